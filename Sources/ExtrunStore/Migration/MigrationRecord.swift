import ExtrunProtocol
import Foundation
import GRDB

/// The store's record of owner-to-owner migrations (schema migration
/// `v2-owner-migrations`, docs/store.md): one `ownerMigration` row per
/// migration, with its phase and cursor, and `ownerMigrationItem` rows for the
/// items worth remembering (failures, conflicts, renames, items kept in the
/// old owner). The cursor moves in the same transaction as the items of a
/// batch, so a migration killed at any moment resumes exactly where it
/// stopped: nothing is done twice, nothing is left out.
enum MigrationRecord {
    static let schemaSQL = """
        CREATE TABLE ownerMigration (
            id INTEGER PRIMARY KEY,
            source TEXT NOT NULL,
            target TEXT NOT NULL,
            origin TEXT NOT NULL,
            options TEXT NOT NULL,
            phase TEXT NOT NULL,
            cursor TEXT NOT NULL DEFAULT '',
            sourceStartVersion INTEGER NOT NULL,
            targetCopiedVersion INTEGER,
            counts TEXT NOT NULL,
            started TEXT NOT NULL,
            updated TEXT NOT NULL,
            finished TEXT
        );
        CREATE UNIQUE INDEX ownerMigration_unfinished ON ownerMigration (source, target, origin) WHERE finished IS NULL;

        CREATE TABLE ownerMigrationItem (
            migration INTEGER NOT NULL REFERENCES ownerMigration(id) ON DELETE CASCADE,
            kind TEXT NOT NULL CHECK (kind IN ('global', 'bookmark')),
            name TEXT NOT NULL,
            outcome TEXT NOT NULL,
            targetName TEXT,
            errorKind TEXT,
            message TEXT,
            kept TEXT,
            PRIMARY KEY (migration, kind, name)
        ) WITHOUT ROWID;
        """

    /// The versions of the new owner's globals a migration wrote, one row per batch
    /// (schema migration `v5-migration-writes`): a version in a range is that migration's
    /// copy, any other is the new owner's own write (`carriedChange`).
    static let writtenSQL = """
        CREATE TABLE ownerMigrationWrite (
            migration INTEGER NOT NULL REFERENCES ownerMigration(id) ON DELETE CASCADE,
            first INTEGER NOT NULL,
            last INTEGER NOT NULL CHECK (last >= first),
            PRIMARY KEY (migration, first)
        ) WITHOUT ROWID;
        """

    static func recordWritten(_ db: Database, migration: Int64, versions: ClosedRange<Int64>) throws {
        try db.execute(
            sql: "INSERT INTO ownerMigrationWrite (migration, first, last) VALUES (?, ?, ?)",
            arguments: [migration, versions.lowerBound, versions.upperBound])
    }

    /// Phases, in order. A migration goes through the copy phases of its
    /// scope, then (with removeSource) verify and the remove phases, then done.
    enum Phase: String, Codable {
        case copyGlobals = "copy-globals"
        case copyBookmarks = "copy-bookmarks"
        case verify
        case removeGlobals = "remove-globals"
        case removeBookmarks = "remove-bookmarks"
        case done

        var kind: SealKind? {
            switch self {
            case .copyGlobals, .removeGlobals: .global
            case .copyBookmarks, .removeBookmarks: .bookmark
            case .verify, .done: nil
            }
        }

        static func copy(_ kind: SealKind) -> Phase { kind == .global ? .copyGlobals : .copyBookmarks }
        static func remove(_ kind: SealKind) -> Phase { kind == .global ? .removeGlobals : .removeBookmarks }

        /// The phase after this one, for a migration of `scope`.
        func next(scope: MigrationScope, removeSource: Bool) -> Phase {
            let order: [Phase] =
                scope.kinds.map(Phase.copy) + (removeSource ? [.verify] + scope.kinds.map(Phase.remove) : []) + [.done]
            guard let index = order.firstIndex(of: self), index + 1 < order.count else { return .done }
            return order[index + 1]
        }

        static func first(scope: MigrationScope) -> Phase { copy(scope.kinds[0]) }
    }

    /// The options a migration was started with (a resumed run must use the same).
    struct StoredOptions: Codable, Equatable {
        var scope: MigrationScope
        var onConflict: ConflictPolicy
        var removeSource: Bool
    }

    struct Counts: Codable, Equatable {
        var global = MigrationCounts()
        var bookmark = MigrationCounts()

