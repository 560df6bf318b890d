import CExtrunStoreShims
import ExtrunProtocol
import ExtrunSystem
import Foundation

#if canImport(Glibc)
import Glibc
#endif

public enum FileKind: String, Codable, Sendable {
    case file
    case folder
    case symlink
    /// A device, socket or FIFO: listed, never read or written.
    case other
}

/// A file or folder inside a bookmark.
public struct FileInfo: Sendable, Equatable {
    /// Relative to the bookmark's target; "" is the target itself.
    public var path: String
    public var kind: FileKind
    public var size: Int64
    public var modified: Date
    /// Permission bits, e.g. 0o644.
    public var permissions: UInt16
}

/// Where `BookmarkAccess.trash` put something.
public struct TrashedItem: Sendable, Equatable {
    /// The path it had inside the bookmark.
    public var path: String
    /// Its absolute path before it was trashed.
    public var originalPath: String
    /// Its absolute path in the trash: `<home>/trash/<owner>/files/<id>`.
    public var trashPath: String
    /// `<home>/trash/<owner>/info/<id>.json`: where it came from and when.
    public var infoPath: String
}

/// Files and folders beneath one bookmark's target, by paths relative to it.
///
/// Every path is resolved beneath the target by the kernel (`openat2` with
/// `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`), and the operation then works
/// on the descriptors it got, never on a path string looked up again: `..`,
/// absolute paths, and symlinks leading out are refused, and a path swapped
/// for a symlink during the operation cannot make it escape.
///
/// Each operation reads the bookmark again and checks that its target is the
/// recorded one (device and inode), on the descriptor it then uses: a moved,
/// deleted or replaced target is `staleBookmark`, with its last known path.
///
/// In a root process, every file operation runs with the rights of the bookmark's creator
/// (`CreatorRights`: its uid, gid and groups on the calling thread), and goes back to the
/// process's own rights for the store, the trash and the home: a file the creator cannot
/// read is never read, whoever asks (docs/store.md, "Who made a bookmark").
public struct BookmarkAccess: Sendable {
    /// The bookmark as it was when this access was made.
    public let bookmark: Bookmark
    let store: Store
    /// Runs after a path was resolved and before the descriptors are used (tests swap paths here).
    var afterResolving: (@Sendable () -> Void)?

    /// The creator's rights its files are opened with (nil: the process's own, see `CreatorRights`).
    let rights: CreatorRights?

    init(store: Store, bookmark: Bookmark) {
        self.store = store
        self.bookmark = bookmark
        self.rights = CreatorRights.forCreator(bookmark.creator.uid)
    }

    /// Runs a file operation with the creator's rights (as root), else as it is.
    private func asCreator<T>(_ body: () throws -> T) throws -> T {
        guard let rights else { return try body() }
        return try rights.run(body)
    }

    /// Within `asCreator`: the store, the trash and the home with the process's own rights.
    private func asService<T>(_ body: () throws -> T) throws -> T {
        guard let rights else { return try body() }
        return try rights.asService(body)
    }

    private var owner: String { bookmark.owner }
    private var name: String { bookmark.name }
    private var bookmarks: Bookmarks { Bookmarks(store: store, owner: owner) }

    // MARK: - Reading

    /// The file or folder at `path` ("" for the target itself). A symlink is reported as itself, not followed.
    public func stat(_ path: String) throws -> FileInfo {
        let parts = try components(path)
        let record = try bookmarks.load(name)
        return try asCreator { try stat(parts, path, record) }
    }

    private func stat(_ parts: [String], _ path: String, _ record: BookmarkRecord) throws -> FileInfo {
        if record.kind == .file {
            try requireRoot(parts, path)
            let (dirfd, _, info) = try openFileParent(record)
            defer { close(dirfd) }
            return fileInfo("", info)
        }
        let root = try openFolderRoot(record)
        defer { close(root) }
        let fd = try openBeneath(root, parts, LinuxABI.O_PATH | O_NOFOLLOW, path)
        defer { close(fd) }
        return fileInfo(parts.joined(separator: "/"), try io(path) { () throws(SystemCallError) in try FileOps.status(fd) })
    }

