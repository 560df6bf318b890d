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
    func asCreator<T>(_ body: () throws -> T) throws -> T {
        guard let rights else { return try body() }
        return try rights.run(body)
    }

    /// Within `asCreator`: the store, the trash and the home with the process's own rights.
    func asService<T>(_ body: () throws -> T) throws -> T {
        guard let rights else { return try body() }
        return try rights.asService(body)
    }

    var owner: String { bookmark.owner }
    var name: String { bookmark.name }
    var bookmarks: Bookmarks { Bookmarks(store: store, owner: owner) }

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
            try StoreShims.renameat2(fromDir, fromLeaf, toDir, toLeaf, flags: LinuxABI.RENAME_NOREPLACE)
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
            try asService { try StoreShims.renameat2(dirfd, leaf, filesDir, id, flags: LinuxABI.RENAME_NOREPLACE) }
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
}
