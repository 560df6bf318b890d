import ExtrunProtocol
import Foundation

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

    /// A record as the backend stores it (`MigrationRows`): options and counts as JSON text.
    struct Stored {
        var id: Int64
        var options: String
        var phase: String
        var cursor: String
        var sourceStartVersion: Int64
        var targetCopiedVersion: Int64?
        var counts: String
    }

    /// The unfinished migration of `source` to `target` from `origin`, if any.
    static func unfinished(_ rows: any MigrationRows, source: String, target: String, origin: String, file: String) throws -> Row? {
        guard let stored = try rows.unfinishedMigration(source: source, target: target, origin: origin) else { return nil }
        return try make(stored, source: source, target: target, origin: origin, file: file)
    }

    /// The record `id`, locked until the end of the caller's write transaction (a second run
    /// of the same migration on another host waits here, then finds the cursor moved).
    static func load(_ rows: any MigrationRows, id: Int64, source: String, target: String, origin: String, file: String) throws -> Row {
        guard let stored = try rows.loadMigration(id: id, forUpdate: true) else {
            throw StoreError(.databaseError, "the record of migration \(id) vanished from \(file)", details: ["file": .string(file)])
        }
        return try make(stored, source: source, target: target, origin: origin, file: file)
    }

    private static func make(_ stored: Stored, source: String, target: String, origin: String, file: String) throws -> Row {
        guard let phase = Phase(rawValue: stored.phase) else {
            throw StoreError(
                .incompatibleStore, "\(file) records a migration in phase '\(stored.phase)', unknown to this extrun", details: ["file": .string(file)])
        }
        return Row(
            id: stored.id, source: source, target: target, origin: origin,
            options: try decode(StoredOptions.self, stored.options, file: file), phase: phase, cursor: stored.cursor,
            sourceStartVersion: stored.sourceStartVersion, targetCopiedVersion: stored.targetCopiedVersion,
            counts: try decode(Counts.self, stored.counts, file: file))
    }

    static func create(
        _ rows: any MigrationRows, source: String, target: String, origin: String, options: StoredOptions, sourceStartVersion: Int64,
        file: String
    ) throws -> Row {
        let phase = Phase.first(scope: options.scope)
        let id = try rows.createMigration(
            source: source, target: target, origin: origin, options: try encode(options), phase: phase.rawValue,
            sourceStartVersion: sourceStartVersion, counts: try encode(Counts()), now: ISODate.format(Date()))
        return Row(
            id: id, source: source, target: target, origin: origin, options: options, phase: phase, cursor: "",
            sourceStartVersion: sourceStartVersion, targetCopiedVersion: nil, counts: Counts())
    }

    /// Saves the phase, cursor and counts of `row` (inside the caller's transaction).
    static func save(_ rows: any MigrationRows, _ row: Row, finished: Bool = false) throws {
        let now = ISODate.format(Date())
        try rows.saveMigration(
            id: row.id, phase: row.phase.rawValue, cursor: row.cursor, counts: try encode(row.counts),
            targetCopiedVersion: row.targetCopiedVersion, now: now, finished: finished ? now : nil)
    }

    /// Why a global changed in the old owner during a `--remove-source` migration was kept.
    /// Running the same command again carries the change (`carriedChange`, which also
    /// recognizes the wording of earlier extruns: the same first clause).
    static let changedDuringMigration =
        "it changed in the old owner during the migration; run the same command again to carry the change (the new owner's value is replaced only while it is still the copy this migration wrote)"
    /// The first clause of `changedDuringMigration`, what `carriedChange` looks for.
    static let changedDuringMigrationPrefix = "it changed in the old owner during the migration;"

    /// Whether the new owner's global `name` is still the copy that an earlier finished
    /// migration of this pair wrote, in a migration that kept the old owner's global because
    /// it changed meanwhile: its version is one that migration's batches wrote
    /// (`ownerMigrationWrite`), so a write the new owner made at any moment since, during
    /// that migration's copying included, is never taken for the copy. Then the change may
    /// replace it without losing any write of the new owner (issue 17, item 4). A migration
    /// recorded by an extrun older than `v5-migration-writes` has no ranges: its copy is
    /// recognized by a version not above what it had written when its copying ended.
    static func carriedChange(_ rows: any MigrationRows, source: String, target: String, name: String, targetVersion: Int64?) throws -> Bool {
        guard let targetVersion, let found = try rows.keptChange(source: source, target: target, name: name, targetVersion: targetVersion)
        else { return false }
        if found.hasRanges { return found.inRange }
        guard let copied = found.copied else { return false }
        return targetVersion <= copied
    }

    /// The recorded items of a migration with names in `first...last` (one batch), by name.
    static func items(_ rows: any MigrationRows, migration: Int64, kind: SealKind, from first: String, through last: String) throws
        -> [String: MigrationItemReport]
    {
        var items: [String: MigrationItemReport] = [:]
        for item in try rows.items(migration: migration, kind: kind, from: first, through: last) { items[item.name] = item }
        return items
    }

    /// The first `limit` reported items of a migration (globals, then bookmarks, by name) and how many there are.
    static func reportedItems(_ rows: any MigrationRows, migration: Int64, limit: Int) throws -> ([MigrationItemReport], Int) {
        let (items, total) = try rows.reportedItems(migration: migration, limit: limit)
        return (items, max(0, total - items.count))
    }
}