    /// The entries of the folder at `path` ("" for the target), sorted by name;
    /// with `recursive`, subfolders' entries follow their folder (symlinks to
    /// folders are listed, not entered). `glob` (fnmatch(3), a leading `.` must
    /// be matched explicitly) filters on entry names, at every depth.
    public func list(_ path: String = "", matching glob: String? = nil, recursive: Bool = false) throws -> [FileInfo] {
        let parts = try components(path)
        if let glob {
            if glob.isEmpty || glob.utf8.contains(0) || glob.utf8.count > StoreLimits.maxGlobBytes {
                throw StoreError(
                    .invalidPath, "the glob must be 1 to \(StoreLimits.maxGlobBytes) bytes without NUL",
                    details: ["glob": .string(glob)])
            }
        }
        let record = try bookmarks.load(name)
        guard record.kind == .folder else {
            throw error(.wrongType, "bookmark '\(name)' is a file, not a folder: it cannot be listed", path)
        }
        return try asCreator {
            let root = try openFolderRoot(record)
            defer { close(root) }
            let fd = try openBeneath(root, parts, O_RDONLY | O_DIRECTORY, path)
            var entries: [FileInfo] = []
            try walk(fd, prefix: parts.joined(separator: "/"), glob: glob, recursive: recursive, depth: 0, into: &entries)
            return entries
        }
    }

    /// The contents of the file at `path` (at most `maxBytes`, and never more than
    /// `StoreLimits.maxReadBytes`): a larger file is refused from its size, unread.
    public func read(_ path: String, maxBytes: Int = StoreLimits.maxReadBytes) throws -> Data {
        let readLimit = min(maxBytes, StoreLimits.maxReadBytes)
        let parts = try components(path)
        let record = try bookmarks.load(name)
        return try asCreator { try read(parts, path, record, readLimit: readLimit) }
    }

    private func read(_ parts: [String], _ path: String, _ record: BookmarkRecord, readLimit: Int) throws -> Data {
        let fd: Int32
        if record.kind == .file {
            try requireRoot(parts, path)
            let (dirfd, leaf, _) = try openFileParent(record)
            defer { close(dirfd) }
            fd = try openBeneath(dirfd, [leaf], O_RDONLY | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW, path, noSymlinks: true)
        } else {
            if parts.isEmpty { throw error(.wrongType, "'' is the bookmark's folder, not a file", path) }
            let root = try openFolderRoot(record)
            defer { close(root) }
            fd = try openBeneath(root, parts, O_RDONLY | O_NONBLOCK | O_NOCTTY, path)
        }
        defer { close(fd) }
        afterResolving?()
        let info = try io(path) { () throws(SystemCallError) in try FileOps.status(fd) }
        if record.kind == .file, !Bookmarks.matches(record, info) { throw stale(record, .replaced) }
        if info.isDirectory { throw error(.wrongType, "'\(path)' is a folder, not a file", path) }
        guard info.isRegularFile else { throw error(.wrongType, "'\(path)' is not a regular file (a device, socket or FIFO)", path) }
        let tooLarge = error(
            .tooLarge,
            readLimit == StoreLimits.maxReadBytes
                ? "'\(path)' is over the read limit of \(StoreLimits.maxReadBytes) bytes (64 MiB)"
                : "'\(path)' is over the read limit of \(readLimit) bytes here (\(info.size) bytes)", path)
        if info.size > readLimit { throw tooLarge }
        guard let data = try io(path, { () throws(SystemCallError) in try FileOps.readAll(fd, limit: readLimit) }) else {
            throw tooLarge
        }
        return data
    }

    // MARK: - Changing

