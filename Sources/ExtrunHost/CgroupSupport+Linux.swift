import ExtrunSystem
import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// Whether the host can put a plugin in a cgroup v2 group with a `memory.max`.
///
/// Only a *delegated* group is used: a cgroup v2 directory that ops hand to
/// extrun (policy `cgroup`, or the `EXTRUN_CGROUP` environment variable), whose
/// `cgroup.controllers` offers `memory`. The host never creates groups in a
/// hierarchy it was not given (on machines where the v1 hierarchies belong to
/// the system's supervisor, that would be trespassing).
public enum CgroupSupport: Sendable, Equatable {
    case available(URL)
    case unavailable(String)

    /// Looks at `directory` (the configured delegation), using `fileSystemRoot`
    /// as `/` so that tests can lay out a fake cgroup tree.
    public static func detect(directory: String?, mountInfo: String) -> CgroupSupport {
        let cgroup2Mounts = mountInfo.split(separator: "\n").compactMap { line -> String? in
            // "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw"
            let parts = line.split(separator: " ")
            guard let dash = parts.firstIndex(of: "-"), dash + 1 < parts.count, parts[dash + 1] == "cgroup2", parts.count > 4 else {
                return nil
            }
            return String(parts[4])
        }
        guard let directory, !directory.isEmpty else {
            let where_ = cgroup2Mounts.isEmpty ? "no cgroup v2 hierarchy is mounted" : "cgroup v2 is mounted at \(cgroup2Mounts.joined(separator: ", "))"
            return .unavailable("no delegated cgroup is configured (policy \"cgroup\" or EXTRUN_CGROUP); \(where_)")
        }
        guard cgroup2Mounts.contains(where: { directory == $0 || directory.hasPrefix($0 + "/") }) else {
            return .unavailable("\(directory) is not inside a cgroup v2 hierarchy (mounted: \(cgroup2Mounts.isEmpty ? "none" : cgroup2Mounts.joined(separator: ", ")))")
        }
        let url = URL(fileURLWithPath: directory, isDirectory: true)
        guard let controllers = try? String(contentsOf: url.appendingPathComponent("cgroup.controllers"), encoding: .utf8) else {
            return .unavailable("cannot read \(directory)/cgroup.controllers")
        }
        guard controllers.split(whereSeparator: { $0 == " " || $0 == "\n" }).contains("memory") else {
            return .unavailable("\(directory) has no memory controller (controllers: \(controllers.trimmingCharacters(in: .whitespacesAndNewlines)))")
        }
        guard access(directory, W_OK) == 0 else {
            return .unavailable("\(directory) is not writable by this user")
        }
        return .available(url)
    }

    /// Detection for this process, done once per configured directory (it reads /proc/self/mountinfo).
    public static func detectHere(configured: String?) -> CgroupSupport {
        let key = configured ?? ProcessInfo.processInfo.environment["EXTRUN_CGROUP"] ?? ""
        if let known = detected.withLockedValue({ $0[key] }) { return known }
        let result = detectUncached(configured: configured)
        detected.withLockedValue { $0[key] = result }
        return result
    }

    private static let detected = NIOLockedValueBox<[String: CgroupSupport]>([:])

    static func detectUncached(configured: String?) -> CgroupSupport {
        let mountInfo = cgroup2MountLines()
        let directory = configured ?? ProcessInfo.processInfo.environment["EXTRUN_CGROUP"]
        return detect(directory: directory, mountInfo: mountInfo)
    }

    /// The lines of /proc/self/mountinfo that mention cgroup2 (all `detect` looks at),
    /// read and picked with plain reads and byte comparisons: Foundation's
    /// `String(contentsOfFile:)` and a split of every line cost a cold run more
    /// (docs/benchmarks.md, "Costs the source's comments point to").
    static func cgroup2MountLines() -> String {
        let fd = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return "" }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 << 10)
        while true {
            let count = (try? SystemCall.read(fd, into: &chunk)) ?? 0
            if count == 0 { break }
            bytes.append(contentsOf: chunk[0..<count])
        }
        let needle = Array("cgroup2".utf8)
        return bytes.split(separator: 0x0A).filter { $0.firstRange(of: needle) != nil }
            .map { String(decoding: $0, as: UTF8.self) }.joined(separator: "\n")
    }

    public var description: String {
        switch self {
        case .available(let url): "cgroup v2 memory.max in \(url.path)"
        case .unavailable(let reason): "no cgroup: \(reason)"
        }
    }
}

/// One run's cgroup: created with its memory.max, joined by the plugin before exec, removed after.
final class CgroupRun {
    let directory: URL
    let procsFD: Int32

    init?(parent: URL, memoryBytes: Int64) {
        let name = "extrun-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let directory = parent.appendingPathComponent(name, isDirectory: true)
        guard mkdir(directory.path, 0o755) == 0 else { return nil }
        // Make sure the parent hands the memory controller to its children.
        Self.write("+memory", to: parent.appendingPathComponent("cgroup.subtree_control"))
        guard Self.write(String(memoryBytes), to: directory.appendingPathComponent("memory.max")) else {
            rmdir(directory.path)
            return nil
        }
        Self.write("0", to: directory.appendingPathComponent("memory.swap.max"))
        let fd = open(directory.appendingPathComponent("cgroup.procs").path, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else {
            rmdir(directory.path)
            return nil
        }
        self.directory = directory
        self.procsFD = fd
    }

    /// The group's peak memory (memory.peak), if the kernel has it.
    var peakBytes: Int64? {
        (try? String(contentsOf: directory.appendingPathComponent("memory.peak"), encoding: .utf8))
            .flatMap { Int64($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
    }

    /// How many times the kernel's OOM killer acted in the group.
    var oomKills: Int {
        guard let events = try? String(contentsOf: directory.appendingPathComponent("memory.events"), encoding: .utf8) else { return 0 }
        for line in events.split(separator: "\n") where line.hasPrefix("oom_kill ") {
            return Int(line.dropFirst("oom_kill ".count)) ?? 0
        }
        return 0
    }

    func remove() {
        close(procsFD)
        rmdir(directory.path)
    }

    @discardableResult
    static func write(_ text: String, to url: URL) -> Bool {
        let fd = open(url.path, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return text.withCString { Glibc.write(fd, $0, strlen($0)) } >= 0
    }
}
