import ExtrunProtocol
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A shared `extrun serve` (root, `--socket-mode 666`) against hostile local callers (issue 30):
/// a uid's flood of half-open connections, slow heads, duplicate credentials, `Expect`, another
/// caller's run ids, a socket path through another user's link, callers that never read.
/// Each test drives the real service with a small standard-library Python script
/// (`hostileScript`, run as the flooding user through runuser when root).
@Suite("extrun serve: a shared service", .serialized)
struct ServeSharedTests {
    let cli: CLI

    init() throws {
        cli = try CLI()
    }

    static var isRoot: Bool { getuid() == 0 }

    /// The ordinary user the hostile caller runs as (made as Scripts/test makes it, when missing).
    static let hostileUser = "extrun-test"

    static func ensureUser(_ name: String) throws -> UInt32 {
        if let entry = getpwnam(name) { return entry.pointee.pw_uid }
        let made = try ProgramRun.program(
            "/usr/sbin/useradd", ["--user-group", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name])
        guard made.status == 0 || made.status == 9, let entry = getpwnam(name) else {
            throw StagedPlugins.NotStaged(description: "cannot make the user \(name): \(made)")
        }
        return entry.pointee.pw_uid
    }

    /// The script in a directory every user can read; removed with the directory.
    static func script() throws -> (TempDirectory, String) {
        let directory = try TempDirectory("serve-hostile")
        chmod(directory.url.path, 0o755)
        let file = try directory.write("hostile.py", hostileScript, mode: 0o755)
        return (directory, file.path)
    }

    /// Runs the script as `user` (root only) or as ourselves, to its end.
    static func hostile(_ arguments: [String], as user: String? = nil, environment: [String: String] = [:]) throws -> CLIResult {
        let (directory, path) = try script()
        defer { withExtendedLifetime(directory) {} }
        let env = environment.map { "\($0.key)=\($0.value)" }.sorted()
        if let user, isRoot {
            return try ProgramRun.program("/usr/sbin/runuser", ["-u", user, "--", "/usr/bin/env"] + env + ["/usr/bin/python3", "-B", path] + arguments)
        }
        return try ProgramRun.program("/usr/bin/env", env + ["/usr/bin/python3", "-B", path] + arguments)
    }

    @Test(
        "One uid's flood of ~1,100 half-open requests (reconnecting as closed) does not lock another user out; the refusals are logged a few lines per 10 s (log under 64 KiB) and counted in /metrics (as root: extrun-test floods, root calls)",
        .enabled(if: isRoot, "needs root: a second local user floods a root service with --socket-mode 666"))
    func uidFloodLeavesOthersServed() throws {
        let floodUID = try Self.ensureUser(Self.hostileUser)
        let service = try RunningService(cli: cli, arguments: ["--socket-mode", "666"])
        defer { service.stop() }
        chmod(service.directory.url.path, 0o711)
        let (directory, script) = try Self.script()
        defer { withExtendedLifetime(directory) {} }
        let flooder = Process()
        flooder.executableURL = URL(fileURLWithPath: "/usr/sbin/runuser")
        flooder.arguments = ["-u", Self.hostileUser, "--", "/usr/bin/python3", "-B", script, "flood", service.socket, "14", "1100"]
        let floodOut = directory.url.appendingPathComponent("flood.out")
        _ = FileManager.default.createFile(atPath: floodOut.path, contents: nil)
        flooder.standardOutput = try FileHandle(forWritingTo: floodOut)
        flooder.standardError = flooder.standardOutput
        try flooder.run()
        defer {
            if flooder.isRunning { kill(flooder.processIdentifier, SIGKILL) }
            flooder.waitUntilExit()
        }
        // The flood holds its connections before the other user starts calling.
        usleep(4_000_000)
        let victim = try Self.hostile(["victim", service.socket, "7"])
        flooder.waitUntilExit()
        let flood = (try? String(contentsOf: floodOut, encoding: .utf8)) ?? ""
        #expect(victim.status == 0, "another user's calls during the flood:\n\(victim)\nflood: \(flood)\nlog: \(service.logText.suffix(1500))")
        #expect(flood.contains("\"held\""), "the flooder: \(flood)")
        let log = service.logText
        #expect(log.utf8.count < 64 << 10, "the log grew to \(log.utf8.count) bytes during the flood: \(log.suffix(1500))")
        #expect(log.contains("refused for uid \(floodUID)"), "\(log.suffix(3000))")
        #expect(victim.stdout.contains("extrun_connections_refused_total"), "metrics: \(victim.stdout.suffix(3000))")
    }