    /// Writes the file at `path` atomically (a temporary file in the same
    /// folder, fsync, rename, fsync of the folder): readers see the old or the
    /// new contents, never a mix. An existing file keeps its permissions; a
    /// symlink at `path` is replaced, not written through. With `overwrite`
    /// false, an existing file is `alreadyExists`. The folder must exist.
    @discardableResult
    public func write(_ path: String, contents: Data, overwrite: Bool = true) throws -> FileInfo {
        let parts = try components(path)
        let record = try bookmarks.load(name)
        try requireWritable(record, path)
        return try asCreator { try write(parts, path, record, contents: contents, overwrite: overwrite) }
    }

    private func write(_ parts: [String], _ path: String, _ record: BookmarkRecord, contents: Data, overwrite: Bool) throws -> FileInfo {
        if record.kind == .file {
            try requireRoot(parts, path)
            guard overwrite else { throw error(.alreadyExists, "bookmark '\(name)' is a file that exists: not overwritten", path) }
            let (dirfd, leaf, info) = try openFileParent(record)
            defer { close(dirfd) }
            afterResolving?()
            let written = try charged(Int64(contents.count) - info.size, path) {
                try io(path) { () throws(SystemCallError) in
                    try FileOps.writeAtomically(
                        dirfd: dirfd, name: leaf, data: contents, createMode: 0o600, exactMode: info.permissions & 0o777, replace: true)
                }
            }
            // The rename gave the file a new inode: record it, or the bookmark would turn stale.
            var updated = record
            updated.identity = FileIdentity(written)
            try asService { try bookmarks.update(name, updated) }
            return fileInfo("", written)
        }
        if parts.isEmpty { throw error(.wrongType, "'' is the bookmark's folder: it cannot be written as a file", path) }
        let root = try openFolderRoot(record)
        defer { close(root) }
        let (dirfd, leaf) = try openParent(root, parts, path)
        defer { close(dirfd) }
        afterResolving?()
        let existing = try io(path) { () throws(SystemCallError) in try FileOps.status(in: dirfd, leaf) }
        if let existing {
            if existing.isDirectory { throw error(.wrongType, "'\(path)' is a folder, not a file", path) }
            if !overwrite { throw error(.alreadyExists, "'\(path)' already exists in bookmark '\(name)'", path) }
        }
        let exactMode = existing.flatMap { $0.isRegularFile ? $0.permissions & 0o777 : nil }
        let replaced = existing.map { $0.isRegularFile ? $0.size : 0 } ?? 0
        let written = try charged(Int64(contents.count) - replaced, path) {
            try io(path) { () throws(SystemCallError) in
                try FileOps.writeAtomically(dirfd: dirfd, name: leaf, data: contents, createMode: 0o666, exactMode: exactMode, replace: overwrite)
            }
        }
        return fileInfo(parts.joined(separator: "/"), written)
    }

    /// Runs `write`, counting the `delta` bytes it adds toward the owner's `fileBytes` quota
    /// (docs/store.md, "Quotas"): growth is counted first, and a write that would go over
    /// the quota is `quotaExceeded` with nothing written; a failed write gives it back; a
    /// shrink is given back after the write.
    private func charged<T>(_ delta: Int64, _ path: String, _ write: () throws -> T) throws -> T {
        if delta > 0 {
            try asService { try store.chargeFileBytes(owner: owner, delta, what: "writing \(delta) more bytes to '\(path)' through bookmark '\(name)'") }
        }
        let result: T
        do {
            result = try write()
        } catch {
            if delta > 0 { try? asService { try store.chargeFileBytes(owner: owner, -delta, what: "") } }
            throw error
        }
        if delta < 0 { try? asService { try store.chargeFileBytes(owner: owner, delta, what: "") } }
        return result
    }

