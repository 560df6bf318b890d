import ExtrunProtocol
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A real `extrun serve` (the built binary) on a socket in a temporary directory, with the
/// CLI's test home and plugins, its own TMPDIR (where plugins' scratch directories go),
/// and its log in a file. `stop()` sends SIGTERM and checks that no process it started
/// and no file of it is left.
final class RunningService {
    let cli: CLI
    let directory: TempDirectory
    let socket: String
    let tmp: URL
    let log: URL
    let process: Process

    /// `sharing`: the socket, TMPDIR and log of an earlier service (one that was killed, say).
    init(cli: CLI, policy: String? = nil, arguments: [String] = [], sharing earlier: RunningService? = nil) throws {
        self.cli = cli
        directory = try earlier?.directory ?? TempDirectory("serve")
        socket = directory.url.appendingPathComponent("s.sock").path
        tmp = try directory.directory("tmp")
        chmod(tmp.path, 0o1777)
        log = directory.url.appendingPathComponent("serve.log")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        var args = ["serve", "--socket", socket] + arguments
        if let policy {
            let file = try directory.write("serve.json", policy, mode: 0o600)
            args += ["--config", file.path]
        }
        process = Process()
        process.executableURL = try ExtrunBinary.url()
        process.arguments = args
        process.environment = cli.environmentForRun(["TMPDIR": tmp.path])
        process.standardOutput = FileHandle.nullDevice
        process.standardError = try FileHandle(forWritingTo: log)
        process.standardInput = FileHandle.nullDevice
        try process.run()
        try waitUntilListening()
    }

    /// Waits until the service accepts on its socket and, started with `--listen HOST:PORT`,
    /// on that port too: it binds the port after the socket, and a test that connected to
    /// the port as soon as the socket accepted found nothing there on a busy machine.
    func waitUntilListening() throws {
        let deadline = Date().addingTimeInterval(30)
        let tcp = process.arguments.flatMap { arguments in
            arguments.firstIndex(of: "--listen").flatMap { $0 + 1 < arguments.count ? arguments[$0 + 1] : nil }
        }
        while Date() < deadline {
            if Self.connects(socket), tcp.map(Self.connectsTCP) ?? true { return }
            if !process.isRunning { break }
            usleep(20_000)
        }
        throw StagedPlugins.NotStaged(description: "extrun serve did not listen on \(socket)\(tcp.map { " and \($0)" } ?? ""); its log:\n\(logText)")
    }

    /// Whether a TCP connection to `HOST:PORT` (an IPv4 address) is accepted.
    static func connectsTCP(_ listen: String) -> Bool {
        guard let colon = listen.lastIndex(of: ":"), let port = UInt16(listen[listen.index(after: colon)...]),
            let fd = connectTCP(host: String(listen[..<colon]), port: port)
        else { return false }
        close(fd)
        return true
    }

    /// A TCP connection to `host` (an IPv4 address) and `port`: its descriptor, or nil when refused.
    static func connectTCP(host: String, port: UInt16) -> Int32? {
        let fd = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(port.bigEndian)
        address.sin_addr.s_addr = inet_addr(host)
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
        if connected { return fd }
        close(fd)
        return nil
    }

    var logText: String { (try? String(contentsOf: log, encoding: .utf8)) ?? "" }

