import CExtrunStoreShims
import ExtrunProtocol
import ExtrunSystem
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// How `BookmarkAccess` resolves paths beneath a bookmark's target (`openat2` with
/// `RESOLVE_BENEATH`, the target checked against its recorded identity), walks folders,
/// and words its results and errors.
extension BookmarkAccess {
    // MARK: - Paths

    /// The components of a relative path; [] is the bookmark's target itself.
    /// `..` and absolute paths are refused here, before the kernel's own check.
    func components(_ path: String) throws -> [String] {
        if path.utf8.contains(0) { throw error(.invalidPath, "a path must not contain NUL bytes", path) }
        if path.utf8.count > StoreLimits.maxPathBytes {
            throw error(.invalidPath, "the path is over \(StoreLimits.maxPathBytes) bytes", path)
        }
        if path.hasPrefix("/") {
            throw error(
                .pathEscape, "'\(path)' is an absolute path; paths are relative to bookmark '\(name)' and cannot leave it", path)
        }
        let parts = path.split(separator: "/", omittingEmptySubsequences: true).map(String.init).filter { $0 != "." }
        if parts.contains("..") {
            throw error(.pathEscape, "'\(path)' contains '..'; paths cannot leave bookmark '\(name)'", path)
        }
        if let long = parts.first(where: { $0.utf8.count > 255 }) {
            throw error(.invalidPath, "the name '\(long.prefix(40))…' is over 255 bytes", path)
        }
        return parts
    }

    func requireRoot(_ parts: [String], _ path: String) throws {
        if !parts.isEmpty {
            throw error(.invalidPath, "bookmark '\(name)' is a file: use the empty path for it, not '\(path)'", path)
        }
    }

    func requireWritable(_ record: BookmarkRecord, _ path: String) throws {
        if record.readOnly {
            throw error(.readOnly, "bookmark '\(name)' of owner '\(owner)' is read-only: '\(path)' was not changed", path)
        }
    }

    /// The folder root for move, trash and new folders, which work on entries inside a folder bookmark only.
    func openWritableFolderRoot(_ record: BookmarkRecord, _ parts: [String], _ path: String) throws -> Int32 {
        guard record.kind == .folder else {
            throw error(.wrongType, "bookmark '\(name)' is a file: only reading and writing it are possible", path)
        }
        if parts.isEmpty { throw error(.invalidPath, "the bookmark's folder itself cannot be moved, trashed or created", path) }
        return try openFolderRoot(record)
    }

    /// The bookmark's folder (O_PATH), checked to be the recorded one.
    func openFolderRoot(_ record: BookmarkRecord) throws -> Int32 {
        let fd = Glibc.open(record.lastKnownPath, LinuxABI.O_PATH | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw rootFailure(record, errno) }
        let info = try? FileOps.status(fd)
        guard let info, Bookmarks.matches(record, info) else {
            close(fd)
            throw stale(record, .replaced)
        }
        return fd
    }

    /// For a file bookmark: its folder (open for reading), its name, and its
    /// current `stat`, checked to be the recorded file.
    func openFileParent(_ record: BookmarkRecord) throws -> (Int32, String, FileStatus) {
        let url = URL(fileURLWithPath: record.lastKnownPath)
        let parent = url.deletingLastPathComponent().path
        let leaf = url.lastPathComponent
        let fd = Glibc.open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { throw rootFailure(record, errno) }
        let info: FileStatus?
        do {
            info = try FileOps.status(in: fd, leaf)
        } catch {
            close(fd)
            throw failure(error, "")
        }
        guard let info else {
            close(fd)
            throw stale(record, .missing)
        }
        guard Bookmarks.matches(record, info) else {
            close(fd)
            throw stale(record, .replaced)
        }
        return (fd, leaf, info)
    }

    func rootFailure(_ record: BookmarkRecord, _ code: Int32) -> StoreError {
        switch code {
        case ENOENT, ENOTDIR: return stale(record, .missing)
        default:
            return StoreError(
                .ioError, "cannot open bookmark '\(name)' at \(record.lastKnownPath): \(SystemCall.reason(code))",
                details: ["owner": .string(owner), "bookmark": .string(name), "lastKnownPath": .string(record.lastKnownPath)])
        }
    }

