import ExtrunProtocol
import Foundation

/// The host's policy: default limits per mode, the maxima a manifest or the
/// command line may ask for, and the sandbox's settings. Every knob is here,
/// with its default; `$EXTRUN_HOME/policy.json` overrides any of them
/// (docs/sandbox.md documents the file). `extrun handle --verbose` prints the
/// limits and mechanisms in force.
public struct SandboxPolicy: Codable, Sendable, Equatable {
    public struct ModeLimits: Codable, Sendable, Equatable {
        /// The memory cap unless the manifest or the command line asks otherwise.
        public var memoryBytes: Int64
        /// The most a manifest or the command line may ask for.
        public var maxMemoryBytes: Int64
        /// The deadline, counted from the plugin's launch.
        public var deadlineMs: Int
        /// The longest deadline a manifest or the command line may ask for.
        public var maxDeadlineMs: Int
        /// How far progress reports may push the deadline (from launch); 0: they cannot.
        public var maxExtendedDeadlineMs: Int
        /// RLIMIT_STACK, which is also the size of each thread's stack.
        public var stackBytes: Int64
        /// The part of the memory cap for files in memory (/tmp, /var/tmp and /dev/shm are
        /// one tmpfs of this size per run; at most a quarter of the run's cap). The rest is
        /// the private memory RLIMIT_DATA allows.
        public var memoryFilesBytes: Int64
        /// The scratch directory's quota: bytes on disk (blocks) and entries (files and folders).
        public var diskBytes: Int64
        public var diskFiles: Int64

        public init(
            memoryBytes: Int64, maxMemoryBytes: Int64, deadlineMs: Int, maxDeadlineMs: Int, maxExtendedDeadlineMs: Int, stackBytes: Int64,
            memoryFilesBytes: Int64 = 4 << 20, diskBytes: Int64 = 256 << 20, diskFiles: Int64 = 4096
        ) {
            self.memoryFilesBytes = memoryFilesBytes
            self.diskBytes = diskBytes
            self.diskFiles = diskFiles
            self.memoryBytes = memoryBytes
            self.maxMemoryBytes = maxMemoryBytes
            self.deadlineMs = deadlineMs
            self.maxDeadlineMs = maxDeadlineMs
            self.maxExtendedDeadlineMs = maxExtendedDeadlineMs
            self.stackBytes = stackBytes
        }
    }

    public struct Namespaces: Codable, Sendable, Equatable {
        /// A pid namespace: everything the plugin starts dies with it, and no other process is visible.
        public var pid: Bool
        /// A network namespace (only a loopback, down): hides the host's own sockets and
        /// interfaces from /proc/net. A root host's plugins share one empty namespace, pinned
        /// at /run/extrun/netns (joining it is much cheaper than making one per run:
        /// docs/benchmarks.md, "Costs the source's comments point to");
        /// an ordinary user's run makes its own in its user namespace (docs/sandbox.md, "Namespaces").
        public var network: Bool
        /// An IPC namespace (System V IPC and POSIX message queues of its own).
        public var ipc: Bool
        /// A mount namespace: `$EXTRUN_HOME` (keys, store, policy, containers) is covered
        /// by an empty read-only tmpfs, and /proc shows the plugin's pid namespace only.
        public var mount: Bool
        /// A user namespace, used only when the host is not root, so that an ordinary
        /// user gets the namespaces above too (the plugin keeps the host's uid).
        public var user: Bool

        public init(pid: Bool, network: Bool, ipc: Bool, mount: Bool = true, user: Bool = true) {
            self.pid = pid
            self.network = network
            self.ipc = ipc
            self.mount = mount
            self.user = user
        }

        private enum CodingKeys: String, CodingKey { case pid, network, ipc, mount, user }

        /// Every field is optional and falls back to the default.
        public init(from decoder: any Decoder) throws {
            let d = SandboxPolicy.default.namespaces
            let c = try decoder.container(keyedBy: CodingKeys.self)
            pid = try c.decodeIfPresent(Bool.self, forKey: .pid) ?? d.pid
            network = try c.decodeIfPresent(Bool.self, forKey: .network) ?? d.network
            ipc = try c.decodeIfPresent(Bool.self, forKey: .ipc) ?? d.ipc
            mount = try c.decodeIfPresent(Bool.self, forKey: .mount) ?? d.mount
            user = try c.decodeIfPresent(Bool.self, forKey: .user) ?? d.user
        }
    }

