import Foundation

/// Requests a plugin sends to the host while it handles an intent: its owner's
/// global variables and bookmarked files. The host answers them from the
/// owner's sealed store; a plugin never sees the database or a key.
/// A refusal is a JSON-RPC error with code `RPCError.serviceError` (-32003)
/// whose `data` is `{"kind": "<ServiceErrorKind>"}`.
public enum ServiceMethod {
    public static let globalsGet = "globals.get"
    public static let globalsSet = "globals.set"
    public static let globalsDelete = "globals.delete"
    public static let globalsList = "globals.list"
    public static let bookmarksList = "bookmarks.list"
    public static let bookmarksStat = "bookmarks.stat"
    public static let bookmarksListFolder = "bookmarks.listFolder"
    public static let bookmarksRead = "bookmarks.read"
    public static let bookmarksWrite = "bookmarks.write"
    public static let bookmarksCreateFolder = "bookmarks.createFolder"
    public static let bookmarksMove = "bookmarks.move"
    public static let bookmarksTrash = "bookmarks.trash"
    public static let donationsDonate = "donations.donate"
    public static let donationsDelete = "donations.delete"
}

// MARK: Donations

/// `donations.donate`: `{"intent", "parameters", "response"?, "identifier"?, "groupIdentifier"?}` →
/// `{"identifier": "...", "donated": true}` (`donated` is false when the run was started with `--no-donate`).
/// The intent must be one the plugin declares; its parameters are checked against the manifest.
public struct DonateParams: Codable, Sendable, Hashable {
    public var intent: String
    public var parameters: [String: JSONValue]
    public var response: IntentResponse?
    public var identifier: String?
    public var groupIdentifier: String?

    public init(
        intent: String, parameters: [String: JSONValue] = [:], response: IntentResponse? = nil, identifier: String? = nil,
        groupIdentifier: String? = nil
    ) {
        self.intent = intent
        self.parameters = parameters
        self.response = response
        self.identifier = identifier
        self.groupIdentifier = groupIdentifier
    }

    private enum CodingKeys: String, CodingKey { case intent, parameters, response, identifier, groupIdentifier }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        intent = try c.decode(String.self, forKey: .intent)
        parameters = try c.decodeIfPresent([String: JSONValue].self, forKey: .parameters) ?? [:]
        response = try c.decodeIfPresent(IntentResponse.self, forKey: .response)
        identifier = try c.decodeIfPresent(String.self, forKey: .identifier)
        groupIdentifier = try c.decodeIfPresent(String.self, forKey: .groupIdentifier)
    }
}

public struct DonateResult: Codable, Sendable, Hashable {
    public var identifier: String
    public var donated: Bool
    public init(identifier: String, donated: Bool) {
        self.identifier = identifier
        self.donated = donated
    }
}

/// `donations.delete`: exactly one of `{"identifier"}`, `{"groupIdentifier"}`, `{"all": true}`,
/// over the plugin's owner's donations only → `{"deleted": 2}`.
public struct DonationDeleteParams: Codable, Sendable, Hashable {
    public var identifier: String?
    public var groupIdentifier: String?
    public var all: Bool?
    public init(identifier: String? = nil, groupIdentifier: String? = nil, all: Bool? = nil) {
        self.identifier = identifier
        self.groupIdentifier = groupIdentifier
        self.all = all
    }
}

public struct DonationDeleteResult: Codable, Sendable, Hashable {
    public var deleted: Int
    public init(deleted: Int) { self.deleted = deleted }
}

// MARK: Globals

/// `globals.get`: `{"name": "counter"}` → `{"value": ..., "version": 3}`, or `null` when there is none.
public struct GlobalNameParams: Codable, Sendable, Hashable {
    public var name: String
    public init(name: String) { self.name = name }
}

public struct GlobalValue: Codable, Sendable, Hashable {
    public var value: JSONValue
    public var version: Int64
    public init(value: JSONValue, version: Int64) {
        self.value = value
        self.version = version
    }
}

/// `globals.set`: `{"name", "value", "ifVersion"?}` → `{"version": 4}`.
/// `ifVersion` makes it a compare-and-set: the current version must be exactly
/// that, or `0` for "must not exist yet"; otherwise the answer is a `versionConflict` error.
public struct GlobalSetParams: Codable, Sendable, Hashable {
    public var name: String
    public var value: JSONValue
    public var ifVersion: Int64?
    public init(name: String, value: JSONValue, ifVersion: Int64? = nil) {
        self.name = name
        self.value = value
        self.ifVersion = ifVersion
    }
}

public struct GlobalVersion: Codable, Sendable, Hashable {
    public var version: Int64
    public init(version: Int64) { self.version = version }
}

/// `globals.delete`: `{"name", "ifVersion"?}` → `{"deleted": true}`.
public struct GlobalDeleteParams: Codable, Sendable, Hashable {
    public var name: String
    public var ifVersion: Int64?
    public init(name: String, ifVersion: Int64? = nil) {
        self.name = name
        self.ifVersion = ifVersion
    }
}

