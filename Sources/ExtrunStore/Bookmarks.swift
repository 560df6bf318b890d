import ExtrunProtocol
import ExtrunSystem
import Foundation
import GRDB

#if canImport(Glibc)
import Glibc
#endif

public enum BookmarkKind: String, Codable, Sendable {
    case file
    case folder
}

/// Which file a bookmark points to, beyond its path: `st_dev`, `st_ino`, and
/// the birth time where the file system records one (file systems reuse a
/// freed inode number at once, so device and inode alone cannot tell a folder
/// from a new one made at the same path).
public struct FileIdentity: Codable, Sendable, Equatable, CustomStringConvertible {
    public var device: UInt64
    public var inode: UInt64
    /// Creation time in nanoseconds since 1970 (statx `stx_btime`), nil where the file system has none.
    public var birth: Int64?

    public init(device: UInt64, inode: UInt64, birth: Int64?) {
        self.device = device
        self.inode = inode
        self.birth = birth
    }

    init(_ status: FileStatus) {
        self.init(device: status.device, inode: status.inode, birth: status.birth)
    }

    /// Whether `current` is the recorded file (a birth time is compared only if one was recorded).
    func matches(_ current: FileIdentity) -> Bool {
        device == current.device && inode == current.inode && (birth == nil || birth == current.birth)
    }

    public var description: String {
        "device \(device), inode \(inode)" + (birth.map { ", born \($0 / 1_000_000_000).\(String(format: "%09d", Int($0 % 1_000_000_000)))" } ?? "")
    }
}

/// A named reference to a file or folder, sealed with its owner's key
/// (every field, so that e.g. the read-only flag cannot be edited in the database).
public struct Bookmark: Sendable, Equatable {
    public var name: String
    public var owner: String
    /// The path as given when the bookmark was added (made absolute).
    public var path: String
    /// The target's canonical path (symlinks resolved) when it was last
    /// recorded; the bookmark is resolved through this path.
    public var lastKnownPath: String
    public var kind: BookmarkKind
    /// Refuses writes, moves, new folders and trashing through `BookmarkAccess`.
    public var readOnly: Bool
    public var created: Date
    /// The target's identity when it was recorded.
    public var identity: FileIdentity
    /// Who made it: its files are opened with this uid's rights (docs/store.md, "Who made a bookmark").
    public var creator: BookmarkCreator
}

/// Who made a bookmark: the local uid whose rights its files are opened with, and where
/// known the principal it came through. Sealed with the bookmark, so it cannot be edited
/// in the database.
public struct BookmarkCreator: Sendable, Equatable, CustomStringConvertible {
    public var uid: UInt32
    /// How the maker reached extrun beyond its uid (nil for the CLI).
    public var principal: String?
    /// False for a bookmark sealed before creators were recorded: its creator is taken to be
    /// the owner of the extrun home (the uid that owns its folder).
    public var recorded: Bool

    public init(uid: UInt32, principal: String? = nil, recorded: Bool = true) {
        self.uid = uid
        self.principal = principal
        self.recorded = recorded
    }

    public var description: String {
        "uid \(uid)" + (principal.map { " (\($0))" } ?? "") + (recorded ? "" : " (the home's owner: the bookmark predates recorded creators)")
    }
}

/// Who asks for a bookmark's files: the uid running `extrun handle`, the peer uid of an
/// `extrun serve` connection, the MCP server's uid; nil uid over TCP (a token names no
/// local user). Only the bookmark's creator (or root) gets its files (`accessDenied`
/// otherwise), and as root they are opened with the creator's rights.
public struct BookmarkCaller: Sendable, Equatable, CustomStringConvertible {
    public var uid: UInt32?
    public var principal: String?

    public init(uid: UInt32?, principal: String? = nil) {
        self.uid = uid
        self.principal = principal
    }

    /// This process's own uid (the CLI).
    public static var process: BookmarkCaller { BookmarkCaller(uid: getuid()) }

    public var description: String {
        switch (uid, principal) {
        case (let uid?, let principal?): "uid \(uid) (\(principal))"
        case (let uid?, nil): "uid \(uid)"
        case (nil, let principal?): principal
        case (nil, nil): "an unknown caller"
        }
    }
}

/// Why a bookmark is stale.
public enum StaleReason: String, Sendable, Codable {
    /// Nothing is at the last known path: the target moved or was deleted.
    case missing
    /// Something else is at the last known path (another file or folder, e.g. restored from a backup).
    case replaced
    /// The last known path cannot be checked (permission denied on the way, ...).
    case unreachable
}

public enum BookmarkStatus: Sendable, Equatable {
    case ok
    case stale(StaleReason)

    public var isStale: Bool { self != .ok }
}