    /// Creates the folder at `path`; its parent must exist.
    @discardableResult
    public func createFolder(_ path: String) throws -> FileInfo {
        let parts = try components(path)
        let record = try bookmarks.load(name)
        try requireWritable(record, path)
        return try asCreator { try createFolder(parts, path, record) }
    }

    private func createFolder(_ parts: [String], _ path: String, _ record: BookmarkRecord) throws -> FileInfo {
        let root = try openWritableFolderRoot(record, parts, path)
        defer { close(root) }
        let (dirfd, leaf) = try openParent(root, parts, path)
        defer { close(dirfd) }
        afterResolving?()
        try io(path) { () throws(SystemCallError) in
            try FileOps.check(mkdirat(dirfd, leaf, 0o777), "mkdirat")
            try FileOps.fsync(dirfd)
        }
        let info = try io(path) { () throws(SystemCallError) in try FileOps.status(in: dirfd, leaf) }
        guard let info else { throw error(.notFound, "'\(path)' vanished right after it was created", path) }
        return fileInfo(parts.joined(separator: "/"), info)
    }

    /// Moves (renames) `source` to `destination`, both inside the bookmark;
    /// never replaces anything (`alreadyExists`).
    @discardableResult
    public func move(_ source: String, to destination: String) throws -> FileInfo {
        let from = try components(source)
        let to = try components(destination)
        let record = try bookmarks.load(name)
        try requireWritable(record, source)
        return try asCreator { try move(from, to, source, destination, record) }
    }

    private func move(_ from: [String], _ to: [String], _ source: String, _ destination: String, _ record: BookmarkRecord) throws -> FileInfo {
        let root = try openWritableFolderRoot(record, from, source)
        defer { close(root) }
        if to.isEmpty { throw error(.invalidPath, "the bookmark's folder itself cannot be replaced", destination) }
        let (fromDir, fromLeaf) = try openParent(root, from, source)
        defer { close(fromDir) }
        let (toDir, toLeaf) = try openParent(root, to, destination)
        defer { close(toDir) }
        afterResolving?()
        do {
            try SystemCalls.renameat2(fromDir, fromLeaf, toDir, toLeaf, flags: LinuxABI.RENAME_NOREPLACE)
        } catch {
            if error.code == EEXIST { throw self.error(.alreadyExists, "'\(destination)' already exists in bookmark '\(name)'", destination) }
            if error.code == EINVAL { throw self.error(.invalidPath, "'\(source)' cannot be moved into itself", source) }
            throw failure(error, source)
        }
        try io(destination) { () throws(SystemCallError) in
            try FileOps.fsync(toDir)
            try FileOps.fsync(fromDir)
        }
        let info = try io(destination) { () throws(SystemCallError) in try FileOps.status(in: toDir, toLeaf) }
        guard let info else { throw error(.notFound, "'\(destination)' vanished right after the move", destination) }
        return fileInfo(to.joined(separator: "/"), info)
    }

    /// Moves the file or folder at `path` into the owner's trash
    /// (`<home>/trash/<owner>/files/`), with a note of where it came from in
    /// `info/`. Nothing is deleted. The trash must be on the same file system.
    @discardableResult
    public func trash(_ path: String) throws -> TrashedItem {
        let parts = try components(path)
        let record = try bookmarks.load(name)
        try requireWritable(record, path)
        return try asCreator { try trash(parts, path, record) }
    }

