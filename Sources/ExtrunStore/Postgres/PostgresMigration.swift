import Crypto
import ExtrunProtocol
import Foundation
import NIOCore
import PostgresNIO

/// `extrun migrate`'s rows on PostgreSQL (MigrationRows.swift has the seam; the engine above it
/// is shared with SQLite). Each batch is one transaction of `PostgresStore.transaction`
/// (READ COMMITTED): it locks the migration's record first (`loadMigration` with
/// `forUpdate`), then the owner it writes (`lockOwner`: the row every write of that owner
/// updates first, PostgresStore+Rows.swift), so the plan it made holds until it commits and a
/// second run of the same migration, on any host, waits and then finds the cursor moved.
/// A batch's rows go in one statement each (`unnest` of arrays), not one per item.
/// The usage counters are kept here, as SQLite's triggers keep them: counted, never refused.
extension PostgresSession: MigrationRows {
    private static func table(_ kind: SealKind) -> String { kind == .global ? "global" : "bookmark" }
    /// Bookmarks of this host only (the `host` column, docs/scaling.md).
    private static func hostFilter(_ kind: SealKind) -> String { kind == .bookmark ? " AND host = ''" : "" }

    func lastVersion(owner: String) throws -> Int64 {
        try query("SELECT lastVersion FROM owner WHERE name = \(owner)").first?.decode(Int64.self) ?? 0
    }

    func lockOwner(_ owner: String) throws {
        try execute("SELECT lastVersion FROM owner WHERE name = \(owner) FOR UPDATE")
    }

    func count(_ kind: SealKind, owner: String) throws -> Int {
        let table = PostgresSession.table(kind)
        let host = PostgresSession.hostFilter(kind)
        return Int(try query("SELECT COUNT(*) FROM \(unescaped: table) WHERE owner = \(owner)\(unescaped: host)").first?.decode(Int64.self) ?? 0)
    }

    func readBatch(_ kind: SealKind, owner: String, after cursor: String, limit: Int, maxBytes: Int, conflictingWith target: String?) throws
        -> [MigrationRowRead]
    {
        let table = PostgresSession.table(kind)
        let host = PostgresSession.hostFilter(kind)
        let version = kind == .global ? "a.version" : "NULL::bigint"
        let conflicting =
            target == nil ? "" : " AND EXISTS (SELECT 1 FROM \(table) b WHERE b.owner = $4 AND b.name = a.name\(host.replacingOccurrences(of: "host", with: "b.host")))"
        var binds = PostgresBindings()
        binds.append(owner)
        binds.append(cursor)
        binds.append(Int64(limit))
        if let target { binds.append(target) }
        binds.append(Int64(maxBytes))
        let maxBytesParameter = target == nil ? "$4" : "$5"
        // The rows up to the one that reaches `maxBytes` (a running sum: no value past it is sent).
        let rows = try query(
            PostgresQuery(
                unsafeSQL: """
                    SELECT name, version, sealed FROM (
                        SELECT a.name AS name, \(version) AS version, a.sealed AS sealed,
                            SUM(octet_length(a.sealed)) OVER (ORDER BY a.name) - octet_length(a.sealed) AS before
                        FROM \(table) a WHERE a.owner = $1 AND a.name > $2\(host.replacingOccurrences(of: "host", with: "a.host"))\(conflicting)
                        ORDER BY a.name LIMIT $3
                    ) batch WHERE before < \(maxBytesParameter) ORDER BY name
                    """, binds: binds))
        return try rows.map {
            let (name, version, sealed) = try $0.decode((String, Int64?, Data).self)
            return MigrationRowRead(name: name, version: version, sealed: sealed)
        }
    }

    func rows(_ kind: SealKind, owner: String, names: [String]) throws -> [String: MigrationRowRead] {
        guard !names.isEmpty else { return [:] }
        let table = PostgresSession.table(kind)
        let host = PostgresSession.hostFilter(kind)
        let version = kind == .global ? "version" : "NULL::bigint"
        var found: [String: MigrationRowRead] = [:]
        for row in try query(
            "SELECT name, \(unescaped: version), sealed FROM \(unescaped: table) WHERE owner = \(owner) AND name = ANY(\(names))\(unescaped: host)")
        {
            let (name, version, sealed) = try row.decode((String, Int64?, Data).self)
            found[name] = MigrationRowRead(name: name, version: version, sealed: sealed)
        }
        return found
    }