    @Test("A caller's connections are limited per uid (callers.UID.maxConnections, maxConnectionsPerCaller): the one over it is answered 503 overloaded with the numbers, the refusals counted in /metrics; the slot frees when one closes")
    func perCallerConnectionCap() throws {
        let uid = getuid()
        let service = try RunningService(cli: cli, policy: #"{"callers": {"\#(uid)": {"maxConnections": 3}}}"#)
        defer { service.stop() }
        let result = try Self.hostile(["caller-cap", service.socket, "3", String(uid)])
        #expect(result.status == 0, "\(result)\n\(service.logText.suffix(2000))")
    }

    @Test("A slow head (one byte a second) is closed after requestHeadTimeoutSeconds, though the whole request's requestTimeoutSeconds is longer; an idle kept-alive connection too")
    func slowHeadClosed() throws {
        let service = try RunningService(cli: cli, policy: #"{"requestHeadTimeoutSeconds": 1.5, "requestTimeoutSeconds": 30}"#)
        defer { service.stop() }
        let result = try Self.hostile(["slow-head", service.socket, "1.5"])
        #expect(result.status == 0, "\(result)\n\(service.logText.suffix(2000))")
    }

    @Test("Expect: 100-continue is answered 100 before the body is sent; another expectation is refused 417; an over-large body is refused 413 without 100")
    func expectContinue() throws {
        let service = try RunningService(cli: cli, policy: #"{"maxRequestBytes": 4096}"#)
        defer { service.stop() }
        let result = try Self.hostile(["expect", service.socket])
        #expect(result.status == 0, "\(result)\n\(service.logText.suffix(2000))")
    }

    @Test("Over TCP: two Authorization headers are refused (400), whichever comes first; another caller's run id is answered as an unknown one (404 notFound, the same body); a source address holds at most maxConnectionsPerCaller connections")
    func tcpCredentialsAndRuns() throws {
        let dir = try TempDirectory("token")
        let token = "s3cret-token-\(UUID().uuidString)"
        let file = try dir.write("token", token, mode: 0o600)
        let port = try ServeListenerTests.freePort()
        let service = try RunningService(
            cli: cli, policy: #"{"maxConnectionsPerCaller": 4}"#, arguments: ["--listen", "127.0.0.1:\(port)", "--token-file", file.path])
        defer { service.stop() }
        let result = try Self.hostile(["tcp", service.socket, String(port)], environment: ["EXTRUN_TOKEN": token])
        #expect(result.status == 0, "\(result)\n\(service.logText.suffix(2000))")
    }

    @Test(
        "A root service given a --socket path through another user's symbolic link refuses it (configurationError naming the link) and creates nothing there; a root-owned link is followed",
        .enabled(if: isRoot, "needs root: the link must belong to another user"))
    func socketPathThroughForeignLink() throws {
        let hostileUID = try Self.ensureUser(Self.hostileUser)
        let base = try TempDirectory("serve-link")
        chmod(base.url.path, 0o755)
        let target = try base.directory("target")
        let theirs = try base.directory("theirs")
        chown(theirs.path, hostileUID, hostileUID)
        let link = theirs.appendingPathComponent("run").path
        #expect(symlink(target.path, link) == 0)
        #expect(lchown(link, hostileUID, hostileUID) == 0)
        let refused = try Self.serveBounded(cli, ["serve", "--socket", link + "/s.sock"], in: base)
        #expect(refused.status == 11 && refused.stderr.contains(link), "\(refused)")
        #expect((try? FileManager.default.contentsOfDirectory(atPath: target.path)) == [], "the service created its socket through the link")
        // A missing directory under their link is not made either.
        let deeper = try Self.serveBounded(cli, ["serve", "--socket", link + "/new/s.sock"], in: base)
        #expect(deeper.status == 11, "\(deeper)")
        #expect((try? FileManager.default.contentsOfDirectory(atPath: target.path)) == [], "a directory was made through the link")
        // A link of root's (as /var/run -> /run) is followed.
        let ours = base.url.appendingPathComponent("ours").path
        #expect(symlink(target.path, ours) == 0)
        let socket = target.appendingPathComponent("o.sock").path
        let process = Process()
        process.executableURL = try ExtrunBinary.url()
        process.arguments = ["serve", "--socket", ours + "/o.sock"]
        process.environment = cli.environmentForRun()
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let deadline = Date().addingTimeInterval(20)
        while !RunningService.connects(socket), process.isRunning, Date() < deadline { usleep(20_000) }
        #expect(RunningService.connects(socket), "the service does not listen through root's link")
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        #expect(!FileManager.default.fileExists(atPath: socket), "the socket is left")
    }

    /// `extrun serve ARGS`, which should refuse to start: given 5 s, then ended (SIGTERM) and
    /// reported as such (status -1), so that a service that does start never outlives the test.
    static func serveBounded(_ cli: CLI, _ arguments: [String], in directory: TempDirectory) throws -> CLIResult {
        let process = Process()
        process.executableURL = try ExtrunBinary.url()
        process.arguments = arguments
        process.environment = cli.environmentForRun()
        let err = directory.url.appendingPathComponent("serve-\(UUID().uuidString).err")
        _ = FileManager.default.createFile(atPath: err.path, contents: nil)
        process.standardOutput = FileHandle.nullDevice
        process.standardError = try FileHandle(forWritingTo: err)
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let deadline = Date().addingTimeInterval(5)
        while process.isRunning, Date() < deadline { usleep(20_000) }
        let started = process.isRunning
        if started { kill(process.processIdentifier, SIGTERM) }
        process.waitUntilExit()
        let stderr = (try? String(contentsOf: err, encoding: .utf8)) ?? ""
        try? FileManager.default.removeItem(at: err)
        return CLIResult(status: started ? -1 : process.terminationStatus, stdout: "", stderr: stderr)
    }

    @Test("Three rounds of 100 callers that never read their answers: the service's memory comes back to within its stated bound of where it started")
    func unreadRoundsGiveMemoryBack() throws {
        let service = try RunningService(cli: cli, policy: #"{"writeTimeoutSeconds": 2}"#)
        defer { service.stop() }
        let result = try Self.hostile(["unread-rounds", service.socket, "3", "100", String(service.process.processIdentifier)])
        #expect(result.status == 0, "\(result)\n\(service.logText.suffix(2000))")
    }
}

/// The hostile callers, standard library only (it runs as another user, outside the test venv).
private let hostileScript = #"""
    #!/usr/bin/python3
    import http.client, json, os, resource, select, socket, sys, time

    def expect(condition, message):
        if not condition:
            print("FAILED: " + message)
            sys.exit(1)

    class UnixConnection(http.client.HTTPConnection):
        def __init__(self, path, timeout=30):
            super().__init__("localhost", timeout=timeout)
            self.path = path
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(self.timeout)
            self.sock.connect(self.path)

    def call(path, method, target, body=None, headers=None, timeout=30):
        connection = UnixConnection(path, timeout)
        data = json.dumps(body).encode() if body is not None else None
        connection.request(method, target, body=data, headers=headers or {})
        response = connection.getresponse()
        raw = response.read()
        connection.close()
        try:
            return response.status, json.loads(raw), response
        except ValueError:
            return response.status, raw.decode(errors="replace"), response

    def raw_reply(sock, seconds=10):
        sock.settimeout(seconds)
        data = b""
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
                head, sep, rest = data.partition(b"\r\n\r\n")
                if sep:
                    lengths = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
                    if lengths and len(rest) >= lengths[0]:
                        break
        except socket.timeout:
            pass
        return data

    def flood(path, seconds, count):
        """Holds up to `count` half-open requests (a partial head), reconnecting as they are closed."""
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, count + 256), hard))
        deadline = time.time() + seconds
        held, opened, closed, failed, most = [], 0, 0, 0, 0
        while time.time() < deadline:
            while len(held) < count and time.time() < deadline:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(0.2)
                try:
                    sock.connect(path)
                    sock.send(b"POST /v1/handle HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                except OSError:
                    failed += 1
                    sock.close()
                    break
                sock.setblocking(False)
                held.append(sock)
                opened += 1
            most = max(most, len(held))
            poller = select.poll()
            byfd = {}
            for sock in held:
                poller.register(sock, select.POLLIN)
                byfd[sock.fileno()] = sock
            readable = [byfd[fd] for fd, _ in poller.poll(50)]
            for sock in readable:
                try:
                    data = sock.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    held.remove(sock)
                    sock.close()
                    closed += 1
        for sock in held:
            sock.close()
        print(json.dumps({"held": most, "opened": opened, "closedByService": closed, "failedConnects": failed}))

    def victim(path, seconds):
        """Another user's calls, one after another: every one must be served."""
        deadline = time.time() + seconds
        calls = 0
        while time.time() < deadline:
            status, answer, _ = call(path, "GET", "/v1/health", timeout=10)
            expect(status == 200, "health during the flood: %s %s" % (status, answer))
            status, answer, _ = call(path, "POST", "/v1/handle", {"intent": "MakeUppercase", "parameters": {"text": "mine"}}, timeout=20)
            expect(status == 200 and answer["report"]["response"]["properties"]["result"] == "MINE", "handle during the flood: %s %s" % (status, answer))
            calls += 2
        status, metrics, _ = call(path, "GET", "/metrics")
        print("calls %d" % calls)
        print(metrics)

    def caller_cap(path, limit, uid):
        held = []
        for _ in range(limit):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
            held.append(sock)
        time.sleep(0.3)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        reply = raw_reply(sock, 5)
        sock.close()
        expect(reply.startswith(b"HTTP/1.1 503"), "the connection over the caller's limit: %r" % reply[:300])
        error = json.loads(reply.partition(b"\r\n\r\n")[2])["error"]
        expect(error["kind"] == "overloaded" and error["reason"] == "callerConnections" and error["limitValue"] == limit
               and error["uid"] == uid and error["open"] == limit, "refusal: %s" % error)
        held.pop().close()
        time.sleep(0.3)
        status, _, _ = call(path, "GET", "/v1/health")
        expect(status == 200, "health once a slot freed: %s" % status)
        status, metrics, _ = call(path, "GET", "/metrics")
        expect('extrun_connections_refused_total{reason="callerConnections"} 1' in metrics, "metrics: %s" % metrics)
        for sock in held:
            sock.close()

    def slow_head(path, head_seconds):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        started = time.time()
        closed_after = None
        for byte in b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n":
            try:
                sock.send(bytes([byte]))
            except OSError:
                closed_after = time.time() - started
                break
            readable, _, _ = select.select([sock], [], [], 0.5)
            if readable and not sock.recv(4096):
                closed_after = time.time() - started
                break
        sock.close()
        expect(closed_after is not None and closed_after < head_seconds + 2, "a slow head was held %s s" % closed_after)
        # An idle kept-alive connection: closed after the head deadline too.
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = raw_reply(sock, 5)
        expect(reply.startswith(b"HTTP/1.1 200"), "health: %r" % reply[:200])
        started = time.time()
        sock.settimeout(head_seconds + 5)
        try:
            rest = sock.recv(4096)
        except socket.timeout:
            rest = b"timeout"
        expect(rest == b"" and time.time() - started < head_seconds + 2, "an idle kept-alive connection: %r after %.1f s" % (rest, time.time() - started))
        sock.close()

    def expect_continue(path):
        body = json.dumps({"intent": "MakeUppercase", "parameters": {"text": "hello"}}).encode()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        sock.sendall(b"POST /v1/handle HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        sock.settimeout(3)
        try:
            interim = sock.recv(4096)
        except socket.timeout:
            interim = b""
        expect(interim.startswith(b"HTTP/1.1 100"), "no 100 Continue within 3 s: %r" % interim[:200])
        sock.sendall(body)
        reply = raw_reply(sock, 20)
        expect(reply.startswith(b"HTTP/1.1 200") and b"HELLO" in reply, "the answer after 100: %r" % reply[:400])
        sock.close()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        sock.sendall(b"POST /v1/handle HTTP/1.1\r\nHost: x\r\nExpect: something-else\r\nContent-Length: %d\r\n\r\n" % len(body))
        reply = raw_reply(sock, 5)
        expect(reply.startswith(b"HTTP/1.1 417"), "another expectation: %r" % reply[:300])
        sock.close()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
        sock.sendall(b"POST /v1/handle HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 100000\r\n\r\n")
        reply = raw_reply(sock, 5)
        expect(reply.startswith(b"HTTP/1.1 413"), "an over-large body expecting 100: %r" % reply[:300])
        sock.close()

    def tcp(path, port):
        token = os.environ["EXTRUN_TOKEN"]
        def tcp_raw(headers, body=b""):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body)
            reply = raw_reply(sock, 10)
            sock.close()
            return reply
        good, bad = b"Authorization: Bearer " + token.encode(), b"Authorization: Bearer wrong-wrong-wrong-wrong"
        expect(tcp_raw([good]).startswith(b"HTTP/1.1 200"), "one good Authorization")
        for headers in ([good, bad], [bad, good], [good, good]):
            reply = tcp_raw(headers)
            expect(reply.startswith(b"HTTP/1.1 400"), "two Authorization headers %s: %r" % (headers, reply[:300]))
        # Another caller's run (started on the Unix socket) and an unknown one: answered alike.
        connection = UnixConnection(path)
        connection.request("POST", "/v1/handle?interactive=true", body=json.dumps({"intent": "MakeUppercase", "parameters": {}}).encode())
        response = connection.getresponse()
        bodies = {}
        for line in response:
            event = json.loads(line)
            if event["event"] == "prompt":
                run = event["run"]
                for name, target in (("foreign", run), ("unknown", "0" * len(run))):
                    tcp_connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                    tcp_connection.request("POST", "/v1/runs/%s/answers" % target, body=json.dumps({"prompt": event["prompt"], "answer": "stolen"}).encode(),
                                           headers={"Authorization": "Bearer " + token})
                    reply = tcp_connection.getresponse()
                    bodies[name] = (reply.status, reply.read().decode().replace(target, "RUN"))
                    tcp_connection.close()
                status, answer, _ = call(path, "POST", "/v1/runs/%s/answers" % run, {"prompt": event["prompt"], "answer": "mine"})
                expect(status == 200, "the run's own caller: %s %s" % (status, answer))
            elif event["event"] == "report":
                expect(event["report"]["response"]["properties"]["result"] == "MINE", "report: %s" % event)
                break
        connection.close()
        expect(bodies.get("foreign") == bodies.get("unknown"), "another caller's run and an unknown one differ: %s" % bodies)
        status, text = bodies["foreign"]
        expect(status == 404 and json.loads(text)["error"]["kind"] == "notFound", "another caller's run: %s %s" % (status, text))
        # One source address holds at most maxConnectionsPerCaller (4) connections, authenticated or not.
        held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(4)]
        time.sleep(0.3)
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        reply = raw_reply(sock, 5)
        sock.close()
        expect(reply.startswith(b"HTTP/1.1 503"), "a fifth connection from 127.0.0.1: %r" % reply[:300])
        error = json.loads(reply.partition(b"\r\n\r\n")[2])["error"]
        expect(error["reason"] == "callerConnections" and error["address"] == "127.0.0.1" and error["limitValue"] == 4, "refusal: %s" % error)
        for sock in held:
            sock.close()
        time.sleep(0.3)
        expect(tcp_raw([good]).startswith(b"HTTP/1.1 200"), "once the address's connections closed")

    def rss(pid):
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024

    def unread_rounds(path, rounds, clients, pid):
        for _ in range(5):
            status, _, _ = call(path, "POST", "/v1/handle", {"intent": "MakeUppercase", "parameters": {"text": "x" * 300000}})
            expect(status == 200, "warm-up: %s" % status)
        time.sleep(1.5)
        baseline = rss(pid)
        body = json.dumps({"intent": "MakeUppercase", "parameters": {"text": "x" * 300000}}).encode()
        after = []
        for _ in range(rounds):
            sockets = []
            for _ in range(clients):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.connect(path)
                sock.sendall(b"POST /v1/handle HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
                sockets.append(sock)
            deadline = time.time() + 120
            while time.time() < deadline:
                status, health, _ = call(path, "GET", "/v1/health")
                if health["running"] == 0 and health["queued"] == 0:
                    break
                time.sleep(0.2)
            time.sleep(3)
            peak = rss(pid)
            for sock in sockets:
                sock.close()
            time.sleep(2.5)
            after.append((peak, rss(pid)))
        mib = lambda n: round(n / 1048576.0, 1)
        print(json.dumps({"baselineMiB": mib(baseline), "rounds": [(mib(p), mib(a)) for p, a in after]}))
        bound = 24 << 20
        expect(after[-1][1] <= baseline + bound, "RSS %s MiB after %d rounds, from %s MiB (bound +%s MiB): %s" % (
            mib(after[-1][1]), rounds, mib(baseline), mib(bound), after))

    command, path = sys.argv[1], sys.argv[2]
    if command == "flood":
        flood(path, float(sys.argv[3]), int(sys.argv[4]))
    elif command == "victim":
        victim(path, float(sys.argv[3]))
    elif command == "caller-cap":
        caller_cap(path, int(sys.argv[3]), int(sys.argv[4]))
    elif command == "slow-head":
        slow_head(path, float(sys.argv[3]))
    elif command == "expect":
        expect_continue(path)
    elif command == "tcp":
        tcp(path, int(sys.argv[3]))
    elif command == "unread-rounds":
        unread_rounds(path, int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit("unknown command " + command)
    """#
