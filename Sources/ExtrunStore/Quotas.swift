import ExtrunProtocol
import Foundation
import GRDB
import NIOConcurrencyHelpers

/// How much one owner may keep in the store (docs/store.md, "Quotas"). The
/// defaults come from `quota` in `$EXTRUN_HOME/policy.json` (else `builtIn`);
/// `extrun owners quota` overrides them per owner.
public struct OwnerQuota: Sendable, Equatable {
    /// Stored bytes: sealed values and names of globals, bookmarks and donations.
    public var bytes: Int64
    public var globals: Int64
    public var bookmarks: Int64
    public var donations: Int64
    /// Bytes the owner's plugins added to files through its bookmarks (`BookmarkAccess.write`):
    /// a file created or grown counts its growth, one shrunk gives its shrink back.
    public var fileBytes: Int64

    public init(bytes: Int64, globals: Int64, bookmarks: Int64, donations: Int64, fileBytes: Int64 = OwnerQuota.builtInFileBytes) {
        self.bytes = bytes
        self.globals = globals
        self.bookmarks = bookmarks
        self.donations = donations
        self.fileBytes = fileBytes
    }

    public static let builtInFileBytes: Int64 = 1 << 30
    public static let builtIn = OwnerQuota(bytes: 256 << 20, globals: 100_000, bookmarks: 10_000, donations: 100_000, fileBytes: builtInFileBytes)

    public static let fieldNames = ["bytes", "globals", "bookmarks", "donations", "fileBytes"]

    /// The fields counted in bytes (the others count items).
    public static func isByteField(_ field: String) -> Bool { field == "bytes" || field == "fileBytes" }

    /// The command-line option that sets `field` (`extrun owners quota`).
    public static func option(for field: String) -> String { field == "fileBytes" ? "file-bytes" : field }

    public subscript(field: String) -> Int64 {
        get {
            switch field {
            case "bytes": bytes
            case "globals": globals
            case "bookmarks": bookmarks
            case "fileBytes": fileBytes
            default: donations
            }
        }
        set {
            switch field {
            case "bytes": bytes = newValue
            case "globals": globals = newValue
            case "bookmarks": bookmarks = newValue
            case "fileBytes": fileBytes = newValue
            default: donations = newValue
            }
        }
    }

    public var json: JSONValue {
        .object([
            "bytes": .int(bytes), "globals": .int(globals), "bookmarks": .int(bookmarks), "donations": .int(donations), "fileBytes": .int(fileBytes),
        ])
    }
}

/// What an owner keeps in the store, counted as the quota counts it.
public struct OwnerUsage: Sendable, Equatable {
    public var bytes: Int64 = 0
    public var globals: Int64 = 0
    public var bookmarks: Int64 = 0
    public var donations: Int64 = 0
    public var fileBytes: Int64 = 0

    public init(bytes: Int64 = 0, globals: Int64 = 0, bookmarks: Int64 = 0, donations: Int64 = 0, fileBytes: Int64 = 0) {
        self.bytes = bytes
        self.globals = globals
        self.bookmarks = bookmarks
        self.donations = donations
        self.fileBytes = fileBytes
    }

    public subscript(field: String) -> Int64 {
        switch field {
        case "bytes": bytes
        case "globals": globals
        case "bookmarks": bookmarks
        case "fileBytes": fileBytes
        default: donations
        }
    }

    public var json: JSONValue {
        .object(["bytes": .int(bytes), "globals": .int(globals), "bookmarks": .int(bookmarks), "donations": .int(donations)])
    }
}

/// An owner's quota, where each limit comes from, and its usage (`extrun owners show`, `owners quota`).
public struct OwnerQuotaReport: Sendable, Equatable {
    public var owner: String
    public var quota: OwnerQuota
    /// The limits set for this owner (`extrun owners quota`); the others are the defaults.
    public var overridden: Set<String>
    public var usage: OwnerUsage

    public var json: JSONValue {
        var limits: [String: JSONValue] = [:]
        for field in OwnerQuota.fieldNames {
            limits[field] = .object([
                "limit": .int(quota[field]), "usage": .int(usage[field]),
                "source": .string(overridden.contains(field) ? "owner" : "default"),
            ])
        }
        return .object(["owner": .string(owner), "quota": .object(limits)])
    }
}

