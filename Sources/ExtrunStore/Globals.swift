import ExtrunProtocol
import Foundation
import GRDB

/// A global variable: a named JSON value of one owner.
public struct Global: Sendable, Equatable {
    public var name: String
    public var value: JSONValue
    /// Grows on every change. Versions come from a per-owner counter, so a
    /// version is never handed out twice for the same owner, not even after a
    /// delete and re-create: compare-and-set cannot be fooled by an ABA change.
    public var version: Int64
}

/// A global as listed: without its value, which stays sealed.
public struct GlobalSummary: Sendable, Equatable {
    public var name: String
    public var version: Int64
    /// The size of the value as compact JSON.
    public var byteCount: Int
}

/// The version a change expects to find (compare-and-set).
public enum VersionCondition: Sendable, Equatable {
    /// Whatever is there (or nothing).
    case any
    /// Only if the global does not exist.
    case absent
    /// Only if the global exists at exactly this version.
    case version(Int64)
}

/// One owner's global variables. Get one from `Store.globals(of:)`.
///
/// Values are any JSON value: text, numbers, booleans, dates as ISO 8601
/// strings, lists and dictionaries (`null` too). Each is sealed with the
/// owner's key; names are stored in clear (they are the rows' keys).
public struct Globals: Sendable {
    public let owner: String
    let store: Store

    init(store: Store, owner: String) {
        self.store = store
        self.owner = owner
    }

    /// The global, or nil if it does not exist.
    public func get(_ name: String) throws -> Global? {
        try NameRules.validateName(name, kind: .global)
        guard let key = try store.readKey(owner) else { return nil }
        let found: (version: Int64, sealed: Data)?
        switch store.backend {
        case .sqlite(let database):
            found = try database.read { db in
                try Row.fetchOne(db, sql: "SELECT version, sealed FROM global WHERE owner = ? AND name = ?", arguments: [owner, name])
            }.map { (version: $0["version"], sealed: $0["sealed"]) }
        case .postgres(let server):
            found = try server.global(owner: owner, name: name)
        }
        guard let found else { return nil }
        let value = try open(found.sealed, name: name, key: key)
        return Global(name: name, value: value, version: found.version)
    }

    /// Names, versions and sizes, in byte order of the names (values are not
    /// opened). Pages with `after` (the last name of the previous page) and `limit`.
    public func list(after: String? = nil, limit: Int? = nil) throws -> [GlobalSummary] {
        guard try store.readKey(owner) != nil else { return [] }
        if case .postgres(let server) = store.backend {
            return try server.globals(owner: owner, after: after ?? "", limit: limit).map {
                GlobalSummary(name: $0.name, version: $0.version, byteCount: max(0, Int($0.size) - Sealing.overhead))
            }
        }
        return try store.database.read { db in
            try Row.fetchAll(
                db,
                sql: "SELECT name, version, length(sealed) AS size FROM global WHERE owner = ? AND name > ? ORDER BY name LIMIT ?",
                arguments: [owner, after ?? "", limit ?? -1]
            ).map { row in
                GlobalSummary(name: row["name"], version: row["version"], byteCount: max(0, (row["size"] as Int) - Sealing.overhead))
            }
        }
    }

    /// Sets the global if its current version satisfies `condition`
    /// (`versionConflict` otherwise) and returns its new version.
    @discardableResult
    public func set(_ name: String, to value: JSONValue, ifVersion condition: VersionCondition = .any) throws -> Int64 {
        try NameRules.validateName(name, kind: .global)
        let plaintext = try Globals.serialize(value, name: name, owner: owner)
        let key = try store.writeKey(owner)
        let sealed = try Sealing.seal(plaintext, with: key, context: SealContext(owner: owner, kind: .global, name: name))
        let quota = try store.quotaDefaultsForWrite()
        if case .postgres(let server) = store.backend {
            return try server.setGlobal(
                owner: owner, name: name, sealed: sealed, check: { try check(condition, current: $0, name: name) }, quota: quota,
                what: "setting global '\(name)' (\(plaintext.count) bytes)")
        }
        return try store.database.write { db in
            let before = try Quotas.usage(db, owner: owner)
            let current = try Int64.fetchOne(
                db, sql: "SELECT version FROM global WHERE owner = ? AND name = ?", arguments: [owner, name])
            try check(condition, current: current, name: name)
            let version = try Globals.nextVersion(db, owner: owner)
            if current == nil {
                try db.execute(
                    sql: "INSERT INTO global (owner, name, version, sealed) VALUES (?, ?, ?, ?)",
                    arguments: [owner, name, version, sealed])
            } else {
                try db.execute(
                    sql: "UPDATE global SET version = ?, sealed = ? WHERE owner = ? AND name = ?",
                    arguments: [version, sealed, owner, name])
            }
            try Quotas.enforce(db, owner: owner, before: before, defaults: quota, what: "setting global '\(name)' (\(plaintext.count) bytes)")
            return version
        }
    }