    private func trash(_ parts: [String], _ path: String, _ record: BookmarkRecord) throws -> TrashedItem {
        let root = try openWritableFolderRoot(record, parts, path)
        defer { close(root) }
        let (dirfd, leaf) = try openParent(root, parts, path)
        defer { close(dirfd) }
        afterResolving?()
        guard let item = try io(path, { () throws(SystemCallError) in try FileOps.status(in: dirfd, leaf) }) else {
            throw error(.notFound, "'\(path)' does not exist in bookmark '\(name)'", path)
        }
        try requireRemovable(dirfd, leaf, item, path)
        let trashPath = store.trashDirectory + "/" + Keystore.escape(owner)
        let (filesDir, infoDir) = try asService { try openTrash(trashPath) }
        defer {
            close(filesDir)
            close(infoDir)
        }
        let id = "\(ISODate.format(Date()))-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))-\(Self.truncated(leaf, bytes: 200))"
        do {
            // Into the trash (the home's, private to the process) with the process's rights:
            // `requireRemovable` checked that the creator may take it out of its folder.
            try asService { try SystemCalls.renameat2(dirfd, leaf, filesDir, id, flags: LinuxABI.RENAME_NOREPLACE) }
        } catch let error as SystemCallError {
            if error.code == EXDEV {
                throw self.error(
                    .ioError,
                    "'\(path)' cannot be moved to the trash: \(record.lastKnownPath) and \(trashPath) are on different file systems (the trash works within the file system of the extrun home)",
                    path)
            }
            throw failure(error, path)
        }
        let originalPath = record.lastKnownPath + "/" + parts.joined(separator: "/")
        let info: JSONValue = .object([
            "owner": .string(owner), "bookmark": .string(name), "path": .string(parts.joined(separator: "/")),
            "originalPath": .string(originalPath), "trashed": .string(ISODate.format(Date())),
        ])
        try asService {
            try io(path) { () throws(SystemCallError) in
                try FileOps.fsync(filesDir)
                try FileOps.fsync(dirfd)
                let data = (try? JSONCoding.encoder(pretty: true).encode(info)) ?? Data()
                try FileOps.writeAtomically(dirfd: infoDir, name: id + ".json", data: data, createMode: 0o600, exactMode: 0o600, replace: false)
            }
        }
        return TrashedItem(
            path: parts.joined(separator: "/"), originalPath: originalPath, trashPath: trashPath + "/files/" + id,
            infoPath: trashPath + "/info/" + id + ".json")
    }

    /// With the creator's rights (`rights`), whether the creator could take `leaf` out of the
    /// folder `dirfd` itself: write and search on the folder, the sticky bit's rule (only the
    /// entry's or the folder's owner), and write on a folder that would change its parent.
    /// The trash is the process's, so the move itself runs with the process's rights.
    private func requireRemovable(_ dirfd: Int32, _ leaf: String, _ item: FileStatus, _ path: String) throws {
        guard let rights else { return }
        let denied = error(
            .accessDenied, "'\(path)' cannot be moved to the trash with the rights of uid \(rights.uid), who made bookmark '\(name)'", path)
        if extrun_faccessat_fs(dirfd, "", W_OK | X_OK, LinuxABI.AT_EMPTY_PATH) != 0 { throw denied }
        var folder = Glibc.stat()
        var entry = Glibc.stat()
        if fstat(dirfd, &folder) != 0 || fstatat(dirfd, leaf, &entry, AT_SYMLINK_NOFOLLOW) != 0 { throw denied }
        if folder.st_mode & S_ISVTX != 0, entry.st_uid != rights.uid, folder.st_uid != rights.uid { throw denied }
        if item.isDirectory, extrun_faccessat_fs(dirfd, leaf, W_OK, AT_SYMLINK_NOFOLLOW) != 0 { throw denied }
    }

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

    private func requireRoot(_ parts: [String], _ path: String) throws {
        if !parts.isEmpty {
            throw error(.invalidPath, "bookmark '\(name)' is a file: use the empty path for it, not '\(path)'", path)
        }
    }

    private func requireWritable(_ record: BookmarkRecord, _ path: String) throws {
        if record.readOnly {
            throw error(.readOnly, "bookmark '\(name)' of owner '\(owner)' is read-only: '\(path)' was not changed", path)
        }
    }

