import CExtrunLinux
import ExtrunProtocol
import ExtrunSystem
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
    /// Peak resident set size from the kernel's rusage (includes shared library pages).
    public var maxRSSBytes: Int64
    /// Its memory as it ended, read by the supervisor's side before it was released (nil: unknown).
    public var finalMemory: FinalMemory? = nil

    public var isClean: Bool { termination == .exited(0) }

    public var description: String {
        switch termination {
        case .exited(let code): "exited with status \(code)"
        case .signaled(let signal): "was killed by signal \(signal) (\(signalName(signal)))"
        }
    }
}

/// A plugin's memory as it ended, exact: read from /proc/PID/status in its exit stop
/// (its parent traces it for that stop alone), or just before the supervisor killed it.
public struct FinalMemory: Sendable, Equatable {
    /// VmPeak: the largest address space it had (the kernel's high-water mark).
    public var peakAddressSpaceBytes: Int64
    /// VmSize: its address space at the end.
    public var addressSpaceBytes: Int64
    /// VmData: its private writable memory at the end (what RLIMIT_DATA counts).
    public var privateBytes: Int64
    /// VmHWM: the largest resident set it had.
    public var peakResidentBytes: Int64
    /// RssShmem: shared memory resident at the end.
    public var sharedResidentBytes: Int64

    /// Requests smaller than this go unseen by the supervisor (EXTRUN_LARGE_MAPPING_BYTES):
    /// the cap refuses one only when at most this much is left under it.
    static let unseenRequestBytes: Int64 = 4 << 20

    init?(_ figures: extrun_memory_figures) {
        guard figures.vm_size_kb > 0 else { return nil }
        peakAddressSpaceBytes = Int64(clamping: figures.vm_peak_kb) * 1024
        addressSpaceBytes = Int64(clamping: figures.vm_size_kb) * 1024
        privateBytes = Int64(clamping: figures.vm_data_kb) * 1024
        peakResidentBytes = Int64(clamping: figures.vm_hwm_kb) * 1024
        sharedResidentBytes = Int64(clamping: figures.rss_shmem_kb) * 1024
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
    case SIGSTOP: "SIGSTOP"
    case SIGCONT: "SIGCONT"
    case SIGHUP: "SIGHUP"
    case SIGINT: "SIGINT"
    case SIGQUIT: "SIGQUIT"
    case SIGUSR1: "SIGUSR1"
    case SIGUSR2: "SIGUSR2"
    default: "signal \(signal)"
    }
}

/// A system call the sandbox stopped.
public struct SandboxViolation: Sendable, Equatable {
    public var syscallNumber: Int32
    public var syscallName: String
    public var argument0: UInt64
    /// The fourth argument (mmap's flags).
    public var argument3: UInt64 = 0
    /// The ABI the call came through when it is not x86_64's own: "i386" (`int 0x80`) or "x32".
    public var abi: String? = nil

    /// "socket(AF_INET)", "ptrace", "mmap(MAP_GROWSDOWN)", "getpid through the i386 ABI (int 0x80)"...
    public var description: String {
        if let abi {
            return "\(syscallName) through the \(abi) ABI\(abi == "i386" ? " (int 0x80)" : "")"
        }
        switch syscallName {
        case "socket":
            let family: String
            switch argument0 {
            case 2: family = "AF_INET"
            case 10: family = "AF_INET6"
            case 16: family = "AF_NETLINK"
            case 17: family = "AF_PACKET"
            default: family = "family \(argument0)"
            }
            return "socket(\(family))"
        case "mmap":
            return "mmap(\(mmapFlag))"
        default:
            return syscallName
        }
    }

    /// The flag of mmap's that the filter refuses (docs/sandbox.md, "Memory").
    var mmapFlag: String {
        if argument3 & UInt64(MAP_GROWSDOWN) != 0 { return "MAP_GROWSDOWN" }
        return argument3 & 0x0f == 0x03 ? "MAP_SHARED_VALIDATE|MAP_ANONYMOUS" : "MAP_SHARED|MAP_ANONYMOUS"
    }

    /// The error's details.
    var details: [String: JSONValue] {
        var details: [String: JSONValue] = ["syscall": .string(syscallName), "syscallNumber": .int(Int64(syscallNumber))]
        if let abi { details["abi"] = .string(abi) }
        if syscallName == "mmap" && abi == nil { details["flag"] = .string(mmapFlag) }
        return details
    }
}