/// The usage counters (kept by triggers, so that every writer, the migrations
/// included, keeps them right) and the per-owner overrides.
enum Quotas {
    /// Schema migration v4: the tables, the triggers, and the counts of the rows already there.
    static let schemaSQL: String = {
        // The rows are added without INSERT OR IGNORE: an outer upsert's conflict handling
        // would apply to it (the donation's ON CONFLICT DO UPDATE).
        func triggers(_ table: String, _ counter: String, _ size: (String) -> String) -> String {
            """
            CREATE TRIGGER \(table)_usage_insert AFTER INSERT ON \(table) BEGIN
                INSERT INTO ownerUsage (owner) SELECT NEW.owner WHERE NOT EXISTS (SELECT 1 FROM ownerUsage WHERE owner = NEW.owner);
                UPDATE ownerUsage SET \(counter) = \(counter) + 1, bytes = bytes + \(size("NEW")) WHERE owner = NEW.owner;
            END;
            CREATE TRIGGER \(table)_usage_delete AFTER DELETE ON \(table) BEGIN
                UPDATE ownerUsage SET \(counter) = \(counter) - 1, bytes = bytes - \(size("OLD")) WHERE owner = OLD.owner;
            END;
            CREATE TRIGGER \(table)_usage_update AFTER UPDATE ON \(table) BEGIN
                UPDATE ownerUsage SET \(counter) = \(counter) - 1, bytes = bytes - \(size("OLD")) WHERE owner = OLD.owner;
                INSERT INTO ownerUsage (owner) SELECT NEW.owner WHERE NOT EXISTS (SELECT 1 FROM ownerUsage WHERE owner = NEW.owner);
                UPDATE ownerUsage SET \(counter) = \(counter) + 1, bytes = bytes + \(size("NEW")) WHERE owner = NEW.owner;
            END;

            """
        }
        // Parenthesized: they are subtracted.
        let named = { (row: String) in "(length(CAST(\(row).name AS BLOB)) + length(\(row).sealed))" }
        let donation = { (row: String) in "(length(CAST(\(row).identifier AS BLOB)) + length(\(row).sealed))" }
        return """
            CREATE TABLE ownerUsage (
                owner TEXT NOT NULL PRIMARY KEY,
                bytes INTEGER NOT NULL DEFAULT 0,
                globals INTEGER NOT NULL DEFAULT 0,
                bookmarks INTEGER NOT NULL DEFAULT 0,
                donations INTEGER NOT NULL DEFAULT 0
            ) WITHOUT ROWID;
            CREATE TABLE ownerQuota (
                owner TEXT NOT NULL PRIMARY KEY,
                bytes INTEGER CHECK (bytes >= 0),
                globals INTEGER CHECK (globals >= 0),
                bookmarks INTEGER CHECK (bookmarks >= 0),
                donations INTEGER CHECK (donations >= 0)
            ) WITHOUT ROWID;
            INSERT INTO ownerUsage (owner, globals, bytes)
                SELECT owner, COUNT(*), SUM(\(named("global"))) FROM global GROUP BY owner;
            INSERT OR IGNORE INTO ownerUsage (owner) SELECT DISTINCT owner FROM bookmark;
            INSERT OR IGNORE INTO ownerUsage (owner) SELECT DISTINCT owner FROM donation;
            UPDATE ownerUsage SET
                bookmarks = (SELECT COUNT(*) FROM bookmark WHERE bookmark.owner = ownerUsage.owner),
                donations = (SELECT COUNT(*) FROM donation WHERE donation.owner = ownerUsage.owner),
                bytes = bytes
                    + (SELECT IFNULL(SUM(\(named("bookmark"))), 0) FROM bookmark WHERE bookmark.owner = ownerUsage.owner)
                    + (SELECT IFNULL(SUM(\(donation("donation"))), 0) FROM donation WHERE donation.owner = ownerUsage.owner);

            """ + triggers("global", "globals", named) + triggers("bookmark", "bookmarks", named)
            + triggers("donation", "donations", donation)
    }()

    /// Schema migration v6: the bytes written through bookmarks (`Store.chargeFileBytes`), kept
    /// by the writes themselves (no table holds them), and their per-owner limit.
    static let fileBytesSQL = """
        ALTER TABLE ownerUsage ADD COLUMN fileBytes INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE ownerQuota ADD COLUMN fileBytes INTEGER CHECK (fileBytes >= 0);
        """