    func reserveVersions(owner: String, count: Int) throws -> Int64? {
        try query("UPDATE owner SET lastVersion = lastVersion + \(Int64(count)) WHERE name = \(owner) RETURNING lastVersion").first?
            .decode(Int64.self)
    }

    func write(_ kind: SealKind, owner: String, inserts: [MigrationRowWrite], updates: [MigrationRowWrite]) throws {
        var delta = OwnerUsage()
        if !inserts.isEmpty {
            let names = inserts.map(\.name)
            let sealed = inserts.map { ByteBuffer(bytes: $0.sealed) }
            if kind == .global {
                let versions = inserts.map { $0.version ?? 0 }
                try execute(
                    """
                    INSERT INTO global (owner, name, version, sealed)
                    SELECT \(owner), name, version, sealed FROM unnest(\(names)::text[], \(versions)::bigint[], \(sealed)::bytea[]) AS u(name, version, sealed)
                    """)
                delta.globals += Int64(inserts.count)
            } else {
                try execute(
                    """
                    INSERT INTO bookmark (owner, name, host, sealed)
                    SELECT \(owner), name, \(PostgresStore.bookmarkHost), sealed FROM unnest(\(names)::text[], \(sealed)::bytea[]) AS u(name, sealed)
                    """)
                delta.bookmarks += Int64(inserts.count)
            }
            delta.bytes += inserts.reduce(Int64(0)) { $0 + Int64($1.name.utf8.count + $1.sealed.count) }
        }
        if !updates.isEmpty {
            let table = PostgresSession.table(kind)
            let host = PostgresSession.hostFilter(kind)
            let names = updates.map(\.name)
            let sealed = updates.map { ByteBuffer(bytes: $0.sealed) }
            var old: [String: Int64] = [:]
            for row in try query(
                """
                SELECT name, octet_length(sealed)::bigint FROM \(unescaped: table) WHERE owner = \(owner) AND name = ANY(\(names))\(unescaped: host)
                FOR UPDATE
                """)
            {
                let (name, size) = try row.decode((String, Int64).self)
                old[name] = size
            }
            let changed: [PostgresRow]
            if kind == .global {
                let versions = updates.map { $0.version ?? 0 }
                changed = try query(
                    """
                    UPDATE global g SET version = u.version, sealed = u.sealed
                    FROM unnest(\(names)::text[], \(versions)::bigint[], \(sealed)::bytea[]) AS u(name, version, sealed)
                    WHERE g.owner = \(owner) AND g.name = u.name RETURNING g.name
                    """)
            } else {
                changed = try query(
                    """
                    UPDATE bookmark b SET sealed = u.sealed FROM unnest(\(names)::text[], \(sealed)::bytea[]) AS u(name, sealed)
                    WHERE b.owner = \(owner) AND b.name = u.name AND b.host = \(PostgresStore.bookmarkHost) RETURNING b.name
                    """)
            }
            let sizes = Dictionary(updates.map { ($0.name, Int64($0.sealed.count)) }, uniquingKeysWith: { _, last in last })
            for row in changed {
                let name = try row.decode(String.self)
                delta.bytes += (sizes[name] ?? 0) - (old[name] ?? 0)
            }
        }
        try count(delta, owner: owner)
    }

    func delete(_ kind: SealKind, owner: String, names: [String]) throws {
        guard !names.isEmpty else { return }
        let table = PostgresSession.table(kind)
        let host = PostgresSession.hostFilter(kind)
        let sizes = try query(
            """
            DELETE FROM \(unescaped: table) WHERE owner = \(owner) AND name = ANY(\(names))\(unescaped: host)
            RETURNING (octet_length(name) + octet_length(sealed))::bigint
            """)
        var delta = OwnerUsage(bytes: -(try sizes.reduce(Int64(0)) { $0 + (try $1.decode(Int64.self)) }))
        if kind == .global { delta.globals = -Int64(sizes.count) } else { delta.bookmarks = -Int64(sizes.count) }
        try count(delta, owner: owner)
    }

