"""Drives `extrun mcp` in MCP 2026-07-28 with the official Python SDK (2.x): server/discover,
tools/list, tools/call, subscriptions/listen, and resolution as input_required rounds whose
sealed requestState goes from one `extrun mcp` process to another.

Usage: python mcp_modern_client.py EXTRUN SCENARIO [ARG...]; the environment (EXTRUN_HOME,
EXTRUN_PLUGIN_PATH, TMPDIR...) is passed on to the servers. Prints one JSON object of
observations on stdout; ExtrunMCPTests (MCPModernClientTests.swift) checks them. The servers
are this script's children, their plugins their descendants (watched through /proc).
"""

import json
import os
import sys
import time
from contextlib import AsyncExitStack

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.subscriptions import listen
from mcp.shared.exceptions import MCPError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcp_client import alive, children, dump, wait_until, wait_until_async  # noqa: E402


def mcp_servers():
    """The `extrun mcp` processes this script started, by pid."""
    found = []
    for pid in children(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"mcp" in f.read().split(b"\0"):
                    found.append(pid)
        except OSError:
            pass
    return sorted(found)


class Asker:
    """Declares elicitation (so the server may ask); in the modern era nothing comes in band."""

    def __init__(self):
        self.in_band = 0

    async def __call__(self, context, params):
        self.in_band += 1
        return types.ElicitResult(action="decline")


def answer(request, plan):
    """An ElicitResult for one input request, from the plan's next entry."""
    data = request.model_dump(by_alias=True, exclude_none=True, mode="json")
    params = data["params"]
    (name, prop), = params["requestedSchema"]["properties"].items()
    action = plan.pop(0) if plan else "decline"
    if action in ("decline", "cancel"):
        return types.ElicitResult(action=action), data
    if action == "first":
        value = prop["oneOf"][0]["const"]
    elif action == "yes":
        value = True
    elif action == "no":
        value = False
    elif action.startswith("text:"):
        value = action[len("text:"):]
    elif action.startswith("int:"):
        value = int(action[len("int:"):])
    else:
        value = action
    return types.ElicitResult(action="accept", content={name: value}), data


async def call(session, name, arguments, responses=None, state=None):
    """One tools/call: ("input", InputRequiredResult), ("result", CallToolResult) or ("error", code, message)."""
    try:
        result = await session.call_tool(name, arguments, input_responses=responses, request_state=state, allow_input_required=True)
    except MCPError as error:
        return ("error", error.code, str(error))
    if isinstance(result, types.InputRequiredResult):
        return ("input", result)
    return ("result", result)


async def open_session(stack, extrun, extra_args=(), elicitation=True):
    params = StdioServerParameters(command=extrun, args=["mcp", *extra_args], env=dict(os.environ))
    before = set(mcp_servers())
    read, write = await stack.enter_async_context(stdio_client(params))
    asker = Asker() if elicitation else None
    session = await stack.enter_async_context(ClientSession(read, write, elicitation_callback=asker))
    discovered = await session.discover()
    pid = None
    for _ in range(100):
        new = [p for p in mcp_servers() if p not in before]
        if new:
            pid = new[0]
            break
        await anyio.sleep(0.02)
    return session, discovered, pid, asker


async def rounds(sessions, name, arguments, plan):
    """Resolves a call through input_required rounds, each round sent to the next session in turn."""
    seen = []
    turn = 0
    outcome = await call(sessions[turn], name, arguments)
    while outcome[0] == "input" and len(seen) < 12:
        required = outcome[1]
        responses = {}
        for key, request in (required.input_requests or {}).items():
            response, data = answer(request, plan)
            responses[key] = response
            seen.append({"server": turn, "key": key, "method": data["method"], "message": data["params"]["message"],
                         "mode": data["params"].get("mode"), "requestedSchema": data["params"]["requestedSchema"]})
        turn = (turn + 1) % len(sessions)
        outcome = await call(sessions[turn], name, arguments, responses, required.request_state)
    if outcome[0] == "result":
        return seen, {"final": dump(outcome[1]), "server": turn}
    if outcome[0] == "error":
        return seen, {"error": outcome[1], "message": outcome[2], "server": turn}
    return seen, {"stillInputRequired": True}


async def main():
    extrun, scenario, *args = sys.argv[1:]
    out = {"scenario": scenario}
    servers = []
    async with AsyncExitStack() as stack:
        if scenario == "discover-list-call":
            session, discovered, pid, asker = await open_session(stack, extrun)
            servers.append(pid)
            out["protocolVersion"] = session.protocol_version
            out["discover"] = discovered.model_dump(by_alias=True, exclude_none=True, mode="json")
            listing = await session.list_tools()
            out["list"] = listing.model_dump(by_alias=True, exclude_none=True, mode="json")
            out["result"] = dump(await session.call_tool("MakeUppercase", {"text": "hello, 2026"}))
            out["inBand"] = asker.in_band

        elif scenario == "no-elicitation":
            session, _, pid, _ = await open_session(stack, extrun, elicitation=False)
            servers.append(pid)
            listing = await session.list_tools()
            soup = next(t for t in listing.tools if t.name == "OrderSoup")
            out["orderSoupProperties"] = sorted((soup.input_schema or {}).get("properties", {}).keys())
            first = dump(await session.call_tool("OrderSoup", {"quantity": 1}))
            out["first"] = first
            options = (first.get("structuredContent") or {}).get("error", {}).get("options", [])
            if options:
                out["confirmed"] = dump(await session.call_tool("OrderSoup", {"quantity": 1, "soup": options[0]["value"], "_confirmed": True}))

        elif scenario == "rounds":
            # OrderSoup's resolution, its rounds alternating between two servers sharing one key file.
            plan = args[0].split(",") if args else ["first", "yes"]
            arguments = json.loads(args[1]) if len(args) > 1 else {"quantity": 1}
            a, _, pid_a, asker_a = await open_session(stack, extrun)
            b, _, pid_b, asker_b = await open_session(stack, extrun)
            servers += [pid_a, pid_b]
            out["servers"] = len({pid_a, pid_b})
            seen, end = await rounds([a, b], "OrderSoup", arguments, plan)
            out["rounds"] = seen
            out["end"] = end
            out["inBand"] = asker_a.in_band + asker_b.in_band

        elif scenario == "refusals":
            # One round on A, then its state presented to B: changed, for another tool, for other
            # arguments, expired. B had run nothing before, and runs nothing for them.
            lifetime = args[0] if args else "300"
            a, _, pid_a, _ = await open_session(stack, extrun, ["--request-state-lifetime", lifetime])
            b, _, pid_b, _ = await open_session(stack, extrun, ["--request-state-lifetime", lifetime])
            servers += [pid_a, pid_b]
            first = await call(a, "OrderSoup", {"quantity": 1})
            assert first[0] == "input", first
            required = first[1]
            (key, request), = required.input_requests.items()
            response, _ = answer(request, ["first"])
            state = required.request_state
            out["stateLength"] = len(state)
            out["stateShowsNoSoup"] = all(word not in state.lower() for word in ("soup", "quantity", "clam", "chowder"))
            flipped = state[:-6] + ("A" if state[-6] != "A" else "B") + state[-5:]
            refused = {}
            refused["tampered"] = await call(b, "OrderSoup", {"quantity": 1}, {key: response}, flipped)
            refused["garbage"] = await call(b, "OrderSoup", {"quantity": 1}, {key: response}, "not a state")
            refused["otherTool"] = await call(b, "MakeUppercase", {"quantity": 1}, {key: response}, state)
            refused["otherArguments"] = await call(b, "OrderSoup", {"quantity": 2}, {key: response}, state)
            out["refused"] = {k: (list(v) if v[0] == "error" else [v[0]]) for k, v in refused.items()}
            out["bRanNothing"] = not children(pid_b)
            if float(lifetime) < 10:
                await anyio.sleep(float(lifetime) + 1)
                expired = await call(b, "OrderSoup", {"quantity": 1}, {key: response}, state)
                out["expired"] = list(expired) if expired[0] == "error" else [expired[0]]
                out["bRanNothingWhenExpired"] = not children(pid_b)

        elif scenario == "unsupported-version":
            session, _, pid, _ = await open_session(stack, extrun)
            servers.append(pid)
            try:
                await session.send_discover("2099-01-01")
                out["error"] = None
            except MCPError as error:
                out["error"] = {"code": error.code, "message": str(error), "data": error.error.data}

        elif scenario == "progress":
            session, _, pid, _ = await open_session(stack, extrun)
            servers.append(pid)
            seen = []

            async def on_progress(progress, total, message):
                seen.append({"progress": progress, "total": total, "message": message})

            out["result"] = dump(await session.call_tool("Sleep", {"seconds": 1, "progress": True}, progress_callback=on_progress))
            out["progress"] = seen

        elif scenario == "cancel":
            session, _, pid, _ = await open_session(stack, extrun)
            servers.append(pid)
            with anyio.move_on_after(float(args[0])):
                await session.call_tool("Sleep", {"seconds": 30})
            out["processesRightAfterCancel"] = len(children(pid))
            began = time.monotonic()
            out["goneWithinMs"] = None
            if await wait_until_async(lambda: not children(pid), 5):
                out["goneWithinMs"] = int((time.monotonic() - began) * 1000)
            out["afterCancel"] = dump(await session.call_tool("MakeUppercase", {"text": "still here"}))

        elif scenario == "listen":
            folder, plugin = args
            session, _, pid, _ = await open_session(stack, extrun)
            servers.append(pid)
            before = [t.name for t in (await session.list_tools()).tools]
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
            after = [t.name for t in (await session.list_tools()).tools]
            out["added"] = sorted(set(after) - set(before))
            os.rename(os.path.join(folder, "Added"), plugin)

        out["descendantsAtEnd"] = [c for pid in servers if pid for c in children(pid)]
    out["serversFound"] = len([p for p in servers if p])
    out["serversGone"] = wait_until(lambda: not any(alive(p) for p in servers if p), 5)
    out["left"] = [pid for pid in out.get("descendantsAtEnd", []) if alive(pid)]
    print(json.dumps(out))


if __name__ == "__main__":
    anyio.run(main)