public struct GlobalDeleted: Codable, Sendable, Hashable {
    public var deleted: Bool
    public init(deleted: Bool) { self.deleted = deleted }
}

/// `globals.list`: `{"after"?, "limit"?}` → `{"globals": [{"name", "version", "byteCount"}]}` in name order.
public struct GlobalListParams: Codable, Sendable, Hashable {
    public var after: String?
    public var limit: Int?
    public init(after: String? = nil, limit: Int? = nil) {
        self.after = after
        self.limit = limit
    }
}

public struct GlobalListEntry: Codable, Sendable, Hashable {
    public var name: String
    public var version: Int64
    public var byteCount: Int
    public init(name: String, version: Int64, byteCount: Int) {
        self.name = name
        self.version = version
        self.byteCount = byteCount
    }
}

public struct GlobalList: Codable, Sendable, Hashable {
    public var globals: [GlobalListEntry]
    public init(globals: [GlobalListEntry]) { self.globals = globals }
}

// MARK: Bookmarks

/// `bookmarks.list`: `{}` → `{"bookmarks": [...]}`. Plugins see names, kinds and
/// state, not the paths behind them.
public struct BookmarkSummary: Codable, Sendable, Hashable {
    public var name: String
    /// `file` or `folder`.
    public var kind: String
    public var readOnly: Bool
    /// Whether the target moved or vanished since it was bookmarked.
    public var stale: Bool
    public init(name: String, kind: String, readOnly: Bool, stale: Bool) {
        self.name = name
        self.kind = kind
        self.readOnly = readOnly
        self.stale = stale
    }
}

public struct BookmarkList: Codable, Sendable, Hashable {
    public var bookmarks: [BookmarkSummary]
    public init(bookmarks: [BookmarkSummary]) { self.bookmarks = bookmarks }
}

/// A path inside a bookmark: `bookmarks.stat`, `bookmarks.read`, `bookmarks.createFolder`,
/// `bookmarks.trash`. `path` is relative to the bookmark's target ("" is the target).
public struct BookmarkPathParams: Codable, Sendable, Hashable {
    public var bookmark: String
    public var path: String
    public init(bookmark: String, path: String = "") {
        self.bookmark = bookmark
        self.path = path
    }
}

/// `bookmarks.listFolder`: `{"bookmark", "path"?, "glob"?, "recursive"?}` → `{"entries": [FileEntry]}`.
public struct BookmarkListFolderParams: Codable, Sendable, Hashable {
    public var bookmark: String
    public var path: String?
    public var glob: String?
    public var recursive: Bool?
    public init(bookmark: String, path: String? = nil, glob: String? = nil, recursive: Bool? = nil) {
        self.bookmark = bookmark
        self.path = path
        self.glob = glob
        self.recursive = recursive
    }
}

/// A file or folder inside a bookmark.
public struct FileEntry: Codable, Sendable, Hashable {
    public var path: String
    /// `file`, `folder`, `symlink` or `other`.
    public var kind: String
    public var size: Int64
    public var modified: String
    public var permissions: Int
    public init(path: String, kind: String, size: Int64, modified: String, permissions: Int) {
        self.path = path
        self.kind = kind
        self.size = size
        self.modified = modified
        self.permissions = permissions
    }
}

public struct FileEntryList: Codable, Sendable, Hashable {
    public var entries: [FileEntry]
    public init(entries: [FileEntry]) { self.entries = entries }
}

/// `bookmarks.read` → `{"data": "<base64>"}`.
public struct FileData: Codable, Sendable, Hashable {
    public var data: Data
    public init(data: Data) { self.data = data }
}

/// `bookmarks.write`: `{"bookmark", "path", "data": "<base64>", "overwrite"?}` → FileEntry.
public struct BookmarkWriteParams: Codable, Sendable, Hashable {
    public var bookmark: String
    public var path: String
    public var data: Data
    public var overwrite: Bool?
    public init(bookmark: String, path: String, data: Data, overwrite: Bool? = nil) {
        self.bookmark = bookmark
        self.path = path
        self.data = data
        self.overwrite = overwrite
    }
}

/// `bookmarks.move`: `{"bookmark", "from", "to"}` → FileEntry (within one bookmark).
public struct BookmarkMoveParams: Codable, Sendable, Hashable {
    public var bookmark: String
    public var from: String
    public var to: String
    public init(bookmark: String, from: String, to: String) {
        self.bookmark = bookmark
        self.from = from
        self.to = to
    }
}

/// `bookmarks.trash` → `{"path": "<the path it had>"}` (the file goes to the owner's trash, not away).
public struct TrashResult: Codable, Sendable, Hashable {
    public var path: String
    public init(path: String) { self.path = path }
}