    public var `extension`: ModeLimits
    public var inApp: ModeLimits
    /// RLIMIT_NPROC for the plugin's user (enforced by the kernel only for non-root users).
    public var processes: Int
    /// Processes a pid namespace may hold (its pid_max; the kernel's minimum is 301).
    public var pidNamespaceMaxPids: Int
    public var openFiles: Int
    /// RLIMIT_FSIZE: the largest file the plugin may write.
    public var fileSizeBytes: Int64
    public var namespaces: Namespaces
    /// The seccomp filter. Turning it off is for measuring its cost, not for production.
    public var seccomp: Bool
    /// Landlock, where the kernel has it: the plugin may read and execute the system's
    /// folders and its own, write only its scratch directory (and the run's /tmp, /var/tmp,
    /// /dev/shm); no TCP; abstract sockets and signals only within its run.
    public var landlock: Bool = true
    /// How long a plugin has, after `cancel`, before its process group is killed.
    public var cancelGraceMs: Int
    /// How long a plugin has to exit once the host has its answer and closes the channel.
    public var exitGraceMs: Int
    /// The largest message accepted from a plugin.
    public var maxMessageBytes: Int
    /// How much of a plugin's stdout and of its stderr the host keeps.
    public var outputCaptureBytes: Int
    /// A cgroup v2 directory delegated to extrun for per-run `memory.max` groups
    /// (or the `EXTRUN_CGROUP` environment variable). Nil: rlimits only.
    public var cgroup: String?
    /// The user plugins run as when the host is root: a user name, or a numeric
    /// `uid` or `uid:gid`. Nil: `extrun-plugin` (made by Scripts/bootstrap),
    /// else `nobody`. Never root. Ignored when the host is not root.
    public var pluginUser: String?
    /// Uids (and gids of the same number) a root host gives one run each when the plugin
    /// has no pid namespace (policy `namespaces.pid: false`): RLIMIT_NPROC counts a uid's
    /// processes across the machine, so one run's fork bomb must not use another's budget.
    /// (With a pid namespace its pid_max bounds each run.) `count` 0: the shared `pluginUser`.
    public var pluginUidRange: UidRange = UidRange()

    public struct UidRange: Codable, Sendable, Equatable {
        public var first: UInt32 = 0x7000_0000
        public var count: UInt32 = 65_536
        public init(first: UInt32 = 0x7000_0000, count: UInt32 = 65_536) {
            self.first = first
            self.count = count
        }
    }
    /// What the host itself may spend on a run (HostLimits.swift; docs/sandbox.md).
    public var host: HostLimits = .default

    public static let `default` = SandboxPolicy(
        extension: ModeLimits(
            memoryBytes: 30 << 20, maxMemoryBytes: 120 << 20, deadlineMs: 10_000, maxDeadlineMs: 30_000,
            maxExtendedDeadlineMs: 30_000, stackBytes: 1 << 20),
        inApp: ModeLimits(
            memoryBytes: 1 << 30, maxMemoryBytes: 4 << 30, deadlineMs: 10_000, maxDeadlineMs: 60_000,
            maxExtendedDeadlineMs: 0, stackBytes: 8 << 20, memoryFilesBytes: 64 << 20, diskBytes: 2 << 30, diskFiles: 65_536),
        processes: 64, pidNamespaceMaxPids: 301, openFiles: 256, fileSizeBytes: 256 << 20,
        namespaces: Namespaces(pid: true, network: true, ipc: true, mount: true, user: true), seccomp: true,
        cancelGraceMs: 500, exitGraceMs: 2_000, maxMessageBytes: 16 << 20, outputCaptureBytes: 64 << 10, cgroup: nil, pluginUser: nil)

