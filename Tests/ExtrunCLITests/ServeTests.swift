import ExtrunProtocol
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `extrun serve`, started for real on a socket in a temporary directory and driven by the
/// CLI as a client and by a Python standard-library client (Fixtures/serve_client.py).
/// Every test ends the service and checks that no process and no file of it is left.
@Suite("extrun serve", .serialized)
struct ServeTests {
    let cli: CLI

    init() throws {
        cli = try CLI()
    }

    /// The fields of a report that do not depend on which host ran it.
    func essentials(_ result: CLIResult) throws -> [String: JSONValue] {
        guard case .object(var object) = try result.json() else { return [:] }
        for volatile in ["id", "metrics", "steps", "donation"] { object[volatile] = nil }
        if case .object(var error) = object["error"] ?? .null {
            error["message"] = nil
            error["file"] = nil
            object["error"] = .object(error)
        }
        return object
    }

    @Test("handle --server and EXTRUN_SERVER print the report extrun handle prints, with its exit status")
    func cliClientMatchesLocalRun() throws {
        let service = try RunningService(cli: cli)
        defer { service.stop() }
        let dir = try TempDirectory("intents")
        let unknown = try dir.write("unknown.json", #"{"intent": "MakeUppercase", "parameters": {"text": "x", "nope": 1}}"#)
        let missing = try dir.write("missing.json", #"{"intent": "MakeUppercase", "parameters": {}}"#)
        let nobody = try dir.write("nobody.json", #"{"intent": "NoSuchIntent"}"#)
        for (file, expected) in [("Examples/intents/make-uppercase.json", Int32(0)), (unknown.path, 4), (missing.path, 3), (nobody.path, 5)] {
            let local = try cli.run(["handle", "--no-input", file])
            let remote = try service.client(["handle", "--no-input", "--server", service.socket, file])
            let fastPath = try service.client(["handle", file], environment: ["EXTRUN_SERVER": service.socket])
            // `handle --server SOCKET FILE` alone skips ArgumentParser too (HandleFastPath.servedIntent).
            let servedFastPath = try service.client(["handle", "--server", service.socket, file])
            #expect(servedFastPath.status == expected, "\(servedFastPath)")
            #expect(try essentials(servedFastPath) == essentials(local), "\(servedFastPath)")
            #expect(local.status == expected, "\(local)")
            #expect(remote.status == expected, "\(remote)")
            #expect(fastPath.status == expected, "\(fastPath)")
            #expect(try essentials(remote) == essentials(local), "\(remote)\n\(local)")
            #expect(try essentials(fastPath) == essentials(local), "\(fastPath)")
        }
        let text = try service.client(["handle", "--server", service.socket, "--format", "text", "Examples/intents/make-uppercase.json"])
        #expect(text.status == 0 && text.stdout.contains("HELLO WORLD"), "\(text)")
        // The service's log names the caller's uid with every intent.
        #expect(service.logText.contains("\"uid\":\(getuid())"), "\(service.logText)")
    }

    @Test("A file parameter is read by the client, never by the service (sent inline)")
    func filesGoInline() throws {
        let service = try RunningService(cli: cli)
        defer { service.stop() }
        let local = try cli.run(["handle", "--no-input", "Examples/intents/rename-files.json"])
        let remote = try service.client(["handle", "--no-input", "--server", service.socket, "Examples/intents/rename-files.json"])
        #expect(remote.status == local.status, "\(remote)\n\(local)")
        #expect(try essentials(remote) == essentials(local), "\(remote)\n\(local)")
    }

    @Test("A service that is not there: configurationError, exit 11, naming the socket")
    func noService() throws {
        let dir = try TempDirectory("nosock")
        let path = dir.url.appendingPathComponent("none.sock").path
        let result = try cli.run(["handle", "--server", path, "Examples/intents/make-uppercase.json"])
        #expect(result.status == 11, "\(result)")
        #expect(try result.json()["error"]?["message"]?.stringValue?.contains(path) == true, "\(result)")
    }

    @Test("Python client: health, intents, handle (warm), typed errors with HTTP statuses, options, metrics")
    func pythonClient() throws {
        let service = try RunningService(cli: cli)
        defer { service.stop() }
        let result = try service.python("basic")
        #expect(result.status == 0, "\(result)\n\(service.logText)")
    }

    @Test("Prompts over the connection: a prompt event, answered by POST .../answers; a declined one ends parameterUnresolved")
    func prompts() throws {
        let service = try RunningService(cli: cli)
        defer { service.stop() }
        let result = try service.python("prompt")
        #expect(result.status == 0, "\(result)\n\(service.logText)")
    }

    @Test("A request over maxRequestBytes is refused from its Content-Length, 413 with the numbers")
    func tooLarge() throws {
        let service = try RunningService(cli: cli, policy: #"{"maxRequestBytes": 65536}"#)
        defer { service.stop() }
        let result = try service.python("too-large")
        #expect(result.status == 0, "\(result)")
    }

    @Test("Queue full: overloaded, HTTP 503, exit 21, with the limits; the running intent is not disturbed")
    func overloaded() throws {
        let service = try RunningService(cli: cli, policy: #"{"maxConcurrent": 1, "maxQueued": 0}"#)
        defer { service.stop() }
        let result = try service.python("overloaded")
        #expect(result.status == 0, "\(result)\n\(service.logText)")
    }

    @Test("SIGKILL of the service: every plugin it started dies with it (the supervisor's lifeline)")
    func killedServiceLeavesNoPlugin() throws {
        let service = try RunningService(cli: cli)
        let warm = try service.client(["handle", "--server", service.socket, "Examples/intents/make-uppercase.json"])
        #expect(warm.status == 0, "\(warm)")
        let started = service.descendants
        #expect(!started.isEmpty, "a warm process should be kept after a reusable plugin's intent")
        kill(service.process.processIdentifier, SIGKILL)
        service.process.waitUntilExit()
        let left = ServeProcesses.waitGone(started, seconds: 5)
        #expect(left.isEmpty, "plugin processes left after the service was killed: \(left)")
        // The next service takes over the stale socket, and its first plugin's launch sweeps
        // the scratch directory the killed one left behind.
        let next = try RunningService(cli: cli, sharing: service)
        let again = try next.client(["handle", "--server", next.socket, "Examples/intents/make-uppercase.json"])
        #expect(again.status == 0, "\(again)")
        next.stop()
    }

    @Test("A bad serve.json: configurationError naming the field, exit 11, nothing left")
    func badPolicy() throws {
        let dir = try TempDirectory("badpolicy")
        let file = try dir.write("serve.json", #"{"maxConcurrent": 0}"#, mode: 0o600)
        let result = try cli.run(["serve", "--socket", dir.url.appendingPathComponent("s.sock").path, "--config", file.path])
        #expect(result.status == 11, "\(result)")
        #expect(result.stderr.contains("maxConcurrent"), "\(result)")
        #expect(!FileManager.default.fileExists(atPath: dir.url.appendingPathComponent("s.sock").path))
    }
}

/// A Python plugin that crashes (exit 3) on every `handle`: the service's crash backoff.
private let crashingPlugin = #"""
    #!/usr/bin/env python3
    import os, sys
    sys.dont_write_bytecode = True
    import extrun_plugin as extrun


    class Crash(extrun.Intent):
        name = "Crash"

        def handle(self, values, context):
            os._exit(3)


    extrun.run("test.crash", "1.0.0", [Crash()])
    """#

private let crashingManifest = #"""
    {"id": "test.crash", "version": "1.0.0", "owner": "TESTTEAM", "protocolVersion": 1, "executable": "plugin.py",
     "intents": [{"name": "Crash", "parameters": []}]}
    """#

@Suite("extrun serve: warm processes and limits", .serialized)
struct ServeLimitTests {
    let cli: CLI

    init() throws {
        cli = try CLI()
    }

    @Test("An idle warm process is ended after idleTimeoutSeconds")
    func idleTimeout() throws {
        // 2 s: the warm process must still be there when the client has exited, which on a
        // loaded machine (a clean-clone run, load ~10) took longer than 0.3 s.
        let service = try RunningService(cli: cli, policy: #"{"idleTimeoutSeconds": 2}"#)
        defer { service.stop() }
        let result = try service.client(["handle", "--server", service.socket, "Examples/intents/make-uppercase.json"])
        #expect(result.status == 0, "\(result)")
        #expect(!service.descendants.isEmpty, "the warm process")
        let deadline = Date().addingTimeInterval(10)
        while !service.descendants.isEmpty, Date() < deadline { usleep(50_000) }
        #expect(service.descendants.isEmpty, "the warm process is still there 10 s after an idle timeout of 2 s")
    }

    @Test("maxWarmPerPlugin: three processes ran at once, one is kept")
    func warmLimit() throws {
        let service = try RunningService(cli: cli, policy: #"{"maxWarmPerPlugin": 1}"#)
        defer { service.stop() }
        let result = try service.python("warm-limit")
        #expect(result.status == 0, "\(result)\n\(service.logText)")
    }

    @Test("The per-caller limit (callers.UID.maxConcurrent) refuses a second intent of the same uid: overloaded with callerLimit")
    func callerLimit() throws {
        let service = try RunningService(cli: cli, policy: #"{"maxConcurrent": 4, "maxQueued": 0, "callers": {"\#(getuid())": {"maxConcurrent": 1}}}"#)
        defer { service.stop() }
        let result = try service.python("caller-limit")
        #expect(result.status == 0, "\(result)\n\(service.logText)")
    }

    @Test("options, continue and phrase over the service run in warm sessions: the second call of each reuses the process")
    func everyVerbIsWarm() throws {
        let service = try RunningService(cli: cli)
        defer { service.stop() }
        func counts() throws -> (launches: Int64, reuses: Int64) {
            let health = try JSONParser.parse(Array(try service.python("health").stdout.utf8))
            return (health["launches"]?.intValue ?? -1, health["reuses"]?.intValue ?? -1)
        }
        let person = StagedPlugins.packageRoot.appendingPathComponent("Examples/activities/view-person.json").path
        let calls: [(String, [String])] = [
            ("options", ["options", "--server", service.socket, "Examples/intents/order-soup.json", "soup"]),
            ("continue", ["continue", "--server", service.socket, person]),
            ("phrase", ["phrase", "--server", service.socket, "--yes", "Order clam chowder in Soup Chef"]),
        ]
        for (verb, arguments) in calls {
            let first = try service.client(arguments)
            #expect(first.status == 0, "\(verb): \(first)")
            let before = try counts()
            let second = try service.client(arguments)
            #expect(second.status == 0, "\(verb): \(second)")
            let after = try counts()
            // The same call again starts no process: each of its steps takes a warm one.
            #expect(after.launches == before.launches, "\(verb): launches \(before.launches) -> \(after.launches)\n\(service.logText)")
            #expect(after.reuses > before.reuses, "\(verb): reuses \(before.reuses) -> \(after.reuses)")
        }
    }

    @Test("SIGHUP re-reads serve.json; a bad file is logged and the running policy kept")
    func sighup() throws {
        let service = try RunningService(cli: cli, policy: #"{"maxConcurrent": 1, "maxQueued": 0}"#)
        defer { service.stop() }
        let file = service.directory.url.appendingPathComponent("serve.json")
        func limits() throws -> JSONValue { try JSONParser.parse(Array(try service.python("limits").stdout.utf8)) }
        #expect(try limits()["maxConcurrent"] == 1)
        try Data(#"{"maxConcurrent": 3, "maxQueued": 5}"#.utf8).write(to: file)
        kill(service.process.processIdentifier, SIGHUP)
        var deadline = Date().addingTimeInterval(5)
        while try limits()["maxConcurrent"] != 3, Date() < deadline { usleep(50_000) }
        #expect(try limits()["maxConcurrent"] == 3 && limits()["maxQueued"] == 5)
        try Data(#"{"maxConcurrent": "many"}"#.utf8).write(to: file)
        kill(service.process.processIdentifier, SIGHUP)
        deadline = Date().addingTimeInterval(5)
        while !service.logText.contains("SIGHUP: the policy was not changed"), Date() < deadline { usleep(50_000) }
        #expect(service.logText.contains("maxConcurrent"), "\(service.logText)")
        #expect(try limits()["maxConcurrent"] == 3)
    }

    @Test("A plugin that keeps crashing is backed off: overloaded (reason backoff, exit 21) with the crashes, listed by health")
    func crashBackoff() throws {
        let plugins = try TempDirectory("serve-plugins")
        try plugins.write("crash/manifest.json", crashingManifest)
        try plugins.write("crash/plugin.py", crashingPlugin, mode: 0o755)
        let module = StagedPlugins.packageRoot.appendingPathComponent("SDKs/python/extrun_plugin.py")
        try plugins.write("crash/extrun_plugin.py", String(decoding: try Data(contentsOf: module), as: UTF8.self))
        let cli = try CLI(extraPluginDirectories: [plugins.url])
        let service = try RunningService(cli: cli, policy: #"{"crashLimit": 2, "crashBackoffSeconds": 60}"#)
        defer { service.stop() }
        let dir = try TempDirectory("crash-intent")
        let intent = try dir.write("crash.json", #"{"intent": "Crash"}"#)
        for _ in 0..<2 {
            let crashed = try service.client(["handle", "--server", service.socket, intent.path])
            #expect(crashed.status == 6, "\(crashed)")
        }
        let refused = try service.client(["handle", "--server", service.socket, intent.path])
        #expect(refused.status == 21, "\(refused)")
        let error = try refused.json()["error"]
        #expect(error?["reason"] == "backoff" && error?["plugin"] == "test.crash" && error?["crashes"] == 2, "\(refused)")
        #expect(service.logText.contains("plugin backed off after repeated crashes"), "\(service.logText)")
        // Other plugins are not affected.
        let other = try service.client(["handle", "--server", service.socket, "Examples/intents/make-uppercase.json"])
        #expect(other.status == 0, "\(other)")
    }
}

extension ServeTests {
    @Test("The per-caller queue check, as overloaded, with the caller's uid in the details")
    func overloadedNamesTheCaller() throws {
        let service = try RunningService(cli: cli, policy: #"{"maxConcurrent": 1, "maxQueued": 0}"#)
        defer { service.stop() }
        let result = try service.python("overloaded")
        #expect(result.status == 0, "\(result)")
        #expect(service.logText.contains("\"uid\":\(getuid())"), "\(service.logText)")
    }
}

@Suite("extrun serve: shutdown and disconnects", .serialized)
struct ServeShutdownTests {
    let cli: CLI

    init() throws {
        cli = try CLI()
    }

    func sleepIntent(_ seconds: Double) throws -> (TempDirectory, String) {
        let dir = try TempDirectory("sleep")
        let file = try dir.write("sleep.json", #"{"intent": "Sleep", "parameters": {"seconds": \#(seconds)}}"#)
        return (dir, file.path)
    }

    @Test("A caller that disconnects mid-intent cancels it: the plugin is ended, nothing keeps running")
    func disconnectCancels() throws {
        let service = try RunningService(cli: cli)
        defer { service.stop() }
        let result = try service.python("disconnect")
        #expect(result.status == 0, "\(result)\n\(service.logText)")
        #expect(service.logText.contains("\"outcome\":\"cancelled\""), "\(service.logText)")
        // Its plugin process is gone (a cancelled warm process is never kept).
        let left = ServeProcesses.waitGone(service.descendants, seconds: 5)
        #expect(left.isEmpty, "\(left)")
    }

    @Test("A caller that disconnects while its prompt waits: the prompt is declined, the run cancelled")
    func disconnectDuringPrompt() throws {
        let service = try RunningService(cli: cli)
        defer { service.stop() }
        let result = try service.python("disconnect-prompt")
        #expect(result.status == 0, "\(result)\n\(service.logText)")
        #expect(service.logText.contains("\"outcome\":\"cancelled\""), "\(service.logText)")
    }

    @Test("SIGTERM: an intent in flight finishes within the grace, and its caller gets its report")
    func sigtermGrace() throws {
        let service = try RunningService(cli: cli, policy: #"{"shutdownGraceSeconds": 20}"#)
        let (dir, intent) = try sleepIntent(1)
        defer { withExtendedLifetime(dir) {} }
        let (client, out) = try service.background(["handle", "--server", service.socket, intent])
        #expect(try service.waitRunning(1))
        service.stop()
        client.waitUntilExit()
        #expect(client.terminationStatus == 0, "\((try? String(contentsOf: out, encoding: .utf8)) ?? "")")
    }

    @Test("SIGTERM: an intent still running after the grace is cancelled (exit 20); every plugin is ended")
    func sigtermCancels() throws {
        let service = try RunningService(cli: cli, policy: #"{"shutdownGraceSeconds": 0.2}"#)
        let (dir, intent) = try sleepIntent(30)
        defer { withExtendedLifetime(dir) {} }
        let (client, out) = try service.background(["handle", "--server", service.socket, intent])
        #expect(try service.waitRunning(1))
        let started = Date()
        service.stop()
        client.waitUntilExit()
        #expect(Date().timeIntervalSince(started) < 10, "the stop took \(Date().timeIntervalSince(started)) s")
        let output = (try? String(contentsOf: out, encoding: .utf8)) ?? ""
        #expect(client.terminationStatus == 20, "\(output)")
        let report = try JSONParser.parse(Array(output.utf8))
        #expect(report["error"]?["kind"] == "cancelled" && report["error"]?["phase"] != nil, "\(output)")
    }
}

@Suite("extrun serve: activation and TCP", .serialized)
struct ServeListenerTests {
    let cli: CLI

    init() throws {
        cli = try CLI()
    }

    @Test("LISTEN_FDS: a listening socket passed as fd 3 (as systemd does) is served; SIGTERM leaves nothing")
    func socketActivation() throws {
        let dir = try TempDirectory("activation")
        let tmp = try dir.directory("tmp")
        chmod(tmp.path, 0o1777)
        let socket = dir.url.appendingPathComponent("a.sock").path
        var environment = cli.environmentForRun(["TMPDIR": tmp.path])
        environment["EXTRUN_BIN"] = try ExtrunBinary.url().path
        let result = try RunningService.python("activation", socket: socket, environment: environment)
        #expect(result.status == 0, "\(result)")
        #expect((try? FileManager.default.contentsOfDirectory(atPath: tmp.path))?.isEmpty == true, "scratch left in TMPDIR")
    }

    @Test("--listen needs --token-file; over TCP a caller without the token gets 401, with it the report")
    func tcpWithToken() throws {
        let refused = try cli.run(["serve", "--listen", "127.0.0.1:1"])
        #expect(refused.status == 64 && refused.stderr.contains("--token-file"), "\(refused)")
        let dir = try TempDirectory("token")
        let token = "s3cret-token-\(UUID().uuidString)"
        let file = try dir.write("token", token, mode: 0o600)
        let port = try Self.freePort()
        let service = try RunningService(cli: cli, arguments: ["--listen", "127.0.0.1:\(port)", "--token-file", file.path])
        defer { service.stop() }
        let result = try service.python("tcp", environment: ["EXTRUN_TCP_PORT": String(port), "EXTRUN_TOKEN": token])
        #expect(result.status == 0, "\(result)\n\(service.logText)")
        // The token is checked at the head: no body of an unauthenticated peer is read (S8b).
        let head = try service.python("tcp-head", environment: ["EXTRUN_TCP_PORT": String(port)])
        #expect(head.status == 0, "\(head)\n\(service.logText)")
        // A token holder cannot answer a Unix-socket caller's prompt (S8c).
        let answer = try service.python("tcp-answer", environment: ["EXTRUN_TCP_PORT": String(port), "EXTRUN_TOKEN": token])
        #expect(answer.status == 0, "\(answer)\n\(service.logText)")
        // A token file others can read is refused.
        let open = try dir.write("open-token", token, mode: 0o644)
        let insecure = try cli.run(["serve", "--socket", dir.url.appendingPathComponent("x.sock").path, "--listen", "127.0.0.1:\(port)", "--token-file", open.path])
        #expect(insecure.status == 11 && insecure.stderr.contains("chmod 600"), "\(insecure)")
    }

    @Test("A service restarted on its TCP port binds it again at once, while the previous one's closed connection is in TIME_WAIT (SO_REUSEADDR)")
    func restartOnTheSamePort() throws {
        let dir = try TempDirectory("reuse")
        let token = "s3cret-token-\(UUID().uuidString)"
        let file = try dir.write("token", token, mode: 0o600)
        let port = try Self.freePort()
        let first = try RunningService(cli: cli, arguments: ["--listen", "127.0.0.1:\(port)", "--token-file", file.path])
        // A keep-alive connection the service closes first when it stops: its end of it stays in TIME_WAIT.
        let fd = try #require(RunningService.connectTCP(host: "127.0.0.1", port: UInt16(port)), "a connection to the service's port")
        let request = "GET /v1/health HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\n\r\n"
        _ = request.withCString { write(fd, $0, strlen($0)) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let got = read(fd, &buffer, buffer.count)
        #expect(got > 0 && String(decoding: buffer.prefix(max(0, got)), as: UTF8.self).hasPrefix("HTTP/1.1 200"))
        first.stop()
        close(fd)
        let second = try RunningService(cli: cli, arguments: ["--listen", "127.0.0.1:\(port)", "--token-file", file.path])
        defer { second.stop() }
        let health = try second.client(["describe", "MakeUppercase", "--server", second.socket])
        #expect(health.status == 0, "\(health)\n\(second.logText)")
    }

    /// A loopback port nobody listens on now.
    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

@Suite("extrun serve: faults", .serialized)
struct ServeFaultTests {
    let cli: CLI

    init() throws {
        cli = try CLI()
    }

    @Test("Malformed requests (garbage, bad headers, a lying length, huge targets and headers): 400 or closed; the service goes on")
    func malformed() throws {
        let service = try RunningService(cli: cli, policy: #"{"requestTimeoutSeconds": 1}"#)
        defer { service.stop() }
        let result = try service.python("malformed")
        #expect(result.status == 0, "\(result)\n\(service.logText)")
    }

    @Test("A caller that never reads its answer is disconnected after writeTimeoutSeconds")
    func neverReads() throws {
        let service = try RunningService(cli: cli, policy: #"{"writeTimeoutSeconds": 1}"#)
        defer { service.stop() }
        let result = try service.python("never-reads")
        #expect(result.status == 0, "\(result)\n\(service.logText)")
    }

    @Test("200 callers at once: each gets its report or overloaded at once; nothing left (Scripts/serve-load: 1,000)")
    func manyCallers() throws {
        let service = try RunningService(cli: cli, policy: #"{"maxConcurrent": 4, "maxQueued": 32}"#)
        defer { service.stop() }
        let result = try service.python("many", environment: ["EXTRUN_CLIENTS": "200"])
        #expect(result.status == 0, "\(result)\n\(service.logText.suffix(2000))")
    }
}

/// A Python plugin that answers `Echo` with its text (installed while the service runs).
private let echoPlugin = #"""
    #!/usr/bin/env python3
    import sys
    sys.dont_write_bytecode = True
    import extrun_plugin as extrun


    class Echo(extrun.Intent):
        name = "Echo"

        def handle(self, values, context):
            return extrun.Response.success({"result": values["text"]})


    extrun.run("test.echo", "1.0.0", [Echo()])
    """#

private let echoManifest = #"""
    {"id": "test.echo", "version": "1.0.0", "owner": "TESTTEAM", "protocolVersion": 1, "executable": "plugin.py",
     "intents": [{"name": "Echo", "parameters": [{"name": "text", "type": "string", "required": true}],
                  "outputs": [{"name": "result", "type": "string"}]}]}
    """#

extension ServeLimitTests {
    @Test("A plugin installed, then removed, while the service runs is noticed without a restart (the catalog is re-read at most once a second)")
    func pluginInstalledWhileServing() throws {
        let plugins = try TempDirectory("serve-later")
        let cli = try CLI(extraPluginDirectories: [plugins.url])
        let service = try RunningService(cli: cli)
        defer { service.stop() }
        let dir = try TempDirectory("echo-intent")
        let intent = try dir.write("echo.json", #"{"intent": "Echo", "parameters": {"text": "later"}}"#)
        let before = try service.client(["handle", "--server", service.socket, intent.path])
        #expect(before.status == 5, "\(before)")
        try plugins.write("echo/manifest.json", echoManifest)
        let module = StagedPlugins.packageRoot.appendingPathComponent("SDKs/python/extrun_plugin.py")
        try plugins.write("echo/extrun_plugin.py", String(decoding: try Data(contentsOf: module), as: UTF8.self))
        try plugins.write("echo/plugin.py", echoPlugin, mode: 0o755)
        usleep(1_200_000)
        let after = try service.client(["handle", "--server", service.socket, intent.path])
        #expect(after.status == 0 && (try? after.json()["response"]?["properties"]?["result"]) == "later", "\(after)")
        try FileManager.default.removeItem(at: plugins.url.appendingPathComponent("echo"))
        usleep(1_200_000)
        let removed = try service.client(["handle", "--server", service.socket, intent.path])
        #expect(removed.status == 5, "\(removed)")
    }
}

extension ServeTests {
    @Test("docs/serve-openapi.json is an OpenAPI 3 document with every endpoint of the decoder")
    func openAPIDocument() throws {
        let file = StagedPlugins.packageRoot.appendingPathComponent("docs/serve-openapi.json")
        let document = try JSONParser.parse(Array(try Data(contentsOf: file)))
        #expect(document["openapi"]?.stringValue?.hasPrefix("3.") == true)
        let paths = Set(document["paths"]?.objectValue?.keys.map { $0 } ?? [])
        let expected: Set<String> = [
            "/v1/health", "/v1/intents", "/v1/intents/{name}", "/v1/handle", "/v1/options", "/v1/continue", "/v1/phrase",
            "/v1/runs/{run}/answers", "/metrics", "/mcp", "/.well-known/oauth-protected-resource",
        ]
        #expect(paths == expected)
        let kinds = Set(document["components"]?["schemas"]?["Error"]?["properties"]?["kind"]?["enum"]?.arrayValue?.compactMap(\.stringValue) ?? [])
        #expect(kinds == Set(["invalidIntent", "noHandler", "parameterUnresolved", "confirmationDeclined", "pluginCrashed", "protocolError",
            "pluginError", "timeout", "memoryLimitExceeded", "sandboxViolation", "diskLimitExceeded", "configurationError",
            "signatureInvalid", "notPermitted", "overloaded", "cancelled", "notFound", "internalError"]))
    }
}

/// A Python plugin with a file parameter that it echoes back, a phrase with a file slot and
/// an activity type: the three ways a caller tried to make the service read a path (S1).
private let fileEchoPlugin = #"""
    #!/usr/bin/env python3
    import base64, sys
    sys.dont_write_bytecode = True
    import extrun_plugin as extrun


    class FileEcho(extrun.Intent):
        name = "FileEcho"

        def handle(self, values, context):
            f = values["f"]
            f = f[0] if isinstance(f, list) else f
            return extrun.Response.success({"head": base64.b64decode(f["data"]).decode("latin1")})


    class Continue(extrun.Activity):
        activity_type = "test.fileecho.activity"

        def continue_activity(self, activity, interaction, context):
            return FileEcho().handle((interaction or {}).get("parameters") or {}, context)


    extrun.run("test.fileecho", "1.0.0", [FileEcho()], [Continue()])
    """#

private let fileEchoManifest = #"""
    {"id": "test.fileecho", "version": "1.0.0", "owner": "TESTTEAM", "protocolVersion": 1, "executable": "plugin.py",
     "modes": ["extension", "in-app"], "activityTypes": ["test.fileecho.activity"],
     "intents": [{"name": "FileEcho", "parameters": [{"name": "f", "type": "file", "required": true, "prompt": "Which file?"}],
                  "phrases": ["Echo ${f} now"], "outputs": [{"name": "head", "type": "string"}]}]}
    """#

extension ServeTests {
    @Test("A caller cannot make the service read a path: not by a prompt's answer, POST /v1/continue or a phrase (as extrun-test against a root service, socket mode 666)")
    func pathsNeverRead() throws {
        let plugins = try TempDirectory("serve-fileecho")
        try plugins.write("fileecho/manifest.json", fileEchoManifest)
        try plugins.write("fileecho/plugin.py", fileEchoPlugin, mode: 0o755)
        let module = StagedPlugins.packageRoot.appendingPathComponent("SDKs/python/extrun_plugin.py")
        try plugins.write("fileecho/extrun_plugin.py", String(decoding: try Data(contentsOf: module), as: UTF8.self))
        chmod(plugins.url.path, 0o755)
        let secrets = try TempDirectory("serve-secret")
        let text = "SECRET-\(UUID().uuidString)-only-the-service-may-read-this"
        let secret = try secrets.write("shadow", text, mode: 0o600)
        chmod(secrets.url.path, 0o711)
        let cli = try CLI(extraPluginDirectories: [plugins.url])
        // Every caller granted every owner (serve.json grants): what is held here is that no path is read.
        let service = try RunningService(cli: cli, policy: #"{"grants": {"*": ["*"]}}"#, arguments: ["--socket-mode", "666"])
        defer { service.stop() }
        chmod(service.directory.url.path, 0o711)
        let script = StagedPlugins.packageRoot.appendingPathComponent("Tests/ExtrunCLITests/Fixtures/serve_client.py").path
        let env = ["SECRET_PATH=\(secret.path)", "SECRET_TEXT=\(text)"]
        let result: CLIResult
        if getuid() == 0 {
            // The caller is the ordinary user, who cannot read the file; the service is root, who can.
            result = try ProgramRun.program(
                "/usr/sbin/runuser", ["-u", "extrun-test", "--", "/usr/bin/env"] + env + ["python3", "-B", script, service.socket, "file-paths"])
        } else {
            result = try ProgramRun.program("/usr/bin/env", env + ["python3", "-B", script, service.socket, "file-paths"])
        }
        #expect(result.status == 0, "\(result)\n\(service.logText.suffix(3000))")
        #expect(!result.stdout.contains(text) && !result.stderr.contains(text))
    }
}

extension ServeTests {
    @Test("Request bodies share one budget (maxBufferedRequestBytes): 8 connections holding 40 MiB bodies stay within 64 MiB; the rest 503 overloaded with the numbers")
    func requestBudget() throws {
        let budget = 64 << 20
        let service = try RunningService(cli: cli, policy: #"{"maxBufferedRequestBytes": \#(budget), "requestTimeoutSeconds": 30}"#)
        defer { service.stop() }
        let result = try service.python(
            "body-budget",
            environment: ["SERVICE_PID": String(service.process.processIdentifier), "EXTRUN_BUDGET": String(budget), "EXTRUN_CONNECTIONS": "8"])
        #expect(result.status == 0, "\(result)\n\(service.logText.suffix(2000))")
    }

    @Test("A connection over maxConnections is answered 503 overloaded (reason connections) at once and closed, logged with the numbers; the others are served")
    func connectionCap() throws {
        let service = try RunningService(cli: cli, policy: #"{"maxConnections": 4}"#)
        defer { service.stop() }
        let result = try service.python("connection-cap")
        #expect(result.status == 0, "\(result)\n\(service.logText.suffix(2000))")
        #expect(
            service.logText.contains("serve.json maxConnections") && service.logText.contains(#""limit":"maxConnections""#)
                && service.logText.contains(#""limitValue":4"#), "\(service.logText)")
    }
}

/// A Python plugin that floods progress (300 messages of 30 KB), then answers; with `ask` it
/// floods while resolving `text`, then asks for it.
private let floodPlugin = #"""
    #!/usr/bin/env python3
    import sys
    sys.dont_write_bytecode = True
    import extrun_plugin as extrun


    class Flood(extrun.Intent):
        name = "Flood"

        def flood(self, values, context):
            for index in range(values.get("n") or 0):
                context.progress(fraction=index / 1000.0, message="p" * 30000)

        def resolve(self, parameter, values, context):
            if parameter == "text" and values.get("ask") and not values.get("text"):
                self.flood(values, context)
                return extrun.Resolution.needs_value()
            return super().resolve(parameter, values, context)

        def handle(self, values, context):
            if not values.get("ask"):
                self.flood(values, context)
            return extrun.Response.success({})


    extrun.run("test.flood", "1.0.0", [Flood()])
    """#

private let floodManifest = #"""
    {"id": "test.flood", "version": "1.0.0", "owner": "TESTTEAM", "protocolVersion": 1, "executable": "plugin.py",
     "intents": [{"name": "Flood", "parameters": [{"name": "n", "type": "integer"}, {"name": "ask", "type": "boolean"},
                  {"name": "text", "type": "string", "prompt": "Say something"}]}]}
    """#

extension ServeTests {
    @Test("Answers callers never read are bounded together (maxPendingResponseBytes): the ones over it are 500 overloaded with the numbers (not 503: their runs ran)")
    func unreadAnswers() throws {
        let budget = 6 << 20
        let service = try RunningService(cli: cli, policy: #"{"maxPendingResponseBytes": \#(budget), "writeTimeoutSeconds": 60}"#)
        defer { service.stop() }
        let result = try service.python("unread-answers", environment: ["EXTRUN_BUDGET": String(budget)])
        #expect(result.status == 0, "\(result)\n\(service.logText.suffix(2000))")
    }

    /// The service and the plugins' folder (kept alive as long as the service).
    func floodService(policy: String) throws -> (TempDirectory, RunningService) {
        let plugins = try TempDirectory("serve-flood")
        try plugins.write("flood/manifest.json", floodManifest)
        try plugins.write("flood/plugin.py", floodPlugin, mode: 0o755)
        let module = StagedPlugins.packageRoot.appendingPathComponent("SDKs/python/extrun_plugin.py")
        try plugins.write("flood/extrun_plugin.py", String(decoding: try Data(contentsOf: module), as: UTF8.self))
        return (plugins, try RunningService(cli: try CLI(extraPluginDirectories: [plugins.url]), policy: policy))
    }

    @Test("A progress flood on a stream nobody reads is dropped past the stream's budget; the report still comes")
    func progressFlood() throws {
        let (plugins, service) = try floodService(policy: #"{"writeTimeoutSeconds": 30}"#)
        defer { withExtendedLifetime(plugins) { service.stop() } }
        let result = try service.python("stream-flood")
        #expect(result.status == 0, "\(result)\n\(service.logText.suffix(2000))")
        #expect(service.logText.contains("progress dropped"), "\(service.logText.suffix(2000))")
    }

    @Test("A prompt the caller does not take within writeTimeoutSeconds (behind a flood) disconnects it and cancels the run")
    func promptNotTaken() throws {
        let (plugins, service) = try floodService(policy: #"{"writeTimeoutSeconds": 1}"#)
        defer { withExtendedLifetime(plugins) { service.stop() } }
        let result = try service.python("stream-flood", environment: ["PROMPT": "1"])
        #expect(result.status == 0, "\(result)\n\(service.logText.suffix(2000))")
        #expect(service.logText.contains("did not take a prompt"), "\(service.logText.suffix(2000))")
    }
}

extension ServeTests {
    @Test("One caller cannot shut others out: its share of the queue (maxQueuedPerCaller), and another caller starts on free places instead of queueing behind it; the defaults keep per-caller limits below the totals")
    func callerShare() throws {
        let defaults = try RunningService(cli: cli)
        let health = try JSONParser.parse(Array(try defaults.python("health").stdout.utf8))
        defaults.stop()
        let limits = health["limits"]
        #expect(
            (limits?["maxConcurrentPerCaller"]?.intValue ?? 99) < (limits?["maxConcurrent"]?.intValue ?? 0)
                && (limits?["maxQueuedPerCaller"]?.intValue ?? 99) < (limits?["maxQueued"]?.intValue ?? 0)
                && (limits?["promptTimeoutSeconds"]?.doubleValue ?? 999) <= 60, "\(health)")
        let dir = try TempDirectory("token")
        let token = "s3cret-token-\(UUID().uuidString)"
        let file = try dir.write("token", token, mode: 0o600)
        let port = try ServeListenerTests.freePort()
        let policy = #"{"maxConcurrent": 4, "maxQueued": 8, "maxQueuedPerCaller": 2, "callers": {"\#(getuid())": {"maxConcurrent": 1}}}"#
        let service = try RunningService(cli: cli, policy: policy, arguments: ["--listen", "127.0.0.1:\(port)", "--token-file", file.path])
        defer { service.stop() }
        let result = try service.python("caller-share", environment: ["EXTRUN_TCP_PORT": String(port), "EXTRUN_TOKEN": token])
        #expect(result.status == 0, "\(result)\n\(service.logText.suffix(2000))")
    }
}

extension ServeTests {
    @Test("--log-format text escapes callers' words (no forged lines); a 404 for an unknown intent does not name the service's plugin path (it is in the log)")
    func saysLess() throws {
        let service = try RunningService(cli: cli, arguments: ["--log-format", "text"])
        defer { service.stop() }
        let pluginDir = StagedPlugins.packageRoot.appendingPathComponent(".build/extrun-plugins").path
        let result = try service.python("say-less", environment: ["PLUGIN_DIR": pluginDir])
        #expect(result.status == 0, "\(result)\n\(service.logText.suffix(2000))")
        let lines = service.logText.split(separator: "\n")
        #expect(!lines.contains { $0.hasPrefix("2026-01-01") || $0.contains("critical FORGED") && !$0.contains("\\n") }, "\(service.logText)")
        #expect(service.logText.contains("plugin path"), "the detail stays in the log: \(service.logText)")
    }
}

/// What Scripts/serve-conformance (schemathesis against docs/serve-openapi.json) found in the
/// service, each held here against a real service by the standard-library client.
extension ServeTests {
    @Test("A 405 has an Allow header naming the endpoint's method (RFC 9110), and the body of its endpoint's shape")
    func methodNotAllowedSaysAllow() throws {
        let service = try RunningService(cli: cli)
        defer { service.stop() }
        let result = try service.python("allow")
        #expect(result.status == 0, "\(result)\n\(service.logText)")
    }

    @Test("POST /v1/runs/RUN/answers refuses a malformed body as {\"error\"} (ErrorOnly), as it refuses a wrong answer; runs keep their envelope")
    func answersRefusalShape() throws {
        let service = try RunningService(cli: cli)
        defer { service.stop() }
        let result = try service.python("bare-refusals")
        #expect(result.status == 0, "\(result)\n\(service.logText)")
    }

    @Test("Path parameters are percent-decoded: GET /v1/intents/Make%55ppercase, a run id; bad encoding is 400")
    func pathParametersDecoded() throws {
        let service = try RunningService(cli: cli)
        defer { service.stop() }
        let result = try service.python("path-decoding")
        #expect(result.status == 0, "\(result)\n\(service.logText)")
    }

    @Test("memoryLimit at or below 64 KiB is refused 422 with the minimum on every run endpoint (it trapped the service); the service goes on")
    func tinyMemoryLimitRefused() throws {
        let service = try RunningService(cli: cli)
        defer { service.stop() }
        let result = try service.python("tiny-memory")
        #expect(result.status == 0, "\(result)\n\(service.logText)")
        #expect(service.process.isRunning, "the service died: \(service.logText)")
    }
}

extension ServeListenerTests {
    /// The short version of Scripts/serve-conformance (which adds minutes of fuzzing):
    /// schemathesis, from the scripts' conformance venv (Scripts/test passes it), against a
    /// real service on TCP loopback with its token; nothing from the network at test time.
    @Test("docs/serve-openapi.json holds for the real service: schemathesis's examples and coverage phases on every operation, with the token (Scripts/serve-conformance: the long run)")
    func conformsToItsDocument() throws {
        guard let schemathesis = ProcessInfo.processInfo.environment["EXTRUN_TEST_SCHEMATHESIS"] else {
            Issue.record("EXTRUN_TEST_SCHEMATHESIS is not set: run the tests with Scripts/test, which makes the conformance venv")
            return
        }
        let dir = try TempDirectory("conformance")
        let token = "s3cret-token-\(UUID().uuidString)"
        let file = try dir.write("token", token, mode: 0o600)
        let port = try Self.freePort()
        let service = try RunningService(
            cli: cli, policy: #"{"promptTimeoutSeconds": 2}"#, arguments: ["--listen", "127.0.0.1:\(port)", "--token-file", file.path])
        defer { service.stop() }
        let root = StagedPlugins.packageRoot
        let result = try ProgramRun.program(
            schemathesis,
            [
                "--config-file", root.appendingPathComponent("Scripts/lib/schemathesis.toml").path,
                "run", root.appendingPathComponent("docs/serve-openapi.json").path,
                "--url", "http://127.0.0.1:\(port)",
                "--checks", "all", "--phases", "examples,coverage", "--max-examples", "5", "--max-time", "50", "--seed", "1",
                "--workers", "1", "--request-timeout", "30", "--generation-database", "none", "--no-color", "--output-truncate", "false",
            ],
            // The token in the environment (Scripts/lib/schemathesis.toml's headers), not on the command line.
            environment: ProcessInfo.processInfo.environment.merging(["NO_COLOR": "1", "EXTRUN_CONFORMANCE_TOKEN": token]) { _, new in new },
            // schemathesis keeps its cache in the current directory.
            in: dir.url)
        #expect(result.status == 0, "schemathesis: \(result.stdout.suffix(12_000))\n\(result.stderr.suffix(2000))\n\(service.logText.suffix(2000))")
        #expect(result.stdout.contains("Operations:       12 selected / 12 total"), "\(result.stdout.prefix(2000))")
        // The token reached the service (from the environment): runs were let in, not only 401s.
        #expect(service.logText.contains("\"message\":\"intent\""), "no run was let in: \(service.logText.suffix(2000))")
        #expect(service.process.isRunning, "the service died: \(service.logText.suffix(4000))")
    }
}
