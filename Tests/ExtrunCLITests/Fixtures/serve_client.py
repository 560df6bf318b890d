#!/usr/bin/env python3
"""A client of `extrun serve` written with Python's standard library only (http.client
over AF_UNIX), as any program would call the service (docs/serve.md). ServeTests runs
each check: `serve_client.py SOCKET CHECK`; exit 0 when it holds, else a message."""
import fcntl
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=30):
        super().__init__("extrun", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def call(path, method, target, body=None, headers=None):
    connection = UnixConnection(path)
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    connection.request(method, target, body=data, headers=headers or {})
    response = connection.getresponse()
    raw = response.read()
    connection.close()
    try:
        return response.status, json.loads(raw), response
    except ValueError:
        return response.status, raw.decode(errors="replace"), response


def wait_running(path, count, seconds):
    """Waits until the service's health says `count` intents run; returns the last health."""
    deadline = time.time() + seconds
    while True:
        _, health, _ = call(path, "GET", "/v1/health")
        if health["running"] == count or time.time() > deadline:
            return health
        time.sleep(0.05)


def send_raw_intent(path, intent, query=""):
    """Sends POST /v1/handle on a socket of its own and returns the socket (the caller reads or closes it)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    body = json.dumps(intent).encode()
    sock.sendall(b"POST /v1/handle%s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (query.encode(), len(body)) + body)
    return sock


def expect(condition, message):
    if not condition:
        print("FAILED: " + message, file=sys.stderr)
        sys.exit(1)


def check_basic(path):
    status, health, _ = call(path, "GET", "/v1/health")
    expect(status == 200 and health["status"] == "ok", "health: %s %s" % (status, health))

    status, listing, _ = call(path, "GET", "/v1/intents")
    expect(status == 200 and any(i["intent"] == "MakeUppercase" for i in listing["intents"]), "intents: %s" % listing)
    status, one, _ = call(path, "GET", "/v1/intents/MakeUppercase")
    expect(status == 200 and one["plugin"] == "com.example.uppercase" and one["intent"]["name"] == "MakeUppercase", "describe: %s" % one)
    # What `extrun describe --format json` prints; no folder (the plugin path is the service's).
    expect("directory" not in one and one["modes"] and one["version"] and one["owner"], "describe's fields: %s" % one)
    status, missing, _ = call(path, "GET", "/v1/intents/NoSuchIntent")
    expect(status == 404 and missing["error"]["kind"] == "noHandler", "describe a missing intent: %s %s" % (status, missing))

    intent = {"intent": "MakeUppercase", "parameters": {"text": "hello world"}}
    for _ in range(3):
        status, answer, _ = call(path, "POST", "/v1/handle", intent)
        expect(status == 200 and answer["exitStatus"] == 0, "handle: %s %s" % (status, answer))
        report = answer["report"]
        expect(report["response"]["properties"]["result"] == "HELLO WORLD", "result: %s" % report)
        expect(report["plugin"] == "com.example.uppercase" and report["mode"] == "extension", "report: %s" % report)
    status, health, _ = call(path, "GET", "/v1/health")
    expect(health["reuses"] >= 2, "warm reuse: %s" % health)

    # Typed errors keep their kind, numbers and exit status; the HTTP status follows them.
    status, answer, _ = call(path, "POST", "/v1/handle", {"intent": "MakeUppercase", "parameters": {"text": "x", "nope": 1}})
    expect(status == 422 and answer["exitStatus"] == 4 and answer["report"]["error"]["kind"] == "invalidIntent", "unknown parameter: %s %s" % (status, answer))
    status, answer, _ = call(path, "POST", "/v1/handle", {"intent": "NoSuchIntent"})
    expect(status == 404 and answer["exitStatus"] == 5, "no handler: %s %s" % (status, answer))
    status, answer, _ = call(path, "POST", "/v1/handle", b'{"intent": ')
    expect(status == 400 and answer["exitStatus"] == 4, "malformed JSON: %s %s" % (status, answer))
    status, answer, _ = call(path, "POST", "/v1/handle?mode=sideways", intent)
    expect(status == 400 and answer["report"]["error"]["field"] == "mode", "bad mode: %s %s" % (status, answer))
    status, answer, _ = call(path, "POST", "/v1/handle", {"intent": "MakeUppercase"})
    expect(status == 422 and answer["exitStatus"] == 3, "non-interactive: a missing value is parameterUnresolved: %s %s" % (status, answer))
    status, answer, _ = call(path, "GET", "/v1/handle")
    expect(status == 405, "wrong method: %s %s" % (status, answer))
    status, answer, _ = call(path, "GET", "/v2/nothing")
    expect(status == 404, "unknown endpoint: %s %s" % (status, answer))
    status, answer, _ = call(path, "POST", "/v1/handle?format=text", intent)
    expect(status == 200 and "HELLO WORLD" in answer["text"], "format=text: %s" % answer)

    # A file parameter given as a path is refused: the service never reads a caller's paths.
    status, answer, _ = call(path, "POST", "/v1/handle", {"intent": "RenameFiles", "parameters": {"files": ["/etc/hostname"]}})
    error = answer["report"]["error"]
    expect(status == 422 and error["reason"] == "path" and error["fileParameters"] == ["files"], "a path: %s %s" % (status, answer))

    # Options and the metrics.
    status, answer, _ = call(path, "POST", "/v1/options?parameter=soup&search=chow", {"intent": "OrderSoup", "parameters": {}})
    expect(status == 200 and answer["exitStatus"] == 0 and answer["report"]["options"], "options: %s %s" % (status, answer))
    status, text, response = call(path, "GET", "/metrics")
    expect(status == 200 and "extrun_intents_total" in str(text) and "extrun_queue_depth" in str(text), "metrics: %s" % text)


def read_events(response):
    """The NDJSON events of an interactive answer, one at a time."""
    while True:
        line = response.readline()
        if not line:
            return
        if line.strip():
            yield json.loads(line)


def interactive(path, intent, answers):
    connection = UnixConnection(path)
    connection.request("POST", "/v1/handle?interactive=true", body=json.dumps(intent).encode())
    response = connection.getresponse()
    expect(response.status == 200 and response.getheader("content-type") == "application/x-ndjson", "stream head: %s" % response.status)
    seen = []
    for event in read_events(response):
        seen.append(event["event"])
        if event["event"] == "prompt":
            answer = answers.pop(0)
            status, body, _ = call(path, "POST", "/v1/runs/%s/answers" % event["run"], {"prompt": event["prompt"], "answer": answer})
            expect(status == 200, "answer: %s %s" % (status, body))
        elif event["event"] == "report":
            connection.close()
            return event, seen
    expect(False, "the stream ended without a report: %s" % seen)


def check_prompt(path):
    event, seen = interactive(path, {"intent": "MakeUppercase", "parameters": {}}, ["shout"])
    expect(seen[0] == "started" and "prompt" in seen, "events: %s" % seen)
    expect(event["exitStatus"] == 0 and event["report"]["response"]["properties"]["result"] == "SHOUT", "answered: %s" % event)
    event, seen = interactive(path, {"intent": "MakeUppercase", "parameters": {}}, [None])
    expect(event["exitStatus"] == 3 and event["report"]["error"]["kind"] == "parameterUnresolved", "declined: %s" % event)
    # A wrong answer is refused and the prompt still waits; an unknown run is 404.
    status, body, _ = call(path, "POST", "/v1/runs/no-such-run/answers", {"prompt": "1", "answer": "x"})
    expect(status == 404, "unknown run: %s %s" % (status, body))


def check_too_large(path):
    connection = UnixConnection(path)
    connection.putrequest("POST", "/v1/handle")
    connection.putheader("Content-Length", str(1 << 30))
    connection.endheaders()
    connection.send(b'{"intent": "MakeUppercase"')
    response = connection.getresponse()
    body = json.loads(response.read())
    expect(response.status == 413 and body["report"]["error"]["limit"] == "maxRequestBytes", "too large: %s %s" % (response.status, body))


def check_disconnect(path):
    """A caller that goes away mid-intent cancels it: nothing keeps running."""
    sock = send_raw_intent(path, {"intent": "Sleep", "parameters": {"seconds": 30}})
    health = wait_running(path, 1, 10)
    expect(health["running"] == 1, "the intent did not start: %s" % health)
    time.sleep(0.3)
    sock.close()
    health = wait_running(path, 0, 5)
    expect(health["running"] == 0, "the intent still runs 5 s after its caller went away: %s" % health)


def check_disconnect_prompt(path):
    """A caller that goes away while its prompt waits: the prompt is declined, the run cancelled, nothing keeps running."""
    sock = send_raw_intent(path, {"intent": "MakeUppercase", "parameters": {}}, "?interactive=true")
    received = b""
    deadline = time.time() + 10
    while b'"prompt"' not in received and time.time() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    expect(b'"event":"prompt"' in received, "no prompt event: %s" % received[:300])
    sock.close()
    health = wait_running(path, 0, 5)
    expect(health["running"] == 0, "the run still waits 5 s after its caller went away: %s" % health)


def check_overloaded(path, field="maxConcurrent"):
    """maxConcurrent 1 (or the caller's limit 1), maxQueued 0: a second intent while one runs is refused at once."""
    sock = send_raw_intent(path, {"intent": "Sleep", "parameters": {"seconds": 2}})
    wait_running(path, 1, 10)
    status, answer, response = call(path, "POST", "/v1/handle", {"intent": "MakeUppercase", "parameters": {"text": "x"}})
    expect(status == 503 and answer["exitStatus"] == 21, "overloaded: %s %s" % (status, answer))
    error = answer["report"]["error"]
    expect(error["kind"] == "overloaded" and error[field] == 1 and error["maxQueued"] == 0, "numbers: %s" % error)
    expect(response.getheader("retry-after") is not None, "Retry-After")
    reply = b""
    while b"exitStatus" not in reply:
        chunk = sock.recv(65536)
        if not chunk:
            break
        reply += chunk
    sock.close()
    expect(b'"exitStatus":0' in reply, "the first intent: %s" % reply[:300])


def check_caller_limit(path):
    check_overloaded(path, field="callerLimit")


def check_warm_limit(path):
    """Three intents at once start three processes; maxWarmPerPlugin 1 keeps one of them."""
    import threading
    results = []

    def one():
        results.append(call(path, "POST", "/v1/handle", {"intent": "Sleep", "parameters": {"seconds": 0.5}})[0])

    threads = [threading.Thread(target=one) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    expect(results == [200, 200, 200], "the intents: %s" % results)
    _, health, _ = call(path, "GET", "/v1/health")
    expect(health["launches"] == 3 and health["warmProcesses"] == 1, "warm: %s" % health)


def check_health(path):
    """Prints the health (for the tests' waits)."""
    _, health, _ = call(path, "GET", "/v1/health")
    print(json.dumps(health))


def check_limits(path):
    """Prints the limits in force (for the SIGHUP test)."""
    _, health, _ = call(path, "GET", "/v1/health")
    print(json.dumps(health["limits"]))


def descendants(root):
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found, frontier = [], {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier}
        found += frontier
    return found


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def check_activation(path):
    """Socket activation without systemd: the listening socket passed as fd 3 with LISTEN_FDS=1
    and LISTEN_PID, as systemd does; the service answers on it, and SIGTERM leaves nothing."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    # Above 3 (and under 10, for dash), so that the shell's `3<&N N<&-` moves it to 3.
    fd = fcntl.fcntl(listener.fileno(), fcntl.F_DUPFD, 4)
    expect(fd <= 9, "a descriptor under 10 for the shell (dash): %d" % fd)
    command = 'exec 3<&%d %d<&-; LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" serve' % (fd, fd)
    service = subprocess.Popen(["/bin/sh", "-c", command, os.environ["EXTRUN_BIN"]], pass_fds=(fd,), stderr=subprocess.PIPE)
    listener.close()
    os.close(fd)
    try:
        status, health, _ = call(path, "GET", "/v1/health")
    except OSError as error:
        service.kill()
        expect(False, "%s; the service's log: %s" % (error, service.communicate()[1][-2000:]))
    expect(status == 200 and health["status"] == "ok", "health over the passed socket: %s" % health)
    status, answer, _ = call(path, "POST", "/v1/handle", {"intent": "MakeUppercase", "parameters": {"text": "on"}})
    expect(status == 200 and answer["report"]["response"]["properties"]["result"] == "ON", "handle: %s" % answer)
    started = descendants(service.pid)
    service.send_signal(signal.SIGTERM)
    _, log = service.communicate(timeout=30)
    expect(service.returncode == 0, "exit %s: %s" % (service.returncode, log[-2000:]))
    expect(b"LISTEN_FDS" in log, "the log names the activation: %s" % log[-2000:])
    deadline = time.time() + 5
    while any(alive(pid) for pid in started) and time.time() < deadline:
        time.sleep(0.05)
    expect(not any(alive(pid) for pid in started), "processes left: %s" % [pid for pid in started if alive(pid)])


def check_tcp(path):
    """--listen with --token-file: a caller without the token is refused (401), with it served."""
    port, token = int(os.environ["EXTRUN_TCP_PORT"]), os.environ["EXTRUN_TOKEN"]
    def tcp(headers):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("POST", "/v1/handle", body=json.dumps({"intent": "MakeUppercase", "parameters": {"text": "tcp"}}).encode(), headers=headers)
        response = connection.getresponse()
        body = json.loads(response.read())
        connection.close()
        return response.status, body
    status, body = tcp({})
    expect(status == 401 and body["error"]["kind"] == "invalidIntent", "without a token: %s %s" % (status, body))
    status, body = tcp({"Authorization": "Bearer wrong-token-of-some-length"})
    expect(status == 401, "a wrong token: %s" % status)
    status, body = tcp({"Authorization": "Bearer " + token})
    expect(status == 200 and body["report"]["response"]["properties"]["result"] == "TCP", "with the token: %s %s" % (status, body))


def raw(path, data, read=True):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(path)
    sock.sendall(data)
    reply = b""
    while read:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        reply += chunk
    sock.close()
    return reply


def check_malformed(path):
    """Garbage, a broken request line, bad headers, a lying Content-Length, a bad chunk:
    each is answered 400 (or the connection closed) and the service goes on."""
    for data in [b"\x00\xff\xfe garbage\r\n\r\n", b"GET\r\n\r\n", b"POST /v1/handle HTTP/1.1\r\nContent-Length: x\r\n\r\n",
                 b"POST /v1/handle HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                 b"POST /v1/handle HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n{\"a\"", b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n",
                 b"GET /v1/health HTTP/1.1\r\n" + b"X-Big: " + b"b" * 200000 + b"\r\n\r\n"]:
        reply = raw(path, data)
        expect(reply == b"" or reply.startswith(b"HTTP/1.1 4"), "%r -> %r" % (data[:40], reply[:200]))
    status, health, _ = call(path, "GET", "/v1/health")
    expect(status == 200 and health["running"] == 0, "after the garbage: %s" % health)


def check_never_reads(path):
    """A caller that asks for a large answer and never reads it is disconnected after
    writeTimeoutSeconds; the service goes on."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(path)
    body = json.dumps({"intent": "MakeUppercase", "parameters": {"text": "x" * (2 << 20)}}).encode()
    sock.sendall(b"POST /v1/handle HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    # The run ends (the service goes on meanwhile), then its answer waits for writeTimeoutSeconds (1 s).
    health = wait_running(path, 0, 60)
    expect(health["running"] == 0, "the intent did not end: %s" % health)
    time.sleep(3)
    # Then its connection was closed: reading drains what the kernel held, then the end.
    sock.settimeout(10)
    total = 0
    try:
        while True:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            total += len(chunk)
    except (ConnectionResetError, socket.timeout):
        pass
    sock.close()
    expect(total < len(body) * 2, "the whole answer waited for the caller: %d bytes" % total)


def check_many(path, count=None):
    """COUNT callers at once (EXTRUN_CLIENTS, default 200): each gets its report or an
    immediate overloaded (503); nobody waits forever; the service's memory stays bounded."""
    import resource
    import selectors
    count = count or int(os.environ.get("EXTRUN_CLIENTS", "200"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, count + 100)), hard))
    body = json.dumps({"intent": "MakeUppercase", "parameters": {"text": "many"}}).encode()
    request = b"POST /v1/handle HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    selector = selectors.DefaultSelector()
    replies = {}
    started = time.time()
    for index in range(count):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        sock.sendall(request)
        sock.setblocking(False)
        replies[sock] = b""
        selector.register(sock, selectors.EVENT_READ)
    open_count = count
    while open_count and time.time() - started < 120:
        for key, _ in selector.select(timeout=1):
            chunk = key.fileobj.recv(65536)
            if chunk:
                replies[key.fileobj] += chunk
            else:
                selector.unregister(key.fileobj)
                key.fileobj.close()
                open_count -= 1
    expect(open_count == 0, "%d callers still wait after 120 s" % open_count)
    statuses = {}
    for reply in replies.values():
        line = reply.split(b"\r\n", 1)[0]
        statuses[line] = statuses.get(line, 0) + 1
    ok = statuses.get(b"HTTP/1.1 200 OK", 0)
    busy = statuses.get(b"HTTP/1.1 503 Service Unavailable", 0)
    expect(ok + busy == count and ok > 0, "statuses: %s" % statuses)
    # A place frees just after its answer is written (the worker returns): waited for, briefly.
    health = wait_running(path, 0, 5)
    expect(health["running"] == 0 and health["queued"] == 0, "after: %s" % health)
    expect(health["residentBytes"] < 512 << 20, "the service's memory: %s" % health["residentBytes"])
    print(json.dumps({"clients": count, "ok": ok, "overloaded": busy, "seconds": round(time.time() - started, 2), "residentBytes": health["residentBytes"]}))


def check_file_paths(path):
    """A caller cannot make the service read a path (finding S1): not through a prompt's
    answer (the stock RenameFiles and FileEcho), nor POST /v1/continue's interaction, nor
    a phrase's file slot. Each is refused (reason path) and the file's bytes appear nowhere."""
    secret, text = os.environ["SECRET_PATH"], os.environ["SECRET_TEXT"]
    everything = []
    for intent in ("RenameFiles", "FileEcho"):
        connection = UnixConnection(path)
        connection.request("POST", "/v1/handle?interactive=true", body=json.dumps({"intent": intent, "parameters": {}}).encode())
        response = connection.getresponse()
        report, answered = None, 0
        for event in read_events(response):
            everything.append(json.dumps(event))
            if event["event"] == "prompt":
                answered += 1
                status, body, _ = call(path, "POST", "/v1/runs/%s/answers" % event["run"], {"prompt": event["prompt"], "answer": secret})
                everything.append(json.dumps(body))
            elif event["event"] == "report":
                report = event
                break
        connection.close()
        expect(report is not None and answered >= 1, "%s: no report or no prompt: %s" % (intent, everything))
        error = report["report"].get("error") or {}
        expect(error.get("kind") in ("parameterUnresolved", "invalidIntent"), "%s: the prompted path was not refused: %s" % (intent, report))
        expect(any("is a path" in e for e in everything), "%s: the caller was not told why: %s" % (intent, everything))
    status, body, _ = call(path, "POST", "/v1/continue", {"activityType": "test.fileecho.activity", "interaction": {"intent": "FileEcho", "parameters": {"f": secret}}})
    everything.append(json.dumps(body))
    error = body["report"]["error"] if isinstance(body, dict) and "report" in body else body.get("error", {})
    expect(status == 422 and (error.get("reason") == "path" or "is a path" in error.get("message", "")), "continue: %s %s" % (status, body))
    status, body, _ = call(path, "POST", "/v1/phrase", {"phrase": "Echo %s now" % secret})
    everything.append(json.dumps(body))
    error = body["report"]["error"] if isinstance(body, dict) and "report" in body else body.get("error", {})
    expect(status == 422 and (error.get("reason") == "path" or "is a path" in error.get("message", "")), "phrase: %s %s" % (status, body))
    for answer in everything:
        expect(text not in answer and text.encode().hex() not in answer, "the file's bytes came back: %s" % answer[:300])
        import base64
        expect(base64.b64encode(text.encode()).decode()[:16] not in answer, "the file's bytes came back (base64): %s" % answer[:300])


def status_kb(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def check_body_budget(path):
    """Many connections each send most of a big body and hold its last byte (finding S4):
    the service buffers no more than maxBufferedRequestBytes across them; the others are
    refused 503 overloaded (reason requestBudget) with the numbers, from their heads."""
    import threading
    pid = int(os.environ["SERVICE_PID"])
    count, size = int(os.environ.get("EXTRUN_CONNECTIONS", "8")), int(os.environ.get("EXTRUN_BODY_BYTES", str(40 << 20)))
    before = status_kb(pid, "VmRSS")
    replies, sockets = {}, []
    chunk = b"x" * (1 << 20)
    def send(index):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(30)
        sock.connect(path)
        sockets.append(sock)
        try:
            sock.sendall(b"POST /v1/handle HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % size)
            left = size - 1
            while left > 0:
                sock.sendall(chunk[:min(left, len(chunk))])
                left -= min(left, len(chunk))
        except OSError:
            pass
        try:
            sock.settimeout(0.5)
            replies[index] = sock.recv(65536)
        except OSError:
            replies[index] = b""
    threads = [threading.Thread(target=send, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    peak = status_kb(pid, "VmHWM")
    held = status_kb(pid, "VmRSS")
    refused = [r for r in replies.values() if r.startswith(b"HTTP/1.1 503")]
    expect(len(refused) >= count - 2, "refused: %d of %d: %s" % (len(refused), count, [r[:120] for r in replies.values()]))
    body = json.loads(refused[0].split(b"\r\n\r\n", 1)[1])
    error = body["report"]["error"]
    expect(error["kind"] == "overloaded" and error["reason"] == "requestBudget" and error["limitValue"] == int(os.environ["EXTRUN_BUDGET"]) and error["measured"] == size, "refusal: %s" % error)
    budget_kb = int(os.environ["EXTRUN_BUDGET"]) >> 10
    print(json.dumps({"rssBeforeKB": before, "peakKB": peak, "heldKB": held, "refused": len(refused)}))
    expect(held - before < budget_kb + (48 << 10), "held %d kB, before %d kB, budget %d kB" % (held, before, budget_kb))
    expect(peak < before + budget_kb + (96 << 10), "peak %d kB, before %d kB, budget %d kB" % (peak, before, budget_kb))
    for sock in sockets:
        sock.close()
    # The budget is given back: a small request goes through.
    time.sleep(0.3)
    status, body, _ = call(path, "GET", "/v1/health")
    expect(status == 200, "health after: %s" % status)


def check_tcp_head(path):
    """Over TCP the token is checked at the head: a caller without it is refused 401 before it sends any body."""
    port = int(os.environ["EXTRUN_TCP_PORT"])
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(b"POST /v1/handle HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (40 << 20))
    reply = b""
    try:
        reply = sock.recv(65536)
    except OSError as error:
        expect(False, "no answer to the head without a token: %s" % error)
    sock.close()
    expect(reply.startswith(b"HTTP/1.1 401"), "head without a token: %r" % reply[:200])


def check_connection_cap(path):
    """With maxConnections 4, four idle connections are held; the fifth is answered 503 overloaded (reason connections) at once and closed (logged with the numbers)."""
    held = []
    for _ in range(4):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        held.append(sock)
    time.sleep(0.3)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.connect(path)
    reply = b""
    while True:
        data = sock.recv(65536)
        if not data:
            break
        reply += data
    sock.close()
    expect(reply.startswith(b"HTTP/1.1 503"), "the fifth connection: %r" % reply[:200])
    error = json.loads(reply.partition(b"\r\n\r\n")[2])["error"]
    expect(error["kind"] == "overloaded" and error["reason"] == "connections" and error["limitValue"] == 4 and error["open"] == 4, "refusal: %s" % error)
    for sock in held:
        sock.close()
    time.sleep(0.3)
    status, _, _ = call(path, "GET", "/v1/health")
    expect(status == 200, "health after the others closed: %s" % status)


def check_unread_answers(path):
    """Callers that ask for large answers and never read them (finding S17): what the service
    holds for them is bounded by maxPendingResponseBytes; the answers over it are replaced by
    500 overloaded (reason responseBudget) with the numbers: not 503, which says nothing ran."""
    budget, count = int(os.environ["EXTRUN_BUDGET"]), 5
    body = json.dumps({"intent": "MakeUppercase", "parameters": {"text": "x" * (2 << 20)}}).encode()
    sockets = []
    for _ in range(count):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(path)
        sock.sendall(b"POST /v1/handle HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        sockets.append(sock)
        time.sleep(0.2)
    health = wait_running(path, 0, 60)
    expect(health["running"] == 0 and health["queued"] == 0, "the intents did not end: %s" % health)
    time.sleep(0.5)
    replies = []
    for sock in sockets:
        sock.settimeout(20)
        data = b""
        while True:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            length = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
            if length and len(rest) >= length[0]:
                break
        sock.close()
        replies.append(data)
    refused = [r for r in replies if r.startswith(b"HTTP/1.1 500")]
    expect(not any(r.startswith(b"HTTP/1.1 503") for r in replies), "a dropped answer of a run that ran is not 503: %s" % [r[:100] for r in replies])
    expect(all(b"retry-after" not in r.partition(b"\r\n\r\n")[0].lower() for r in refused), "a dropped answer has no Retry-After")
    served = [r for r in replies if r.startswith(b"HTTP/1.1 200")]
    expect(len(refused) >= 2 and len(served) >= 1, "served %d, refused %d: %s" % (len(served), len(refused), [r[:100] for r in replies]))
    error = json.loads(refused[0].partition(b"\r\n\r\n")[2])["report"]["error"]
    expect(error["kind"] == "overloaded" and error["reason"] == "responseBudget" and error["limitValue"] == budget and error["measured"] > 2 << 20, "refusal: %s" % error)


def check_stream_flood(path):
    """A plugin floods progress on an interactive stream its caller does not read (finding S5):
    progress past the stream's budget is dropped, the report still comes. With PROMPT set, the
    plugin then asks: a prompt the caller does not take within writeTimeoutSeconds ends the run."""
    prompt = os.environ.get("PROMPT") == "1"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(path)
    params = {"n": 300} if not prompt else {"n": 300, "ask": True}
    body = json.dumps({"intent": "Flood", "parameters": params}).encode()
    sock.sendall(b"POST /v1/handle?interactive=true HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    time.sleep(1)
    health = wait_running(path, 0, 30)
    expect(health["running"] == 0, "the run did not end: %s" % health)
    sock.settimeout(10)
    data = b""
    try:
        while True:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    sock.close()
    progress = data.count(b'"event":"progress"')
    if prompt:
        expect(b'"event":"report"' not in data, "a report reached a caller that never read: %r" % data[-300:])
    else:
        expect(b'"event":"report"' in data and b'"exitStatus":0' in data, "no report: %r" % data[-300:])
    expect(progress < 100, "%d of 300 progress events were kept for a caller that did not read" % progress)


def check_caller_share(path):
    """One caller (this uid, on the Unix socket) limited to 1 running and 2 queued sends 5
    long intents: 1 runs, 2 wait, 2 are refused callerQueueFull with the numbers. Another
    caller (over TCP) is not shut out: its 3 intents start at once on the free places
    (before: they queued behind intents that could not start, or were refused queueFull)."""
    port, token = int(os.environ["EXTRUN_TCP_PORT"]), os.environ["EXTRUN_TOKEN"]
    intent = {"intent": "Sleep", "parameters": {"seconds": 3}}
    hog = [send_raw_intent(path, intent) for _ in range(3)]
    wait_running(path, 1, 10)
    refusals = []
    for _ in range(2):
        status, answer, _ = call(path, "POST", "/v1/handle", intent)
        refusals.append((status, answer))
    for status, answer in refusals:
        error = answer["report"]["error"]
        expect(status == 503 and error["reason"] == "callerQueueFull" and error["callerQueued"] == 2 and error["maxQueuedPerCaller"] == 2, "the hog's extra intent: %s %s" % (status, answer))
    others = []
    for _ in range(3):
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        body = json.dumps(intent).encode()
        sock.sendall(b"POST /v1/handle HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n" % (token.encode(), len(body)) + body)
        others.append(sock)
    health = wait_running(path, 4, 10)
    expect(health["running"] == 4 and health["queued"] == 2, "the other caller did not get the free places: %s" % health)
    for sock in hog + others:
        sock.settimeout(30)
        reply = b""
        while b"exitStatus" not in reply:
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
        sock.close()
        expect(b'"exitStatus":0' in reply, "an intent: %r" % reply[:300])


def check_tcp_answer(path):
    """A TCP token holder cannot answer the prompt of a run started on the Unix socket (404 notFound, as an unknown run);
    the caller that started it can."""
    port, token = int(os.environ["EXTRUN_TCP_PORT"]), os.environ["EXTRUN_TOKEN"]
    connection = UnixConnection(path)
    connection.request("POST", "/v1/handle?interactive=true", body=json.dumps({"intent": "MakeUppercase", "parameters": {}}).encode())
    response = connection.getresponse()
    for event in read_events(response):
        if event["event"] == "prompt":
            body = json.dumps({"prompt": event["prompt"], "answer": "stolen"}).encode()
            tcp = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            tcp.request("POST", "/v1/runs/%s/answers" % event["run"], body=body, headers={"Authorization": "Bearer " + token})
            reply = tcp.getresponse()
            answer = reply.read()
            tcp.close()
            expect(reply.status == 404 and json.loads(answer)["error"]["kind"] == "notFound", "a TCP caller answered a Unix caller's prompt: %s %s" % (reply.status, answer))
            status, answer, _ = call(path, "POST", "/v1/runs/%s/answers" % event["run"], {"prompt": event["prompt"], "answer": "mine"})
            expect(status == 200, "the run's own caller: %s %s" % (status, answer))
        elif event["event"] == "report":
            expect(event["report"]["response"]["properties"]["result"] == "MINE", "report: %s" % event)
            break
    connection.close()


def check_say_less(path):
    """Callers' intent names cannot forge text log lines; a 404 does not name the plugin path."""
    status, answer, _ = call(path, "POST", "/v1/handle", {"intent": "Nope\n2026-01-01T00:00:00.000Z critical FORGED by the caller", "parameters": {}})
    expect(status == 404, "unknown intent: %s %s" % (status, answer))
    text = json.dumps(answer)
    expect("plugin path" not in text and os.environ["PLUGIN_DIR"] not in text, "the 404 names the plugin path: %s" % text)
    status, answer, _ = call(path, "GET", "/v1/intents/Nope")
    text = json.dumps(answer)
    expect(status == 404 and "plugin path" not in text and os.environ["PLUGIN_DIR"] not in text, "describe: %s %s" % (status, text))


def check_allow(path):
    """A 405 names the methods the endpoint takes in an Allow header (RFC 9110), and its body
    has the endpoint's shape: a run's envelope, or {"error"} where the endpoint answers that."""
    for method, target, allow, bare in [
        ("POST", "/v1/health", "GET", True), ("DELETE", "/metrics", "GET", True), ("TRACE", "/v1/intents", "GET", True),
        ("PUT", "/v1/intents/MakeUppercase", "GET", True), ("GET", "/v1/runs/x/answers", "POST", True),
        ("GET", "/v1/handle", "POST", False), ("DELETE", "/v1/phrase", "POST", False),
    ]:
        status, body, response = call(path, method, target)
        expect(status == 405 and response.getheader("allow") == allow, "%s %s: %s allow=%s %s" % (method, target, status, response.getheader("allow"), body))
        error = body.get("error") if bare else body.get("report", {}).get("error")
        expect(error is not None and error["kind"] == "invalidIntent" and ("report" in body) != bare, "%s %s: the body's shape: %s" % (method, target, body))


def check_bare_refusals(path):
    """POST /v1/runs/RUN/answers refuses a malformed body as it refuses a wrong answer: {"error"}
    (docs/serve-openapi.json, ErrorOnly), not a run's envelope; a run's refusal keeps the envelope."""
    for body in [b"", b"not json", b"[1]", {"answer": "x"}, {"prompt": 1}]:
        status, answer, _ = call(path, "POST", "/v1/runs/no-such-run/answers", body, {"Content-Type": "application/json"})
        expect(status == 400 and set(answer) == {"error"} and answer["error"]["kind"] == "invalidIntent" and answer["error"]["message"],
               "answers with %r: %s %s" % (body, status, answer))
    status, answer, _ = call(path, "GET", "/v1/intents/a/b")
    expect(status == 404 and set(answer) == {"error"}, "GET /v1/intents/a/b: %s %s" % (status, answer))
    status, answer, _ = call(path, "GET", "/v1/health?x=%ZZ")
    expect(status == 400 and set(answer) == {"error"}, "GET /v1/health with a bad query: %s %s" % (status, answer))
    status, answer, _ = call(path, "GET", "/v1/intents/" + "x" * 9000)
    expect(status == 414 and set(answer) == {"error"}, "GET /v1/intents/LONG: %s %s" % (status, answer))
    status, answer, _ = call(path, "POST", "/v1/handle", b"not json")
    expect(status == 400 and answer["exitStatus"] == 4 and answer["report"]["error"]["kind"] == "invalidIntent", "handle, not JSON: %s %s" % (status, answer))


def check_path_decoding(path):
    """A path parameter is percent-decoded, as clients encode it (extrun's ServerClient does)."""
    status, answer, _ = call(path, "GET", "/v1/intents/Make%55ppercase")
    expect(status == 200 and answer["plugin"] == "com.example.uppercase", "encoded name: %s %s" % (status, answer))
    status, answer, _ = call(path, "GET", "/v1/intents/No%20Such%2FIntent")
    expect(status == 404 and "'No Such/Intent'" in answer["error"]["message"], "encoded unknown name: %s %s" % (status, answer))
    status, answer, _ = call(path, "POST", "/v1/runs/%6Eo-run/answers", {"prompt": "1", "answer": "x"})
    expect(status == 404 and "'no-run'" in answer["error"]["message"], "encoded run: %s %s" % (status, answer))
    status, answer, _ = call(path, "GET", "/v1/intents/%ZZ")
    expect(status == 400 and "percent-encoded" in answer["error"]["message"], "bad encoding: %s %s" % (status, answer))


def check_tiny_memory(path):
    """A memory limit too small to leave the plugin any private memory is refused (422, with the
    minimum), on every run endpoint; it once trapped the whole service converting a negative size."""
    intent = {"intent": "MakeUppercase", "parameters": {"text": "hi"}}
    activity = {"activityType": "com.example.people.viewPerson", "userInfo": {"person": "chen"}}
    for target, body in [("/v1/handle", intent), ("/v1/options?parameter=text", intent), ("/v1/continue", activity),
                         ("/v1/phrase", {"phrase": "Order clam chowder in Soup Chef"})]:
        for size in ["1000", "0.613k", "64KiB"]:
            sep = "&" if "?" in target else "?"
            status, answer, _ = call(path, "POST", target + sep + "memoryLimit=" + size, body)
            error = answer["report"]["error"]
            expect(status == 422 and error["kind"] == "invalidIntent" and error["limit"] == "memoryBytes" and error["minimum"] == 65537,
                   "%s memoryLimit=%s: %s %s" % (target, size, status, answer))
    status, answer, _ = call(path, "POST", "/v1/handle?memoryLimit=65537", intent)
    expect(status in (200, 502), "just above the minimum: %s %s" % (status, answer))
    status, health, _ = call(path, "GET", "/v1/health")
    expect(status == 200 and health["status"] == "ok", "the service after them: %s %s" % (status, health))


checks = {
    "basic": check_basic, "prompt": check_prompt, "too-large": check_too_large, "disconnect": check_disconnect,
    "overloaded": check_overloaded, "caller-limit": check_caller_limit, "warm-limit": check_warm_limit, "limits": check_limits,
    "disconnect-prompt": check_disconnect_prompt, "health": check_health,
    "activation": check_activation, "tcp": check_tcp,
    "malformed": check_malformed, "file-paths": check_file_paths, "body-budget": check_body_budget, "tcp-head": check_tcp_head, "connection-cap": check_connection_cap, "unread-answers": check_unread_answers, "stream-flood": check_stream_flood, "caller-share": check_caller_share, "tcp-answer": check_tcp_answer, "say-less": check_say_less, "never-reads": check_never_reads, "many": check_many,
    "allow": check_allow, "bare-refusals": check_bare_refusals, "path-decoding": check_path_decoding, "tiny-memory": check_tiny_memory,
}

if __name__ == "__main__":
    checks[sys.argv[2]](sys.argv[1])