    /// Schema migration v7: a donation's write made cheaper, its meaning unchanged (the
    /// group commit's writer is the serial part of every donating process: docs/benchmarks.md,
    /// "The donation's own cost").
    /// - The group index holds only donations that have a group (most have none), with the
    ///   group first, so that both of its queries (an owner's group deleted; which other
    ///   owners have that group) seek it; a donation without a group writes no entry to it.
    /// - No index on the identifier alone: which other owners have an identifier (asked only
    ///   when a delete found none of the owner's) is a few seeks per owner in `UNIQUE (owner,
    ///   identifier)` (`Donations.othersSQL`).
    /// - A donation's insert counts it with one upsert of the owner's usage row instead of an
    ///   insert-if-missing and an update: the same counts, including for an owner's first
    ///   donation and inside the donation's own upsert (`DonationBatchWriter.insertSQL`).
    /// Per donation in a batch of 5, SQLite's CPU went from ~21 to ~14 µs (a C loop over the
    /// same statements, docs/benchmarks.md).
    static let donationWritesSQL = """
        DROP INDEX donation_identifier;
        DROP INDEX donation_group;
        CREATE INDEX donation_group ON donation (groupIdentifier, owner) WHERE groupIdentifier IS NOT NULL;
        DROP TRIGGER donation_usage_insert;
        CREATE TRIGGER donation_usage_insert AFTER INSERT ON donation BEGIN
            INSERT INTO ownerUsage (owner, donations, bytes)
                VALUES (NEW.owner, 1, length(CAST(NEW.identifier AS BLOB)) + length(NEW.sealed))
                ON CONFLICT (owner) DO UPDATE SET donations = donations + 1, bytes = bytes + excluded.bytes;
        END;
        """

    static func usage(_ db: Database, owner: String) throws -> OwnerUsage {
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT bytes, globals, bookmarks, donations, fileBytes FROM ownerUsage WHERE owner = ?"), arguments: [owner])
        else { return OwnerUsage() }
        return OwnerUsage(
            bytes: row["bytes"], globals: row["globals"], bookmarks: row["bookmarks"], donations: row["donations"], fileBytes: row["fileBytes"])
    }

    static func overrides(_ db: Database, owner: String) throws -> [String: Int64] {
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT bytes, globals, bookmarks, donations, fileBytes FROM ownerQuota WHERE owner = ?"), arguments: [owner])
        else { return [:] }
        var found: [String: Int64] = [:]
        for field in OwnerQuota.fieldNames {
            if let value = row[field] as Int64? { found[field] = value }
        }
        return found
    }

    /// Inside a write transaction, after the write: `quotaExceeded` (which rolls the
    /// transaction back) when a count or the bytes grew past the owner's limit.
    /// A write that shrinks what is over a (lowered) limit is let through.
    static func enforce(_ db: Database, owner: String, before: OwnerUsage, defaults: OwnerQuota, what: String) throws {
        let after = try usage(db, owner: owner)
        var quota = defaults
        for (field, value) in try overrides(db, owner: owner) { quota[field] = value }
        for field in OwnerQuota.fieldNames where after[field] > quota[field] && after[field] > before[field] {
            throw exceeded(owner: owner, field: field, limit: quota[field], before: before[field], adding: after[field] - before[field], what: what)
        }
    }

    /// The `quotaExceeded` of a write that would take `field` from `before` past `limit` (both backends).
    static func exceeded(owner: String, field: String, limit: Int64, before: Int64, adding: Int64, what: String) -> StoreError {
        let unit = OwnerQuota.isByteField(field) ? " bytes" : " \(field)"
        return StoreError(
            .quotaExceeded,
            "\(what) would take owner '\(owner)' to \(before + adding)\(unit); its quota is \(limit)\(unit) (it has \(before)). Nothing was written, and what it has is kept. To let it in, raise the quota: extrun owners quota \(owner) --\(OwnerQuota.option(for: field)) N",
            details: [
                "owner": .string(owner), "quota": .string(field), "limit": .int(limit), "usage": .int(before), "adding": .int(adding),
            ])
    }
}