    /// `openat2(dirfd, parts, flags)` beneath `dirfd`: no `..` out of it, no absolute symlinks, no magic links.
    func openBeneath(_ dirfd: Int32, _ parts: [String], _ flags: Int32, _ path: String, noSymlinks: Bool = false) throws -> Int32 {
        let relative = parts.isEmpty ? "." : parts.joined(separator: "/")
        var resolve = LinuxABI.RESOLVE_BENEATH | LinuxABI.RESOLVE_NO_MAGICLINKS
        if noSymlinks { resolve |= LinuxABI.RESOLVE_NO_SYMLINKS }
        switch StoreShims.openat2(dirfd, relative, flags: flags, resolve: resolve) {
        case .success(let fd):
            try refuseHome(fd, path)
            return fd
        case .failure(let error): throw failure(error, path)
        }
    }

    /// A bookmark of a folder that holds extrun's home (say, the user's home folder)
    /// must not reach the store, the keys, the policy, the installed plugins or other
    /// owners' containers and trash: what was opened is closed and refused when it is
    /// in the home, unless it is in the bookmark's owner's own container.
    func refuseHome(_ fd: Int32, _ path: String) throws {
        guard let opened = ProcFS.path(of: fd) else { return }
        // The home and the container are found with the process's rights (the creator may
        // not be able to look into the home, and a home not found must not skip the check).
        let (homeFound, container) = try asService { () -> (String?, String) in
            guard let home = realpath(store.homePath, nil) else { return (nil, "") }
            defer { free(home) }
            return (String(cString: home), ContainerMap.canonicalContainer(home: store.homePath, owner: owner))
        }
        guard let homePath = homeFound else { return }
        func inside(_ folder: String) -> Bool { opened == folder || opened.hasPrefix(folder + "/") }
        if inside(homePath) && !inside(container) {
            close(fd)
            throw error(
                .pathEscape,
                "'\(path)' leads into extrun's own home (\(homePath): the store, the owners' keys, the policy), which no bookmark reaches",
                path)
        }
    }

    /// The folder holding the last component (open for reading, resolved beneath `root`) and that component.
    func openParent(_ root: Int32, _ parts: [String], _ path: String) throws -> (Int32, String) {
        guard let leaf = parts.last else {
            throw error(.invalidPath, "the bookmark's folder itself cannot be changed this way", path)
        }
        let fd = try openBeneath(root, Array(parts.dropLast()), O_RDONLY | O_DIRECTORY, path)
        return (fd, leaf)
    }

    func openTrash(_ trashPath: String) throws -> (Int32, Int32) {
        do throws(SystemCallError) {
            try FileOps.makePrivateDirectory(store.trashDirectory)
            let trashRoot = try FileOps.open(store.trashDirectory, O_RDONLY | O_DIRECTORY)
            defer { close(trashRoot) }
            let ownerDir = try FileOps.openPrivateDirectory(in: trashRoot, Keystore.escape(owner))
            defer { close(ownerDir) }
            let files = try FileOps.openPrivateDirectory(in: ownerDir, "files")
            do throws(SystemCallError) {
                let info = try FileOps.openPrivateDirectory(in: ownerDir, "info")
                return (files, info)
            } catch {
                close(files)
                throw error
            }
        } catch {
            throw StoreError(.ioError, "cannot prepare the trash \(trashPath): \(error.reason)", details: ["file": .string(trashPath)])
        }
    }