/// A bookmark and whether its target is still where it was recorded.
public struct BookmarkEntry: Sendable, Equatable {
    public var bookmark: Bookmark
    public var status: BookmarkStatus
}

/// What is sealed for a bookmark (docs/store.md, "Bookmarks").
package struct BookmarkRecord: Codable, Equatable {
    var path: String
    var lastKnownPath: String
    var kind: BookmarkKind
    var readOnly: Bool
    var created: Date
    var device: UInt64
    var inode: UInt64
    var birth: Int64?
    /// Who made it; absent in a record sealed before creators were recorded (docs/store.md).
    var creatorUID: UInt32?
    var creatorPrincipal: String?

    package init(
        path: String, lastKnownPath: String, kind: BookmarkKind, readOnly: Bool, created: Date, device: UInt64, inode: UInt64, birth: Int64?,
        creatorUID: UInt32? = nil, creatorPrincipal: String? = nil
    ) {
        self.path = path
        self.lastKnownPath = lastKnownPath
        self.kind = kind
        self.readOnly = readOnly
        self.created = created
        self.device = device
        self.inode = inode
        self.birth = birth
        self.creatorUID = creatorUID
        self.creatorPrincipal = creatorPrincipal
    }

    var identity: FileIdentity {
        get { FileIdentity(device: device, inode: inode, birth: birth) }
        set {
            device = newValue.device
            inode = newValue.inode
            birth = newValue.birth
        }
    }
}

/// One owner's bookmarks. Get one from `Store.bookmarks(of:)`.
public struct Bookmarks: Sendable {
    public let owner: String
    let store: Store

    init(store: Store, owner: String) {
        self.store = store
        self.owner = owner
    }

