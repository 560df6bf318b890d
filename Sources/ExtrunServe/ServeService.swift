import ExtrunHost
import ExtrunMCP
import ExtrunProtocol
import ExtrunCommandLine
import ExtrunSystem
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix

#if canImport(Glibc)
import Glibc
#endif

/// `extrun serve`: listens (a Unix socket, a descriptor from systemd, TCP with a token),
/// runs intents for its callers, and stops cleanly on SIGTERM (docs/serve.md, "Operation").
public enum ServeService {
    /// Every TCP caller counts as this one uid for the per-caller limits.
    static let tcpCallerUID = UInt32.max - 1

    /// Runs until SIGTERM or SIGINT; returns the exit status.
    public static func run(_ options: ServeOptions) -> Int32 {
        let logLevel: Logger.Level = options.verbose ? .debug : .info
        let json = options.logFormat == "json"
        LoggingSystem.bootstrap { _ in ServeLogHandler(json: json, level: logLevel) }
        let logger = Logger(label: "extrun.serve")
        func fail(_ error: HostError) -> Int32 {
            logger.critical("\(error.message)", metadata: ["kind": "\(error.kind.rawValue)"])
            return error.kind.exitCode
        }
        let host = Host()
        let policyPath = ServePolicy.path(config: options.config, home: host.paths.home)
        let policy: ServePolicy
        do throws(HostError) {
            let (loaded, source) = try ServePolicy.load(path: policyPath, required: options.config != nil)
            policy = loaded
            logger.info("policy", metadata: ["source": "\(source)"])
        } catch {
            return fail(error)
        }
        // A reader that went away must not kill the service.
        signal(SIGPIPE, SIG_IGN)
        // Every connection is a descriptor: the soft limit up to the hard one (1,024 by default is
        // not enough for 1,000 callers). maxConcurrent and maxQueued bound the work, not this.
        var files = rlimit()
        if getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &files) == 0, files.rlim_cur < files.rlim_max {
            files.rlim_cur = files.rlim_max
            setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &files)
        }
        let engine = ServeEngine(host: host, policy: policy, logger: logger)
        // `/mcp`: its request-state key is read (or made) now; an unsafe one stops the start.
        let mcp: MCPDispatcher?
        do throws(HostError) {
            mcp = try ServeMCP.dispatcher(engine: engine, settings: policy.mcp)
        } catch {
            engine.shutDown(reason: "the service did not start")
            return fail(error)
        }
        let stop = StopSignal()
        // Before the socket exists: a SIGTERM sent as soon as the socket answers is taken, not lost.
        installSignals(stop: stop, engine: engine, policyPath: policyPath, required: options.config != nil, logger: logger)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        var channels: [any Channel] = []
        var socketDirectory: SocketDirectory?
        do throws(HostError) {
            let token = try options.tokenFile.map(readToken)
            if let inherited = try activationDescriptor() {
                var type: Int32 = 0
                var typeLength = socklen_t(MemoryLayout<Int32>.size)
                if getsockopt(inherited, SOL_SOCKET, SO_TYPE, &type, &typeLength) == 0, type != Int32(SOCK_STREAM.rawValue) {
                    let name = type == Int32(SOCK_DGRAM.rawValue) ? (isInetSocket(inherited) ? "a UDP socket" : "a datagram socket") : "not a stream socket (type \(type))"
                    throw HostError(.configurationError, "the descriptor passed by LISTEN_FDS is \(name): the service listens on a stream socket (TCP or Unix)")
                }
                let tcp = isInetSocket(inherited)
                if tcp, token == nil {
                    throw HostError(.configurationError, "the descriptor passed by LISTEN_FDS is a TCP socket: start the service with --token-file")
                }
                channels.append(try bind(engine: engine, mcp: mcp, group: group, token: tcp ? token : nil) { $0.withBoundSocket(inherited) })
                logger.info("listening", metadata: ["fd": "\(inherited)", "activation": "LISTEN_FDS"])
            } else {
                let path = options.socket ?? defaultSocketPath(home: host.paths.home)
                let directory = try prepareSocketPath(path)
                // The socket is made with its mode (the umask's complement), through the
                // directory opened above: never through the path's links again.
                let previous = umask(mode_t(~options.socketPermissions & 0o777))
                let channel = try? bind(engine: engine, mcp: mcp, group: group, token: nil) { $0.bind(unixDomainSocketPath: directory.pinnedPath) }
                umask(previous)
                guard let channel else {
                    throw HostError(.configurationError, "cannot listen on \(path): \(SystemCall.lastReason)", details: ["file": .string(path)])
                }
                socketDirectory = directory
                channels.append(channel)
                logger.info("listening", metadata: ["socket": "\(path)", "mode": "\(options.socketMode)"])
            }
            if let listen = options.listen, let (address, port) = ServeOptions.hostAndPort(listen), let token {
                channels.append(try bind(engine: engine, mcp: mcp, group: group, token: token) { $0.bind(host: address, port: port) })
                logger.info("listening", metadata: ["tcp": "\(listen)"])
            }
        } catch {
            for channel in channels { try? channel.close().wait() }
            try? group.syncShutdownGracefully()
            return fail(error)
        }

        startIdleReaper(engine: engine, stop: stop)
        stop.wait()

        // Stop accepting; give intents in flight the grace; cancel the rest; end every plugin.
        logger.info("stopping", metadata: ["running": "\(engine.runningCount)", "graceSeconds": "\(engine.policy.shutdownGraceSeconds)"])
        for channel in channels { try? channel.close().wait() }
        socketDirectory?.unlinkSocket()
        engine.shutDown(reason: "the service is stopping (SIGTERM)")
        mcp?.shutDown(reason: "the service is stopping (SIGTERM)")
        // Let the last answers reach their callers.
        usleep(50_000)
        try? group.syncShutdownGracefully()
        logger.info("stopped")
        return 0
    }

    /// The service's listener: each connection gets SwiftNIO's HTTP/1.1 server pipeline
    /// (with its error handling), then the handler `makeHandler` makes for it. `package` for
    /// ExtrunHTTPFloor (Benchmarks/HTTPFloor), which measures this listener with a fixed answer.
    package static func listener(
        group: MultiThreadedEventLoopGroup, makeHandler: @escaping @Sendable () -> any ChannelHandler
    ) -> ServerBootstrap {
        ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 1024)
            // A restarted service binds its TCP port again at once, even while connections of
            // the previous one are in TIME_WAIT (a fleet's rolling restart); two listeners on
            // one port are still refused (that would be SO_REUSEPORT).
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(makeHandler())
                }
            }
            .childChannelOption(.allowRemoteHalfClosure, value: false)
    }

    static func bind(
        engine: ServeEngine, mcp: MCPDispatcher?, group: MultiThreadedEventLoopGroup, token: [UInt8]?,
        _ how: (ServerBootstrap) -> EventLoopFuture<any Channel>
    ) throws(HostError) -> any Channel {
        let bootstrap = listener(group: group) { ServeHTTPHandler(engine: engine, token: token, mcp: mcp) }
        do {
            return try how(bootstrap).wait()
        } catch {
            throw HostError(.configurationError, "cannot listen: \(error)")
        }
    }

    /// `$XDG_RUNTIME_DIR/extrun.sock`, else `$EXTRUN_HOME/extrun.sock`.
    public static func defaultSocketPath(home: URL, environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let runtime = environment["XDG_RUNTIME_DIR"], !runtime.isEmpty { return runtime + "/extrun.sock" }
        return home.appendingPathComponent("extrun.sock").path
    }

    /// Opens the socket's directory without following another user's links (`SocketDirectory`);
    /// refuses a path where another service answers; removes a stale socket file; never
    /// removes anything else.
    static func prepareSocketPath(_ path: String) throws(HostError) -> SocketDirectory {
        guard path.utf8.count < 108 else {
            throw HostError(
                .configurationError, "the socket path \(path) is \(path.utf8.count) bytes; a Unix socket's path must be under 108",
                details: ["file": .string(path)])
        }
        let directory = try SocketDirectory.open(path)
        guard let info = directory.status() else { return directory }
        guard (info.st_mode & S_IFMT) == S_IFSOCK else {
            throw HostError(
                .configurationError, "\(path) exists and is not a socket; name another path with --socket", details: ["file": .string(path)])
        }
        if connects(to: directory.pinnedPath) {
            throw HostError(
                .configurationError, "another service already listens on \(path); stop it, or name another path with --socket",
                details: ["file": .string(path)])
        }
        directory.unlinkSocket()
        return directory
    }

    static func connects(to path: String) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.prefix(raw.count - 1).enumerated() { raw[index] = byte }
        }
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0 }
        }
    }

    /// The listening descriptor systemd passes (LISTEN_FDS=1, LISTEN_PID=our pid): 3. The
    /// variables are removed so that nothing the service starts sees them.
    static func activationDescriptor() throws(HostError) -> Int32? {
        let environment = ProcessInfo.processInfo.environment
        guard let count = environment["LISTEN_FDS"] else { return nil }
        defer {
            unsetenv("LISTEN_FDS")
            unsetenv("LISTEN_PID")
            unsetenv("LISTEN_FDNAMES")
        }
        guard let pid = environment["LISTEN_PID"].flatMap(Int32.init), pid == getpid() else { return nil }
        guard count == "1" else {
            throw HostError(.configurationError, "LISTEN_FDS=\(count): the service takes exactly one listening socket (fd 3)")
        }
        var info = stat()
        guard fstat(3, &info) == 0, (info.st_mode & S_IFMT) == S_IFSOCK else {
            throw HostError(.configurationError, "LISTEN_FDS=1 but descriptor 3 is not a socket")
        }
        _ = fcntl(3, F_SETFD, FD_CLOEXEC)
        return 3
    }

    static func isInetSocket(_ fd: Int32) -> Bool {
        var address = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let got = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return got == 0 && (Int32(address.ss_family) == AF_INET || Int32(address.ss_family) == AF_INET6)
    }

    /// The token file: private to the service's user, not empty.
    static func readToken(_ path: String) throws(HostError) -> [UInt8] {
        var info = stat()
        guard stat(path, &info) == 0, let data = FileManager.default.contents(atPath: path) else {
            throw HostError(.configurationError, "cannot read the token file \(path): \(SystemCall.lastReason)", details: ["file": .string(path)])
        }
        guard info.st_mode & 0o077 == 0 else {
            throw HostError(
                .configurationError, "the token file \(path) is readable by others (mode \(String(info.st_mode & 0o777, radix: 8))); chmod 600 \(path)",
                details: ["file": .string(path)])
        }
        let token = Array(String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines).utf8)
        guard token.count >= 16 else {
            throw HostError(.configurationError, "the token in \(path) is \(token.count) bytes; use at least 16 (e.g. head -c 32 /dev/urandom | base64)", details: ["file": .string(path)])
        }
        return token
    }

    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for index in a.indices { difference |= a[index] ^ b[index] }
        return difference == 0
    }

    /// SIGTERM and SIGINT stop the service (the first gracefully, a second at once:
    /// `TerminationSignals`); SIGHUP re-reads serve.json and policy.json.
    static func installSignals(stop: StopSignal, engine: ServeEngine, policyPath: String, required: Bool, logger: Logger) {
        TerminationSignals.install(
            terminating: [SIGTERM, SIGINT], reloading: [SIGHUP],
            onReload: { _ in
                do throws(HostError) {
                    let (policy, source) = try ServePolicy.load(path: policyPath, required: required)
                    let sandbox = try engine.pool.reloadPolicy()
                    engine.update(policy)
                    logger.info("policy re-read (SIGHUP)", metadata: ["source": "\(source)", "sandboxPolicy": "\(sandbox)"])
                } catch {
                    logger.error("SIGHUP: the policy was not changed: \(error.message)", metadata: ["kind": "\(error.kind.rawValue)"])
                }
            },
            onTerminate: { _ in stop.signal() })
    }

    /// Ends warm processes idle past `idleTimeoutSeconds` (checked 4 times per timeout, at
    /// least every second); writes the refusals' sums when their window is over; gives free
    /// memory back after a burst of answers (`ServeEngine.trimMemoryIfDue`).
    static func startIdleReaper(engine: ServeEngine, stop: StopSignal) {
        Thread.detachNewThread {
            while !stop.isStopped {
                let seconds = min(1.0, max(0.05, engine.policy.idleTimeoutSeconds / 4))
                usleep(useconds_t(seconds * 1e6))
                let ended = engine.pool.endIdleProcesses()
                if ended > 0 { engine.logger.debug("idle warm processes ended", metadata: ["count": "\(ended)"]) }
                engine.refusals.flushIfDue()
                engine.trimMemoryIfDue()
            }
        }
    }
}

/// SIGTERM or SIGINT arrived.
final class StopSignal: @unchecked Sendable {
    private let condition = NSCondition()
    private var stopped = false

    var isStopped: Bool {
        condition.lock()
        defer { condition.unlock() }
        return stopped
    }

    func signal() {
        condition.lock()
        stopped = true
        condition.broadcast()
        condition.unlock()
    }

    func wait() {
        condition.lock()
        while !stopped { condition.wait() }
        condition.unlock()
    }
}
