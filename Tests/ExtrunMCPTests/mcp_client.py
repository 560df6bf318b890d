"""Drives `extrun mcp` with the official Python MCP SDK (2.x), as an assistant would.

Usage: python mcp_client.py EXTRUN SCENARIO [ARG...]; the environment (EXTRUN_HOME,
EXTRUN_PLUGIN_PATH, TMPDIR...) is passed on to the server. Prints one JSON object
of observations on stdout; ExtrunMCPTests (Swift Testing) checks them. The server's
processes are watched through /proc: the server is this script's child, the plugins
its descendants.
"""

import json
import os
import sys
import time

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def children(pid):
    """Live (non-zombie) descendants of pid, from /proc."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2:].split()
        if rest[0] == "Z":
            continue
        parents.setdefault(int(rest[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def server_pid():
    """The `extrun mcp` process this script started."""
    for pid in children(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"mcp" in f.read().split(b"\0"):
                    return pid
        except OSError:
            pass
    return None


def wait_until(check, seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.02)
    return check()


async def wait_until_async(check, seconds):
    """As wait_until, without blocking the event loop (the client must keep sending and reading meanwhile)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if check():
            return True
        await anyio.sleep(0.02)
    return check()


def dump(result):
    data = result.model_dump(by_alias=True, exclude_none=True, mode="json")
    return {
        "isError": data.get("isError", False),
        "structuredContent": data.get("structuredContent"),
        "text": [c.get("text") for c in data.get("content", []) if c.get("type") == "text"],
    }


class Answers:
    """Answers elicitations from a script: each entry is (action, content chooser)."""

    def __init__(self, plan):
        self.plan = list(plan)
        self.asked = []

    async def __call__(self, context, params):
        data = params.model_dump(by_alias=True, exclude_none=True, mode="json")
        self.asked.append({"message": data.get("message"), "requestedSchema": data.get("requestedSchema")})
        action = self.plan.pop(0) if self.plan else "decline"
        if action == "wait":
            # The user takes their time: the call is cancelled meanwhile.
            await anyio.sleep(3)
            return types.ElicitResult(action="decline")
        if action in ("decline", "cancel"):
            return types.ElicitResult(action=action)
        schema = data["requestedSchema"]
        (name, prop), = schema["properties"].items()
        if action == "first":
            value = prop["oneOf"][0]["const"]
        elif action == "yes":
            value = True
        elif action == "no":
            value = False
        elif action.startswith("text:"):
            # A client that answers a boolean question with text (not what the schema asked).
            value = action[len("text:"):]
        else:
            value = action
        return types.ElicitResult(action="accept", content={name: value})