        subscript(kind: SealKind) -> MigrationCounts {
            get { kind == .global ? global : bookmark }
            set { if kind == .global { global = newValue } else { bookmark = newValue } }
        }
    }

    struct Row: Equatable {
        var id: Int64
        var source: String
        var target: String
        var origin: String
        var options: StoredOptions
        var phase: Phase
        var cursor: String
        var sourceStartVersion: Int64
        var targetCopiedVersion: Int64?
        var counts: Counts
    }

    static func encode<T: Encodable>(_ value: T) throws -> String {
        String(decoding: try JSONCoding.encoder().encode(value), as: UTF8.self)
    }

    static func decode<T: Decodable>(_ type: T.Type, _ text: String, file: String) throws -> T {
        do {
            return try JSONCoding.decode(type, fromJSON: Data(text.utf8))
        } catch {
            throw StoreError(.corruptStore, "the migration record in \(file) is damaged: \(JSONCoding.describe(error))", details: ["file": .string(file)])
        }
    }

    /// The unfinished migration of `source` to `target` from `origin`, if any.
    static func unfinished(_ db: Database, source: String, target: String, origin: String, file: String) throws -> Row? {
        guard let row = try GRDB.Row.fetchOne(
            db,
            sql: """
                SELECT id, options, phase, cursor, sourceStartVersion, targetCopiedVersion, counts FROM ownerMigration
                WHERE source = ? AND target = ? AND origin = ? AND finished IS NULL
                """,
            arguments: [source, target, origin])
        else { return nil }
        return try make(row, source: source, target: target, origin: origin, file: file)
    }

    static func load(_ db: Database, id: Int64, source: String, target: String, origin: String, file: String) throws -> Row {
        guard let row = try GRDB.Row.fetchOne(
            db,
            sql: "SELECT id, options, phase, cursor, sourceStartVersion, targetCopiedVersion, counts FROM ownerMigration WHERE id = ?",
            arguments: [id])
        else {
            throw StoreError(.databaseError, "the record of migration \(id) vanished from \(file)", details: ["file": .string(file)])
        }
        return try make(row, source: source, target: target, origin: origin, file: file)
    }

    private static func make(_ row: GRDB.Row, source: String, target: String, origin: String, file: String) throws -> Row {
        let phaseText: String = row["phase"]
        guard let phase = Phase(rawValue: phaseText) else {
            throw StoreError(.incompatibleStore, "\(file) records a migration in phase '\(phaseText)', unknown to this extrun", details: ["file": .string(file)])
        }
        return Row(
            id: row["id"], source: source, target: target, origin: origin,
            options: try decode(StoredOptions.self, row["options"], file: file), phase: phase, cursor: row["cursor"],
            sourceStartVersion: row["sourceStartVersion"], targetCopiedVersion: row["targetCopiedVersion"],
            counts: try decode(Counts.self, row["counts"], file: file))
    }

    static func create(
        _ db: Database, source: String, target: String, origin: String, options: StoredOptions, sourceStartVersion: Int64, file: String
    ) throws -> Row {
        let now = ISODate.format(Date())
        let phase = Phase.first(scope: options.scope)
        try db.execute(
            sql: """
                INSERT INTO ownerMigration (source, target, origin, options, phase, cursor, sourceStartVersion, counts, started, updated)
                VALUES (?, ?, ?, ?, ?, '', ?, ?, ?, ?)
                """,
            arguments: [source, target, origin, try encode(options), phase.rawValue, sourceStartVersion, try encode(Counts()), now, now])
        return Row(
            id: db.lastInsertedRowID, source: source, target: target, origin: origin, options: options, phase: phase, cursor: "",
            sourceStartVersion: sourceStartVersion, targetCopiedVersion: nil, counts: Counts())
    }

    /// Saves the phase, cursor and counts of `row` (inside the caller's transaction).
    static func save(_ db: Database, _ row: Row, finished: Bool = false) throws {
        let now = ISODate.format(Date())
        try db.execute(
            sql: """
                UPDATE ownerMigration SET phase = ?, cursor = ?, counts = ?, targetCopiedVersion = ?, updated = ?, finished = ?
                WHERE id = ?
                """,
            arguments: [row.phase.rawValue, row.cursor, try encode(row.counts), row.targetCopiedVersion, now, finished ? now : nil, row.id])
    }

