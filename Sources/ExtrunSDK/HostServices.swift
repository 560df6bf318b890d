import Foundation

/// A host service refused a request: the global was changed meanwhile
/// (`versionConflict`), the bookmark is read-only, a path leads outside it...
public struct HostServiceError: Error, Sendable, CustomStringConvertible {
    /// The store's error kind, e.g. `versionConflict`, `notFound`, `readOnly`, `pathEscape`, `staleBookmark`,
    /// `quotaExceeded`, `unsignedPlugin`, `untrustedSigner` (docs/store.md).
    public var kind: String
    public var message: String
    /// The error's numbers, for `quotaExceeded`: `quota`, `limit`, `usage`, `adding`.
    public var details: [String: JSONValue] = [:]
    public var description: String { "\(kind): \(message)" }
}

extension PluginChannel {
    /// Sends a service request and decodes its answer.
    func service<Result: Decodable>(_ method: String, _ params: some Encodable, as type: Result.Type) async throws -> Result {
        let encoded: JSONValue
        do {
            encoded = try JSONCoding.value(of: params)
        } catch {
            throw HostServiceError(kind: "invalidRequest", message: "\(error)")
        }
        switch await request(method, encoded) {
        case .success(let value):
            do {
                return try JSONCoding.decode(type, from: value)
            } catch {
                throw HostServiceError(kind: "invalidAnswer", message: "the host's answer to \(method) does not decode: \(JSONCoding.describe(error))")
            }
        case .failure(let error):
            var details = error.data?.objectValue ?? [:]
            details["kind"] = nil
            throw HostServiceError(kind: error.data?["kind"]?.stringValue ?? "error", message: error.message, details: details)
        }
    }
}

/// The global variables of the plugin's owner, kept sealed by the host.
public struct Globals: Sendable {
    let channel: PluginChannel

    /// The value, or nil when there is none.
    public func get(_ name: String) async throws -> JSONValue? {
        try await entry(name)?.value
    }

    /// The value decoded as `T` (a `String`, an `Int`, a Codable struct...).
    public func get<T: Decodable>(_ name: String, as type: T.Type) async throws -> T? {
        guard let value = try await get(name) else { return nil }
        do {
            return try JSONCoding.decode(type, from: value)
        } catch {
            throw HostServiceError(kind: "typeMismatch", message: "global '\(name)' is not a \(T.self): \(JSONCoding.describe(error))")
        }
    }

    /// The value and its version, for compare-and-set.
    public func entry(_ name: String) async throws -> GlobalValue? {
        try await channel.service(ServiceMethod.globalsGet, GlobalNameParams(name: name), as: GlobalValue?.self)
    }

    /// Sets a value. With `ifVersion`, only if the current version is exactly that
    /// (0: only if there is none yet); otherwise throws a `versionConflict` error. Returns the new version.
    @discardableResult
    public func set(_ name: String, to value: JSONValue, ifVersion: Int64? = nil) async throws -> Int64 {
        try await channel.service(
            ServiceMethod.globalsSet, GlobalSetParams(name: name, value: value, ifVersion: ifVersion), as: GlobalVersion.self
        ).version
    }

    /// Sets any encodable value.
    @discardableResult
    public func set(_ name: String, to value: some Encodable, ifVersion: Int64? = nil) async throws -> Int64 {
        let json: JSONValue
        do {
            json = try JSONCoding.value(of: value)
        } catch {
            throw HostServiceError(kind: "invalidValue", message: "\(error)")
        }
        return try await set(name, to: json, ifVersion: ifVersion)
    }

    /// Deletes a value; returns whether there was one.
    @discardableResult
    public func delete(_ name: String, ifVersion: Int64? = nil) async throws -> Bool {
        try await channel.service(ServiceMethod.globalsDelete, GlobalDeleteParams(name: name, ifVersion: ifVersion), as: GlobalDeleted.self)
            .deleted
    }

    /// Names and versions, in name order (`after` and `limit` page through many).
    public func list(after: String? = nil, limit: Int? = nil) async throws -> [GlobalListEntry] {
        try await channel.service(ServiceMethod.globalsList, GlobalListParams(after: after, limit: limit), as: GlobalList.self).globals
    }
}

/// Files and folders the user bookmarked for the plugin's owner, reached by
/// bookmark name and a path relative to it. The host resolves every path
/// beneath the bookmark: `..`, absolute paths and symlinks leading out are refused.
public struct Bookmarks: Sendable {
    let channel: PluginChannel