async def main():
    extrun, scenario, *args = sys.argv[1:]
    params = StdioServerParameters(command=extrun, args=["mcp"], env=dict(os.environ))
    out = {"scenario": scenario}
    plan = {"elicit-choose": ["first", "yes"], "elicit-decline": ["decline"], "elicit-confirm-no": ["first", "no"],
            "elicit-cancel": ["wait"], "elicit-mistyped": ["first", "text:yes"]}.get(scenario)
    answers = Answers(plan) if plan is not None else None
    notices = []

    async def on_message(message):
        if isinstance(message, Exception):
            notices.append("exception: " + repr(message))
        else:
            notices.append(message.model_dump(by_alias=True, exclude_none=True, mode="json").get("method"))

    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, elicitation_callback=answers, message_handler=on_message) as session:
            init = await session.initialize()
            out["protocolVersion"] = init.protocol_version
            out["capabilities"] = init.capabilities.model_dump(by_alias=True, exclude_none=True, mode="json")
            server = server_pid()
            out["serverFound"] = server is not None

            if scenario == "list":
                tools = await session.list_tools()
                out["tools"] = [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in tools.tools]

            elif scenario == "call":
                tools = await session.list_tools()
                out["tools"] = [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in tools.tools]
                out["result"] = dump(await session.call_tool(args[0], json.loads(args[1])))

            elif scenario == "uppercase":
                await session.list_tools()
                out["result"] = dump(await session.call_tool("MakeUppercase", {"text": "hello, mcp"}))
                out["again"] = dump(await session.call_tool("MakeUppercase", {"text": "warm"}))

            elif scenario == "memory":
                out["result"] = dump(await session.call_tool("AllocateMemory", {"megabytes": int(args[0])}))

            elif scenario == "elicit-cancel":
                with anyio.move_on_after(1):
                    await session.call_tool("OrderSoup", {"quantity": 1})
                out["asked"] = len(answers.asked)
                out["processesRightAfterCancel"] = len(children(server))
                out["goneWithinMs"] = None
                begin = time.monotonic()
                if await wait_until_async(lambda: not children(server), 5):
                    out["goneWithinMs"] = int((time.monotonic() - begin) * 1000)
                await anyio.sleep(3)  # the late answer to the elicitation arrives and is ignored
                out["afterCancel"] = dump(await session.call_tool("MakeUppercase", {"text": "next"}))

            elif scenario.startswith("elicit-"):
                out["result"] = dump(await session.call_tool("OrderSoup", {"quantity": 1}))
                out["asked"] = answers.asked

            elif scenario == "no-elicitation":
                first = dump(await session.call_tool("OrderSoup", {"quantity": 1}))
                out["first"] = first
                options = (first.get("structuredContent") or {}).get("error", {}).get("options", [])
                out["unconfirmed"] = dump(await session.call_tool("OrderSoup", {"quantity": 1, "soup": options[0]["value"]})) if options else None
                out["confirmed"] = (
                    dump(await session.call_tool("OrderSoup", {"quantity": 1, "soup": options[0]["value"], "_confirmed": True}))
                    if options else None
                )
                # A soup named in part: the app asks to confirm the one it found.
                partial = {"quantity": 1, "soup": {"identifier": "tomato", "title": "tomato"}}
                out["partial"] = dump(await session.call_tool("OrderSoup", partial))
                out["partialConfirmed"] = dump(await session.call_tool("OrderSoup", {**partial, "_confirmed": True}))

            elif scenario == "cancel":
                started = time.monotonic()
                with anyio.move_on_after(float(args[0])):
                    await session.call_tool("Sleep", {"seconds": 30})
                out["cancelledAfterMs"] = int((time.monotonic() - started) * 1000)
                had = children(server) if server else []
                out["processesRightAfterCancel"] = len(had)
                out["goneWithinMs"] = None
                begin = time.monotonic()
                if await wait_until_async(lambda: not children(server), 5):
                    out["goneWithinMs"] = int((time.monotonic() - begin) * 1000)
                out["leftAfterCancel"] = children(server) if server else []
                await session.send_ping()
                out["afterCancel"] = dump(await session.call_tool("MakeUppercase", {"text": "still here"}))

            elif scenario == "progress":
                seen = []

                async def on_progress(progress, total, message):
                    seen.append({"progress": progress, "total": total, "message": message})

                out["result"] = dump(await session.call_tool("Sleep", {"seconds": 1, "progress": True}, progress_callback=on_progress))
                out["progress"] = seen

            elif scenario == "list-changed":
                folder = args[0]
                before = [t.name for t in (await session.list_tools()).tools]
                os.rename(args[1], os.path.join(folder, "Added"))
                wait = time.monotonic()
                while "notifications/tools/list_changed" not in notices and time.monotonic() - wait < 10:
                    await anyio.sleep(0.05)
                out["notifiedWithinMs"] = int((time.monotonic() - wait) * 1000)
                out["notices"] = list(notices)
                after = [t.name for t in (await session.list_tools()).tools]
                out["added"] = sorted(set(after) - set(before))
                notices.clear()
                os.rename(os.path.join(folder, "Added"), os.path.join(args[1]))
                wait = time.monotonic()
                while "notifications/tools/list_changed" not in notices and time.monotonic() - wait < 10:
                    await anyio.sleep(0.05)
                out["removedNotified"] = "notifications/tools/list_changed" in notices
                out["afterRemoval"] = sorted(set(after) - set(t.name for t in (await session.list_tools()).tools))

            elif scenario == "bench":
                rounds = int(args[0])
                await session.call_tool("MakeUppercase", {"text": "warm up"})
                times = []
                for i in range(rounds):
                    began = time.perf_counter_ns()
                    result = await session.call_tool("MakeUppercase", {"text": f"round {i}"})
                    times.append((time.perf_counter_ns() - began) // 1000)
                    if result.is_error:
                        raise SystemExit("a bench call failed: " + json.dumps(dump(result)))
                out["microseconds"] = times

            out["descendantsAtEnd"] = children(server) if server else []
    if server:
        out["serverGone"] = wait_until(lambda: not alive(server), 5)
        out["left"] = [pid for pid in out.get("descendantsAtEnd", []) if alive(pid)]
    print(json.dumps(out))


if __name__ == "__main__":
    anyio.run(main)
