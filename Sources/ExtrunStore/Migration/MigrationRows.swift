import ExtrunProtocol
import Foundation
import GRDB

/// The migration engine's access to the store's rows, inside one read or one write
/// transaction (`Store.migrationRead`, `Store.migrationWrite`): the backend seam for
/// `extrun migrate`. The engine above it (MigrationEngine.swift, MigrationLocal.swift)
/// opens, seals, plans, keeps the record's rules and throws the typed errors; each backend
/// only reads and writes rows: SQLite here (`SQLiteMigrationRows`), PostgreSQL in
/// Postgres/PostgresMigration.swift. Names are compared in byte order on both.
protocol MigrationRows {
    /// The owner's last given global version (0 when it has no row).
    func lastVersion(owner: String) throws -> Int64
    /// Makes the owner's writers wait until this transaction ends (PostgreSQL: its row
    /// locked; SQLite: a write transaction already excludes every other writer).
    func lockOwner(_ owner: String) throws
    func count(_ kind: SealKind, owner: String) throws -> Int
    /// The owner's items after `cursor` in name order: at most `limit`, and no more once
    /// `maxBytes` of sealed values are read; with `conflictingWith`, only names that owner also has.
    func readBatch(_ kind: SealKind, owner: String, after cursor: String, limit: Int, maxBytes: Int, conflictingWith target: String?) throws
        -> [MigrationRowRead]
    /// The owner's rows among `names`, by name.
    func rows(_ kind: SealKind, owner: String, names: [String]) throws -> [String: MigrationRowRead]
    /// Takes `count` global versions of the owner; returns the last (nil: the owner has no row).
    func reserveVersions(owner: String, count: Int) throws -> Int64?
    /// Writes new rows and replaces the sealed value (and a global's version) of existing ones.
    func write(_ kind: SealKind, owner: String, inserts: [MigrationRowWrite], updates: [MigrationRowWrite]) throws
    func delete(_ kind: SealKind, owner: String, names: [String]) throws

    // The record (MigrationRecord.swift).
    func unfinishedMigration(source: String, target: String, origin: String) throws -> MigrationRecord.Stored?
    /// The record `id`; `forUpdate` in a write: locked until the transaction ends.
    func loadMigration(id: Int64, forUpdate: Bool) throws -> MigrationRecord.Stored?
    /// Inserts a record; returns its id.
    func createMigration(
        source: String, target: String, origin: String, options: String, phase: String, sourceStartVersion: Int64, counts: String, now: String
    ) throws -> Int64
    func saveMigration(
        id: Int64, phase: String, cursor: String, counts: String, targetCopiedVersion: Int64?, now: String, finished: String?) throws
    func recordItem(migration: Int64, kind: SealKind, _ item: MigrationItemReport) throws
    func markKept(migration: Int64, kind: SealKind, name: String, reason: String) throws
    func recordWritten(migration: Int64, versions: ClosedRange<Int64>) throws
    func items(migration: Int64, kind: SealKind, from first: String, through last: String) throws -> [MigrationItemReport]
    func reportedItems(migration: Int64, limit: Int) throws -> (items: [MigrationItemReport], total: Int)
    /// The latest finished local migration of the pair that kept global `name` because it
    /// changed meanwhile: whether it recorded version ranges, whether `targetVersion` is in one,
    /// and the version it had written when its copying ended.
    func keptChange(source: String, target: String, name: String, targetVersion: Int64) throws
        -> (hasRanges: Bool, inRange: Bool, copied: Int64?)?
}

/// A row as the migration reads it: name, a global's version, the sealed value.
struct MigrationRowRead {
    var name: String
    var version: Int64?
    var sealed: Data
}

/// A row the migration writes (`version` for globals).
struct MigrationRowWrite {
    var name: String
    var version: Int64?
    var sealed: Data
}

extension Store {
    /// Reads for the migration engine (PostgreSQL: one statement's snapshot each).
    func migrationRead<T>(_ body: (any MigrationRows) throws -> T) throws -> T {
        switch backend {
        case .sqlite(let database): try database.read { db in try body(SQLiteMigrationRows(db: db)) }
        case .postgres(let server): try server.read { session in try body(session) }
        }
    }

    /// One transaction of the migration engine: a batch, a phase's move.
    func migrationWrite<T>(_ body: (any MigrationRows) throws -> T) throws -> T {
        switch backend {
        case .sqlite(let database): try database.write { db in try body(SQLiteMigrationRows(db: db)) }
        case .postgres(let server): try server.transaction { session in try body(session) }
        }
    }
}

/// The migration's rows in `store.sqlite`, through GRDB.
struct SQLiteMigrationRows: MigrationRows {
    let db: Database

    func lastVersion(owner: String) throws -> Int64 {
        try Int64.fetchOne(db, sql: "SELECT lastVersion FROM owner WHERE name = ?", arguments: [owner]) ?? 0
    }

    func lockOwner(_ owner: String) throws {}

    func count(_ kind: SealKind, owner: String) throws -> Int {
        try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM \(kind.rawValue) WHERE owner = ?", arguments: [owner]) ?? 0
    }

