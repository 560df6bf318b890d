import CExtrunLinux
import ExtrunProtocol
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The run's deadline, which progress reports may push back (in extension mode, up to a maximum).
final class Deadline: @unchecked Sendable {
    private(set) var instant: UInt64 = 0
    private var start: UInt64 = 0
    private var stepNs: UInt64 = 0
    private var maximum: UInt64 = 0
    /// Time spent waiting for a person (prompts), which does not count against the plugin.
    private(set) var excludedNs: UInt64 = 0

    /// Runs `body` (a question to a person) with the clock stopped for the plugin.
    func excluding<T>(_ body: () throws -> T) rethrows -> T {
        let began = MonotonicClock.now()
        defer {
            let spent = MonotonicClock.now() - began
            excludedNs += spent
            instant += spent
            maximum += spent
        }
        return try body()
    }

    func set(start: UInt64, limits: EffectiveLimits) {
        self.start = start
        stepNs = UInt64(limits.deadlineMs) * 1_000_000
        instant = start + stepNs
        maximum = start + UInt64(max(limits.maxExtendedDeadlineMs, limits.deadlineMs)) * 1_000_000
    }

    /// Pushes the deadline to a full period from now, within the maximum. Returns whether it moved.
    func extend() -> Bool {
        let wanted = min(MonotonicClock.now() + stepNs, maximum)
        guard wanted > instant else { return false }
        instant = wanted
        return true
    }

    /// The deadline in milliseconds from launch, not counting time spent waiting for a person.
    var currentMs: Int { Int((instant - start - excludedNs) / 1_000_000) }
}

/// Lines runtimes print when an allocation fails (under RLIMIT_DATA, malloc returns NULL).
enum MemoryFailureText {
    static let patterns = [
        "could not allocate memory", "cannot allocate memory", "out of memory", "memoryerror", "bad_alloc",
        "failed to allocate", "allocation failed",
    ]

    static func matches(_ line: String) -> Bool {
        let lower = line.lowercased()
        return patterns.contains { lower.contains($0) }
    }
}

enum PluginEnvironment {
    /// Variables a plugin inherits from the host's environment; everything else is scrubbed.
    static let inherited = ["LANG", "LC_ALL", "LC_CTYPE", "TZ"]
}

enum ScratchDirectory {
    /// A new directory (mode 700) under `$TMPDIR` (or /tmp) that belongs to the
    /// plugin's user: when the host is root, it is handed over to the plugin's uid and gid.
    static func create(owner: PluginIdentity? = nil) throws(HostError) -> URL {
        let base = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array("\(base)/extrun-run-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else {
            throw HostError(.internalError, "cannot create a scratch directory under \(base): \(String(cString: strerror(errno)))")
        }
        let path = String(cString: made)
        if let owner, owner.dropsPrivileges, chown(path, owner.uid, owner.gid) != 0 {
            let reason = String(cString: strerror(errno))
            rmdir(path)
            throw HostError(.internalError, "cannot give the scratch directory \(path) to the plugin's user (uid \(owner.uid)): \(reason)")
        }
        return URL(fileURLWithPath: path, isDirectory: true)
    }

    /// Removes the directory whatever the plugin left in it, by descriptor (openat and
    /// unlinkat: no path-length limit; symbolic links removed, never followed; folders
    /// the plugin made unreadable opened again first), and checks that it is gone.
    /// Nil, or what could not be removed and why.
    @discardableResult
    static func remove(_ url: URL) -> String? {
        var failure = [CChar](repeating: 0, count: 512)
        guard extrun_remove_tree(url.path, &failure, failure.count) != 0 else { return nil }
        return "\(url.path): \(String(decoding: failure.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))"
    }
}
