import ExtrunProtocol
import Foundation
import PostgresNIO

/// The store's operations on PostgreSQL, one per operation of the `Store` API that the
/// SQLite backend does with GRDB (Globals.swift, Quotas.swift, Donations.swift, Store.swift).
/// The rows are the same: sealed bytes in, sealed bytes out; sealing stays above.
///
/// Exactness under concurrency: a global's write locks its owner's row first (the version
/// counter), so compare-and-set sees every committed write; a quota is charged by one
/// conditional UPDATE of the owner's usage row (`charge`), which PostgreSQL re-checks on the
/// newest row after waiting for a concurrent writer: never over, with no read-check-write.
extension PostgresStore {
    // MARK: - Owners

    func recordedOwner(_ owner: String) throws -> Store.RecordedOwner? {
        try read { session in
            guard
                let row = try session.query(
                    """
                    SELECT (SELECT keyFingerprint FROM owner WHERE name = \(owner)),
                        (SELECT COUNT(*) FROM global WHERE owner = \(owner)), (SELECT COUNT(*) FROM bookmark WHERE owner = \(owner))
                    """
                ).first
            else { return nil }
            let (fingerprint, globals, bookmarks) = try row.decode((String?, Int64, Int64).self)
            if fingerprint == nil && globals == 0 && bookmarks == 0 { return nil }
            return Store.RecordedOwner(fingerprint: fingerprint, globals: Int(globals), bookmarks: Int(bookmarks))
        }
    }

    func fingerprint(of owner: String) throws -> String? {
        try read { session in
            try session.query("SELECT keyFingerprint FROM owner WHERE name = \(owner)").first?.decode(String.self)
        }
    }

    /// Records the owner's key fingerprint unless one is recorded; returns the recorded one.
    func recordOwner(_ owner: String, fingerprint: String, created: String) throws -> String? {
        try transaction { session in
            try session.execute(
                "INSERT INTO owner (name, keyFingerprint, created) VALUES (\(owner), \(fingerprint), \(created)) ON CONFLICT DO NOTHING")
            return try session.query("SELECT keyFingerprint FROM owner WHERE name = \(owner)").first?.decode(String.self)
        }
    }

    func ownerNames() throws -> [String] {
        try read { session in try session.query("SELECT name FROM owner").map { try $0.decode(String.self) } }
    }

    // MARK: - Globals

    func global(owner: String, name: String) throws -> (version: Int64, sealed: Data)? {
        try read { session in
            try session.query("SELECT version, sealed FROM global WHERE owner = \(owner) AND name = \(name)").first.map {
                try $0.decode((Int64, Data).self)
            }
        }
    }

    func globals(owner: String, after: String, limit: Int?) throws -> [(name: String, version: Int64, size: Int64)] {
        try read { session in
            let rows: [PostgresRow]
            if let limit {
                rows = try session.query(
                    """
                    SELECT name, version, octet_length(sealed)::bigint FROM global WHERE owner = \(owner) AND name > \(after)
                    ORDER BY name LIMIT \(Int64(limit))
                    """)
            } else {
                rows = try session.query(
                    "SELECT name, version, octet_length(sealed)::bigint FROM global WHERE owner = \(owner) AND name > \(after) ORDER BY name")
            }
            return try rows.map { try $0.decode((String, Int64, Int64).self) }.map { (name: $0.0, version: $0.1, size: $0.2) }
        }
    }

    /// A page of the owner's globals with their sealed values, in name order after `after`.
    func globalRows(owner: String, after: String, limit: Int) throws -> [(name: String, sealed: Data)] {
        try read { session in
            try session.query(
                "SELECT name, sealed FROM global WHERE owner = \(owner) AND name > \(after) ORDER BY name LIMIT \(Int64(limit))"
            ).map {
                let (name, sealed) = try $0.decode((String, Data).self)
                return (name: name, sealed: sealed)
            }
        }
    }

    /// What `importGlobals`' body reads and writes through, in its transaction: `current`
    /// (called once for each global of the document: a name given twice is refused there)
    /// and `put` (a new or changed value, with the sealed value `current` found).
    struct GlobalsImport {
        let current: (String) throws -> Data?
        let put: (String, Data, Data?) throws -> Void
    }