    static func connects(_ path: String) -> Bool {
        let fd = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
        }
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0 }
        }
    }

    /// `extrun ARGS` as a client of this service.
    func client(_ arguments: [String], environment: [String: String] = [:]) throws -> CLIResult {
        var cli = self.cli
        cli.environment.merge(environment) { _, new in new }
        return try cli.run(arguments)
    }

    /// `extrun ARGS` as a client of this service, in the background: the process and its stdout's file.
    func background(_ arguments: [String]) throws -> (Process, URL) {
        let process = Process()
        process.executableURL = try ExtrunBinary.url()
        process.arguments = arguments
        process.environment = cli.environmentForRun()
        process.currentDirectoryURL = StagedPlugins.packageRoot
        let out = directory.url.appendingPathComponent("client-\(UUID().uuidString)")
        _ = FileManager.default.createFile(atPath: out.path, contents: nil)
        process.standardOutput = try FileHandle(forWritingTo: out)
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        return (process, out)
    }

    /// Health's `running` (through the Python client), waited for until it is `count`.
    func waitRunning(_ count: Int, seconds: Double = 10) throws -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            let limits = try python("health")
            if let health = try? JSONParser.parse(Array(limits.stdout.utf8)), health["running"]?.intValue == Int64(count) { return true }
            usleep(50_000)
        }
        return false
    }

    /// The Python standard-library client's check `name` (Fixtures/serve_client.py).
    func python(_ check: String, environment: [String: String] = [:]) throws -> CLIResult {
        try Self.python(check, socket: socket, environment: environment)
    }

    static func python(_ check: String, socket: String, environment: [String: String] = [:]) throws -> CLIResult {
        guard let python = ProcessInfo.processInfo.environment["EXTRUN_TEST_PYTHON"] else {
            Issue.record("EXTRUN_TEST_PYTHON is not set: run the tests with Scripts/test, which makes the scripts' venv")
            return CLIResult(status: -1, stdout: "", stderr: "")
        }
        let script = StagedPlugins.packageRoot.appendingPathComponent("Tests/ExtrunCLITests/Fixtures/serve_client.py").path
        var env = ProcessInfo.processInfo.environment
        env.merge(environment) { _, new in new }
        return try ProgramRun.program(python, [script, socket, check], environment: env)
    }

    /// Every process whose parent chain leads to the service (its plugins' supervisors, the plugins).
    var descendants: [Int32] { ServeProcesses.descendants(of: process.processIdentifier) }

    /// SIGTERM, the exit, then: no process it started, no socket, no scratch left.
    func stop(sourceLocation: SourceLocation = #_sourceLocation) {
        let started = descendants
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "extrun serve's exit after SIGTERM; log:\n\(logText)", sourceLocation: sourceLocation)
        expectNothingLeft(started, sourceLocation: sourceLocation)
    }

    func expectNothingLeft(_ started: [Int32], sourceLocation: SourceLocation = #_sourceLocation) {
        let left = ServeProcesses.waitGone(started, seconds: 5)
        #expect(left.isEmpty, "processes left after the service ended: \(left)", sourceLocation: sourceLocation)
        #expect(!FileManager.default.fileExists(atPath: socket), "the socket file is left", sourceLocation: sourceLocation)
        let scratch = (try? FileManager.default.contentsOfDirectory(atPath: tmp.path)) ?? []
        #expect(scratch.isEmpty, "files left in the service's TMPDIR: \(scratch)", sourceLocation: sourceLocation)
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}

enum ServeProcesses {
    /// The parent of each process now (from /proc/PID/stat).
    static func parents() -> [Int32: Int32] {
        var result: [Int32: Int32] = [:]
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = Int32(entry), let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { continue }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 1, let parent = Int32(fields[1]) { result[pid] = parent }
        }
        return result
    }

    static func descendants(of root: Int32) -> [Int32] {
        let parents = parents()
        var found: [Int32] = []
        var frontier: Set<Int32> = [root]
        while !frontier.isEmpty {
            let next = parents.filter { frontier.contains($0.value) }.map(\.key)
            found += next
            frontier = Set(next)
        }
        return found
    }

    static func isAlive(_ pid: Int32) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") else { return false }
        let state = stat[stat.index(after: close)...].split(separator: " ").first
        return state != "Z" && state != "X"
    }

    /// The processes of `pids` still alive after up to `seconds`.
    static func waitGone(_ pids: [Int32], seconds: Double) -> [Int32] {
        let deadline = Date().addingTimeInterval(seconds)
        var alive = pids.filter(isAlive)
        while !alive.isEmpty, Date() < deadline {
            usleep(20_000)
            alive = alive.filter(isAlive)
        }
        return alive
    }
}

enum ProgramRun {
    /// Runs a program to its end; its output in the result.
    static func program(_ path: String, _ arguments: [String], environment: [String: String]? = nil, in directory: URL? = nil) throws -> CLIResult {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        if let environment { process.environment = environment }
        if let directory { process.currentDirectoryURL = directory }
        let directory = try TempDirectory("run")
        let out = directory.url.appendingPathComponent("out")
        let err = directory.url.appendingPathComponent("err")
        _ = FileManager.default.createFile(atPath: out.path, contents: nil)
        _ = FileManager.default.createFile(atPath: err.path, contents: nil)
        process.standardOutput = try FileHandle(forWritingTo: out)
        process.standardError = try FileHandle(forWritingTo: err)
        process.standardInput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        return CLIResult(
            status: process.terminationStatus, stdout: (try? String(contentsOf: out, encoding: .utf8)) ?? "",
            stderr: (try? String(contentsOf: err, encoding: .utf8)) ?? "")
    }
}
