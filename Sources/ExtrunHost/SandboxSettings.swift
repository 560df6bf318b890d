import CExtrunLinux
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What this machine lets the sandbox use, detected once per process.
public struct SandboxCapabilities: Sendable {
    /// seccomp user notification: forbidden calls are reported by name.
    public var seccompNotify: Bool
    public var isRoot: Bool

    public static let current = SandboxCapabilities(seccompNotify: extrun_seccomp_notify_supported() != 0, isRoot: geteuid() == 0)
}

/// The sandbox for one run: limits, filter and namespaces, in the form the launcher takes.
struct SandboxSettings {
    var limits = extrun_limits()
    var seccomp = true
    var seccompNotify = true
    var namespaces: Int32 = 0
    var pidMax = 0
    var cgroupProcsFD: Int32 = -1

    init(policy: SandboxPolicy, limits effective: EffectiveLimits, capabilities: SandboxCapabilities, cgroup: CgroupRun?) {
        limits.data_bytes = UInt64(effective.memoryBytes)
        limits.stack_bytes = UInt64(effective.stackBytes)
        limits.open_files = UInt64(policy.openFiles)
        limits.processes = UInt64(policy.processes)
        limits.file_bytes = UInt64(policy.fileSizeBytes)
        // A CPU-time backstop well past the wall-clock deadline (which is what normally ends a run).
        limits.cpu_seconds = UInt64(effective.maxExtendedDeadlineMs / 1000 + 30)
        seccomp = policy.seccomp
        seccompNotify = capabilities.seccompNotify
        var flags: Int32 = 0
        if policy.namespaces.pid { flags |= Int32(EXTRUN_NS_PID) }
        if policy.namespaces.network { flags |= Int32(EXTRUN_NS_NET) }
        if policy.namespaces.ipc { flags |= Int32(EXTRUN_NS_IPC) }
        namespaces = flags
        pidMax = policy.pidNamespaceMaxPids
        cgroupProcsFD = cgroup?.procsFD ?? -1
    }

    /// For `--verbose`: what is in force.
    static func describe(namespaces active: Int32) -> String {
        var names: [String] = []
        if active & Int32(EXTRUN_NS_PID) != 0 { names.append("pid") }
        if active & Int32(EXTRUN_NS_NET) != 0 { names.append("network") }
        if active & Int32(EXTRUN_NS_IPC) != 0 { names.append("ipc") }
        return names.isEmpty ? "none (not permitted here; descendants are tracked as a subreaper instead)" : names.joined(separator: ", ")
    }
}