    func walk(_ fd: Int32, prefix: String, glob: String?, recursive: Bool, depth: Int, into entries: inout [FileInfo]) throws {
        guard let directory = fdopendir(fd) else {
            let code = errno
            close(fd)
            throw failure(SystemCallError(call: "fdopendir", code: code), prefix)
        }
        defer { closedir(directory) }
        let dirfd = Glibc.dirfd(directory)
        var names: [String] = []
        while true {
            errno = 0
            guard let entry = readdir(directory) else {
                if errno != 0 { throw failure(SystemCallError(call: "readdir", code: errno), prefix) }
                break
            }
            let entryName = withUnsafeBytes(of: entry.pointee.d_name) { bytes in
                String(decoding: bytes.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if entryName != ".", entryName != ".." { names.append(entryName) }
        }
        names.sort { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        for entryName in names {
            let relative = prefix.isEmpty ? entryName : prefix + "/" + entryName
            guard let info = try io(relative, { () throws(SystemCallError) in try FileOps.status(in: dirfd, entryName) }) else {
                continue  // Deleted while listing.
            }
            if glob.map({ fnmatch($0, entryName, FNM_PERIOD) == 0 }) ?? true {
                if entries.count >= StoreLimits.maxListEntries {
                    throw error(
                        .tooLarge,
                        "the listing has more than \(StoreLimits.maxListEntries) entries; list a subfolder, use a glob, or do not recurse",
                        prefix)
                }
                entries.append(fileInfo(relative, info))
            }
            if recursive, info.isDirectory {
                if depth >= 255 { throw error(.tooLarge, "'\(relative)' is nested more than 255 folders deep", relative) }
                let child = try openBeneath(dirfd, [entryName], O_RDONLY | O_DIRECTORY | O_NOFOLLOW, relative, noSymlinks: true)
                try walk(child, prefix: relative, glob: glob, recursive: true, depth: depth + 1, into: &entries)
            }
        }
    }

    // MARK: - Results and errors

    func fileInfo(_ path: String, _ info: FileStatus) -> FileInfo {
        let kind: FileKind =
            info.isRegularFile ? .file : info.isDirectory ? .folder : info.isSymlink ? .symlink : .other
        return FileInfo(path: path, kind: kind, size: info.size, modified: info.modified, permissions: UInt16(info.permissions))
    }

    static func truncated(_ name: String, bytes: Int) -> String {
        var result = ""
        for scalar in name.unicodeScalars {
            if result.utf8.count + String(scalar).utf8.count > bytes { break }
            result.unicodeScalars.append(scalar)
        }
        return result
    }

    func io<T>(_ path: String, _ body: () throws(SystemCallError) -> T) throws -> T {
        do {
            return try body()
        } catch {
            throw failure(error, path)
        }
    }

    func error(_ kind: StoreErrorKind, _ message: String, _ path: String) -> StoreError {
        StoreError(kind, message, details: ["owner": .string(owner), "bookmark": .string(name), "path": .string(path)])
    }

    func stale(_ record: BookmarkRecord, _ reason: StaleReason) -> StoreError {
        let what: String
        switch reason {
        case .missing: what = "nothing is at its last known path \(record.lastKnownPath) (moved or deleted)"
        case .replaced: what = "its last known path \(record.lastKnownPath) now holds another \(record.kind == .folder ? "folder" : "file") than the one bookmarked"
        case .unreachable: what = "its last known path \(record.lastKnownPath) cannot be checked"
        }
        return StoreError(
            .staleBookmark,
            "bookmark '\(name)' of owner '\(owner)' is stale: \(what). The bookmark is kept; refresh it or add it again",
            details: [
                "owner": .string(owner), "bookmark": .string(name), "lastKnownPath": .string(record.lastKnownPath),
                "reason": .string(reason.rawValue),
            ])
    }

    /// A failed system call on `path`, as the error the caller sees.
    func failure(_ failure: SystemCallError, _ path: String) -> StoreError {
        let shown = path.isEmpty ? "the bookmark's \(bookmark.kind == .folder ? "folder" : "file")" : "'\(path)'"
        switch failure.code {
        case EXDEV:
            return error(.pathEscape, "\(shown) leads outside bookmark '\(name)' (through a symbolic link pointing out of it): refused", path)
        case ELOOP:
            return error(.invalidPath, "\(shown): too many levels of symbolic links (a symlink loop, or a link where none may be)", path)
        case ENOENT:
            return error(.notFound, "\(shown) does not exist in bookmark '\(name)'", path)
        case ENOTDIR:
            return error(.wrongType, "a part of \(shown) is not a folder", path)
        case EISDIR:
            return error(.wrongType, "\(shown) is a folder", path)
        case EEXIST:
            return error(.alreadyExists, "\(shown) already exists in bookmark '\(name)'", path)
        case ENAMETOOLONG:
            return error(.invalidPath, "\(shown) is too long", path)
        case ENOSYS:
            return error(.ioError, "this kernel has no openat2(2) (Linux 5.6 or later is needed)", path)
        default:
            return error(.ioError, "\(shown): \(failure.reason) (\(failure.call))", path)
        }
    }
}