    /// A globals document's import in one transaction (GlobalsDocument.swift): `body` reads the
    /// document and writes through the `GlobalsImport` it is given, returning what to call the
    /// import in a `quotaExceeded`; with `replace`, the owner's globals the document did not
    /// name are deleted (their count to `deleted`). The quota is charged once, for the whole import.
    func importGlobals(owner: String, replace: Bool, quota: OwnerQuota, _ body: (GlobalsImport) throws -> String, deleted: (Int) -> Void) throws {
        try transaction { session in
            try session.execute("SELECT lastVersion FROM owner WHERE name = \(owner) FOR UPDATE")
            try session.execute("CREATE TEMP TABLE importedName (name text COLLATE \"C\" PRIMARY KEY) ON COMMIT DROP")
            var delta = OwnerUsage()
            let access = GlobalsImport(
                current: { name in
                    guard try session.execute("INSERT INTO importedName (name) VALUES (\(name)) ON CONFLICT DO NOTHING") == 1 else {
                        throw StoreError(
                            .invalidDocument, "the globals document is invalid: global '\(name)' is in it twice; nothing was imported",
                            details: ["owner": .string(owner), "name": .string(name)])
                    }
                    return try session.query("SELECT sealed FROM global WHERE owner = \(owner) AND name = \(name)").first?.decode(Data.self)
                },
                put: { name, sealed, previous in
                    guard
                        let version = try session.query(
                            "UPDATE owner SET lastVersion = lastVersion + 1 WHERE name = \(owner) RETURNING lastVersion"
                        ).first?.decode(Int64.self)
                    else { throw StoreError(.databaseError, "owner '\(owner)' has no row in the store's owner table") }
                    if let previous {
                        try session.execute("UPDATE global SET version = \(version), sealed = \(sealed) WHERE owner = \(owner) AND name = \(name)")
                        delta.bytes += Int64(sealed.count - previous.count)
                    } else {
                        try session.execute("INSERT INTO global (owner, name, version, sealed) VALUES (\(owner), \(name), \(version), \(sealed))")
                        delta.globals += 1
                        delta.bytes += Int64(name.utf8.count + sealed.count)
                    }
                })
            let what = try body(access)
            if replace {
                let rows = try session.query(
                    """
                    DELETE FROM global WHERE owner = \(owner) AND name NOT IN (SELECT name FROM importedName)
                    RETURNING (octet_length(name) + octet_length(sealed))::bigint
                    """)
                delta.globals -= Int64(rows.count)
                delta.bytes -= try rows.reduce(Int64(0)) { $0 + (try $1.decode(Int64.self)) }
                deleted(rows.count)
            }
            try charge(session, owner: owner, delta, quota: quota, what: what)
        }
    }

    /// Sets the global when `check` accepts its current version (nil: absent); returns the new version.
    func setGlobal(
        owner: String, name: String, sealed: Data, check: (Int64?) throws -> Void, quota: OwnerQuota, what: String
    ) throws -> Int64 {
        try transaction { session in
            // The owner's row first: every write of the owner waits here for the one before.
            guard
                let version = try session.query(
                    "UPDATE owner SET lastVersion = lastVersion + 1 WHERE name = \(owner) RETURNING lastVersion"
                ).first?.decode(Int64.self)
            else {
                throw StoreError(.databaseError, "owner '\(owner)' has no row in the store's owner table", details: ["owner": .string(owner)])
            }
            let current = try session.query(
                "SELECT version, (octet_length(name) + octet_length(sealed))::bigint FROM global WHERE owner = \(owner) AND name = \(name)"
            ).first.map { try $0.decode((Int64, Int64).self) }
            try check(current?.0)
            if current == nil {
                try session.execute("INSERT INTO global (owner, name, version, sealed) VALUES (\(owner), \(name), \(version), \(sealed))")
            } else {
                try session.execute("UPDATE global SET version = \(version), sealed = \(sealed) WHERE owner = \(owner) AND name = \(name)")
            }
            let size = Int64(name.utf8.count + sealed.count)
            try charge(
                session, owner: owner, OwnerUsage(bytes: size - (current?.1 ?? 0), globals: current == nil ? 1 : 0), quota: quota, what: what)
            return version
        }
    }

    /// Deletes the global when `check` accepts its current version; false if there was none.
    func deleteGlobal(owner: String, name: String, check: (Int64?) throws -> Void) throws -> Bool {
        try transaction { session in
            try session.execute("SELECT lastVersion FROM owner WHERE name = \(owner) FOR UPDATE")
            let current = try session.query(
                "SELECT version, (octet_length(name) + octet_length(sealed))::bigint FROM global WHERE owner = \(owner) AND name = \(name)"
            ).first.map { try $0.decode((Int64, Int64).self) }
            try check(current?.0)
            guard let current else { return false }
            try session.execute("DELETE FROM global WHERE owner = \(owner) AND name = \(name)")
            try charge(session, owner: owner, OwnerUsage(bytes: -current.1, globals: -1), quota: .builtIn, what: "")
            return true
        }
    }