/// A mapping the memory cap refused: what the plugin asked for, with how much private memory in use.
public struct RefusedAllocation: Sendable, Equatable {
    public var requestedBytes: Int64
    public var inUseBytes: Int64
}

/// The scratch directory past its quota.
public struct DiskBreach: Sendable, Equatable {
    public var bytes: Int64
    public var files: Int64
    /// Folders nested deeper than the supervisor counts (256).
    public var tooDeep: Bool
}

/// The run's processes together past the memory cap (counted by the supervisor while
/// there is more than one).
public struct RunMemoryBreach: Sendable, Equatable {
    public var bytes: Int64
    public var processes: Int64
    /// `bytes` are the run's page tables, past their share of the cap.
    public var pageTables: Bool
}

/// A call the sandbox refused (with EPERM) without stopping the plugin: a
/// signal aimed at a process that is not the plugin's own.
public struct DeniedCall: Sendable, Equatable {
    public var syscallName: String
    /// The process (or, negative, the process group) it aimed at.
    public var target: Int64
    /// The signal; -1 for a call on a process's limits or scheduling (prlimit64, setpriority...).
    public var signal: Int32

    public var description: String {
        if signal < 0 {  // a call on a process's limits or scheduling
            let aim = target == -1 ? "a user's processes" : target < 0 ? "process group \(-target)" : "pid \(target)"
            return "\(syscallName)(\(aim)): not one of the plugin's own processes"
        }
        let aim = target == -1 ? "-1, every process it may signal" : target < 0 ? "process group \(-target)" : "pid \(target)"
        return "\(syscallName)(\(aim), \(signal == 0 ? "signal 0" : signalName(signal))): not one of the plugin's own processes"
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

/// A started plugin: its supervisor, its pid, and the parent's ends of its pipes.
///
/// The host forks a supervisor, a single-threaded process that sets up the
/// sandbox (namespaces, rlimits, seccomp) and forks the plugin. The plugin
/// gets: stdin `/dev/null`, stdout and stderr to capture pipes, fd 3 reading
/// the host's messages, fd 4 writing its own. The supervisor reports the
/// plugin's start, any forbidden system call and its end (with rusage) on a
/// status pipe; it kills the plugin when the host closes the lifeline pipe or
/// dies, and it removes every process the plugin left behind before it
/// reports the end.
final class PluginProcess {
    let supervisorPID: pid_t
    private(set) var pid: pid_t = -1
    /// The namespaces the plugin actually got.
    private(set) var activeNamespaces: Int32 = 0
    var statusFD: Int32
    private var lifelineFD: Int32
    /// Parent's ends (non-blocking): we write fd 3's pipe, read fd 4's, stdout's, stderr's.
    var toPlugin: Int32
    var fromPlugin: Int32
    var stdoutFD: Int32
    var stderrFD: Int32
    private(set) var exit: ProcessExit?
    private(set) var violation: SandboxViolation?
    /// The scratch directory past its quota, as the supervisor counted it.
    private(set) var diskBreach: DiskBreach?
    private(set) var runMemoryBreach: RunMemoryBreach?
    /// The scratch directory, removed by `removeScratch` once the process has ended.
    private var scratch: String?
    private var scratchRemoved = false
    /// The first large mapping the memory cap refused (the supervisor saw it asked for).
    private(set) var refusedAllocation: RefusedAllocation?
    /// Signals the supervisor refused (the plugin got EPERM and went on).
    private(set) var denied: [DeniedCall] = []
    private var eventBuffer: [UInt8] = []
    let memory: MemorySampler
    /// The run's own uid, held until the process and all it started are gone.
    private var uidLease: PluginUidLease?

    private init(supervisorPID: pid_t, statusFD: Int32, lifelineFD: Int32, toPlugin: Int32, fromPlugin: Int32, stdoutFD: Int32, stderrFD: Int32) {
        self.supervisorPID = supervisorPID
        self.statusFD = statusFD
        self.lifelineFD = lifelineFD
        self.toPlugin = toPlugin
        self.fromPlugin = fromPlugin
        self.stdoutFD = stdoutFD
        self.stderrFD = stderrFD
        self.memory = MemorySampler()
    }

    static func launch(_ spec: LaunchSpec, sandbox: SandboxSettings) throws(HostError) -> PluginProcess {
        HostSignals.ignoreSIGPIPE()
        var opened: [Int32] = []
        func pipePair() throws(HostError) -> (read: Int32, write: Int32) {
            var fds: [Int32] = [-1, -1]
            guard extrun_pipe_cloexec(&fds) == 0 else {
                let reason = SystemCall.lastReason
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
            // The child's ends, and /dev/null, belong to the plugin once it is started.
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
        // The path's C string must be the very pointer the seccomp filter allows execve with:
        // with seccomp, the one the filters were built for (kept for the process's life).
        var programs: SeccompFilters.Set?
        if sandbox.seccomp {
            let wantsPidNamespace = sandbox.namespaces & Int32(EXTRUN_NS_PID) != 0
            switch SeccompFilters.programs(path: spec.executable.path, notify: sandbox.seccompNotify, pidNamespace: wantsPidNamespace) {
            case .success(let built): programs = built
            case .failure(let error):
                for fd in [input.write, output.read, out.read, err.read] { close(fd) }
                throw HostError(.internalError, "cannot build the seccomp filter (libseccomp error \(error.code))")
            }
        }
        if !sandbox.identity.dropsPrivileges {
            // The plugin shares the host's uid: the host must not be readable through
            // /proc/<host>/mem or /environ should the plugin see the host's pid.
            extrun_set_dumpable(0)
        }

        // Every string and array the C side reads, in one arena freed after the spawn.
        let arena = CArena()
        var request = extrun_sandbox_request()
        request.path = UnsafePointer(programs?.path ?? arena.string(spec.executable.path))
        request.argv = UnsafePointer(arena.strings(argv))
        request.envp = UnsafePointer(arena.strings(envp))
        request.cwd = spec.workingDirectory.map { UnsafePointer(arena.string($0.path)) }
        request.fds = UnsafePointer(arena.copy(mappings))
        request.fd_count = Int32(mappings.count)
        request.limits = sandbox.limits
        request.filter = UnsafeRawPointer(programs?.main.bytes)
        request.filter_length = UInt16(programs?.main.length ?? 0)
        request.filter_uses_notify = sandbox.seccompNotify ? 1 : 0
        request.namespaces = sandbox.namespaces
        request.pid_max = Int32(sandbox.pidMax)
        request.cgroup_procs_fd = sandbox.cgroupProcsFD
        request.drop_privileges = sandbox.identity.dropsPrivileges ? 1 : 0
        request.plugin_uid = sandbox.identity.uid
        request.plugin_gid = sandbox.identity.gid
        request.hide_paths = arena.constStrings(sandbox.hidePaths)
        request.hide_count = Int32(sandbox.hidePaths.count)
        request.reveal_sources = arena.constStrings(sandbox.reveals.map(\.source))
        request.reveal_targets = arena.constStrings(sandbox.reveals.map(\.target))
        request.reveal_writable = UnsafePointer(arena.copy(sandbox.reveals.map { Int32($0.writable ? 1 : 0) }))
        request.reveal_count = Int32(sandbox.reveals.count)
        // Without a pid namespace, the supervisor checks every signal the plugin sends: a
        // program that leaves them to the namespace is not used then (see the retry below).
        request.filter_needs_pid_ns = programs?.needsPidNamespace == true ? 1 : 0
        request.private_dev = sandbox.privateDev ? 1 : 0
        request.memory_files_bytes = sandbox.memoryFilesBytes
        request.memory_files_inodes = sandbox.memoryFilesInodes
        request.scratch_path = sandbox.scratchPath.map { UnsafePointer(arena.string($0)) }
        request.disk_bytes = sandbox.diskBytes
        request.disk_files = sandbox.diskFiles
        request.disk_check_ms = SandboxSettings.diskCheckMs
        request.landlock_paths = arena.constStrings(sandbox.landlock.map(\.path))
        request.landlock_kinds = UnsafePointer(arena.copy(sandbox.landlock.map(\.kind)))
        request.landlock_count = Int32(sandbox.landlock.count)
        var result = extrun_sandbox_result()
        withExtendedLifetime(arena) { extrun_sandbox_spawn(&request, &result) }
        guard result.error == 0, result.supervisor_pid > 0 else {
            for fd in [input.write, output.read, out.read, err.read] { close(fd) }
            throw HostError(.internalError, "cannot start the plugin's supervisor: \(SystemCall.reason(result.error))")
        }
        let process = PluginProcess(
            supervisorPID: result.supervisor_pid, statusFD: result.status_fd, lifelineFD: result.lifeline_fd,
            toPlugin: input.write, fromPlugin: output.read, stdoutFD: out.read, stderrFD: err.read)
        process.uidLease = sandbox.identity.lease
        process.scratch = sandbox.scratchPath
        // The first event says whether the plugin started.
        guard let first = process.readEvent(blocking: true) else {
            process.kill()
            process.reap()
            throw HostError(.internalError, "the plugin's supervisor ended before it reported the start of \(spec.executable.path)")
        }
        if first.type == EXTRUN_EVENT_SETUP_FAILED.rawValue {
            // No plugin ran: the supervisor goes (a session's `Teardown` is for a started one).
            process.kill()
            process.reap()
            let reason = SystemCall.reason(first.error)
            switch extrun_spawn_stage(rawValue: UInt32(first.stage)) {
            case EXTRUN_STAGE_PID_NAMESPACE where programs?.needsPidNamespace == true:
                // No pid namespace to be had here: again (once) with the program that has the
                // supervisor check signals, which every later launch of this process builds at once.
                SeccompFilters.noteNoPidNamespace()
                return try launch(spec, sandbox: sandbox)
            case EXTRUN_STAGE_EXEC where sandbox.identity.dropsPrivileges && (first.error == EACCES || first.error == EPERM):
                let blocked = PathAccess.firstBlocked(
                    spec.executable.path, uid: sandbox.identity.uid, gid: sandbox.identity.gid, wanted: "rx")
                throw HostError(
                    .configurationError,
                    "cannot execute \(spec.executable.path) as the plugin's user: \(blocked.map { PathAccess.explain($0, identity: sandbox.identity) } ?? reason)",
                    details: ["executable": .string(spec.executable.path)])
            case EXTRUN_STAGE_FORK where first.error == ESRCH, EXTRUN_STAGE_EXEC where first.error == ENOMEM:
                // It exec'd and was gone before the supervisor saw it run (the kernel could not map
                // its image), or execve refused for want of memory: the run says whether the cap did it.
                throw HostError(
                    .pluginCrashed, "\(spec.executable.path) died inside execve, before its first instruction",
                    details: ["phase": .string("launch"), "diedAtStart": .bool(true), "executable": .string(spec.executable.path)])
            case EXTRUN_STAGE_EXEC:
                throw HostError(
                    .configurationError, "cannot execute \(spec.executable.path): \(reason)",
                    details: ["executable": .string(spec.executable.path)])
            case EXTRUN_STAGE_CHDIR:
                let scratch = spec.workingDirectory?.path ?? ""
                let blocked = sandbox.identity.dropsPrivileges
                    ? PathAccess.firstBlocked(scratch, uid: sandbox.identity.uid, gid: sandbox.identity.gid, wanted: "rwx") : nil
                throw HostError(
                    .internalError,
                    "cannot enter the scratch directory \(scratch): \(blocked.map { PathAccess.explain($0, identity: sandbox.identity) + "; scratch directories are made under $TMPDIR" } ?? reason)")
            case EXTRUN_STAGE_CREDENTIALS:
                throw HostError(
                    .internalError, "cannot switch the plugin to its user (uid \(sandbox.identity.uid), gid \(sandbox.identity.gid)): \(reason)")
            case EXTRUN_STAGE_MOUNT:
                throw HostError(
                    .internalError, "cannot hide \(sandbox.hidePaths.joined(separator: " and ")) from the plugin in its mount namespace: \(reason)")
            case EXTRUN_STAGE_SECCOMP:
                throw HostError(.internalError, "cannot install the seccomp filter: \(reason)")
            case EXTRUN_STAGE_LANDLOCK:
                throw HostError(.internalError, "cannot restrict the plugin with Landlock: \(reason)")
            case EXTRUN_STAGE_RLIMIT:
                throw HostError(.internalError, "cannot set the plugin's resource limits: \(reason)")
            default:
                throw HostError(.internalError, "cannot start \(spec.executable.path) (setup stage \(first.stage)): \(reason)")
            }
        }
        process.apply(first)
        for fd in [input.write, output.read, out.read, err.read, process.statusFD] {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        }
        return process
    }

    /// Reads the supervisor's events that are available. Returns false at its end of file.
    @discardableResult
    func readEvents() -> Bool {
        while let event = readEvent(blocking: false) { apply(event) }
        return statusFD >= 0
    }

    private func apply(_ event: extrun_event) {
        switch UInt32(event.type) {
        case EXTRUN_EVENT_STARTED.rawValue:
            pid = event.pid
            activeNamespaces = event.namespaces
            memory.attach(pid: pid)
        case EXTRUN_EVENT_VIOLATION.rawValue:
            let abi = extrun_syscall_abi(event.arch, event.syscall_nr)
            let name = extrun_syscall_name_abi(abi, event.syscall_nr).map { String(cString: $0) } ?? "syscall \(event.syscall_nr)"
            let abiName: String? =
                switch Int(abi) {
                case Int(EXTRUN_ABI_NATIVE): nil
                case Int(EXTRUN_ABI_I386): "i386"
                case Int(EXTRUN_ABI_X32): "x32"
                default: "architecture 0x\(String(event.arch, radix: 16))"
                }
            violation = violation ?? SandboxViolation(
                syscallNumber: event.syscall_nr, syscallName: name, argument0: event.arg0, argument3: event.arg1, abi: abiName)
        case EXTRUN_EVENT_DENIED.rawValue:
            let name = extrun_syscall_name(event.syscall_nr).map { String(cString: $0) } ?? "syscall \(event.syscall_nr)"
            if denied.count < 100 {
                denied.append(DeniedCall(syscallName: name, target: Int64(bitPattern: event.arg0), signal: Int32(truncatingIfNeeded: event.arg1)))
            }
        case EXTRUN_EVENT_DISK_LIMIT.rawValue:
            // (Counted again after the end, in full: the larger count is what was written.)
            let counted = DiskBreach(bytes: Int64(clamping: event.arg0), files: Int64(clamping: event.arg1), tooDeep: event.status != 0)
            if let earlier = diskBreach {
                diskBreach = DiskBreach(
                    bytes: max(earlier.bytes, counted.bytes), files: max(earlier.files, counted.files), tooDeep: earlier.tooDeep || counted.tooDeep)
            } else {
                diskBreach = counted
            }
        case EXTRUN_EVENT_RUN_MEMORY_LIMIT.rawValue:
            runMemoryBreach = runMemoryBreach ?? RunMemoryBreach(
                bytes: Int64(clamping: event.arg0), processes: Int64(clamping: event.arg1), pageTables: event.status != 0)
        case EXTRUN_EVENT_ALLOCATION_REFUSED.rawValue:
            if refusedAllocation == nil {
                refusedAllocation = RefusedAllocation(requestedBytes: Int64(clamping: event.arg0), inUseBytes: Int64(clamping: event.arg1))
            }
        case EXTRUN_EVENT_EXITED.rawValue:
            memory.detach()
            let status = event.status
            let termination: ProcessExit.Termination =
                extrun_wifsignaled(status) != 0 ? .signaled(extrun_wtermsig(status)) : .exited(extrun_wexitstatus(status))
            let cpu = Double(event.utime_us + event.stime_us) / 1000
            exit = ProcessExit(
                termination: termination, cpuMs: cpu.rounded(toPlaces: 3), maxRSSBytes: event.maxrss_kb * 1024,
                finalMemory: FinalMemory(event.final_memory))
        default:
            break
        }
    }

    private func readEvent(blocking: Bool) -> extrun_event? {
        let size = MemoryLayout<extrun_event>.size
        while eventBuffer.count < size {
            guard statusFD >= 0 else { return nil }
            var chunk = [UInt8](repeating: 0, count: size - eventBuffer.count)
            let fd = statusFD
            let outcome = chunk.withUnsafeMutableBytes { raw in
                Result { () throws(SystemCallError) in try SystemCall.readNonBlocking(fd, into: raw) }
            }
            switch outcome {
            case .success(.completed(let count)) where count > 0:
                eventBuffer += chunk[0..<count]
            case .success(.wouldBlock):
                if !blocking { return nil }
                var entry = [pollfd(fd: statusFD, events: Int16(POLLIN), revents: 0)]
                _ = try? SystemCall.poll(&entry, timeoutMs: 1000)
            case .success(.completed), .failure:
                // The end of the supervisor's reports (or a read that failed: there will be no more).
                close(statusFD)
                statusFD = -1
                return nil
            }
        }
        let event = eventBuffer.withUnsafeBytes { $0.loadUnaligned(as: extrun_event.self) }
        eventBuffer.removeFirst(size)
        return event
    }

    /// Removes the scratch directory (by descriptor) once the process and all it started
    /// are gone: nil, or what could not be removed and why. Once; later calls say nil.
    func removeScratch() -> String? {
        guard exit != nil, !scratchRemoved, let scratch else { return nil }
        scratchRemoved = true
        return ScratchDirectory.remove(URL(fileURLWithPath: scratch, isDirectory: true))
    }

    /// Unless it has exited, has the supervisor kill the plugin and everything it started
    /// (a "K" on the lifeline), and sends SIGKILL to its process group.
    func kill() {
        guard lifelineFD >= 0, exit == nil else { return }
        var command = UInt8(ascii: "K")
        _ = write(lifelineFD, &command, 1)
        if pid > 0 { _ = Glibc.kill(-pid, SIGKILL) }
    }

    func closeToPlugin() {
        if toPlugin >= 0 {
            close(toPlugin)
            toPlugin = -1
        }
    }

    /// Closes the lifeline (the supervisor kills whatever is left when it closes), waits
    /// for the supervisor's final report (so that no process of the plugin's remains),
    /// reaps the supervisor, closes everything and gives back the run's uid. A step of
    /// every session's end (`Teardown`), after `kill`.
    func reap() {
        if lifelineFD >= 0 {
            close(lifelineFD)
            lifelineFD = -1
        }
        while exit == nil, statusFD >= 0, let event = readEvent(blocking: true) { apply(event) }
        var status: Int32 = 0
        _ = SystemCall.retryingInterrupts { waitpid(supervisorPID, &status, 0) }
        memory.detach()
        uidLease = nil
        for fd in [toPlugin, fromPlugin, stdoutFD, stderrFD, statusFD] where fd >= 0 { close(fd) }
        toPlugin = -1
        fromPlugin = -1
        stdoutFD = -1
        stderrFD = -1
        statusFD = -1
    }
}

enum HostSignals {
    /// A plugin that closes its end must not kill the host with SIGPIPE on the next write.
    static func ignoreSIGPIPE() {
        signal(SIGPIPE, SIG_IGN)
    }
}

/// Memory for the C side of a launch: C strings, NULL-terminated arrays of them and copies
/// of arrays, allocated as the request is filled in and freed together with the arena
/// (one flat list of assignments instead of a closure per string list).
private final class CArena {
    private var allocations: [UnsafeMutableRawPointer] = []

    deinit {
        for allocation in allocations { allocation.deallocate() }
    }

    /// A copy of `values` (at least one element's room, so never a null pointer).
    func copy<T: BitwiseCopyable>(_ values: [T]) -> UnsafeMutablePointer<T> {
        let pointer = UnsafeMutablePointer<T>.allocate(capacity: max(values.count, 1))
        values.withUnsafeBufferPointer { buffer in
            if let base = buffer.baseAddress { pointer.initialize(from: base, count: buffer.count) }
        }
        allocations.append(UnsafeMutableRawPointer(pointer))
        return pointer
    }

    func string(_ string: String) -> UnsafeMutablePointer<CChar> {
        copy(Array(string.utf8CString))
    }

    /// `strings` as C strings, then a null pointer (`char *const *`).
    func strings(_ strings: [String]) -> UnsafeMutablePointer<UnsafeMutablePointer<CChar>?> {
        copy(strings.map { Optional(string($0)) } + [nil])
    }

    /// The same as `const char *const *`.
    func constStrings(_ strings: [String]) -> UnsafePointer<UnsafePointer<CChar>?> {
        UnsafePointer(copy(strings.map { Optional(UnsafePointer(string($0))) } + [nil]))
    }
}
