import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Temporary files named after the process that writes them (`.<prefix>-<pid>-<random>.tmp`),
/// so that a later run removes those of killed runs and never those of a run still going
/// (a concurrent migration or export writing into the same folder).
enum ProcessTemporaries {
    static func name(_ prefix: String) -> String {
        ".\(prefix)-\(getpid())-\(String(UInt64.random(in: 0...UInt64.max), radix: 16)).tmp"
    }

    /// Removes `folder`'s temporaries of `prefix` whose process is gone, and those of older
    /// extruns, which named no process. Returns how many were removed.
    @discardableResult
    static func removeStale(in folder: String, prefix: String) -> Int {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return 0 }
        let start = "." + prefix + "-"
        var removed = 0
        for entry in entries where entry.hasPrefix(start) && entry.hasSuffix(".tmp") {
            let middle = entry.dropFirst(start.count).dropLast(4)
            if let dash = middle.firstIndex(of: "-"), let pid = pid_t(middle[..<dash]), pid > 0 {
                if kill(pid, 0) == 0 || errno == EPERM { continue }
            }
            if unlink(folder + "/" + entry) == 0 { removed += 1 }
        }
        return removed
    }
}
