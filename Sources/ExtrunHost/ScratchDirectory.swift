import CExtrunLinux
import ExtrunSystem
import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// Each plugin process's own directory (its HOME and TMPDIR), made before the launch and removed after it.
///
/// Scratch directories are made in a folder of extrun's own in `$TMPDIR` (or /tmp),
/// `extrun-scratch-UID` (UID: the host's effective uid; mode 711 for root, whose plugins
/// have other uids and must reach their own, 700 otherwise; removed when its last scratch
/// directory goes), so that a host's sweep of killed hosts' folders lists only extrun's
/// entries: listing a crowded /tmp (3,084 entries) cost ~0.9 ms of CPU per `extrun handle`.
/// Should that folder belong to someone else or be writable by others (another user made
/// it first, say), scratch directories are made in `$TMPDIR` itself, as before.
enum ScratchDirectory {
    /// Scratch directories are named `extrun-run-l-XXXXXX`; each is locked (`flock`, held
    /// on a descriptor of the host's, and of its supervisors, which inherit it) for as long
    /// as its run's host lives. A killed host leaves its folder; the next host to make one
    /// in the same place removes every such folder whose lock nobody holds.
    static let prefix = "extrun-run-l-"
    /// What one is called from its making to its lock.
    static let unlockedPrefix = "extrun-new-"
    /// The folder of one user's scratch directories in `$TMPDIR`: this, then the uid.
    static let folderPrefix = "extrun-scratch-"
    /// The lock descriptor of each scratch directory of this process's, by path.
    private static let locks = NIOLockedValueBox<[String: Int32]>([:])
    /// The folders this process has swept already.
    private static let swept = NIOLockedValueBox<Set<String>>([])

    /// A new directory (mode 700) in extrun's folder under `$TMPDIR` (or /tmp) that belongs
    /// to the plugin's user: when the host is root, it is handed over to the plugin's uid and gid.
    static func create(owner: PluginCredentials? = nil) throws(HostError) -> URL {
        let base = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        // Another host of this user removes the folder when it empties it: then it is made again.
        var attempts = 0
        while true {
            guard let (folder, folderFD) = openFolder(in: base) else {
                throw HostError(.internalError, "cannot open \(base) to make a scratch directory in it: \(SystemCall.lastReason)")
            }
            defer { close(folderFD) }
            if swept.withLockedValue({ $0.insert(folder).inserted }) { sweep(folder) }
            switch make(in: folder, folderFD: folderFD, owner: owner) {
            case .made(let url): return url
            case .failed(let error, let code):
                attempts += 1
                guard code == ENOENT, attempts < 4 else { throw error }
            }
        }
    }

    private enum Made {
        case made(URL)
        /// The error, and its errno.
        case failed(HostError, Int32)
    }

    /// Extrun's folder in `base` (made if missing), checked to be this user's and writable
    /// by no one else, and a descriptor of it; `base` itself when that check fails.
    private static func openFolder(in base: String) -> (String, Int32)? {
        let uid = geteuid()
        let folder = "\(base)/\(folderPrefix)\(uid)"
        // Root's plugins have uids of their own: they must be able to enter (not list) it.
        let mode: mode_t = uid == 0 ? 0o711 : 0o700
        if mkdir(folder, mode) == 0 || errno == EEXIST {
            let fd = open(folder, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            var info = stat()
            if fd >= 0, fstat(fd, &info) == 0, info.st_uid == uid, info.st_mode & 0o022 == 0 {
                // (The umask may have taken the others' x of a folder just made.)
                if info.st_mode & 0o777 != mode { _ = fchmod(fd, mode) }
                return (folder, fd)
            }
            if fd >= 0 { close(fd) }
        }
        let fd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        return fd >= 0 ? (base, fd) : nil
    }

    /// A scratch directory in `folder`, by descriptor: made under another name, locked,
    /// then renamed, so a sweep never sees one unlocked. (errno is ENOENT when the folder
    /// was removed meanwhile: the caller makes it again.)
    private static func make(in folder: String, folderFD: Int32, owner: PluginCredentials?) -> Made {
        var suffix = ""
        var made = false
        for _ in 0..<100 {
            suffix = randomSuffix()
            if mkdirat(folderFD, unlockedPrefix + suffix, 0o700) == 0 {
                made = true
                break
            }
            if errno != EEXIST { break }
        }
        guard made else {
            let saved = errno
            return .failed(HostError(.internalError, "cannot create a scratch directory under \(folder): \(SystemCall.reason(saved))"), saved)
        }
        let madeName = unlockedPrefix + suffix
        let name = prefix + suffix
        let lock = openat(folderFD, madeName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard lock >= 0, flock(lock, LOCK_EX | LOCK_NB) == 0, renameat(folderFD, madeName, folderFD, name) == 0 else {
            let saved = errno
            if lock >= 0 { close(lock) }
            unlinkat(folderFD, madeName, AT_REMOVEDIR)
            return .failed(HostError(.internalError, "cannot lock the scratch directory \(folder)/\(madeName): \(SystemCall.reason(saved))"), saved)
        }
        let path = "\(folder)/\(name)"
        if let owner, owner.dropsPrivileges, fchown(lock, owner.uid, owner.gid) != 0 {
            let saved = errno
            unlinkat(folderFD, name, AT_REMOVEDIR)
            close(lock)
            return .failed(HostError(.internalError, "cannot give the scratch directory \(path) to the plugin's user (uid \(owner.uid)): \(SystemCall.reason(saved))"), saved)
        }
        locks.withLockedValue { $0[path] = lock }
        return .made(URL(fileURLWithPath: path, isDirectory: true))
    }

    /// Six characters of [A-Za-z0-9], as mkdtemp's.
    private static func randomSuffix() -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789".utf8)
        var generator = SystemRandomNumberGenerator()
        return String(decoding: (0..<6).map { _ in alphabet[Int(generator.next(upperBound: UInt64(alphabet.count)))] }, as: UTF8.self)
    }

    /// The folder a scratch directory's run hides from the plugin: `$TMPDIR` (other runs'
    /// scratch directories, the host's temporary files), above extrun's own folder.
    static func hiddenFolder(of scratch: URL) -> URL {
        let parent = scratch.deletingLastPathComponent()
        return parent.lastPathComponent.hasPrefix(folderPrefix) ? parent.deletingLastPathComponent() : parent
    }

    /// The names in `base` that start like a scratch directory's, read with readdir and
    /// compared as bytes: every `extrun handle` sweeps once (extrun's own folder, but
    /// `$TMPDIR` itself where that folder cannot be had, which can hold thousands of entries).
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

    /// Removes the scratch directories in `base` whose host is gone (their lock is free).
    /// Returns how many it removed.
    @discardableResult
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
        if !failed, let lock = locks.withLockedValue({ $0.removeValue(forKey: url.path) }) { close(lock) }
        guard failed else {
            // Extrun's folder goes with its last scratch directory (rmdir fails while another
            // run's is there; a host about to make one in it then makes the folder again).
            let folder = url.deletingLastPathComponent()
            if folder.lastPathComponent.hasPrefix(folderPrefix) { rmdir(folder.path) }
            return nil
        }
        return "\(url.path): \(String(decoding: failure.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))"
    }
}