    static func recordItem(_ db: Database, migration: Int64, kind: SealKind, _ item: MigrationItemReport) throws {
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

    /// Why a global changed in the old owner during a `--remove-source` migration was kept.
    /// Running the same command again carries the change (`carriedChange`, which also
    /// recognizes the wording of earlier extruns: the same first clause).
    static let changedDuringMigration =
        "it changed in the old owner during the migration; run the same command again to carry the change (the new owner's value is replaced only while it is still the copy this migration wrote)"

    /// Whether the new owner's global `name` is still the copy that an earlier finished
    /// migration of this pair wrote, in a migration that kept the old owner's global because
    /// it changed meanwhile: its version is one that migration's batches wrote
    /// (`ownerMigrationWrite`), so a write the new owner made at any moment since, during
    /// that migration's copying included, is never taken for the copy. Then the change may
    /// replace it without losing any write of the new owner (issue 17, item 4). A migration
    /// recorded by an extrun older than `v5-migration-writes` has no ranges: its copy is
    /// recognized by a version not above what it had written when its copying ended.
    static func carriedChange(_ db: Database, source: String, target: String, name: String, targetVersion: Int64?) throws -> Bool {
        guard let targetVersion else { return false }
        guard let row = try GRDB.Row.fetchOne(
            db,
            sql: """
                SELECT m.id AS id, m.targetCopiedVersion AS copied,
                       EXISTS (SELECT 1 FROM ownerMigrationWrite w WHERE w.migration = m.id) AS hasRanges,
                       EXISTS (SELECT 1 FROM ownerMigrationWrite w WHERE w.migration = m.id AND ? BETWEEN w.first AND w.last) AS inRange
                FROM ownerMigrationItem i JOIN ownerMigration m ON m.id = i.migration
                WHERE m.source = ? AND m.target = ? AND m.origin = 'local' AND m.finished IS NOT NULL
                  AND i.kind = 'global' AND i.name = ? AND i.targetName IS NULL
                  AND i.kept LIKE 'it changed in the old owner during the migration;%'
                ORDER BY m.id DESC LIMIT 1
                """,
            arguments: [targetVersion, source, target, name])
        else { return false }
        if row["hasRanges"] as Bool? == true { return row["inRange"] as Bool? == true }
        guard let copied = row["copied"] as Int64? else { return false }
        return targetVersion <= copied
    }

    static func markKept(_ db: Database, migration: Int64, kind: SealKind, name: String, reason: String) throws {
        try db.execute(
            sql: """
                INSERT INTO ownerMigrationItem (migration, kind, name, outcome, kept) VALUES (?, ?, ?, 'migrated', ?)
                ON CONFLICT (migration, kind, name) DO UPDATE SET kept = excluded.kept
                """,
            arguments: [migration, kind.rawValue, name, reason])
    }

    /// The recorded items of a migration with names in `first...last` (one batch), by name.
    static func items(_ db: Database, migration: Int64, kind: SealKind, from first: String, through last: String) throws -> [String: MigrationItemReport] {
        var items: [String: MigrationItemReport] = [:]
        let rows = try GRDB.Row.fetchCursor(
            db,
            sql: """
                SELECT name, outcome, targetName, errorKind, message, kept FROM ownerMigrationItem
                WHERE migration = ? AND kind = ? AND name >= ? AND name <= ?
                """,
            arguments: [migration, kind.rawValue, first, last])
        while let row = try rows.next() {
            let item = report(row, kind: kind)
            items[item.name] = item
        }
        return items
    }

    /// The first `limit` reported items of a migration (globals, then bookmarks, by name) and how many there are.
    static func reportedItems(_ db: Database, migration: Int64, limit: Int) throws -> ([MigrationItemReport], Int) {
        let total = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ownerMigrationItem WHERE migration = ?", arguments: [migration]) ?? 0
        let rows = try GRDB.Row.fetchAll(
            db,
            sql: """
                SELECT kind, name, outcome, targetName, errorKind, message, kept FROM ownerMigrationItem
                WHERE migration = ? ORDER BY kind DESC, name LIMIT ?
                """,
            arguments: [migration, limit])
        let items = rows.map { row in report(row, kind: SealKind(rawValue: row["kind"]) ?? .global) }
        return (items, max(0, total - items.count))
    }

    private static func report(_ row: GRDB.Row, kind: SealKind) -> MigrationItemReport {
        MigrationItemReport(
            kind: kind.rawValue, name: row["name"], outcome: row["outcome"], targetName: row["targetName"],
            errorKind: row["errorKind"], message: row["message"], kept: row["kept"])
    }
}
