import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What the host reads from /proc outside the plugin's memory sampling
/// (`MemorySampler`) and the cgroup detection (`CgroupSupport`).
enum ProcFS {
    /// This process's executable (the link /proc/self/exe), or nil when it cannot be read.
    static func ownExecutable() -> String? {
        try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
    }

    /// Whether the process `pid` exists and is neither a zombie nor dead (the state field of
    /// /proc/PID/stat, after the command's closing parenthesis).
    static func isRunning(_ pid: pid_t) -> Bool {
        guard pid > 0, let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return false }
        let state = stat[stat.index(after: close)...].drop(while: { $0 == " " }).first
        return state != "Z" && state != "X" && state != "x"
    }
}