    /// Adds `delta` to the owner's usage counters without checking its quota: what the
    /// migration moves was counted against the old owner, and is counted, never refused, here
    /// (as SQLite's triggers count it).
    private func count(_ delta: OwnerUsage, owner: String) throws {
        guard delta.bytes != 0 || delta.globals != 0 || delta.bookmarks != 0 else { return }
        try execute("INSERT INTO ownerUsage (owner) VALUES (\(owner)) ON CONFLICT DO NOTHING")
        try execute(
            """
            UPDATE ownerUsage SET bytes = bytes + \(delta.bytes), globals = globals + \(delta.globals), bookmarks = bookmarks + \(delta.bookmarks)
            WHERE owner = \(owner)
            """)
    }

    // MARK: - The record

    private func stored(_ row: PostgresRow?) throws -> MigrationRecord.Stored? {
        guard let row else { return nil }
        let (id, options, phase, cursor, start, copied, counts) = try row.decode((Int64, String, String, String, Int64, Int64?, String).self)
        return MigrationRecord.Stored(
            id: id, options: options, phase: phase, cursor: cursor, sourceStartVersion: start, targetCopiedVersion: copied, counts: counts)
    }

    func unfinishedMigration(source: String, target: String, origin: String) throws -> MigrationRecord.Stored? {
        try stored(
            try query(
                """
                SELECT id, options, phase, cursor, sourceStartVersion, targetCopiedVersion, counts FROM ownerMigration
                WHERE source = \(source) AND target = \(target) AND origin = \(origin) AND finished IS NULL
                """
            ).first)
    }

    func loadMigration(id: Int64, forUpdate: Bool) throws -> MigrationRecord.Stored? {
        try stored(
            try query(
                """
                SELECT id, options, phase, cursor, sourceStartVersion, targetCopiedVersion, counts FROM ownerMigration
                WHERE id = \(id)\(unescaped: forUpdate ? " FOR UPDATE" : "")
                """
            ).first)
    }

    func createMigration(
        source: String, target: String, origin: String, options: String, phase: String, sourceStartVersion: Int64, counts: String, now: String
    ) throws -> Int64 {
        guard
            let id = try query(
                """
                INSERT INTO ownerMigration (source, target, origin, options, phase, cursor, sourceStartVersion, counts, started, updated)
                VALUES (\(source), \(target), \(origin), \(options), \(phase), '', \(sourceStartVersion), \(counts), \(now), \(now)) RETURNING id
                """
            ).first?.decode(Int64.self)
        else { throw StoreError(.databaseError, "\(store.location.display): the migration's record was not created") }
        return id
    }

    func saveMigration(
        id: Int64, phase: String, cursor: String, counts: String, targetCopiedVersion: Int64?, now: String, finished: String?
    ) throws {
        try execute(
            """
            UPDATE ownerMigration SET phase = \(phase), cursor = \(cursor), counts = \(counts), targetCopiedVersion = \(targetCopiedVersion),
                updated = \(now), finished = \(finished)
            WHERE id = \(id)
            """)
    }

    func recordItem(migration: Int64, kind: SealKind, _ item: MigrationItemReport) throws {
        try execute(
            """
            INSERT INTO ownerMigrationItem (migration, kind, name, outcome, targetName, errorKind, message, kept)
            VALUES (\(migration), \(kind.rawValue), \(item.name), \(item.outcome), \(item.targetName), \(item.errorKind), \(item.message), \(item.kept))
            ON CONFLICT (migration, kind, name) DO UPDATE SET
                outcome = excluded.outcome, targetName = excluded.targetName, errorKind = excluded.errorKind,
                message = excluded.message, kept = excluded.kept
            """)
    }

    func markKept(migration: Int64, kind: SealKind, name: String, reason: String) throws {
        try execute(
            """
            INSERT INTO ownerMigrationItem (migration, kind, name, outcome, kept) VALUES (\(migration), \(kind.rawValue), \(name), 'migrated', \(reason))
            ON CONFLICT (migration, kind, name) DO UPDATE SET kept = excluded.kept
            """)
    }

    func recordWritten(migration: Int64, versions: ClosedRange<Int64>) throws {
        try execute(
            "INSERT INTO ownerMigrationWrite (migration, first, last) VALUES (\(migration), \(versions.lowerBound), \(versions.upperBound))")
    }

    private func report(_ row: PostgresRow) throws -> MigrationItemReport {
        let (kind, name, outcome, targetName, errorKind, message, kept) = try row.decode(
            (String, String, String, String?, String?, String?, String?).self)
        return MigrationItemReport(
            kind: kind, name: name, outcome: outcome, targetName: targetName, errorKind: errorKind, message: message, kept: kept)
    }