    /// Deletes the global if its current version satisfies `condition`.
    /// Returns false if there was nothing to delete.
    @discardableResult
    public func delete(_ name: String, ifVersion condition: VersionCondition = .any) throws -> Bool {
        try NameRules.validateName(name, kind: .global)
        guard try store.readKey(owner) != nil else {
            try check(condition, current: nil, name: name)
            return false
        }
        if case .postgres(let server) = store.backend {
            return try server.deleteGlobal(owner: owner, name: name, check: { try check(condition, current: $0, name: name) })
        }
        return try store.database.write { db in
            let current = try Int64.fetchOne(
                db, sql: "SELECT version FROM global WHERE owner = ? AND name = ?", arguments: [owner, name])
            try check(condition, current: current, name: name)
            guard current != nil else { return false }
            try db.execute(sql: "DELETE FROM global WHERE owner = ? AND name = ?", arguments: [owner, name])
            return true
        }
    }

    // MARK: - Helpers

    private func check(_ condition: VersionCondition, current: Int64?, name: String) throws {
        let what = "global '\(name)' of owner '\(owner)'"
        var details: [String: JSONValue] = ["owner": .string(owner), "name": .string(name), "currentVersion": current.map(JSONValue.int) ?? .null]
        switch (condition, current) {
        case (.any, _), (.absent, nil):
            return
        case (.version(let expected), let current?) where expected == current:
            return
        case (.absent, let current?):
            details["expected"] = "absent"
            throw StoreError(.versionConflict, "\(what) already exists (version \(current)); expected it absent", details: details)
        case (.version(let expected), nil):
            details["expectedVersion"] = .int(expected)
            throw StoreError(.versionConflict, "\(what) does not exist; expected version \(expected)", details: details)
        case (.version(let expected), let current?):
            details["expectedVersion"] = .int(expected)
            throw StoreError(
                .versionConflict, "\(what) is at version \(current), not \(expected): it changed since it was read", details: details)
        }
    }

    /// The next version of the owner's counter (inside the caller's write transaction).
    static func nextVersion(_ db: Database, owner: String) throws -> Int64 {
        guard let version = try Int64.fetchOne(
            db.cachedStatement(sql: "UPDATE owner SET lastVersion = lastVersion + 1 WHERE name = ? RETURNING lastVersion"), arguments: [owner])
        else {
            throw StoreError(.databaseError, "owner '\(owner)' has no row in the store's owner table", details: ["owner": .string(owner)])
        }
        return version
    }

    /// The value as compact JSON with sorted keys: what is sealed, and what the size limit counts.
    package static func serialize(_ value: JSONValue, name: String, owner: String) throws -> Data {
        let data: Data
        do {
            data = try JSONCoding.encoder().encode(value)
        } catch {
            throw StoreError(
                .invalidValue, "global '\(name)' cannot be stored as JSON (numbers must be finite): \(error)",
                details: ["owner": .string(owner), "name": .string(name)])
        }
        if data.count > StoreLimits.maxValueBytes {
            throw StoreError(
                .tooLarge,
                "global '\(name)' is \(data.count) bytes as JSON; the limit is \(StoreLimits.maxValueBytes) bytes (4 MiB)",
                details: [
                    "owner": .string(owner), "name": .string(name), "byteCount": .int(Int64(data.count)),
                    "limit": .int(Int64(StoreLimits.maxValueBytes)),
                ])
        }
        return data
    }

    func openPlaintext(_ sealed: Data, name: String, key: OwnerKey) throws -> Data {
        try Sealing.open(sealed, with: key, context: SealContext(owner: owner, kind: .global, name: name), file: store.databasePath)
    }

    func open(_ sealed: Data, name: String, key: OwnerKey) throws -> JSONValue {
        let plaintext = try openPlaintext(sealed, name: name, key: key)
        // JSONParser, not JSONDecoder: a 4 MiB value is a plugin's globals.get, served while its
        // deadline runs (issue 14), and the Codable route costs several times as much.
        do throws(JSONParseError) {
            return try JSONParser.parse(plaintext)
        } catch {
            throw StoreError(
                .sealBroken, "global '\(name)' of owner '\(owner)' opened but is not JSON: \(error)",
                details: ["owner": .string(owner), "name": .string(name), "file": .string(store.databasePath)])
        }
    }
}
