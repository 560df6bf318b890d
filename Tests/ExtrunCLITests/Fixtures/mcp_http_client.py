"""Drives `extrun serve`'s /mcp (MCP's Streamable HTTP transport) with the official Python
SDK (2.x): the 2026-07-28 era (server/discover, tools/list, tools/call, input_required
rounds whose sealed requestState goes from one `extrun serve` to another), the handshake
era (initialize, Mcp-Session-Id, in-band elicitation on a call's SSE stream, DELETE), a
call abandoned mid-way.

Usage: python mcp_http_client.py SCENARIO JSON; JSON is an object with `endpoints`, each
{"socket": PATH} (the service's Unix socket, reached as http://localhost/mcp) or {"url":
"http://127.0.0.1:PORT/mcp"}, either with an optional "bearer" token, and the scenario's
own fields. Prints one JSON object of observations on stdout; ExtrunCLITests
(ServeMCPTests.swift) checks them. Every HTTP exchange is logged (method, status,
content type, Mcp-Session-Id, Retry-After) in the report's `http`.
"""

import json
import os
import sys
import time
from contextlib import AsyncExitStack

import anyio
import httpx2
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import listen
from mcp.shared.exceptions import MCPError

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "ExtrunMCPTests"))
from mcp_client import children, dump, wait_until_async  # noqa: E402
from mcp_modern_client import Asker, answer, call, rounds  # noqa: E402

MODERN = "2026-07-28"


class Endpoint:
    """One service's /mcp: an httpx2 client on its socket or TCP port, logging each exchange."""

    def __init__(self, spec, log):
        self.spec = spec
        self.log = log
        headers = {"authorization": f"Bearer {spec['bearer']}"} if spec.get("bearer") else {}
        if "socket" in spec:
            self.url = "http://localhost/mcp"
            transport = httpx2.AsyncHTTPTransport(uds=spec["socket"])
        else:
            self.url = spec["url"]
            transport = httpx2.AsyncHTTPTransport()
        self.client = httpx2.AsyncClient(
            transport=transport, headers=headers, timeout=httpx2.Timeout(30, read=120), event_hooks={"response": [self.logged]}
        )

    async def logged(self, response):
        request = response.request
        entry = {
            "method": request.method,
            "status": response.status_code,
            "contentType": response.headers.get("content-type", ""),
        }
        if request.method == "POST":
            try:
                entry["rpc"] = json.loads(request.content).get("method")
            except (ValueError, AttributeError):
                pass
        for name in ("mcp-session-id", "retry-after", "allow", "www-authenticate"):
            if name in response.headers:
                entry[name] = response.headers[name]
        if request.headers.get("mcp-session-id"):
            entry["sentSession"] = request.headers["mcp-session-id"]
        self.log.append(entry)

    async def open(self, stack, elicitation=None, modern=True):
        """A ClientSession on this endpoint: discovered (2026-07-28) or initialized (handshake)."""
        await stack.enter_async_context(self.client)
        read, write = await stack.enter_async_context(streamable_http_client(self.url, http_client=self.client))
        session = await stack.enter_async_context(ClientSession(read, write, elicitation_callback=elicitation))
        if modern:
            await session.discover()
        else:
            await session.initialize()
        return session

    async def post(self, message, headers=None):
        """One raw JSON-RPC POST (outside a session): its status, headers and JSON body."""
        return await self.raw("POST", json.dumps(message), headers)

    async def delete(self, headers):
        return await self.raw("DELETE", None, headers)

    async def raw(self, method, content, headers):
        async with httpx2.AsyncClient(
            transport=httpx2.AsyncHTTPTransport(uds=self.spec["socket"]) if "socket" in self.spec else httpx2.AsyncHTTPTransport(),
            timeout=30,
        ) as client:
            all_headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
            if self.spec.get("bearer"):
                all_headers["authorization"] = f"Bearer {self.spec['bearer']}"
            all_headers.update(headers or {})
            response = await client.request(method, self.url, content=content, headers=all_headers)
            try:
                body = response.json()
            except ValueError:
                body = response.text
            return {"status": response.status_code, "headers": dict(response.headers), "body": body}


def error_data(error):
    return {"code": error.code, "message": str(error), "data": error.error.data}


async def listing(session):
    result = await session.list_tools()
    data = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    return {"names": sorted(t["name"] for t in data["tools"]), "ttlMs": data.get("ttlMs"), "cacheScope": data.get("cacheScope")}


