import CExtrunLinux
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Each plugin process's own directory (its HOME and TMPDIR), made before the launch and removed after it.
enum ScratchDirectory {
    /// Scratch directories are named `extrun-run-l-XXXXXX`; each is locked (`flock`, held
    /// on a descriptor of the host's, and of its supervisors, which inherit it) for as long
    /// as its run's host lives. A killed host leaves its folder; the next host to make one
    /// in the same place removes every such folder whose lock nobody holds.
    static let prefix = "extrun-run-l-"
    /// What one is called from its making to its lock.
    static let unlockedPrefix = "extrun-new-"
    /// The lock descriptor of each scratch directory of this process's, by path.
    private static let locks = Mutex<[String: Int32]>([:])
    /// The folders this process has swept already.
    private static let swept = Mutex<Set<String>>([])

    /// A new directory (mode 700) under `$TMPDIR` (or /tmp) that belongs to the
    /// plugin's user: when the host is root, it is handed over to the plugin's uid and gid.
    static func create(owner: PluginCredentials? = nil) throws(HostError) -> URL {
        let base = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        if swept.withLock({ $0.insert(base).inserted }) { sweep(base) }
        // Made under another name, locked, then renamed: a sweep never sees one unlocked.
        var template = Array("\(base)/\(unlockedPrefix)XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else {
            throw HostError(.internalError, "cannot create a scratch directory under \(base): \(String(cString: strerror(errno)))")
        }
        let madePath = String(cString: made)
        let lock = open(madePath, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        let path = "\(base)/\(prefix)\(madePath.suffix(6))"
        guard lock >= 0, flock(lock, LOCK_EX | LOCK_NB) == 0, rename(madePath, path) == 0 else {
            let reason = String(cString: strerror(errno))
            if lock >= 0 { close(lock) }
            rmdir(madePath)
            throw HostError(.internalError, "cannot lock the scratch directory \(madePath): \(reason)")
        }
        if let owner, owner.dropsPrivileges, chown(path, owner.uid, owner.gid) != 0 {
            let reason = String(cString: strerror(errno))
            rmdir(path)
            close(lock)
            throw HostError(.internalError, "cannot give the scratch directory \(path) to the plugin's user (uid \(owner.uid)): \(reason)")
        }
        locks.withLock { $0[path] = lock }
        return URL(fileURLWithPath: path, isDirectory: true)
    }

    /// Removes the scratch directories in `base` whose host is gone (their lock is free).
    /// Returns how many it removed.
    @discardableResult
    /// The names in `base` that start like a scratch directory's, read with readdir and
    /// compared as bytes: every `extrun handle` sweeps once, and `/tmp` can hold thousands
    /// of entries (FileManager's listing of 2,876 cost the whole command ~2 ms here).
    static func candidates(in base: String) -> [String] {
        guard let dir = opendir(base) else { return [] }
        defer { closedir(dir) }
        let prefixes = [Array(prefix.utf8), Array(unlockedPrefix.utf8)]
        var names: [String] = []
        while let entry = readdir(dir) {
            let matches = withUnsafeBytes(of: entry.pointee.d_name) { raw -> Bool in
                prefixes.contains { wanted in wanted.count < raw.count && wanted.indices.allSatisfy { raw[$0] == wanted[$0] } }
            }
            guard matches else { continue }
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            names.append(name)
        }
        return names
    }

    static func sweep(_ base: String) -> Int {
        let names = candidates(in: base)
        var removed = 0
        let now = time(nil)
        for name in names where name.hasPrefix(prefix) || name.hasPrefix(unlockedPrefix) {
            let path = "\(base)/\(name)"
            if name.hasPrefix(unlockedPrefix) {
                // Not locked yet: a live host holds one for microseconds, so only one older
                // than a minute is a killed host's.
                var info = stat()
                guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR, now - info.st_mtim.tv_sec > 60 else { continue }
            }
            // (Never a link; a folder of this process's runs is locked by another descriptor.)
            let fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            guard flock(fd, LOCK_EX | LOCK_NB) == 0 else { continue }
            var failure = [CChar](repeating: 0, count: 512)
            if extrun_remove_tree(path, &failure, failure.count) == 0 { removed += 1 }
        }
        return removed
    }

    /// Removes the directory whatever the plugin left in it, by descriptor (openat and
    /// unlinkat: no path-length limit; symbolic links removed, never followed; folders
    /// the plugin made unreadable opened again first), and checks that it is gone.
    /// Nil, or what could not be removed and why.
    @discardableResult
    static func remove(_ url: URL) -> String? {
        var failure = [CChar](repeating: 0, count: 512)
        let failed = extrun_remove_tree(url.path, &failure, failure.count) != 0
        if !failed, let lock = locks.withLock({ $0.removeValue(forKey: url.path) }) { close(lock) }
        guard failed else { return nil }
        return "\(url.path): \(String(decoding: failure.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))"
    }
}