    // MARK: - Bookmarks

    /// The bookmarks' `host` column (docs/scaling.md): '' for every bookmark so far, whose
    /// target is checked on each use (device, inode, birth), so that a host that does not
    /// have the same file finds the bookmark stale rather than another file.
    static let bookmarkHost = ""

    /// Adds the bookmark; `alreadyExists` when the owner has one by that name.
    func addBookmark(owner: String, name: String, sealed: Data, quota: OwnerQuota, what: String) throws {
        let host = PostgresStore.bookmarkHost
        try transaction { session in
            try session.execute("SELECT lastVersion FROM owner WHERE name = \(owner) FOR UPDATE")
            let inserted = try session.execute(
                """
                INSERT INTO bookmark (owner, name, host, sealed) VALUES (\(owner), \(name), \(host), \(sealed))
                ON CONFLICT (owner, name, host) DO NOTHING
                """)
            guard inserted == 1 else {
                throw StoreError(
                    .alreadyExists, "owner '\(owner)' already has a bookmark named '\(name)'", details: ["owner": .string(owner), "name": .string(name)])
            }
            try charge(session, owner: owner, OwnerUsage(bytes: Int64(name.utf8.count + sealed.count), bookmarks: 1), quota: quota, what: what)
        }
    }

    func bookmarkRows(owner: String) throws -> [(name: String, sealed: Data)] {
        let host = PostgresStore.bookmarkHost
        return try read { session in
            try session.query("SELECT name, sealed FROM bookmark WHERE owner = \(owner) AND host = \(host) ORDER BY name").map {
                let (name, sealed) = try $0.decode((String, Data).self)
                return (name: name, sealed: sealed)
            }
        }
    }

    func bookmarkSealed(owner: String, name: String) throws -> Data? {
        let host = PostgresStore.bookmarkHost
        return try read { session in
            try session.query("SELECT sealed FROM bookmark WHERE owner = \(owner) AND name = \(name) AND host = \(host)").first?.decode(Data.self)
        }
    }

    /// Removes the bookmark; false when there was none.
    func removeBookmark(owner: String, name: String) throws -> Bool {
        let host = PostgresStore.bookmarkHost
        return try transaction { session in
            let rows = try session.query(
                """
                DELETE FROM bookmark WHERE owner = \(owner) AND name = \(name) AND host = \(host)
                RETURNING (octet_length(name) + octet_length(sealed))::bigint
                """)
            guard let size = try rows.first?.decode(Int64.self) else { return false }
            try charge(session, owner: owner, OwnerUsage(bytes: -size, bookmarks: -1), quota: .builtIn, what: "")
            return true
        }
    }

    /// Re-seals an existing bookmark (nothing when it was removed meanwhile).
    func updateBookmark(owner: String, name: String, sealed: Data) throws {
        let host = PostgresStore.bookmarkHost
        try transaction { session in
            try session.execute("SELECT lastVersion FROM owner WHERE name = \(owner) FOR UPDATE")
            guard
                let old = try session.query(
                    "SELECT octet_length(sealed)::bigint FROM bookmark WHERE owner = \(owner) AND name = \(name) AND host = \(host)"
                ).first?.decode(Int64.self)
            else { return }
            try session.execute("UPDATE bookmark SET sealed = \(sealed) WHERE owner = \(owner) AND name = \(name) AND host = \(host)")
            // Counted, not refused (as the SQLite store's trigger): a refresh adds no bookmark.
            try charge(session, owner: owner, OwnerUsage(bytes: Int64(sealed.count) - old), quota: PostgresStore.noLimit, what: "")
        }
    }

    // MARK: - Quotas

    /// Limits no write reaches: for changes that are counted but never refused.
    static let noLimit = OwnerQuota(bytes: .max, globals: .max, bookmarks: .max, donations: .max, fileBytes: .max)

    func usage(_ session: PostgresSession, owner: String) throws -> OwnerUsage {
        guard
            let row = try session.query(
                "SELECT bytes, globals, bookmarks, donations, fileBytes FROM ownerUsage WHERE owner = \(owner)"
            ).first
        else { return OwnerUsage() }
        let (bytes, globals, bookmarks, donations, fileBytes) = try row.decode((Int64, Int64, Int64, Int64, Int64).self)
        return OwnerUsage(bytes: bytes, globals: globals, bookmarks: bookmarks, donations: donations, fileBytes: fileBytes)
    }

