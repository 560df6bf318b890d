import Crypto
import ExtrunSystem
import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// Who may change a signed plugin's files: root and the host's own user, no one else
/// (docs/sandbox.md, "Who a plugin is"). A signed plugin is refused when its folder, a
/// folder or file in it, a file it is signed with outside it (an executable through
/// `..`, the file a link leads to), or a folder above any of these, could be changed by
/// another uid:
/// - the plugin's folder, its subfolders and its files: owned by root or the host's uid,
///   with no write bit for group or others;
/// - each folder above them, up to `/`: owned by root or the host's uid, with no write bit
///   for group or others, unless it is sticky (`/tmp`, mode 1777): there no one can rename
///   or remove another user's entry, and the entry below it is held to these rules itself.
public enum PluginFilePermissions {
    static func trustedOwner(_ uid: uid_t) -> Bool { uid == 0 || uid == geteuid() }

    static func octal(_ mode: mode_t) -> String {
        let digits = String(mode & 0o7777, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    /// What is wrong with an entry of the plugin (its folder, a subfolder or a file), or nil.
    static func problem(entry info: stat, path: String) -> PluginSignatureProblem? {
        if !trustedOwner(info.st_uid) {
            return .writableByOthers(
                path: path, mode: octal(info.st_mode),
                reason: "it belongs to uid \(info.st_uid), neither root nor the host's uid \(geteuid()), who can change it (fix: chown it to the host's user or root)")
        }
        if info.st_mode & 0o022 != 0 {
            return .writableByOthers(
                path: path, mode: octal(info.st_mode),
                reason: "its group or other users may write it (fix: chmod go-w '\(path)')")
        }
        return nil
    }

    /// What is wrong with a folder above the plugin, or nil (sticky world-writable folders pass).
    static func problem(ancestor info: stat, path: String) -> PluginSignatureProblem? {
        if !trustedOwner(info.st_uid) {
            return .writableByOthers(
                path: path, mode: octal(info.st_mode),
                reason: "this folder above the plugin belongs to uid \(info.st_uid), neither root nor the host's uid \(geteuid()), who can replace what lies below it (fix: move the plugin, or chown the folder)")
        }
        if info.st_mode & 0o022 != 0 && info.st_mode & S_ISVTX == 0 {
            return .writableByOthers(
                path: path, mode: octal(info.st_mode),
                reason: "this folder above the plugin may be written by its group or other users, who can replace what lies below it (fix: chmod go-w '\(path)', or make it sticky, or move the plugin)")
        }
        return nil
    }

    /// What is wrong with a symbolic link met on the way to the plugin, or nil: its owner
    /// can point it elsewhere at any time (in a sticky folder such as `/tmp`, where anyone
    /// may make one, and which root follows where `fs.protected_symlinks` is 0).
    static func problem(link info: stat, path: String) -> PluginSignatureProblem? {
        guard !trustedOwner(info.st_uid) else { return nil }
        return .writableByOthers(
            path: path, mode: octal(info.st_mode),
            reason: "this symbolic link on the way to the plugin belongs to uid \(info.st_uid), neither root nor the host's uid \(geteuid()), who can point it elsewhere (fix: name the plugin's real path, or replace the link with one of the host's user or root)")
    }

    /// Links followed on the way to a path before it is refused (the kernel's own limit).
    static let maxLinks = 40

    /// Checks the folders above `path` (an absolute path) as the kernel resolves it: component
    /// by component, following each symbolic link met (the last component's too), so that
    /// every folder passed through and every link followed, a link that leads to a link
    /// included, is held to the rules above. The last component itself is the caller's to check.
    static func checkAncestors(of path: String) throws(PluginSignatureProblem) {
        var info = stat()
        if lstat("/", &info) == 0, let problem = problem(ancestor: info, path: "/") { throw problem }
        var current = ""  // the resolved folder so far ("" is `/`)
        var pending = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init).reversed() as [String]
        var links = 0
        while let name = pending.popLast() {
            if name == "." { continue }
            if name == ".." {
                if let slash = current.lastIndex(of: "/") { current = String(current[..<slash]) }
                continue
            }
            let next = current + "/" + name
            // Missing: the open that follows fails and says so.
            guard lstat(next, &info) == 0 else { return }
            if info.st_mode & S_IFMT == S_IFLNK {
                if let problem = problem(link: info, path: next) { throw problem }
                links += 1
                guard links <= maxLinks else { throw .unsupported("\(path) leads through over \(maxLinks) symbolic links") }
                var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
                let count = readlink(next, &target, Int(PATH_MAX))
                guard count > 0 else { return }
                guard let text = String(validating: target[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self) else {
                    throw .unsupported("\(next) is a symbolic link to a path that is not UTF-8, which cannot be checked; point it at the plugin's real path")
                }
                if text.hasPrefix("/") { current = "" }
                pending.append(contentsOf: text.split(separator: "/", omittingEmptySubsequences: true).map(String.init).reversed())
                continue
            }
            // A folder passed through (the last component is not one: the caller checks it).
            if !pending.isEmpty, let problem = problem(ancestor: info, path: next) { throw problem }
            current = next
        }
    }

    /// Checks a program a signed plugin runs that it is not signed with (the interpreter of
    /// its script, outside its folder): the file (where links lead) and the folders and links
    /// on the way to it must be ones only root or the host's user can change, as the
    /// plugin's own files must: whoever could change it would run their code as the plugin.
    public static func checkProgram(_ path: String) throws(PluginSignatureProblem) {
        try checkAncestors(of: path)
        var info = stat()
        guard stat(path, &info) == 0 else { return }  // missing: the launch says so
        if let problem = problem(entry: info, path: path) { throw problem }
    }

    /// Checks a signed plugin's folder (and the folders above it) for writers other than root and the host's uid.
    public static func checkFolder(_ directory: String) throws(PluginSignatureProblem) {
        try checkAncestors(of: directory)
        var info = stat()
        guard stat(directory, &info) == 0 else { throw .unsupported("cannot read the folder \(directory): \(SystemCall.lastReason)") }
        if let problem = problem(entry: info, path: directory) { throw problem }
    }
}

/// A signed plugin's private copy: what runs (docs/sandbox.md, "Who a plugin is").
public struct PinnedPlugin: Sendable, Equatable {
    /// The copy of the plugin's folder.
    public var directory: String
    /// The executable in the copy.
    public var executable: String
}

/// The private copies of signed plugins, under `<home>/cache/plugin-copies/<SHA-256 of
/// the signature file>/`: `plugin/` holds the folder's signed files (and the signature
/// file), `external/<n>/` a signed file outside the folder (an executable reached through
/// `..`). Each file was read once, through a descriptor opened without following a link
/// in its last component, hashed from that descriptor as it was copied, and compared with
/// the signature; its files are then made read-only (0444, or 0555 for an executable one;
/// folders 0755) and the copy is renamed into place in one step. Only the host's user can
/// change it (the home is 0700; a plugin that runs as that user sees it through a read-only
/// bind mount, or may only read it under Landlock),
/// so a later run with the same signature file reuses it without reading the folder's
/// files again, and a file swapped in the folder afterwards is never the one that runs.
public enum PluginCopies {
    /// A copy unused this long is removed (when a new copy is made).
    public static let unusedLifetimeSeconds = 30 * 86_400
    /// A copy's folder time is moved forward when a run finds it older than this.
    static let touchAfterSeconds = 86_400
    /// A half-made copy (a crashed host's) this old is removed.
    static let staleTemporarySeconds = 3_600

    public static func root(home: String) -> String { home + "/cache/plugin-copies" }

    /// Whether `directory` lies in `home`'s copies.
    public static func contains(_ directory: String, home: String) -> Bool {
        directory.hasPrefix(root(home: home) + "/")
    }

    /// Where the plugin runs from in the copy named `name`: `executable` is the catalog's path of it.
    static func pinned(in copy: String, signature: PluginSignature, directory: String, executable: String) -> PinnedPlugin {
        let inside = directory + "/"
        let executablePath: String
        if executable.hasPrefix(inside), !executable.dropFirst(inside.count).split(separator: "/").contains("..") {
            executablePath = copy + "/plugin/" + executable.dropFirst(inside.count)
        } else if let index = signature.files.firstIndex(where: { $0.path.utf8.elementsEqual(executable.utf8) }) {
            executablePath = copy + "/external/\(index)/" + (executable as NSString).lastPathComponent
        } else {
            executablePath = copy + "/plugin/" + (executable as NSString).lastPathComponent
        }
        return PinnedPlugin(directory: copy + "/plugin", executable: executablePath)
    }

    /// The copy of the plugin whose signature file held `signatureData` (digest `digest`),
    /// made now if there is none. The signature itself was checked by the caller.
    static func pin(
        signature: PluginSignature, signatureData: Data, digest: String, directory: String, executable: String, home: String
    ) throws(PluginSignatureProblem) -> PinnedPlugin {
        let rootPath = root(home: home)
        do throws(SystemCallError) {
            try FileOps.makePrivateDirectory(rootPath)
        } catch {
            throw .unsupported("cannot make the folder for plugin copies \(rootPath): \(error.reason)")
        }
        let rootFD = open(rootPath, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard rootFD >= 0 else { throw .unsupported("cannot open \(rootPath): \(SystemCall.lastReason)") }
        defer { close(rootFD) }
        var rootInfo = stat()
        guard fstat(rootFD, &rootInfo) == 0, rootInfo.st_uid == geteuid(), rootInfo.st_mode & 0o022 == 0 else {
            throw .unsupported("\(rootPath) is not the host's own private folder (mode \(PluginFilePermissions.octal(rootInfo.st_mode)), uid \(rootInfo.st_uid)); remove it")
        }
        if try reuse(rootFD: rootFD, name: digest, rootPath: rootPath) {
            return pinned(in: rootPath + "/" + digest, signature: signature, directory: directory, executable: executable)
        }
        try make(signature: signature, signatureData: signatureData, name: digest, rootFD: rootFD, rootPath: rootPath, directory: directory)
        removeUnused(rootFD: rootFD, keeping: digest)
        return pinned(in: rootPath + "/" + digest, signature: signature, directory: directory, executable: executable)
    }

    /// Whether a finished copy `name` is there (a folder of the host's, mode 0755); a copy
    /// in any other state is removed, to be made again.
    private static func reuse(rootFD: Int32, name: String, rootPath: String) throws(PluginSignatureProblem) -> Bool {
        var info = stat()
        guard fstatat(rootFD, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { return false }
        guard info.st_mode & S_IFMT == S_IFDIR, info.st_uid == geteuid(), info.st_mode & 0o7777 == 0o755 else {
            removeTree(in: rootFD, name)
            return false
        }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        if Int(now.tv_sec) - Int(info.st_mtim.tv_sec) > touchAfterSeconds {
            let utimeNow = (1 << 30) - 1  // UTIME_NOW, which Glibc's module does not bring
            var times = [timespec(tv_sec: 0, tv_nsec: utimeNow), timespec(tv_sec: 0, tv_nsec: utimeNow)]
            _ = utimensat(rootFD, name, &times, AT_SYMLINK_NOFOLLOW)
        }
        return true
    }

    /// Copies every signed file into a new temporary folder, hashing what it copies, and
    /// renames the folder to `name` once every digest matched.
    private static func make(
        signature: PluginSignature, signatureData: Data, name: String, rootFD: Int32, rootPath: String, directory: String
    ) throws(PluginSignatureProblem) {
        let temporary = ".tmp-" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
        guard mkdirat(rootFD, temporary, 0o700) == 0 else {
            throw .unsupported("cannot make a copy of the plugin in \(rootPath): \(SystemCall.lastReason)")
        }
        var done = false
        defer { if !done { removeTree(in: rootFD, temporary) } }
        let copyFD = openat(rootFD, temporary, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard copyFD >= 0 else { throw .unsupported("cannot open the copy in \(rootPath): \(SystemCall.lastReason)") }
        defer { close(copyFD) }
        // Folders made (relative to the copy), given their mode at the end.
        var folders: [String] = []
        func folder(_ relative: String) throws(PluginSignatureProblem) -> Int32 {
            var fd = dup(copyFD)
            var path = ""
            for part in relative.split(separator: "/") {
                path += (path.isEmpty ? "" : "/") + part
                let name = String(part)
                if mkdirat(fd, name, 0o700) == 0 {
                    folders.append(path)
                } else if errno != EEXIST {
                    close(fd)
                    throw .unsupported("cannot make \(rootPath)/\(temporary)/\(path): \(SystemCall.lastReason)")
                }
                let next = openat(fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                close(fd)
                guard next >= 0 else { throw .unsupported("cannot open \(rootPath)/\(temporary)/\(path): \(SystemCall.lastReason)") }
                fd = next
            }
            return fd
        }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        for (index, file) in signature.files.enumerated() {
            let source = file.path.hasPrefix("/") ? file.path : directory + "/" + file.path
            let relative = file.path.hasPrefix("/")
                ? "external/\(index)/" + (file.path as NSString).lastPathComponent : "plugin/" + file.path
            try copy(
                source: source, link: file.link != nil, external: file.path.hasPrefix("/"), into: relative, expected: file, folder: folder, buffer: &buffer)
        }
        // The signature file, as it was read and checked.
        let pluginFD = try folder("plugin")
        defer { close(pluginFD) }
        let signatureFD = openat(pluginFD, PluginSignature.fileName, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard signatureFD >= 0 else { throw .unsupported("cannot write the copy's signature file: \(SystemCall.lastReason)") }
        do throws(SystemCallError) {
            defer { close(signatureFD) }
            try SystemCall.writeAll(signatureFD, signatureData)
            _ = fchmod(signatureFD, 0o444)
            try FileOps.fsync(signatureFD)
        } catch {
            throw .unsupported("cannot write the copy's signature file: \(error.reason)")
        }
        for path in folders.reversed() {
            _ = fchmodat(copyFD, path, 0o755, 0)
        }
        try? FileOps.fsync(copyFD)
        // 0755 last: what marks a finished copy (`reuse`).
        _ = fchmod(copyFD, 0o755)
        do throws(SystemCallError) {
            try StoreShims.renameat2(rootFD, temporary, rootFD, name, flags: LinuxABI.RENAME_NOREPLACE)
            done = true
            try? FileOps.fsync(rootFD)
        } catch where error.code == EEXIST || error.code == ENOTEMPTY {
            // Another run made it first: theirs is used (the same signature's files, checked as these were).
            guard try reuse(rootFD: rootFD, name: name, rootPath: rootPath) else {
                throw .unsupported("another copy of the plugin appeared at \(rootPath)/\(name) while this one was made, and it is not a finished copy; run again")
            }
        } catch {
            throw .unsupported("cannot put the plugin's copy in place at \(rootPath)/\(name): \(error.reason)")
        }
    }

    /// Copies one signed file: opened once (not through a link in its last component, but
    /// where a signed link leads), checked for its owner and mode, hashed as it is copied.
    private static func copy(
        source: String, link: Bool, external: Bool, into relative: String, expected: PluginSignature.File,
        folder: (String) throws(PluginSignatureProblem) -> Int32, buffer: inout [UInt8]
    ) throws(PluginSignatureProblem) {
        var path = source
        if link {
            // Where the signed link leads (the signature's `link` was compared by the check before).
            guard let real = realpath(source, nil) else { throw .fileChanged(path: source, reason: "it leads nowhere now") }
            path = String(cString: real)
            free(real)
        }
        if link || external { try PluginFilePermissions.checkAncestors(of: path) }
        // O_NONBLOCK: a named pipe put there meanwhile does not block the open (it is refused below).
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            let reason = errno == ELOOP ? "it is a symbolic link now" : "it cannot be read (\(SystemCall.lastReason))"
            throw .fileChanged(path: source, reason: reason)
        }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
            throw .fileChanged(path: source, reason: "it is not a regular file now")
        }
        if let problem = PluginFilePermissions.problem(entry: info, path: path) { throw problem }
        let parent = (relative as NSString).deletingLastPathComponent
        let folderFD = try folder(parent)
        defer { close(folderFD) }
        let name = (relative as NSString).lastPathComponent
        let out = openat(folderFD, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard out >= 0 else { throw .unsupported("cannot write the copy of \(source): \(SystemCall.lastReason)") }
        defer { close(out) }
        var hasher = SHA256()
        var size: Int64 = 0
        while true {
            let count: Int
            do throws(SystemCallError) {
                count = try SystemCall.read(fd, into: &buffer)
            } catch {
                throw .fileChanged(path: source, reason: "it cannot be read (\(error.reason))")
            }
            if count == 0 { break }
            size += Int64(count)
            guard size <= expected.size else { break }
            hasher.update(data: buffer[0..<count])
            do throws(SystemCallError) {
                try SystemCall.writeAll(out, buffer[0..<count])
            } catch {
                throw .unsupported("cannot write the copy of \(source): \(error.reason)")
            }
        }
        let digest = PluginFiles.hex(hasher.finalize())
        guard size == expected.size, digest == expected.sha256.lowercased() else {
            throw .fileChanged(
                path: source,
                reason: "its contents changed while it was checked (\(size) bytes, SHA-256 \(size > expected.size ? "not computed" : digest); signed: \(expected.size) bytes, \(expected.sha256))")
        }
        _ = fchmod(out, info.st_mode & 0o111 != 0 ? 0o555 : 0o444)
        try? FileOps.fsync(out)
    }

    /// Removes copies unused for `unusedLifetimeSeconds` and half-made ones over an hour old.
    private static func removeUnused(rootFD: Int32, keeping: String) {
        let listFD = openat(rootFD, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard listFD >= 0, let dir = fdopendir(listFD) else {
            if listFD >= 0 { close(listFD) }
            return
        }
        defer { closedir(dir) }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self) }
            if name == "." || name == ".." || name == keeping { continue }
            names.append(name)
        }
        for name in names {
            var info = stat()
            guard fstatat(rootFD, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
            let age = Int(now.tv_sec) - Int(info.st_mtim.tv_sec)
            if age > (name.hasPrefix(".tmp-") ? staleTemporarySeconds : unusedLifetimeSeconds) {
                removeTree(in: rootFD, name)
            }
        }
    }

    /// Removes `name` in `dirfd` and all it holds (a folder made writable first); links are not followed.
    static func removeTree(in dirfd: Int32, _ name: String) {
        if unlinkat(dirfd, name, 0) == 0 { return }
        let fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return }
        _ = fchmod(fd, 0o700)
        if let listFD = Optional(dup(fd)), listFD >= 0, let dir = fdopendir(listFD) {
            var names: [String] = []
            while let entry = readdir(dir) {
                let bytes = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.prefix { $0 != 0 }) }
                let child = String(decoding: bytes, as: UTF8.self)
                if child == "." || child == ".." { continue }
                names.append(child)
            }
            closedir(dir)
            for child in names { removeTree(in: fd, child) }
        }
        close(fd)
        _ = unlinkat(dirfd, name, AT_REMOVEDIR)
    }
}