    public func list() async throws -> [BookmarkSummary] {
        try await channel.service(ServiceMethod.bookmarksList, [String: String](), as: BookmarkList.self).bookmarks
    }

    public func stat(_ bookmark: String, path: String = "") async throws -> FileEntry {
        try await channel.service(ServiceMethod.bookmarksStat, BookmarkPathParams(bookmark: bookmark, path: path), as: FileEntry.self)
    }

    /// The entries of a folder, optionally filtered by a glob (`*.txt`) and recursive.
    public func listFolder(_ bookmark: String, path: String = "", glob: String? = nil, recursive: Bool = false) async throws -> [FileEntry] {
        try await channel.service(
            ServiceMethod.bookmarksListFolder,
            BookmarkListFolderParams(bookmark: bookmark, path: path, glob: glob, recursive: recursive), as: FileEntryList.self
        ).entries
    }

    public func read(_ bookmark: String, path: String = "") async throws -> Data {
        try await channel.service(ServiceMethod.bookmarksRead, BookmarkPathParams(bookmark: bookmark, path: path), as: FileData.self).data
    }

    /// Writes a file atomically (refused by read-only bookmarks).
    @discardableResult
    public func write(_ bookmark: String, path: String, data: Data, overwrite: Bool = true) async throws -> FileEntry {
        try await channel.service(
            ServiceMethod.bookmarksWrite, BookmarkWriteParams(bookmark: bookmark, path: path, data: data, overwrite: overwrite),
            as: FileEntry.self)
    }

    @discardableResult
    public func createFolder(_ bookmark: String, path: String) async throws -> FileEntry {
        try await channel.service(ServiceMethod.bookmarksCreateFolder, BookmarkPathParams(bookmark: bookmark, path: path), as: FileEntry.self)
    }

    /// Moves within one bookmark.
    @discardableResult
    public func move(_ bookmark: String, from: String, to: String) async throws -> FileEntry {
        try await channel.service(ServiceMethod.bookmarksMove, BookmarkMoveParams(bookmark: bookmark, from: from, to: to), as: FileEntry.self)
    }

    /// Moves to the owner's trash (not deleted).
    public func trash(_ bookmark: String, path: String) async throws {
        _ = try await channel.service(ServiceMethod.bookmarksTrash, BookmarkPathParams(bookmark: bookmark, path: path), as: TrashResult.self)
    }
}

/// The owner's donation log: interactions the system may suggest again. The host
/// donates every successful `handle` itself; a plugin donates related intents here
/// (for example the order it just placed as a "reorder" intent) and deletes what no
/// longer makes sense (a soup that left the menu).
public struct Donations: Sendable {
    let channel: PluginChannel

    /// Donates an intent the plugin declares, with its parameters (checked against the
    /// manifest) and optionally a response. Returns the identifier (made up when not given)
    /// and whether it was stored (not with `--no-donate`).
    @discardableResult
    public func donate(
        intent: String, parameters: [String: JSONValue] = [:], response: IntentResponse? = nil, identifier: String? = nil,
        groupIdentifier: String? = nil
    ) async throws -> DonateResult {
        try await channel.service(
            ServiceMethod.donationsDonate,
            DonateParams(intent: intent, parameters: parameters, response: response, identifier: identifier, groupIdentifier: groupIdentifier),
            as: DonateResult.self)
    }

    /// Deletes the owner's donation with this identifier; returns how many were deleted (0 or 1).
    @discardableResult
    public func delete(identifier: String) async throws -> Int {
        try await channel.service(ServiceMethod.donationsDelete, DonationDeleteParams(identifier: identifier), as: DonationDeleteResult.self).deleted
    }

    /// Deletes the owner's donations of a group.
    @discardableResult
    public func delete(groupIdentifier: String) async throws -> Int {
        try await channel.service(ServiceMethod.donationsDelete, DonationDeleteParams(groupIdentifier: groupIdentifier), as: DonationDeleteResult.self)
            .deleted
    }

    /// Deletes all of the owner's donations.
    @discardableResult
    public func deleteAll() async throws -> Int {
        try await channel.service(ServiceMethod.donationsDelete, DonationDeleteParams(all: true), as: DonationDeleteResult.self).deleted
    }
}