    func overrides(_ session: PostgresSession, owner: String) throws -> [String: Int64] {
        guard
            let row = try session.query(
                "SELECT bytes, globals, bookmarks, donations, fileBytes FROM ownerQuota WHERE owner = \(owner)"
            ).first
        else { return [:] }
        let values = try row.decode((Int64?, Int64?, Int64?, Int64?, Int64?).self)
        var found: [String: Int64] = [:]
        for (field, value) in zip(["bytes", "globals", "bookmarks", "donations", "fileBytes"], [values.0, values.1, values.2, values.3, values.4]) {
            if let value { found[field] = value }
        }
        return found
    }

    func quotaState(owner: String) throws -> (overrides: [String: Int64], usage: OwnerUsage) {
        try read { session in (try overrides(session, owner: owner), try usage(session, owner: owner)) }
    }

    func setQuota(owner: String, _ changes: [String: Int64?]) throws {
        try transaction { session in
            try session.execute("INSERT INTO ownerQuota (owner) VALUES (\(owner)) ON CONFLICT DO NOTHING")
            for (field, value) in changes where OwnerQuota.fieldNames.contains(field) {
                var binds = PostgresBindings()
                binds.append(value)
                binds.append(owner)
                try session.execute(PostgresQuery(unsafeSQL: "UPDATE ownerQuota SET \(field) = $1 WHERE owner = $2", binds: binds))
            }
        }
    }

    /// Adds `delta` to the owner's usage in one conditional UPDATE: refused (`quotaExceeded`,
    /// which rolls the transaction back) when a field that grows would pass its limit. A
    /// change that shrinks what is over a lowered limit goes through.
    func charge(_ session: PostgresSession, owner: String, _ delta: OwnerUsage, quota defaults: OwnerQuota, what: String) throws {
        try session.execute("INSERT INTO ownerUsage (owner) VALUES (\(owner)) ON CONFLICT DO NOTHING")
        var quota = defaults
        let growing = OwnerQuota.fieldNames.contains { delta[$0] > 0 }
        if growing {
            for (field, value) in try overrides(session, owner: owner) { quota[field] = value }
        }
        let changed = try session.execute(
            """
            UPDATE ownerUsage SET bytes = bytes + \(delta.bytes), globals = globals + \(delta.globals),
                bookmarks = bookmarks + \(delta.bookmarks), donations = donations + \(delta.donations),
                fileBytes = GREATEST(0, fileBytes + \(delta.fileBytes))
            WHERE owner = \(owner)
                AND (\(delta.bytes) <= 0 OR bytes + \(delta.bytes) <= \(quota.bytes))
                AND (\(delta.globals) <= 0 OR globals + \(delta.globals) <= \(quota.globals))
                AND (\(delta.bookmarks) <= 0 OR bookmarks + \(delta.bookmarks) <= \(quota.bookmarks))
                AND (\(delta.donations) <= 0 OR donations + \(delta.donations) <= \(quota.donations))
                AND (\(delta.fileBytes) <= 0 OR fileBytes + \(delta.fileBytes) <= \(quota.fileBytes))
            """)
        guard changed == 0 else { return }
        let before = try usage(session, owner: owner)
        let field = OwnerQuota.fieldNames.first { delta[$0] > 0 && before[$0] + delta[$0] > quota[$0] } ?? "bytes"
        throw Quotas.exceeded(owner: owner, field: field, limit: quota[field], before: before[field], adding: delta[field], what: what)
    }

    // MARK: - Donations

