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
    if intent == "RewriteOwnManifest":
        # A plugin that is the host's user could make itself another owner for its next run.
        manifest = os.path.join(os.environ.get("EXTRUN_PLUGIN_DIR", "."), "manifest.json")
        return success(request, result=json.dumps({manifest: attempt(lambda: append(manifest))}))
    if intent == "WhoAmI":
        info = os.stat(".")
        return success(request, result=json.dumps({"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(),
                                                   "groups": os.getgroups(), "scratchOwner": info.st_uid,
                                                   "scratchMode": oct(info.st_mode & 0o7777)}))
    if intent == "ReadSecrets":
        # The store and the keys by path: absolute, and through the parent's and
        # the host's /proc entries (cwd and root), which lead outside a mount namespace.
        home, host = params["path"], int(params.get("pid", 0))
        ppid = os.getppid()
        targets = []
        for base in [home, "/proc/%d/root%s" % (ppid, home), "/proc/%d/root%s" % (host, home), "/proc/1/root%s" % home]:
            targets += [base + "/store.sqlite", base + "/keys", base + "/policy.json"]
        for base in ["/proc/%d/cwd" % ppid, "/proc/%d/cwd" % host]:
            targets += [base + "/store.sqlite", base + "/keys"]
        results = {}
        for path in targets:
            results[path] = attempt(lambda path=path: read_anything(path))
        return success(request, result=json.dumps(results))
    if intent == "WriteHome":
        home = params["path"]
        results = {}
        for path in [home + "/planted", home + "/keys/planted.key", home + "/containers/planted"]:
            results[path] = attempt(lambda path=path: write_new(path))
        results[home + "/store.sqlite"] = attempt(lambda: append(home + "/store.sqlite"))
        return success(request, result=json.dumps(results))
    if intent == "ReadContainer":
        path = params["path"]
        results = {path: attempt(lambda: read_anything(path)),
                   os.path.dirname(path): attempt(lambda: os.listdir(os.path.dirname(path)))}
        return success(request, result=json.dumps(results))
    if intent == "PtraceAttach":
        import ctypes
        ctypes.CDLL(None, use_errno=True).ptrace(16, int(params["pid"]), 0, 0)  # PTRACE_ATTACH
        return success(request, result="attached")
    if intent == "SignalHost":
        import signal
        host = int(params["pid"])
        results = {}
        for name, sig in [("SIGSTOP", signal.SIGSTOP), ("SIGKILL", signal.SIGKILL)]:
            results["kill(%d, %s)" % (host, name)] = attempt(lambda sig=sig: os.kill(host, sig))
        results["kill(-%d, SIGKILL)" % host] = attempt(lambda: os.kill(-host, signal.SIGKILL))
        results["kill(-1, 0)"] = attempt(lambda: os.kill(-1, 0))
        results["pidfd_send_signal(host)"] = attempt(lambda: pidfd_kill(host))
        # Its own child may be signalled.
        child = os.fork()
        if child == 0:
            time.sleep(60)
            os._exit(0)
        os.kill(child, signal.SIGKILL)
        _, status = os.waitpid(child, 0)
        results["own child"] = "killed by %d" % os.WTERMSIG(status) if os.WIFSIGNALED(status) else "exited"
        return success(request, result=json.dumps(results))
    if intent == "EscapeScratch":
        # chown and chmod: out of its scratch directory, and making it hard to remove.
        here = os.getcwd()
        results = {"chown . root": attempt(lambda: os.chown(here, 0, 0)),
                   "chmod .. 777": attempt(lambda: os.chmod(os.path.dirname(here), 0o777)),
                   "chown .. self": attempt(lambda: os.chown(os.path.dirname(here), os.getuid(), os.getgid())),
                   "write ..": attempt(lambda: write_new(os.path.dirname(here) + "/planted"))}
        os.makedirs("locked/deeper", exist_ok=True)
        write_new("locked/deeper/file")
        os.chmod("locked/deeper/file", 0o4755)
        results["setuid file"] = attempt(lambda: os.chmod("locked/deeper/file", 0o4755))
        os.chmod("locked/deeper", 0o000)
        os.chmod("locked", 0o500)
        write_new("readonly")
        os.chmod("readonly", 0o400)
        results["chmod . 000"] = attempt(lambda: os.chmod(here, 0o000))
        return success(request, result=json.dumps(results), scratch=here)
    answer(request, {"code": "failure"})


def attempt(action):
    """"ok" or the errno's name: what an attempt came to."""
    import errno as errno_names
    try:
        action()
        return "ok"
    except OSError as error:
        return errno_names.errorcode.get(error.errno, str(error.errno))


def read_anything(path):
    if os.path.isdir(path):
        os.listdir(path)
    else:
        with open(path, "rb") as f:
            f.read(16)


def write_new(path):
    with open(path, "wb") as f:
        f.write(b"planted")


def append(path):
    with open(path, "ab") as f:
        f.write(b"garbage")


def pidfd_kill(pid):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(434, pid, 0)  # pidfd_open
    if fd < 0:
        raise OSError(ctypes.get_errno(), "pidfd_open")
    if libc.syscall(424, fd, 9, None, 0) != 0:  # pidfd_send_signal(SIGKILL)
        raise OSError(ctypes.get_errno(), "pidfd_send_signal")


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
           "FloodStderr", "HugeResponse", "Daemonize", "WriteBigFile", "ProgressThenAnswer", "ReadSecrets", "WriteHome",
           "ReadContainer", "PtraceAttach", "SignalHost", "EscapeScratch", "WhoAmI", "RewriteOwnManifest"]

if __name__ == "__main__":
    main()
