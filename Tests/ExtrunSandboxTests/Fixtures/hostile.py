#!/usr/bin/env python3
"""A deliberately misbehaving extrun plugin for the sandbox tests.

Each intent misbehaves in one way during `handle`. It speaks just enough of
the protocol (docs/protocol.md) to get there: fd 3 in, fd 4 out, Content-Length frames.
"""
import json
import os
import sys
import time

IN, OUT = 3, 4
buffer = b""


def read_message():
    global buffer
    while b"\r\n\r\n" not in buffer:
        chunk = os.read(IN, 65536)
        if not chunk:
            sys.exit(0)
        buffer += chunk
    header, buffer = buffer.split(b"\r\n\r\n", 1)
    length = int(header.split(b":")[1])
    while len(buffer) < length:
        chunk = os.read(IN, 65536)
        if not chunk:
            sys.exit(0)
        buffer += chunk
    body, buffer = buffer[:length], buffer[length:]
    return json.loads(body)


def send(message):
    body = json.dumps(message).encode()
    os.write(OUT, b"Content-Length: %d\r\n\r\n" % len(body) + body)


def answer(request, result):
    send({"jsonrpc": "2.0", "id": request["id"], "result": result})


def success(request, **properties):
    answer(request, {"code": "success", "properties": properties})
    return True


def misbehave(intent, params, request):
    if intent == "NeverAnswer":
        while True:
            time.sleep(1)
    if intent == "Spin":
        while True:
            pass
    if intent == "ForkBomb":
        while True:
            try:
                os.fork()
            except OSError:
                pass
    if intent == "OpenSocket":
        import socket
        socket.socket(socket.AF_INET, socket.SOCK_STREAM).connect(("127.0.0.1", 9))
        return success(request)
    if intent == "ExecShell":
        os.execv("/bin/sh", ["sh", "-c", "echo escaped"])
    if intent == "Ptrace":
        import ctypes
        ctypes.CDLL(None, use_errno=True).ptrace(0, 0, 0, 0)  # PTRACE_TRACEME
        return success(request)
    if intent == "Unshare":
        import ctypes
        ctypes.CDLL(None, use_errno=True).unshare(0x40000000)  # CLONE_NEWNET
        return success(request)
    if intent == "FloodStdout":
        chunk = b"x" * 65535 + b"\n"
        for _ in range(800):  # about 50 MB
            os.write(1, chunk)
        return success(request, flooded="stdout")
    if intent == "FloodStderr":
        chunk = b"e" * 65535 + b"\n"
        for _ in range(800):
            os.write(2, chunk)
        return success(request, flooded="stderr")
    if intent == "HugeResponse":
        # Announce a 300 MB frame, then start sending it.
        os.write(OUT, b"Content-Length: 314572800\r\n\r\n")
        chunk = b" " * (1 << 20)
        for _ in range(300):
            os.write(OUT, chunk)
        return
    if intent == "Daemonize":
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(120)
                os._exit(0)
            os._exit(0)
        time.sleep(0.2)
        return success(request, daemonized=True)
    if intent == "WriteBigFile":
        with open("big.bin", "wb") as f:
            f.write(b"\0" * (int(params.get("megabytes", 1)) << 20))
        return success(request)
    if intent == "ProgressThenAnswer":
        for _ in range(int(params.get("steps", 3))):
            time.sleep(0.6)
            send({"jsonrpc": "2.0", "method": "progress", "params": {"fraction": 0.5}})
        return success(request, done=True)
    answer(request, {"code": "failure"})


def main():
    while True:
        message = read_message()
        method = message.get("method")
        if "id" not in message:
            continue
        params = message.get("params") or {}
        if method == "initialize":
            answer(message, {"protocolVersion": 1, "plugin": {"id": "test.hostile", "version": "1"},
                             "intents": INTENTS})
        elif method == "resolve":
            name = params["parameter"]
            value = params["parameters"].get(name)
            answer(message, {"result": "success", "value": value} if value is not None else {"result": "notRequired"})
        elif method == "confirm":
            answer(message, {"code": "ready"})
        elif method == "handle":
            misbehave(params["intent"], params["parameters"], message)
        else:
            send({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "no " + method}})


INTENTS = ["NeverAnswer", "Spin", "ForkBomb", "OpenSocket", "ExecShell", "Ptrace", "Unshare", "FloodStdout",
           "FloodStderr", "HugeResponse", "Daemonize", "WriteBigFile", "ProgressThenAnswer"]

if __name__ == "__main__":
    main()
