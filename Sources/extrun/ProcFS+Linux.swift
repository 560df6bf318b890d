import Foundation

/// What the command line reads from /proc.
enum ProcFS {
    /// This process's executable (the link /proc/self/exe), or nil when it cannot be read.
    static func ownExecutable() -> String? {
        try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
    }
}