extension Store {
    /// The quota defaults: `quota` in `$EXTRUN_HOME/policy.json` over `OwnerQuota.builtIn`.
    public func defaultQuota() throws -> OwnerQuota {
        let path = homePath + "/policy.json"
        // Private to the host's user, as the host requires of it (SandboxPolicy.load).
        guard let data = try keystore.readPrivateFile(path, owner: "", limit: 1 << 20, what: "a policy file") else { return .builtIn }
        var quota = OwnerQuota.builtIn
        let details: [String: JSONValue] = ["file": .string(path)]
        guard case .object(let policy) = (try? JSONCoding.parse(json: data)) ?? .null else {
            throw StoreError(.invalidDocument, "\(path) is not a JSON object: fix the policy file", details: details)
        }
        guard let section = policy["quota"] else { return quota }
        guard case .object(let fields) = section else {
            throw StoreError(.invalidDocument, "\(path): quota must be an object with bytes, globals, bookmarks, donations", details: details)
        }
        for (name, value) in fields {
            guard OwnerQuota.fieldNames.contains(name), case .int(let number) = value, number >= 0 else {
                throw StoreError(
                    .invalidDocument,
                    "\(path): quota.\(name) must be one of \(OwnerQuota.fieldNames.joined(separator: ", ")) with a whole number of at least 0",
                    details: details)
            }
            quota[name] = number
        }
        return quota
    }

    /// The quota defaults for a write, read once per `Store` (like the host's policy, once per pool).
    func quotaDefaultsForWrite() throws -> OwnerQuota {
        if let known = quotaDefaults.withLockedValue({ $0 }) { return known }
        let quota = try defaultQuota()
        quotaDefaults.withLockedValue { $0 = quota }
        return quota
    }

    /// The owner's quota, where each limit comes from, and its usage.
    public func quota(of owner: String) throws -> OwnerQuotaReport {
        try NameRules.validateOwner(owner)
        var quota = try defaultQuota()
        let overrides: [String: Int64]
        let usage: OwnerUsage
        switch backend {
        case .sqlite(let database):
            (overrides, usage) = try database.read { db in (try Quotas.overrides(db, owner: owner), try Quotas.usage(db, owner: owner)) }
        case .postgres(let server):
            (overrides, usage) = try server.quotaState(owner: owner)
        }
        for (field, value) in overrides { quota[field] = value }
        return OwnerQuotaReport(owner: owner, quota: quota, overridden: Set(overrides.keys), usage: usage)
    }

    /// Sets (a number) or clears (nil: back to the default) the owner's limits given in `changes`.
    /// Lowering a limit under the usage deletes nothing: later writes that add are refused.
    @discardableResult
    public func setQuota(of owner: String, _ changes: [String: Int64?]) throws -> OwnerQuotaReport {
        try NameRules.validateOwner(owner)
        for (field, value) in changes {
            guard OwnerQuota.fieldNames.contains(field) else {
                throw StoreError(.invalidName, "'\(field)' is not a quota (they are \(OwnerQuota.fieldNames.joined(separator: ", ")))")
            }
            if let value, value < 0 {
                throw StoreError(.invalidValue, "the \(field) quota must be 0 or more, not \(value)", details: ["owner": .string(owner)])
            }
        }
        switch backend {
        case .sqlite(let database):
            try database.write { db in
                try db.execute(sql: "INSERT OR IGNORE INTO ownerQuota (owner) VALUES (?)", arguments: [owner])
                for (field, value) in changes {
                    try db.execute(sql: "UPDATE ownerQuota SET \(field) = ? WHERE owner = ?", arguments: [value, owner])
                }
            }
        case .postgres(let server):
            try server.setQuota(owner: owner, changes)
        }
        return try quota(of: owner)
    }

    /// Counts `delta` bytes written through one of `owner`'s bookmarks (negative: given back,
    /// never below 0). Growth past the owner's `fileBytes` quota is `quotaExceeded`, and
    /// nothing is counted: the caller writes nothing then.
    func chargeFileBytes(owner: String, _ delta: Int64, what: @autoclosure () -> String) throws {
        guard delta != 0 else { return }
        let quota = try quotaDefaultsForWrite()
        if case .postgres(let server) = backend {
            let what = what()
            try server.transaction { session in
                try server.charge(session, owner: owner, OwnerUsage(fileBytes: delta), quota: quota, what: what)
            }
            return
        }
        try database.write { db in
            let before = try Quotas.usage(db, owner: owner)
            try db.execute(
                sql: "INSERT INTO ownerUsage (owner) SELECT ? WHERE NOT EXISTS (SELECT 1 FROM ownerUsage WHERE owner = ?)", arguments: [owner, owner])
            try db.execute(sql: "UPDATE ownerUsage SET fileBytes = MAX(0, fileBytes + ?) WHERE owner = ?", arguments: [delta, owner])
            if delta > 0 { try Quotas.enforce(db, owner: owner, before: before, defaults: quota, what: what()) }
        }
    }
}
