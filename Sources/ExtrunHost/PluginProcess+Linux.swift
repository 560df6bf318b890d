import CExtrunLinux
import ExtrunProtocol
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// How a plugin process ended, and what it used.
public struct ProcessExit: Sendable, Equatable {
    public enum Termination: Sendable, Equatable {
        case exited(Int32)
        case signaled(Int32)
    }
    public var termination: Termination
    /// User + system CPU time.
    public var cpuMs: Double
    /// Peak resident set size from the kernel's rusage (includes shared pages).
    public var maxRSSBytes: Int64

    public var description: String {
        switch termination {
        case .exited(let code): "exited with status \(code)"
        case .signaled(let signal): "was killed by signal \(signal) (\(signalName(signal)))"
        }
    }
}

func signalName(_ signal: Int32) -> String {
    switch signal {
    case SIGKILL: "SIGKILL"
    case SIGSEGV: "SIGSEGV"
    case SIGABRT: "SIGABRT"
    case SIGILL: "SIGILL"
    case SIGBUS: "SIGBUS"
    case SIGFPE: "SIGFPE"
    case SIGTERM: "SIGTERM"
    case SIGPIPE: "SIGPIPE"
    case SIGSYS: "SIGSYS"
    case SIGXCPU: "SIGXCPU"
    case SIGXFSZ: "SIGXFSZ"
    case SIGTRAP: "SIGTRAP"
    default: "signal \(signal)"
    }
}

/// What to start.
public struct LaunchSpec: Sendable {
    public var executable: URL
    public var arguments: [String]
    public var environment: [String: String]
    public var workingDirectory: URL?

    public init(executable: URL, arguments: [String] = [], environment: [String: String] = [:], workingDirectory: URL? = nil) {
        self.executable = executable
        self.arguments = arguments
        self.environment = environment
        self.workingDirectory = workingDirectory
    }
}

/// A started plugin process and the parent's ends of its pipes.
///
/// The child gets: stdin `/dev/null`, stdout and stderr to capture pipes,
/// fd 3 reading the host's messages, fd 4 writing its own. It leads a
/// process group of its own, so that the host can signal everything it started.
final class PluginProcess {
    let pid: pid_t
    let pidfd: Int32
    /// Parent's ends (non-blocking): we write fd 3's pipe, read fd 4's, stdout's, stderr's.
    var toPlugin: Int32
    var fromPlugin: Int32
    var stdoutFD: Int32
    var stderrFD: Int32
    private(set) var exit: ProcessExit?

    private init(pid: pid_t, pidfd: Int32, toPlugin: Int32, fromPlugin: Int32, stdoutFD: Int32, stderrFD: Int32) {
        self.pid = pid
        self.pidfd = pidfd
        self.toPlugin = toPlugin
        self.fromPlugin = fromPlugin
        self.stdoutFD = stdoutFD
        self.stderrFD = stderrFD
    }