    func items(migration: Int64, kind: SealKind, from first: String, through last: String) throws -> [MigrationItemReport] {
        try query(
            """
            SELECT kind, name, outcome, targetName, errorKind, message, kept FROM ownerMigrationItem
            WHERE migration = \(migration) AND kind = \(kind.rawValue) AND name >= \(first) AND name <= \(last)
            """
        ).map(report)
    }

    func reportedItems(migration: Int64, limit: Int) throws -> (items: [MigrationItemReport], total: Int) {
        let total = try query("SELECT COUNT(*) FROM ownerMigrationItem WHERE migration = \(migration)").first?.decode(Int64.self) ?? 0
        let items = try query(
            """
            SELECT kind, name, outcome, targetName, errorKind, message, kept FROM ownerMigrationItem
            WHERE migration = \(migration) ORDER BY kind DESC, name LIMIT \(Int64(limit))
            """
        ).map(report)
        return (items, Int(total))
    }

    func keptChange(source: String, target: String, name: String, targetVersion: Int64) throws -> (hasRanges: Bool, inRange: Bool, copied: Int64?)? {
        guard
            let row = try query(
                """
                SELECT m.targetCopiedVersion,
                       EXISTS (SELECT 1 FROM ownerMigrationWrite w WHERE w.migration = m.id),
                       EXISTS (SELECT 1 FROM ownerMigrationWrite w WHERE w.migration = m.id AND \(targetVersion) BETWEEN w.first AND w.last)
                FROM ownerMigrationItem i JOIN ownerMigration m ON m.id = i.migration
                WHERE m.source = \(source) AND m.target = \(target) AND m.origin = 'local' AND m.finished IS NOT NULL
                  AND i.kind = 'global' AND i.name = \(name) AND i.targetName IS NULL
                  AND starts_with(i.kept, \(MigrationRecord.changedDuringMigrationPrefix))
                ORDER BY m.id DESC LIMIT 1
                """
            ).first
        else { return nil }
        let (copied, hasRanges, inRange) = try row.decode((Int64?, Bool, Bool).self)
        return (hasRanges, inRange, copied)
    }
}

extension PostgresStore {
    /// The advisory lock's key of the pair (`migrationLock`): the first 8 bytes of
    /// SHA-256("extrun-migrate\n" ‖ from ‖ "\n" ‖ to), big-endian (`store check` names it).
    static func migrationLockKey(from: String, to: String) -> Int64 {
        let digest = Array(SHA256.hash(data: Data(("extrun-migrate\n" + from + "\n" + to).utf8)))
        return digest.prefix(8).reduce(Int64(0)) { ($0 << 8) | Int64($1) }
    }

    /// One migration of the pair (`from`, `to`) at a time among every process and host using
    /// this server: a session advisory lock on a connection of its own, held while the value
    /// lives and released by the server when that connection ends, however it ends. (The
    /// flock of MigrationLock.swift covers one home; this covers the shared store.)
    func migrationLock(from: String, to: String) throws -> PostgresMigrationLock {
        let key = PostgresStore.migrationLockKey(from: from, to: to)
        let holder = try PostgresStore(location: location, migrating: false)
        let locked = try holder.read { session in
            try session.query("SELECT pg_try_advisory_lock(\(key))").first?.decode(Bool.self) ?? false
        }
        guard locked else {
            throw StoreError(
                .storeBusy,
                "a migration from '\(from)' to '\(to)' is already running on the store's server \(location.display) (another process or host holds its lock); this one changed nothing. Let it finish (it prints its summary), then run this command again if anything is left to do",
                details: ["store": .string(location.display), "from": .string(from), "to": .string(to)])
        }
        return PostgresMigrationLock(holder: holder, key: key)
    }
}

/// A migration's advisory lock, released with `pg_advisory_unlock` when the value goes, before
/// its connection closes: a connection's close is not waited for, and a run started right after
/// (a second run of the same command) found the lock still held (storeBusy).
final class PostgresMigrationLock: @unchecked Sendable {
    let holder: PostgresStore
    let key: Int64

    init(holder: PostgresStore, key: Int64) {
        self.holder = holder
        self.key = key
    }

    deinit {
        // If this fails, the server releases the lock when the connection ends.
        _ = try? holder.read { session in try session.query("SELECT pg_advisory_unlock(\(key))") }
    }
}