    /// The folder root for move, trash and new folders, which work on entries inside a folder bookmark only.
    private func openWritableFolderRoot(_ record: BookmarkRecord, _ parts: [String], _ path: String) throws -> Int32 {
        guard record.kind == .folder else {
            throw error(.wrongType, "bookmark '\(name)' is a file: only reading and writing it are possible", path)
        }
        if parts.isEmpty { throw error(.invalidPath, "the bookmark's folder itself cannot be moved, trashed or created", path) }
        return try openFolderRoot(record)
    }

    /// The bookmark's folder (O_PATH), checked to be the recorded one.
    private func openFolderRoot(_ record: BookmarkRecord) throws -> Int32 {
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
    private func openFileParent(_ record: BookmarkRecord) throws -> (Int32, String, FileStatus) {
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

    private func rootFailure(_ record: BookmarkRecord, _ code: Int32) -> StoreError {
        switch code {
        case ENOENT, ENOTDIR: return stale(record, .missing)
        default:
            return StoreError(
                .ioError, "cannot open bookmark '\(name)' at \(record.lastKnownPath): \(SystemCall.reason(code))",
                details: ["owner": .string(owner), "bookmark": .string(name), "lastKnownPath": .string(record.lastKnownPath)])
        }
    }

    /// `openat2(dirfd, parts, flags)` beneath `dirfd`: no `..` out of it, no absolute symlinks, no magic links.
    private func openBeneath(_ dirfd: Int32, _ parts: [String], _ flags: Int32, _ path: String, noSymlinks: Bool = false) throws -> Int32 {
        let relative = parts.isEmpty ? "." : parts.joined(separator: "/")
        var resolve = LinuxABI.RESOLVE_BENEATH | LinuxABI.RESOLVE_NO_MAGICLINKS
        if noSymlinks { resolve |= LinuxABI.RESOLVE_NO_SYMLINKS }
        switch SystemCalls.openat2(dirfd, relative, flags: flags, resolve: resolve) {
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
    private func refuseHome(_ fd: Int32, _ path: String) throws {
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink("/proc/self/fd/\(fd)", &buffer, buffer.count - 1)
        guard count > 0 else { return }
        let opened = String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
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
    private func openParent(_ root: Int32, _ parts: [String], _ path: String) throws -> (Int32, String) {
        guard let leaf = parts.last else {
            throw error(.invalidPath, "the bookmark's folder itself cannot be changed this way", path)
        }
        let fd = try openBeneath(root, Array(parts.dropLast()), O_RDONLY | O_DIRECTORY, path)
        return (fd, leaf)
    }

    private func openTrash(_ trashPath: String) throws -> (Int32, Int32) {
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

    private func walk(_ fd: Int32, prefix: String, glob: String?, recursive: Bool, depth: Int, into entries: inout [FileInfo]) throws {
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

    private func fileInfo(_ path: String, _ info: FileStatus) -> FileInfo {
        let kind: FileKind =
            info.isRegularFile ? .file : info.isDirectory ? .folder : info.isSymlink ? .symlink : .other
        return FileInfo(path: path, kind: kind, size: info.size, modified: info.modified, permissions: UInt16(info.permissions))
    }

    private static func truncated(_ name: String, bytes: Int) -> String {
        var result = ""
        for scalar in name.unicodeScalars {
            if result.utf8.count + String(scalar).utf8.count > bytes { break }
            result.unicodeScalars.append(scalar)
        }
        return result
    }

    private func io<T>(_ path: String, _ body: () throws(SystemCallError) -> T) throws -> T {
        do {
            return try body()
        } catch {
            throw failure(error, path)
        }
    }

    private func error(_ kind: StoreErrorKind, _ message: String, _ path: String) -> StoreError {
        StoreError(kind, message, details: ["owner": .string(owner), "bookmark": .string(name), "path": .string(path)])
    }

    private func stale(_ record: BookmarkRecord, _ reason: StaleReason) -> StoreError {
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
    private func failure(_ failure: SystemCallError, _ path: String) -> StoreError {
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