    public init(
        extension: ModeLimits, inApp: ModeLimits, processes: Int, pidNamespaceMaxPids: Int, openFiles: Int, fileSizeBytes: Int64,
        namespaces: Namespaces, seccomp: Bool, cancelGraceMs: Int, exitGraceMs: Int, maxMessageBytes: Int, outputCaptureBytes: Int,
        cgroup: String?, pluginUser: String? = nil
    ) {
        self.cgroup = cgroup
        self.pluginUser = pluginUser
        self.extension = `extension`
        self.inApp = inApp
        self.processes = processes
        self.pidNamespaceMaxPids = pidNamespaceMaxPids
        self.openFiles = openFiles
        self.fileSizeBytes = fileSizeBytes
        self.namespaces = namespaces
        self.seccomp = seccomp
        self.cancelGraceMs = cancelGraceMs
        self.exitGraceMs = exitGraceMs
        self.maxMessageBytes = maxMessageBytes
        self.outputCaptureBytes = outputCaptureBytes
    }

    public func limits(for mode: Mode) -> ModeLimits {
        mode == .extension ? self.extension : inApp
    }

    private enum CodingKeys: String, CodingKey {
        case `extension` = "extension", inApp = "in-app", processes, pidNamespaceMaxPids, openFiles, fileSizeBytes, namespaces, seccomp, landlock
        case cancelGraceMs, exitGraceMs, maxMessageBytes, outputCaptureBytes, cgroup, pluginUser, pluginUidRange
        case host
    }

    /// Decodes a policy file: every field is optional and falls back to the default.
    public init(from decoder: any Decoder) throws {
        let d = SandboxPolicy.default
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.extension = try c.decodeIfPresent(PartialModeLimits.self, forKey: .extension)?.merged(over: d.extension) ?? d.extension
        inApp = try c.decodeIfPresent(PartialModeLimits.self, forKey: .inApp)?.merged(over: d.inApp) ?? d.inApp
        processes = try c.decodeIfPresent(Int.self, forKey: .processes) ?? d.processes
        pidNamespaceMaxPids = try c.decodeIfPresent(Int.self, forKey: .pidNamespaceMaxPids) ?? d.pidNamespaceMaxPids
        openFiles = try c.decodeIfPresent(Int.self, forKey: .openFiles) ?? d.openFiles
        fileSizeBytes = try c.decodeIfPresent(Int64.self, forKey: .fileSizeBytes) ?? d.fileSizeBytes
        namespaces = try c.decodeIfPresent(Namespaces.self, forKey: .namespaces) ?? d.namespaces
        seccomp = try c.decodeIfPresent(Bool.self, forKey: .seccomp) ?? d.seccomp
        landlock = try c.decodeIfPresent(Bool.self, forKey: .landlock) ?? d.landlock
        cancelGraceMs = try c.decodeIfPresent(Int.self, forKey: .cancelGraceMs) ?? d.cancelGraceMs
        exitGraceMs = try c.decodeIfPresent(Int.self, forKey: .exitGraceMs) ?? d.exitGraceMs
        maxMessageBytes = try c.decodeIfPresent(Int.self, forKey: .maxMessageBytes) ?? d.maxMessageBytes
        outputCaptureBytes = try c.decodeIfPresent(Int.self, forKey: .outputCaptureBytes) ?? d.outputCaptureBytes
        cgroup = try c.decodeIfPresent(String.self, forKey: .cgroup)
        pluginUser = try c.decodeIfPresent(String.self, forKey: .pluginUser)
        pluginUidRange = try c.decodeIfPresent(UidRange.self, forKey: .pluginUidRange) ?? d.pluginUidRange
        host = try c.decodeIfPresent(HostLimits.self, forKey: .host) ?? d.host
    }

    private struct PartialModeLimits: Decodable {
        var memoryBytes: Int64?
        var maxMemoryBytes: Int64?
        var deadlineMs: Int?
        var maxDeadlineMs: Int?
        var maxExtendedDeadlineMs: Int?
        var stackBytes: Int64?
        var memoryFilesBytes: Int64?
        var diskBytes: Int64?
        var diskFiles: Int64?

        func merged(over base: ModeLimits) -> ModeLimits {
            ModeLimits(
                memoryBytes: memoryBytes ?? base.memoryBytes, maxMemoryBytes: maxMemoryBytes ?? base.maxMemoryBytes,
                deadlineMs: deadlineMs ?? base.deadlineMs, maxDeadlineMs: maxDeadlineMs ?? base.maxDeadlineMs,
                maxExtendedDeadlineMs: maxExtendedDeadlineMs ?? base.maxExtendedDeadlineMs, stackBytes: stackBytes ?? base.stackBytes,
                memoryFilesBytes: memoryFilesBytes ?? base.memoryFilesBytes, diskBytes: diskBytes ?? base.diskBytes,
                diskFiles: diskFiles ?? base.diskFiles)
        }
    }