    static func launch(_ spec: LaunchSpec) throws(HostError) -> PluginProcess {
        HostSignals.ignoreSIGPIPE()
        var opened: [Int32] = []
        func pipePair() throws(HostError) -> (read: Int32, write: Int32) {
            var fds: [Int32] = [-1, -1]
            guard extrun_pipe_cloexec(&fds) == 0 else {
                let reason = String(cString: strerror(errno))
                for fd in opened { close(fd) }
                throw HostError(.internalError, "cannot create a pipe for the plugin: \(reason)")
            }
            opened += fds
            return (fds[0], fds[1])
        }
        let input = try pipePair()  // host → plugin (fd 3)
        let output = try pipePair()  // plugin → host (fd 4)
        let out = try pipePair()
        let err = try pipePair()
        let devNull = open("/dev/null", O_RDONLY | O_CLOEXEC)
        defer {
            // The child's ends, and /dev/null, are the child's business once it is started.
            for fd in [input.read, output.write, out.write, err.write, devNull] where fd >= 0 { close(fd) }
        }
        // Bigger pipes for the protocol channels: fewer wake-ups for large messages.
        _ = extrun_set_pipe_size(input.write, 1 << 20)
        _ = extrun_set_pipe_size(output.read, 1 << 20)

        let mappings = [
            extrun_fd_mapping(source: devNull, target: 0),
            extrun_fd_mapping(source: out.write, target: 1),
            extrun_fd_mapping(source: err.write, target: 2),
            extrun_fd_mapping(source: input.read, target: ProtocolChannels.hostToPlugin),
            extrun_fd_mapping(source: output.write, target: ProtocolChannels.pluginToHost),
        ]
        let argv = [spec.executable.path] + spec.arguments
        let envp = spec.environment.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        var result = extrun_spawn_result()
        withCStrings(argv) { argvPointer in
            withCStrings(envp) { envpPointer in
                spec.executable.path.withCString { path in
                    withOptionalCString(spec.workingDirectory?.path) { cwd in
                        mappings.withUnsafeBufferPointer { fds in
                            var request = extrun_spawn_request(
                                path: path, argv: argvPointer, envp: envpPointer, cwd: cwd, fds: fds.baseAddress,
                                fd_count: Int32(fds.count))
                            extrun_spawn(&request, &result)
                        }
                    }
                }
            }
        }
        guard result.error == 0, result.pid > 0 else {
            for fd in [input.write, output.read, out.read, err.read] { close(fd) }
            let reason = String(cString: strerror(result.error))
            let what: String
            switch result.stage {
            case EXTRUN_STAGE_EXEC: what = "cannot execute \(spec.executable.path): \(reason)"
            case EXTRUN_STAGE_CHDIR: what = "cannot enter the working directory \(spec.workingDirectory?.path ?? ""): \(reason)"
            default: what = "cannot start \(spec.executable.path) (stage \(result.stage.rawValue)): \(reason)"
            }
            throw HostError(.internalError, what, details: ["executable": .string(spec.executable.path)])
        }
        let pidfd = extrun_pidfd_open(result.pid)
        for fd in [input.write, output.read, out.read, err.read] {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        }
        return PluginProcess(
            pid: result.pid, pidfd: pidfd, toPlugin: input.write, fromPlugin: output.read, stdoutFD: out.read, stderrFD: err.read)
    }

    /// Reaps the process if it has exited. Returns whether it has.
    @discardableResult
    func reap(blocking: Bool = false) -> Bool {
        if exit != nil { return true }
        var status: Int32 = 0
        var usage = rusage()
        var pid: pid_t
        repeat {
            pid = wait4(self.pid, &status, blocking ? 0 : WNOHANG, &usage)
        } while pid < 0 && errno == EINTR
        guard pid == self.pid else { return false }
        let termination: ProcessExit.Termination =
            extrun_wifsignaled(status) != 0 ? .signaled(extrun_wtermsig(status)) : .exited(extrun_wexitstatus(status))
        let cpu =
            Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000 + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1000
        exit = ProcessExit(termination: termination, cpuMs: cpu.rounded(toPlaces: 3), maxRSSBytes: Int64(usage.ru_maxrss) * 1024)
        return true
    }

    /// Signals the plugin's whole process group.
    func signalGroup(_ signal: Int32) {
        _ = kill(-pid, signal)
    }

    func closeToPlugin() {
        if toPlugin >= 0 {
            close(toPlugin)
            toPlugin = -1
        }
    }

    /// Kills whatever is left of the group, reaps the plugin, closes every descriptor.
    func finish() {
        signalGroup(SIGKILL)
        reap(blocking: true)
        for fd in [toPlugin, fromPlugin, stdoutFD, stderrFD, pidfd] where fd >= 0 { close(fd) }
        toPlugin = -1
        fromPlugin = -1
        stdoutFD = -1
        stderrFD = -1
    }
}

enum HostSignals {
    /// A plugin that closes its end must not kill the host with SIGPIPE on the next write.
    static func ignoreSIGPIPE() {
        signal(SIGPIPE, SIG_IGN)
    }
}

private func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
    var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
    pointers.append(nil)
    defer { for pointer in pointers { free(pointer) } }
    return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
}

private func withOptionalCString<R>(_ string: String?, _ body: (UnsafePointer<CChar>?) -> R) -> R {
    guard let string else { return body(nil) }
    return string.withCString { body($0) }
}