    /// One transaction for the batch, a savepoint each (as the SQLite store's `writeDonations`).
    func writeDonations(_ batch: [DonationGroupCommit.Entry], quota: OwnerQuota) -> [Result<Void, StoreError>] {
        var results: [Result<Void, StoreError>] = []
        do {
            try transaction { session in
                results = []
                for entry in batch {
                    let donation = entry.donation
                    let savepoint = batch.count > 1
                    do {
                        if savepoint { try session.execute("SAVEPOINT donation") }
                        // The usage row locked first: donations of one owner are counted one after another.
                        try session.execute("INSERT INTO ownerUsage (owner) VALUES (\(donation.owner)) ON CONFLICT DO NOTHING")
                        try session.execute("SELECT owner FROM ownerUsage WHERE owner = \(donation.owner) FOR UPDATE")
                        let old = try session.query(
                            """
                            SELECT (octet_length(identifier) + octet_length(sealed))::bigint FROM donation
                            WHERE owner = \(donation.owner) AND identifier = \(donation.identifier)
                            """
                        ).first?.decode(Int64.self)
                        try session.execute(
                            """
                            INSERT INTO donation (owner, identifier, groupIdentifier, intent, plugin, source, created, sealed)
                            VALUES (\(donation.owner), \(donation.identifier), \(donation.groupIdentifier), \(donation.intent),
                                \(donation.plugin), \(donation.source), \(donation.created), \(entry.sealed))
                            ON CONFLICT (owner, identifier) DO UPDATE SET
                                groupIdentifier = excluded.groupIdentifier, intent = excluded.intent, plugin = excluded.plugin,
                                source = excluded.source, created = excluded.created, sealed = excluded.sealed
                            """)
                        let size = Int64(donation.identifier.utf8.count + entry.sealed.count)
                        try charge(
                            session, owner: donation.owner, OwnerUsage(bytes: size - (old ?? 0), donations: old == nil ? 1 : 0), quota: quota,
                            what: "donating '\(donation.identifier)'")
                        if savepoint { try session.execute("RELEASE SAVEPOINT donation") }
                        results.append(.success(()))
                    } catch {
                        // A lone donation's error ends its transaction; in a batch, only a
                        // server-side refusal stays with its entry (the rest go on).
                        guard savepoint, !PostgresStore.connectionLost(error), !PostgresStore.isRetryable(error) else { throw error }
                        try session.execute("ROLLBACK TO SAVEPOINT donation")
                        results.append(.failure(storeError(error)))
                    }
                }
            }
        } catch {
            let failure = storeError(error)
            results = Array(repeating: .failure(failure), count: batch.count)
        }
        return results
    }

    func donationRows(owner: String, intent: String?) throws -> [PostgresRow] {
        try read { session in
            if let intent {
                return try session.query(
                    """
                    SELECT identifier, groupIdentifier, intent, plugin, source, created, sealed FROM donation
                    WHERE owner = \(owner) AND intent = \(intent) ORDER BY id
                    """)
            }
            return try session.query(
                "SELECT identifier, groupIdentifier, intent, plugin, source, created, sealed FROM donation WHERE owner = \(owner) ORDER BY id")
        }
    }

    /// Deletes the owner's donations that `condition` selects (`identifier` or `group`), giving
    /// their usage back; returns how many, and the other owners that have such rows when none was the owner's.
    func deleteDonations(owner: String, identifier: String? = nil, group: String? = nil) throws -> (deleted: Int, others: [String]) {
        try transaction { session in
            let rows: [PostgresRow]
            let others: [PostgresRow]
            if let identifier {
                rows = try session.query(
                    """
                    DELETE FROM donation WHERE owner = \(owner) AND identifier = \(identifier)
                    RETURNING (octet_length(identifier) + octet_length(sealed))::bigint
                    """)
                others =
                    rows.isEmpty
                    ? try session.query("SELECT owner FROM donation WHERE identifier = \(identifier) AND owner <> \(owner) ORDER BY owner") : []
            } else if let group {
                rows = try session.query(
                    """
                    DELETE FROM donation WHERE owner = \(owner) AND groupIdentifier = \(group)
                    RETURNING (octet_length(identifier) + octet_length(sealed))::bigint
                    """)
                others =
                    rows.isEmpty
                    ? try session.query(
                        "SELECT DISTINCT owner FROM donation WHERE groupIdentifier = \(group) AND owner <> \(owner) ORDER BY owner") : []
            } else {
                rows = try session.query(
                    "DELETE FROM donation WHERE owner = \(owner) RETURNING (octet_length(identifier) + octet_length(sealed))::bigint")
                others = []
            }
            let bytes = try rows.reduce(Int64(0)) { $0 + (try $1.decode(Int64.self)) }
            if !rows.isEmpty {
                try charge(session, owner: owner, OwnerUsage(bytes: -bytes, donations: -Int64(rows.count)), quota: .builtIn, what: "")
            }
            return (rows.count, try others.map { try $0.decode(String.self) })
        }
    }

    func donationOwners() throws -> [String] {
        try read { session in try session.query("SELECT DISTINCT owner FROM donation ORDER BY owner").map { try $0.decode(String.self) } }
    }
}
