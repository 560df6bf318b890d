#!/usr/bin/env python3
"""A hostile plugin for Scripts/bench's "host under a flood" row (docs/benchmarks.md).

FloodUnread: requests without end, never reading the answers (the host's queue).
FloodNames: requests with 1 MB method names without end (the host's parsing, its deadline).
FloodNested: an answer of 200,000 zeros 500 arrays deep (the report's amplification).
"""
import json, os

def read_message():
    header = b""
    while not header.endswith(b"\r\n\r\n"):
        c = os.read(3, 1)
        if not c:
            raise SystemExit(0)
        header += c
    length = int(header.split(b":")[1])
    body = b""
    while len(body) < length:
        body += os.read(3, length - len(body))
    return json.loads(body)

def frame(body):
    return b"Content-Length: %d\r\n\r\n" % len(body) + body

def write_raw(data):
    while data:
        data = data[os.write(4, data):]

def send(obj):
    write_raw(frame(json.dumps(obj).encode()))

while True:
    msg = read_message()
    method, params = msg.get("method"), msg.get("params") or {}
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"protocolVersion": 1,
              "plugin": {"id": "bench.flood", "version": "1.0.0"}, "intents": [params.get("intent")]}})
    elif method == "confirm":
        send({"jsonrpc": "2.0", "id": msg["id"], "result": {"code": "ready"}})
    elif method == "handle":
        intent = params.get("intent")
        if intent == "FloodUnread":
            chunk = b"".join(frame(json.dumps({"jsonrpc": "2.0", "id": i, "method": "no.such", "params": {}}).encode())
                             for i in range(2000))
            while True:
                write_raw(chunk)
        if intent == "FloodNames":
            request = frame(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "m" * (1 << 20)}).encode())
            while True:
                write_raw(request)
        body = '{"jsonrpc":"2.0","id":%d,"result":{"code":"success","properties":{"deep":%s%s%s}}}' % (
            msg["id"], "[" * 500, ",".join(["0"] * 200000), "]" * 500)
        write_raw(frame(body.encode()))