    /// Bookmarks the file or folder at `path` (relative paths are taken from
    /// the current directory; symlinks are resolved and the target recorded).
    @discardableResult
    public func add(_ name: String, path: String, readOnly: Bool, creator: BookmarkCreator? = nil) throws -> Bookmark {
        try NameRules.validateName(name, kind: .bookmark)
        let maker = creator ?? BookmarkCreator(uid: getuid())
        // Only root may make a bookmark opened with another uid's rights: anyone else would
        // hand a root service rights that are not theirs.
        if maker.uid != getuid(), geteuid() != 0 {
            throw StoreError(
                .accessDenied,
                "only root may make a bookmark for another user: '\(name)' would be opened with uid \(maker.uid)'s rights, and this is uid \(getuid())",
                details: ["owner": .string(owner), "name": .string(name), "creator": .int(Int64(maker.uid)), "caller": .int(Int64(getuid()))])
        }
        let target = try Bookmarks.locate(path)
        let record = BookmarkRecord(
            path: target.absolute, lastKnownPath: target.canonical, kind: target.kind, readOnly: readOnly,
            created: Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down)),
            device: target.identity.device, inode: target.identity.inode, birth: target.identity.birth,
            creatorUID: maker.uid, creatorPrincipal: maker.principal)
        let key = try store.writeKey(owner)
        let sealed = try seal(record, name: name, key: key)
        let quota = try store.quotaDefaultsForWrite()
        if case .postgres(let server) = store.backend {
            try server.addBookmark(owner: owner, name: name, sealed: sealed, quota: quota, what: "adding bookmark '\(name)'")
            return bookmark(name, record)
        }
        try store.database.write { db in
            let before = try Quotas.usage(db, owner: owner)
            if try Bool.fetchOne(db, sql: "SELECT 1 FROM bookmark WHERE owner = ? AND name = ?", arguments: [owner, name]) == true {
                throw StoreError(
                    .alreadyExists, "owner '\(owner)' already has a bookmark named '\(name)'",
                    details: ["owner": .string(owner), "name": .string(name)])
            }
            try db.execute(sql: "INSERT INTO bookmark (owner, name, sealed) VALUES (?, ?, ?)", arguments: [owner, name, sealed])
            try Quotas.enforce(db, owner: owner, before: before, defaults: quota, what: "adding bookmark '\(name)'")
        }
        return bookmark(name, record)
    }

    /// Every bookmark with its status, in byte order of the names. Stale
    /// bookmarks are listed (with their last known path), never dropped.
    public func list() throws -> [BookmarkEntry] {
        guard let key = try store.readKey(owner) else { return [] }
        let rows = try rows()
        return try rows.map { row in
            let name = row.name
            let record = try open(row.sealed, name: name, key: key)
            return BookmarkEntry(bookmark: bookmark(name, record), status: Bookmarks.status(of: record))
        }
    }

    /// Every bookmark that opens, and an error naming each one that does not (a broken
    /// seal, a damaged record): one damaged bookmark hides none of the others.
    public func listReadable() throws -> (entries: [BookmarkEntry], damaged: [StoreError]) {
        guard let key = try store.readKey(owner) else { return ([], []) }
        let rows = try rows()
        var entries: [BookmarkEntry] = []
        var damaged: [StoreError] = []
        for row in rows {
            let name = row.name
            do {
                let record = try open(row.sealed, name: name, key: key)
                entries.append(BookmarkEntry(bookmark: bookmark(name, record), status: Bookmarks.status(of: record)))
            } catch let error as StoreError {
                var error = error
                error.details["name"] = .string(name)
                damaged.append(error)
            }
        }
        return (entries, damaged)
    }

    /// One bookmark with its status; `notFound` if there is none by that name.
    public func show(_ name: String) throws -> BookmarkEntry {
        let record = try load(name)
        return BookmarkEntry(bookmark: bookmark(name, record), status: Bookmarks.status(of: record))
    }

    /// Removes the bookmark (its target is not touched); `notFound` if there is none.
    public func remove(_ name: String) throws {
        try NameRules.validateName(name, kind: .bookmark)
        guard try store.readKey(owner) != nil else { throw notFound(name) }
        let deleted: Int
        if case .postgres(let server) = store.backend {
            deleted = try server.removeBookmark(owner: owner, name: name) ? 1 : 0
        } else {
            deleted = try store.database.write { db in
                try db.execute(sql: "DELETE FROM bookmark WHERE owner = ? AND name = ?", arguments: [owner, name])
                return db.changesCount
            }
        }
        if deleted == 0 { throw notFound(name) }
    }

    /// Records again what is at the bookmark's path now (for a target that was
    /// replaced or restored on purpose); the name, flag and creation date stay.
    @discardableResult
    public func refresh(_ name: String) throws -> Bookmark {
        var record = try load(name)
        let target = try Bookmarks.locate(record.path)
        record.lastKnownPath = target.canonical
        record.kind = target.kind
        record.identity = target.identity
        try update(name, record)
        return bookmark(name, record)
    }

    /// File access beneath the bookmark's target; `notFound` if there is no such bookmark.
    /// Staleness is checked by every operation, on the descriptor it uses.
    ///
    /// With a `caller`, only the bookmark's creator or root gets it (`accessDenied` naming the
    /// bookmark, its creator and the caller). When this process is root, every file operation
    /// of the access runs with the creator's rights (its uid, gid and groups, on the calling
    /// thread), so that no file the creator cannot reach is read or changed through it.
    public func access(_ name: String, caller: BookmarkCaller? = nil) throws -> BookmarkAccess {
        let record = try load(name)
        let made = bookmark(name, record)
        if let caller, !(caller.uid == made.creator.uid || caller.uid == 0) {
            throw StoreError(
                .accessDenied,
                "bookmark '\(name)' of owner '\(owner)' was made by \(made.creator) and only its maker may use it; this run's caller is \(caller)",
                details: [
                    "owner": .string(owner), "bookmark": .string(name), "creator": .int(Int64(made.creator.uid)),
                    "caller": caller.uid.map { .int(Int64($0)) } ?? .string(caller.principal ?? "unknown"),
                ])
        }
        return BookmarkAccess(store: store, bookmark: made)
    }

    // MARK: - Helpers

    func load(_ name: String) throws -> BookmarkRecord {
        try NameRules.validateName(name, kind: .bookmark)
        guard let key = try store.readKey(owner) else { throw notFound(name) }
        let sealed: Data?
        if case .postgres(let server) = store.backend {
            sealed = try server.bookmarkSealed(owner: owner, name: name)
        } else {
            sealed = try store.database.read { db in
                try Data.fetchOne(db, sql: "SELECT sealed FROM bookmark WHERE owner = ? AND name = ?", arguments: [owner, name])
            }
        }
        guard let sealed else { throw notFound(name) }
        return try open(sealed, name: name, key: key)
    }

    /// Re-seals the record of an existing bookmark (a no-op if it was removed meanwhile).
    func update(_ name: String, _ record: BookmarkRecord) throws {
        let key = try store.writeKey(owner)
        let sealed = try seal(record, name: name, key: key)
        if case .postgres(let server) = store.backend {
            try server.updateBookmark(owner: owner, name: name, sealed: sealed)
            return
        }
        try store.database.write { db in
            try db.execute(sql: "UPDATE bookmark SET sealed = ? WHERE owner = ? AND name = ?", arguments: [sealed, owner, name])
        }
    }

    /// The owner's bookmark rows, in byte order of the names.
    private func rows() throws -> [(name: String, sealed: Data)] {
        if case .postgres(let server) = store.backend { return try server.bookmarkRows(owner: owner) }
        return try store.database.read { db in
            try Row.fetchAll(db, sql: "SELECT name, sealed FROM bookmark WHERE owner = ? ORDER BY name", arguments: [owner])
                .map { (name: $0["name"], sealed: $0["sealed"]) }
        }
    }

    private func notFound(_ name: String) -> StoreError {
        StoreError(.notFound, "owner '\(owner)' has no bookmark named '\(name)'", details: ["owner": .string(owner), "name": .string(name)])
    }

    private func bookmark(_ name: String, _ record: BookmarkRecord) -> Bookmark {
        Bookmark(
            name: name, owner: owner, path: record.path, lastKnownPath: record.lastKnownPath, kind: record.kind,
            readOnly: record.readOnly, created: record.created,
            identity: record.identity, creator: creator(of: record))
    }

    /// Who made the record: as sealed, or for an old record the owner of the extrun home.
    func creator(of record: BookmarkRecord) -> BookmarkCreator {
        if let uid = record.creatorUID { return BookmarkCreator(uid: uid, principal: record.creatorPrincipal) }
        var uid = UInt32.max
        let fd = Glibc.open(store.homePath, LinuxABI.O_PATH | O_CLOEXEC)
        if fd >= 0 {
            if let info = try? FileOps.fstat(fd) { uid = info.st_uid }
            close(fd)
        }
        return BookmarkCreator(uid: uid, recorded: false)
    }

    private func seal(_ record: BookmarkRecord, name: String, key: OwnerKey) throws -> Data {
        let plaintext: Data
        do {
            plaintext = try JSONCoding.encoder().encode(record)
        } catch {
            throw StoreError(.invalidValue, "cannot encode bookmark '\(name)': \(error)")
        }
        return try Sealing.seal(plaintext, with: key, context: SealContext(owner: owner, kind: .bookmark, name: name))
    }

    private func open(_ sealed: Data, name: String, key: OwnerKey) throws -> BookmarkRecord {
        let context = SealContext(owner: owner, kind: .bookmark, name: name)
        let plaintext = try Sealing.open(sealed, with: key, context: context, file: store.databasePath)
        do {
            return try JSONCoding.decode(BookmarkRecord.self, fromJSON: plaintext)
        } catch {
            throw StoreError(
                .sealBroken, "bookmark '\(name)' of owner '\(owner)' opened but is not a bookmark record: \(JSONCoding.describe(error))",
                details: ["owner": .string(owner), "name": .string(name), "file": .string(store.databasePath)])
        }
    }

    /// The file or folder at `path`: its absolute and canonical paths, kind and identity.
    package static func locate(_ path: String) throws -> (absolute: String, canonical: String, kind: BookmarkKind, identity: FileIdentity) {
        let details: [String: JSONValue] = ["path": .string(path)]
        if path.isEmpty || path.utf8.contains(0) {
            throw StoreError(.invalidPath, "a bookmark needs the path of a file or folder", details: details)
        }
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        guard let resolved = realpath(absolute, nil) else {
            let code = errno
            if code == ENOENT || code == ENOTDIR {
                throw StoreError(.notFound, "nothing at \(absolute) to bookmark", details: details)
            }
            throw StoreError(.ioError, "cannot resolve \(absolute): \(SystemCall.reason(code))", details: details)
        }
        let canonical = String(cString: resolved)
        free(resolved)
        let info: FileStatus
        do {
            let fd = try FileOps.open(canonical, LinuxABI.O_PATH)
            defer { close(fd) }
            info = try FileOps.status(fd)
        } catch {
            throw StoreError(.ioError, "cannot read \(canonical): \(error.reason)", details: details)
        }
        let kind: BookmarkKind
        if info.isDirectory {
            kind = .folder
        } else if info.isRegularFile {
            kind = .file
        } else {
            throw StoreError(.wrongType, "\(canonical) is neither a regular file nor a folder", details: details)
        }
        return (absolute, canonical, kind, FileIdentity(info))
    }

    /// Whether the recorded target is still at its last known path.
    static func status(of record: BookmarkRecord) -> BookmarkStatus {
        let fd = Glibc.open(record.lastKnownPath, LinuxABI.O_PATH | O_CLOEXEC)
        guard fd >= 0 else {
            switch errno {
            case ENOENT, ENOTDIR: return .stale(.missing)
            default: return .stale(.unreachable)
            }
        }
        defer { close(fd) }
        guard let info = try? FileOps.status(fd) else { return .stale(.unreachable) }
        return matches(record, info) ? .ok : .stale(.replaced)
    }

    /// Whether the file found is the recorded target: same kind and identity.
    static func matches(_ record: BookmarkRecord, _ info: FileStatus) -> Bool {
        let kind: BookmarkKind? = info.isDirectory ? .folder : info.isRegularFile ? .file : nil
        return kind == record.kind && record.identity.matches(FileIdentity(info))
    }
}