    func readBatch(_ kind: SealKind, owner: String, after cursor: String, limit: Int, maxBytes: Int, conflictingWith target: String?) throws
        -> [MigrationRowRead]
    {
        let version = kind == .global ? "a.version" : "NULL"
        var sql = "SELECT a.name, \(version), a.sealed FROM \(kind.rawValue) a WHERE a.owner = ? AND a.name > ?"
        var arguments: StatementArguments = [owner, cursor]
        if let target {
            sql += " AND EXISTS (SELECT 1 FROM \(kind.rawValue) b WHERE b.owner = ? AND b.name = a.name)"
            arguments += [target]
        }
        sql += " ORDER BY a.name LIMIT ?"
        arguments += [limit]
        var rows: [MigrationRowRead] = []
        var bytes = 0
        let cursor = try Row.fetchCursor(db, sql: sql, arguments: arguments)
        while let row = try cursor.next() {
            let sealed: Data = row[2]
            rows.append(MigrationRowRead(name: row[0], version: row[1], sealed: sealed))
            bytes += sealed.count
            if bytes >= maxBytes { break }
        }
        return rows
    }

    func rows(_ kind: SealKind, owner: String, names: [String]) throws -> [String: MigrationRowRead] {
        let lookup = try db.cachedStatement(
            sql: "SELECT \(kind == .global ? "version" : "NULL"), sealed FROM \(kind.rawValue) WHERE owner = ? AND name = ?")
        var present = names
        if names.count > 8, let first = names.min(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }),
            let last = names.max(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) })
        {
            // A batch's names (in order): the owner's names in their range first, one index
            // range read, then only those looked up (a new owner has none to look up).
            let wanted = Set(names)
            present = try String.fetchAll(
                db, sql: "SELECT name FROM \(kind.rawValue) WHERE owner = ? AND name >= ? AND name <= ?", arguments: [owner, first, last]
            ).filter { wanted.contains($0) }
        }
        var found: [String: MigrationRowRead] = [:]
        for name in present {
            guard let row = try Row.fetchOne(lookup, arguments: [owner, name]) else { continue }
            found[name] = MigrationRowRead(name: name, version: row[0], sealed: row[1])
        }
        return found
    }

    func reserveVersions(owner: String, count: Int) throws -> Int64? {
        try Int64.fetchOne(
            db, sql: "UPDATE owner SET lastVersion = lastVersion + ? WHERE name = ? RETURNING lastVersion", arguments: [count, owner])
    }

    func write(_ kind: SealKind, owner: String, inserts: [MigrationRowWrite], updates: [MigrationRowWrite]) throws {
        // The usage counters follow by the tables' triggers (Quotas.swift).
        if !inserts.isEmpty {
            let insert = try db.cachedStatement(
                sql: kind == .global
                    ? "INSERT INTO global (owner, name, version, sealed) VALUES (?, ?, ?, ?)"
                    : "INSERT INTO bookmark (owner, name, sealed) VALUES (?, ?, ?)")
            for row in inserts {
                // The arguments match the statements: no validation needed.
                insert.setUncheckedArguments(kind == .global ? [owner, row.name, row.version, row.sealed] : [owner, row.name, row.sealed])
                try insert.execute()
            }
        }
        if !updates.isEmpty {
            let update = try db.cachedStatement(
                sql: kind == .global
                    ? "UPDATE global SET version = ?, sealed = ? WHERE owner = ? AND name = ?"
                    : "UPDATE bookmark SET sealed = ? WHERE owner = ? AND name = ?")
            for row in updates {
                update.setUncheckedArguments(kind == .global ? [row.version, row.sealed, owner, row.name] : [row.sealed, owner, row.name])
                try update.execute()
            }
        }
    }

    func delete(_ kind: SealKind, owner: String, names: [String]) throws {
        let delete = try db.cachedStatement(sql: "DELETE FROM \(kind.rawValue) WHERE owner = ? AND name = ?")
        for name in names { try delete.execute(arguments: [owner, name]) }
    }

    // MARK: - The record

    private static let recordColumns = "id, options, phase, cursor, sourceStartVersion, targetCopiedVersion, counts"

    private func stored(_ row: Row?) -> MigrationRecord.Stored? {
        guard let row else { return nil }
        return MigrationRecord.Stored(
            id: row["id"], options: row["options"], phase: row["phase"], cursor: row["cursor"],
            sourceStartVersion: row["sourceStartVersion"], targetCopiedVersion: row["targetCopiedVersion"], counts: row["counts"])
    }

    func unfinishedMigration(source: String, target: String, origin: String) throws -> MigrationRecord.Stored? {
        stored(
            try Row.fetchOne(
                db,
                sql: """
                    SELECT \(SQLiteMigrationRows.recordColumns) FROM ownerMigration
                    WHERE source = ? AND target = ? AND origin = ? AND finished IS NULL
                    """,
                arguments: [source, target, origin]))
    }

    func loadMigration(id: Int64, forUpdate: Bool) throws -> MigrationRecord.Stored? {
        // A write transaction here is already the only writer.
        stored(try Row.fetchOne(db, sql: "SELECT \(SQLiteMigrationRows.recordColumns) FROM ownerMigration WHERE id = ?", arguments: [id]))
    }

    func createMigration(
        source: String, target: String, origin: String, options: String, phase: String, sourceStartVersion: Int64, counts: String, now: String
    ) throws -> Int64 {
        try db.execute(
            sql: """
                INSERT INTO ownerMigration (source, target, origin, options, phase, cursor, sourceStartVersion, counts, started, updated)
                VALUES (?, ?, ?, ?, ?, '', ?, ?, ?, ?)
                """,
            arguments: [source, target, origin, options, phase, sourceStartVersion, counts, now, now])
        return db.lastInsertedRowID
    }

    func saveMigration(
        id: Int64, phase: String, cursor: String, counts: String, targetCopiedVersion: Int64?, now: String, finished: String?
    ) throws {
        try db.execute(
            sql: """
                UPDATE ownerMigration SET phase = ?, cursor = ?, counts = ?, targetCopiedVersion = ?, updated = ?, finished = ?
                WHERE id = ?
                """,
            arguments: [phase, cursor, counts, targetCopiedVersion, now, finished, id])
    }

    func recordItem(migration: Int64, kind: SealKind, _ item: MigrationItemReport) throws {
        try db.execute(
            sql: """
                INSERT INTO ownerMigrationItem (migration, kind, name, outcome, targetName, errorKind, message, kept)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (migration, kind, name) DO UPDATE SET
                    outcome = excluded.outcome, targetName = excluded.targetName, errorKind = excluded.errorKind,
                    message = excluded.message, kept = excluded.kept
                """,
            arguments: [migration, kind.rawValue, item.name, item.outcome, item.targetName, item.errorKind, item.message, item.kept])
    }

    func markKept(migration: Int64, kind: SealKind, name: String, reason: String) throws {
        try db.execute(
            sql: """
                INSERT INTO ownerMigrationItem (migration, kind, name, outcome, kept) VALUES (?, ?, ?, 'migrated', ?)
                ON CONFLICT (migration, kind, name) DO UPDATE SET kept = excluded.kept
                """,
            arguments: [migration, kind.rawValue, name, reason])
    }

    func recordWritten(migration: Int64, versions: ClosedRange<Int64>) throws {
        try db.execute(
            sql: "INSERT INTO ownerMigrationWrite (migration, first, last) VALUES (?, ?, ?)",
            arguments: [migration, versions.lowerBound, versions.upperBound])
    }

    private func report(_ row: Row, kind: SealKind) -> MigrationItemReport {
        MigrationItemReport(
            kind: kind.rawValue, name: row["name"], outcome: row["outcome"], targetName: row["targetName"],
            errorKind: row["errorKind"], message: row["message"], kept: row["kept"])
    }

    func items(migration: Int64, kind: SealKind, from first: String, through last: String) throws -> [MigrationItemReport] {
        try Row.fetchAll(
            db,
            sql: """
                SELECT name, outcome, targetName, errorKind, message, kept FROM ownerMigrationItem
                WHERE migration = ? AND kind = ? AND name >= ? AND name <= ?
                """,
            arguments: [migration, kind.rawValue, first, last]
        ).map { report($0, kind: kind) }
    }

    func reportedItems(migration: Int64, limit: Int) throws -> (items: [MigrationItemReport], total: Int) {
        let total = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ownerMigrationItem WHERE migration = ?", arguments: [migration]) ?? 0
        let rows = try Row.fetchAll(
            db,
            sql: """
                SELECT kind, name, outcome, targetName, errorKind, message, kept FROM ownerMigrationItem
                WHERE migration = ? ORDER BY kind DESC, name LIMIT ?
                """,
            arguments: [migration, limit])
        return (rows.map { report($0, kind: SealKind(rawValue: $0["kind"]) ?? .global) }, total)
    }

    func keptChange(source: String, target: String, name: String, targetVersion: Int64) throws -> (hasRanges: Bool, inRange: Bool, copied: Int64?)? {
        guard let row = try Row.fetchOne(
            db,
            sql: """
                SELECT m.id AS id, m.targetCopiedVersion AS copied,
                       EXISTS (SELECT 1 FROM ownerMigrationWrite w WHERE w.migration = m.id) AS hasRanges,
                       EXISTS (SELECT 1 FROM ownerMigrationWrite w WHERE w.migration = m.id AND ? BETWEEN w.first AND w.last) AS inRange
                FROM ownerMigrationItem i JOIN ownerMigration m ON m.id = i.migration
                WHERE m.source = ? AND m.target = ? AND m.origin = 'local' AND m.finished IS NOT NULL
                  AND i.kind = 'global' AND i.name = ? AND i.targetName IS NULL
                  AND i.kept LIKE '\(MigrationRecord.changedDuringMigrationPrefix)%'
                ORDER BY m.id DESC LIMIT 1
                """,
            arguments: [targetVersion, source, target, name])
        else { return nil }
        return (row["hasRanges"] as Bool? == true, row["inRange"] as Bool? == true, row["copied"] as Int64?)
    }
}