    /// Problems that make the policy unusable, each naming its field.
    public func problems() -> [String] {
        var problems: [String] = []
        for (name, limits) in [("extension", self.extension), ("in-app", inApp)] {
            if limits.memoryBytes <= EffectiveLimits.minimumMemoryBytes {
                problems.append("\(name).memoryBytes: must be above \(EffectiveLimits.minimumMemoryBytes) (the least the run's files in memory take of it)")
            }
            if limits.memoryBytes > limits.maxMemoryBytes {
                problems.append("\(name).memoryBytes: \(limits.memoryBytes) is above \(name).maxMemoryBytes (\(limits.maxMemoryBytes))")
            }
            if limits.deadlineMs <= 0 { problems.append("\(name).deadlineMs: must be positive") }
            if limits.deadlineMs > limits.maxDeadlineMs {
                problems.append("\(name).deadlineMs: \(limits.deadlineMs) is above \(name).maxDeadlineMs (\(limits.maxDeadlineMs))")
            }
            if limits.stackBytes < 64 << 10 { problems.append("\(name).stackBytes: must be at least 65536") }
            if limits.memoryFilesBytes < 64 << 10 { problems.append("\(name).memoryFilesBytes: must be at least 65536") }
            if limits.diskBytes < 1 << 20 { problems.append("\(name).diskBytes: must be at least 1048576") }
            if limits.diskFiles < 16 { problems.append("\(name).diskFiles: must be at least 16") }
        }
        if processes < 1 { problems.append("processes: must be at least 1") }
        if pidNamespaceMaxPids < 301 { problems.append("pidNamespaceMaxPids: the kernel's minimum is 301") }
        if openFiles < 16 { problems.append("openFiles: must be at least 16") }
        if let pluginUser, let problem = PluginUser.problem(with: pluginUser) { problems.append("pluginUser: \(problem)") }
        if pluginUidRange.count > 0 && (pluginUidRange.first < 65_536 || UInt64(pluginUidRange.first) + UInt64(pluginUidRange.count) > 0x7fff_ffff) {
            problems.append("pluginUidRange: must lie between 65536 and 2147483647 (uids of no user)")
        }
        problems += host.problems(maxMessageBytes: maxMessageBytes)
        return problems
    }

    /// Loads `$EXTRUN_HOME/policy.json`, or the defaults when there is none.
    public static func load(home: URL) throws(HostError) -> (SandboxPolicy, source: String) {
        let url = home.appendingPathComponent("policy.json")
        guard FileManager.default.fileExists(atPath: url.path) else { return (.default, "built-in defaults") }
        // Whoever may write the policy decides how plugins are confined: only the host's user.
        try PrivateFile.check(url.path, what: "the policy file")
        let policy: SandboxPolicy
        do {
            policy = try JSONCoding.decode(SandboxPolicy.self, fromJSON: Data(contentsOf: url))
        } catch {
            throw HostError(.configurationError, "\(url.path): invalid policy: \(JSONCoding.describe(error))", details: ["file": .string(url.path)])
        }
        let problems = policy.problems()
        if !problems.isEmpty {
            throw HostError(
                .configurationError, "\(url.path): invalid policy: \(problems.joined(separator: "; "))", details: ["file": .string(url.path)])
        }
        return (policy, url.path)
    }
}

/// The limits that apply to one run, after policy, manifest and command line.
public struct EffectiveLimits: Sendable, Equatable {
    public var mode: Mode
    public var memoryBytes: Int64
    public var deadlineMs: Int
    public var maxExtendedDeadlineMs: Int
    public var stackBytes: Int64
    /// The policy's share for files in memory; the run gets at most a quarter of its cap.
    var policyMemoryFilesBytes: Int64 = 4 << 20
    /// The scratch directory's quota (the policy's, per mode).
    public var diskBytes: Int64 = 256 << 20
    public var diskFiles: Int64 = 4096

