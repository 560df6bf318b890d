#!/usr/bin/env python3
"""A plugin that breaks one rule of docs/protocol.md, named by its first argument,
for `extrun plugins check` to catch (PluginCheckCLITests). Plain framing, no SDK:
each fixture folder links its plugin.py here and names the fault in its manifest's
"arguments". Faults: slow-cancel, big-at-rest, wrong-identity, lying-session,
reusable-exits, none."""
import json
import os
import sys
import time

FAULT = sys.argv[1] if len(sys.argv) > 1 else "none"
PLUGIN_ID = os.environ.get("EXTRUN_PLUGIN_ID", "?")
IN_FD, OUT_FD = 3, 4
ballast = bytearray(14 << 20) if FAULT == "big-at-rest" else None  # held for the process's life


def frames():
    buffer = b""
    while True:
        while b"\r\n\r\n" in buffer:
            header, rest = buffer.split(b"\r\n\r\n", 1)
            length = next(int(line.split(b":", 1)[1]) for line in header.split(b"\r\n") if line.lower().startswith(b"content-length:"))
            if len(rest) < length:
                break
            yield json.loads(rest[:length])
            buffer = rest[length:]
        chunk = os.read(IN_FD, 65536)
        if not chunk:
            return
        buffer += chunk


def send(message):
    body = json.dumps(message).encode()
    data = b"Content-Length: %d\r\n\r\n" % len(body) + body
    while data:
        data = data[os.write(OUT_FD, data):]


def answer(method, params):
    if method == "initialize":
        result = {"protocolVersion": 1, "plugin": {"id": PLUGIN_ID, "version": "1.0.0"}, "intents": ["BrokenEcho"]}
        if FAULT == "wrong-identity":
            result["plugin"]["id"] = "com.example.someone-else"
        if FAULT in ("lying-session", "reusable-exits"):
            result["reusable"] = True
        if FAULT == "lying-session":
            result["session"] = True  # ...but it does not answer `session` (below)
        return {"result": result}
    if method == "resolve":
        value = params["parameters"].get(params["parameter"])
        return {"result": {"result": "success", "value": value} if value is not None else {"result": "notRequired"}}
    if method == "confirm":
        return {"result": {"code": "ready"}}
    if method == "handle":
        if FAULT == "slow-cancel":
            time.sleep(3)  # never reads fd 3 meanwhile, so it sees neither cancel nor the end of input
        text = params["parameters"].get("text", "")
        return {"result": {"code": "success", "properties": {"result": text.upper()}}}
    return {"error": {"code": -32601, "message": f"unknown method {method}"}}


for message in frames():
    if "id" in message and "method" in message:
        send({"jsonrpc": "2.0", "id": message["id"], **answer(message["method"], message.get("params") or {})})
        if FAULT == "reusable-exits" and message["method"] == "handle":
            sys.exit(0)  # declared reusable, yet gone after one session