async def main():
    scenario, raw = sys.argv[1:3]
    spec = json.loads(raw)
    log = []
    endpoints = [Endpoint(e, log) for e in spec["endpoints"]]
    out = {"scenario": scenario}
    async with AsyncExitStack() as stack:
        if scenario == "calls":
            # Modern: discover, list, then each call in turn (a result, or the JSON-RPC error).
            asker = Asker()
            session = await endpoints[0].open(stack, elicitation=asker)
            out["protocolVersion"] = session.protocol_version
            out["discover"] = session.discover_result.model_dump(by_alias=True, exclude_none=True, mode="json")
            out["list"] = await listing(session)
            results = []
            for tool, arguments in spec.get("calls", []):
                try:
                    results.append({"result": dump(await session.call_tool(tool, arguments))})
                except MCPError as error:
                    results.append({"error": error_data(error)})
            out["calls"] = results
            out["inBand"] = asker.in_band

        elif scenario == "rounds":
            # OrderSoup's rounds, each sent to the next endpoint in turn (two services).
            plan = spec.get("plan", "first,yes").split(",")
            sessions = [await e.open(stack, elicitation=Asker()) for e in endpoints]
            seen, end = await rounds(sessions, spec.get("tool", "OrderSoup"), spec.get("arguments", {"quantity": 1}), plan)
            out["rounds"] = seen
            out["end"] = end

        elif scenario == "refusals":
            # One round on the first service; its state, changed or for another tool, to the second.
            a = await endpoints[0].open(stack, elicitation=Asker())
            b = await endpoints[1].open(stack, elicitation=Asker())
            first = await call(a, "OrderSoup", {"quantity": 1})
            assert first[0] == "input", first
            required = first[1]
            (key, request), = required.input_requests.items()
            response, _ = answer(request, ["first"])
            state = required.request_state
            flipped = state[:-6] + ("A" if state[-6] != "A" else "B") + state[-5:]
            refused = {
                "tampered": await call(b, "OrderSoup", {"quantity": 1}, {key: response}, flipped),
                "otherTool": await call(b, "MakeUppercase", {"quantity": 1}, {key: response}, state),
                "otherArguments": await call(b, "OrderSoup", {"quantity": 2}, {key: response}, state),
            }
            out["refused"] = {k: (list(v) if v[0] == "error" else [v[0]]) for k, v in refused.items()}
            out["secondRanNothing"] = not children(spec["pids"][1])
            # The state itself still continues on the second service.
            out["genuine"] = (await call(b, "OrderSoup", {"quantity": 1}, {key: response}, state))[0]

        elif scenario == "expired":
            # A state presented after serve.json's requestStateLifetimeSeconds: refused, nothing runs.
            session = await endpoints[0].open(stack, elicitation=Asker())
            first = await call(session, "OrderSoup", {"quantity": 1})
            assert first[0] == "input", first
            required = first[1]
            (key, request), = required.input_requests.items()
            response, _ = answer(request, ["first"])
            await anyio.sleep(spec["wait"])
            out["processesBefore"] = len(children(spec["pid"]))
            late = await call(session, "OrderSoup", {"quantity": 1}, {key: response}, required.request_state)
            out["late"] = list(late) if late[0] == "error" else [late[0]]
            out["processesAfter"] = len(children(spec["pid"]))

        elif scenario == "handshake":
            # 2025-11-25 through initialize: a session, a listing, calls, OrderSoup's questions in
            # band on the call's own SSE stream (answered by the callback), DELETE at the end.
            asked = []

            async def elicit(context, params):
                asked.append({"message": params.message, "schema": params.requested_schema})
                (name, prop), = params.requested_schema["properties"].items()
                if "oneOf" in prop:
                    return types.ElicitResult(action="accept", content={name: prop["oneOf"][0]["const"]})
                return types.ElicitResult(action="accept", content={name: True})

            endpoint = endpoints[0]
            inner = AsyncExitStack()
            async with inner:
                session = await endpoint.open(inner, elicitation=elicit, modern=False)
                out["protocolVersion"] = session.protocol_version
                out["list"] = await listing(session)
                out["upper"] = dump(await session.call_tool("MakeUppercase", {"text": "over http"}))
                out["soup"] = dump(await session.call_tool("OrderSoup", {"quantity": 1}))
                out["asked"] = asked
            # The SDK sent DELETE on leaving; the session is gone now.
            sessions = [e["mcp-session-id"] for e in log if "mcp-session-id" in e]
            out["session"] = sessions[0] if sessions else None
            if out["session"]:
                out["afterDelete"] = await endpoint.post(
                    {"jsonrpc": "2.0", "id": 99, "method": "tools/list"},
                    {"mcp-session-id": out["session"], "mcp-protocol-version": "2025-11-25"},
                )

        elif scenario == "progress":
            # A 1 s Sleep with progress: the notifications come as SSE events of the call's answer.
            session = await endpoints[0].open(stack, elicitation=Asker(), modern=spec.get("modern", True))
            out["protocolVersion"] = session.protocol_version
            seen = []

            async def on_progress(progress, total, message):
                seen.append({"progress": progress, "total": total})

            out["result"] = dump(await session.call_tool("Sleep", {"seconds": 1, "progress": True}, progress_callback=on_progress))
            out["progress"] = seen

        elif scenario == "listen":
            # subscriptions/listen: a POST whose SSE answer stays open; a plugin moved onto the
            # plugin path meanwhile is told as notifications/tools/list_changed on it.
            folder, plugin = spec["folder"], spec["plugin"]
            session = await endpoints[0].open(stack, elicitation=Asker())
            before = {t.name for t in (await session.list_tools()).tools}
            events = []
            async with listen(session, tools_list_changed=True) as subscription:
                out["honored"] = subscription.honored.model_dump(by_alias=True, exclude_none=True, mode="json")
                os.rename(plugin, os.path.join(folder, "Added"))
                began = time.monotonic()
                with anyio.move_on_after(10):
                    async for event in subscription:
                        events.append(type(event).__name__)
                        break
                out["notifiedWithinMs"] = int((time.monotonic() - began) * 1000)
            out["events"] = events
            after = {t.name for t in (await session.list_tools()).tools}
            out["added"] = sorted(after - before)
            os.rename(os.path.join(folder, "Added"), plugin)

        elif scenario == "principals":
            # What one principal got is refused to another: a modern call's requestState (-32602),
            # a handshake session's id (404, -32001).
            owner, other = endpoints
            a = await owner.open(stack, elicitation=Asker())
            b = await other.open(stack, elicitation=Asker())
            first = await call(a, "OrderSoup", {"quantity": 1})
            assert first[0] == "input", first
            required = first[1]
            (key, request), = required.input_requests.items()
            response, _ = answer(request, ["first"])
            stolen = await call(b, "OrderSoup", {"quantity": 1}, {key: response}, required.request_state)
            out["stolenState"] = list(stolen) if stolen[0] == "error" else [stolen[0]]
            out["ownerContinues"] = (await call(a, "OrderSoup", {"quantity": 1}, {key: response}, required.request_state))[0]
            initialize = {
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}},
            }
            made = await owner.post(initialize)
            session_id = made["headers"].get("mcp-session-id")
            out["sessionMade"] = bool(session_id)
            listing_request = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
            session_headers = {"mcp-session-id": session_id or "", "mcp-protocol-version": "2025-11-25"}
            out["otherWithSession"] = await other.post(listing_request, session_headers)
            out["ownerWithSession"] = (await owner.post(listing_request, session_headers))["status"]
            out["otherDelete"] = await other.delete(session_headers)
            out["ownerDelete"] = await owner.delete(session_headers)

        elif scenario == "disconnect":
            # A 30 s Sleep abandoned after `after` seconds. At 2026-07-28 the SDK closes the
            # call's HTTP response (the era's cancellation); in the handshake era it POSTs
            # notifications/cancelled in the session. Either way the service must end the run.
            pid, tmp = spec["pid"], spec["tmp"]
            session = await endpoints[0].open(stack, elicitation=Asker(), modern=spec.get("modern", True))
            out["protocolVersion"] = session.protocol_version
            # Abandoned once its plugin runs (seen among the service's children, waited for up
            # to 30 s: a loaded machine starts it late), plus `after` seconds.
            began = time.monotonic()
            running = 0
            async with anyio.create_task_group() as group:
                async def sleep_for_30_s():
                    await session.call_tool("Sleep", {"seconds": 30})
                group.start_soon(sleep_for_30_s)
                limit = time.monotonic() + 30
                while not running and time.monotonic() < limit:
                    running = len(children(pid))
                    if not running:
                        await anyio.sleep(0.05)
                await anyio.sleep(spec.get("after", 0.3))
                group.cancel_scope.cancel()
            out["abandonedAfterMs"] = int((time.monotonic() - began) * 1000)
            out["processesWhenAbandoned"] = running
            began = time.monotonic()
            out["goneWithinMs"] = None
            if await wait_until_async(lambda: not children(pid), 10):
                out["goneWithinMs"] = int((time.monotonic() - began) * 1000)
            out["scratchGone"] = await wait_until_async(lambda: not os.listdir(tmp), 5)
            out["scratchLeft"] = os.listdir(tmp)
            out["after"] = dump(await session.call_tool("MakeUppercase", {"text": "still serving"}))

        else:
            raise SystemExit(f"unknown scenario {scenario}")
    out["http"] = log
    print(json.dumps(out))


anyio.run(main)