    /// The run's memory filesystem (/tmp, /var/tmp, /dev/shm): part of the cap.
    public var memoryFilesBytes: Int64 { min(policyMemoryFilesBytes, max(memoryBytes / 4, 64 << 10)) }
    /// Private memory (RLIMIT_DATA): the cap less the memory filesystem.
    public var dataBytes: Int64 { memoryBytes - memoryFilesBytes }
    /// A memory limit must be above this, the least the memory filesystem takes of it.
    public static let minimumMemoryBytes: Int64 = 64 << 10

    public var json: JSONValue {
        var object: [String: JSONValue] = [
            "memoryBytes": .int(memoryBytes), "deadlineMs": .int(Int64(deadlineMs)), "memoryFilesBytes": .int(memoryFilesBytes),
            "diskBytes": .int(diskBytes), "diskFiles": .int(diskFiles),
        ]
        if maxExtendedDeadlineMs > deadlineMs { object["maxExtendedDeadlineMs"] = .int(Int64(maxExtendedDeadlineMs)) }
        return .object(object)
    }

    /// Resolves the limits: the policy's defaults, then the manifest's request, then the
    /// command line's; anything above the policy's maxima is an error, never a silent clamp.
    public static func resolve(
        policy: SandboxPolicy, mode: Mode, manifest: ManifestLimits?, manifestFile: String, memoryOverride: Int64?, deadlineOverride: Int?
    ) throws(HostError) -> EffectiveLimits {
        let base = policy.limits(for: mode)
        var limits = EffectiveLimits(
            mode: mode, memoryBytes: base.memoryBytes, deadlineMs: base.deadlineMs,
            maxExtendedDeadlineMs: max(base.maxExtendedDeadlineMs, base.deadlineMs), stackBytes: base.stackBytes,
            policyMemoryFilesBytes: base.memoryFilesBytes, diskBytes: base.diskBytes, diskFiles: base.diskFiles)
        func check(_ memory: Int64?, _ deadline: Int?, source: String, kind: ErrorKind) throws(HostError) {
            if let memory {
                // Above the least the run's memory filesystem takes of it, so that its private
                // memory (dataBytes) is positive: 1000 bytes trapped converting it (serve-conformance).
                guard memory > Self.minimumMemoryBytes, memory <= base.maxMemoryBytes else {
                    let allowed =
                        memory <= Self.minimumMemoryBytes
                        ? "only a limit above \(ByteCount.format(Self.minimumMemoryBytes)), the least the run's files in memory take of it"
                        : "at most \(ByteCount.format(base.maxMemoryBytes)) (\(mode.rawValue).maxMemoryBytes)"
                    throw HostError(
                        kind,
                        "\(source) asks for a memory limit of \(ByteCount.format(memory)) in \(mode.rawValue) mode; the policy allows \(allowed)",
                        details: [
                            "limit": "memoryBytes", "requested": .int(memory), "minimum": .int(Self.minimumMemoryBytes + 1),
                            "maximum": .int(base.maxMemoryBytes),
                        ])
                }
                limits.memoryBytes = memory
            }
            if let deadline {
                guard deadline > 0, deadline <= base.maxDeadlineMs else {
                    throw HostError(
                        kind,
                        "\(source) asks for a deadline of \(deadline) ms in \(mode.rawValue) mode; the policy allows \(deadline <= 0 ? "only a positive deadline" : "at most \(base.maxDeadlineMs) ms") (\(mode.rawValue).maxDeadlineMs)",
                        details: ["limit": "deadlineMs", "requested": .int(Int64(deadline)), "maximum": .int(Int64(base.maxDeadlineMs))])
                }
                limits.deadlineMs = deadline
                limits.maxExtendedDeadlineMs = max(limits.maxExtendedDeadlineMs, deadline)
            }
        }

        let fromManifest = mode == .extension ? manifest?.extension : manifest?.inApp
        try check(fromManifest?.memoryBytes, fromManifest?.deadlineMs, source: "the manifest \(manifestFile)", kind: .configurationError)
        try check(memoryOverride, deadlineOverride, source: "the command line", kind: .invalidIntent)
        // A deadline given on the command line is a cap: progress reports do not extend it.
        if deadlineOverride != nil { limits.maxExtendedDeadlineMs = limits.deadlineMs }
        return limits
    }
}
