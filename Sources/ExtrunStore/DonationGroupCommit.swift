import ExtrunProtocol
import Foundation
import GRDB
import GRDBSQLite

/// Group commit for donations: the donations that threads of one process (the warm
/// pool of `extrun serve`, `extrun mcp`, `extrun batch`) make at the same time are
/// written in one transaction by whichever of them gets there first, instead of one
/// transaction each behind the connection's lock (8 callers donated ~900 intents/s
/// one by one: docs/benchmarks.md, "extrun serve"). Every donation keeps its own outcome
/// (a savepoint each: one over its owner's quota fails alone), and `commit` returns
/// only once the transaction holding it is committed, so a report never says
/// "donated" for a row that is not in the store. A lone donation is a batch of one.
final class DonationGroupCommit: @unchecked Sendable {
    /// One donation waiting: its row, sealed, and, once written, its outcome.
    final class Entry: @unchecked Sendable {
        let donation: Donation
        let sealed: Data
        let durable: Bool
        /// The deadline bound to the donating thread (`StoreDeadline.current`), if any.
        let deadline: UInt64?
        /// Set and read under the group commit's lock.
        var result: Result<Void, StoreError>?

        init(donation: Donation, sealed: Data, durable: Bool, deadline: UInt64? = StoreDeadline.current) {
            self.donation = donation
            self.sealed = sealed
            self.durable = durable
            self.deadline = deadline
        }
    }

    private let condition = NSCondition()
    private var pending: [Entry] = []
    private var writing = false
    /// Batches written and donations in them (read under the lock: `counts`).
    private var batches = 0
    private var written = 0

    /// Adds `entry` and waits until a batch holding it is written (by this thread when
    /// no other is writing). Throws the entry's own error. `write` returns one result per
    /// entry of its batch, in order; they are set under the lock.
    ///
    /// Deadlines hold as without batching. A batch holds either donations bound to a
    /// run's deadline (waiting for a lock no longer than the earliest of them) or
    /// donations with none (waiting up to the busy timeout), never both, so that a short
    /// deadline cuts short only the waits that carry one. A donation whose deadline
    /// passes before a batch takes it leaves with `storeBusy`, nothing written.
    func commit(
        _ entry: Entry, file: String = "", write: ([Entry]) -> [Result<Void, StoreError>]
    ) throws(StoreError) {
        condition.lock()
        pending.append(entry)
        var spins = 0
        while entry.result == nil {
            if let deadline = entry.deadline, StoreDeadline.now() >= deadline,
                let index = pending.firstIndex(where: { $0 === entry })
            {
                // Past its deadline and not taken into a batch yet: it leaves the queue.
                pending.remove(at: index)
                condition.unlock()
                throw StoreError(
                    .storeBusy,
                    "\(file) was busy with other donations of this process until the run's deadline; nothing was changed, try again",
                    details: ["file": .string(file)])
            }
            if writing {
                // A batch is being written: first give the CPU to the other runnable threads
                // a few times (the batch often commits meanwhile), and only then sleep. Asleep,
                // each donation cost a futex wake-up, and a switch back, from the writer's
                // broadcast: 4.2 sleeps per intent against 2.5 with 8 callers on 2 CPUs, and
                // 8% fewer intents/s (docs/benchmarks.md, "The donation's own cost"). With an
                // idle CPU a yield returns at once: at most `waitYields` of them, a few µs.
                if spins < Self.waitYields {
                    spins += 1
                    condition.unlock()
                    sched_yield()
                    condition.lock()
                    continue
                }
                if let deadline = entry.deadline, pending.contains(where: { $0 === entry }) {
                    let now = StoreDeadline.now()
                    if now < deadline { _ = condition.wait(until: Date(timeIntervalSinceNow: Double(deadline - now) / 1e9)) }
                } else {
                    condition.wait()
                }
                continue
            }
            writing = true
            // Donations on their way join this batch: the writer gives its CPU to the other
            // runnable threads (callers whose plugin has answered) while that brings more in,
            // up to `lingerYields` times. With 8 callers on 2 CPUs a batch held 1.5 donations
            // without it and 4.9 with it, and each batch writes the same few pages (the
            // tables' and indexes' last ones): less of the log to write and fold per donation
            // (docs/benchmarks.md, "The donation's own cost"). Alone, it is one `sched_yield`.
            for _ in 0..<Self.lingerYields {
                let before = pending.count
                condition.unlock()
                sched_yield()
                condition.lock()
                if pending.count == before { break }
            }
            // The donations of the same kind as the first waiting one (bound to a deadline
            // or not); the others wait for the next batch.
            let bound = pending[0].deadline != nil
            let batch = pending.filter { ($0.deadline != nil) == bound }
            pending.removeAll { ($0.deadline != nil) == bound }
            condition.unlock()
            let earliest = batch.compactMap(\.deadline).min()
            let results = StoreDeadline.$current.withValue(earliest) { write(batch) }
            condition.lock()
            for (item, result) in zip(batch, results) { item.result = result }
            // A writer that returned too few results: the rest did not happen.
            for item in batch where item.result == nil {
                item.result = .failure(StoreError(.databaseError, "\(file): the donation was not written (no result for it)"))
            }
            batches += 1
            written += batch.count
            writing = false
            condition.broadcast()
        }
        let result = entry.result
        condition.unlock()
        if case .failure(let error) = result { throw error }
    }

    /// The most times a writer yields its CPU for donations on their way (`commit`).
    static let lingerYields = 3
    /// The most times a waiting donation yields its CPU before it sleeps (`commit`).
    static let waitYields = 5

    /// Donations waiting for a batch now (for tests).
    var pendingCount: Int {
        condition.lock()
        defer { condition.unlock() }
        return pending.count
    }

    var counts: (batches: Int, donations: Int) {
        condition.lock()
        defer { condition.unlock() }
        return (batches, written)
    }
}

extension Store {
    /// Writes a batch of sealed donations in one transaction, a savepoint each; returns each
    /// entry's result, in order. A failure of the transaction itself fails every entry of
    /// it with that failure (an error that ended the transaction, such as a full disk,
    /// keeps its own kind).
    func writeDonations(_ batch: [DonationGroupCommit.Entry]) -> [Result<Void, StoreError>] {
        let durable = batch.contains { $0.durable }
        do {
            let quota = try quotaDefaultsForWrite()
            if case .postgres(let server) = backend { return server.writeDonations(batch, quota: quota) }
            // Not durable: at synchronous = NORMAL, which the connection keeps until a
            // durable write sets FULL again (StoreDatabase.access(durable:)); no other write
            // runs with the relaxed setting.
            return try database.access(durable: durable) { db in
                try DonationBatchWriter(db, path: databasePath, quotaDefaults: quota).write(batch)
            }
        } catch {
            let failure = error as? StoreError ?? StoreDatabase.storeError(error, path: databasePath)
            return Array(repeating: .failure(failure), count: batch.count)
        }
    }

    /// How many donation batches this connection wrote, and how many donations they held.
    public var donationBatchCounts: (batches: Int, donations: Int) { donationCommits.counts }
}

/// One batch of donations into the SQLite store: `BEGIN IMMEDIATE`, per donation a
/// savepoint, the upsert and the owner's quota, then one `COMMIT`. Its statements are
/// compiled once per connection (GRDB's statement cache) and the per-donation ones run
/// through SQLite's C interface: through GRDB's rows and arguments, the quota's reads
/// and the upsert cost several times what SQLite itself spends on them
/// (docs/benchmarks.md, "The donation's own cost"). The transaction's own statements
/// (begin, savepoints, commit, rollback) go through GRDB, which follows the
/// transaction's state.
///
/// The quota is checked as `Quotas.enforce` does, with fewer reads: an owner's overrides
/// once per batch (the write lock is held, nothing else changes them), its usage before
/// its first donation of the batch, then after each donation (the triggers keep it); the
/// usage after one donation is the usage before the owner's next, or, when the savepoint
/// was rolled back, the one before stays.
struct DonationBatchWriter {
    let db: Database
    let path: String
    let quotaDefaults: OwnerQuota
    let connection: OpaquePointer
    let insert: Statement
    let usage: Statement
    let overrides: Statement

    /// The statements' SQL, distinct from the texts other code runs through GRDB: these
    /// cached statements are only ever run here, through the C interface.
    static let insertSQL = """
        INSERT INTO donation (owner, identifier, groupIdentifier, intent, plugin, source, created, sealed)
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
        ON CONFLICT (owner, identifier) DO UPDATE SET
            groupIdentifier = excluded.groupIdentifier, intent = excluded.intent, plugin = excluded.plugin,
            source = excluded.source, created = excluded.created, sealed = excluded.sealed
        """
    static let usageSQL = "SELECT u.bytes, u.globals, u.bookmarks, u.donations, u.fileBytes FROM ownerUsage AS u WHERE u.owner = ?1"
    static let overridesSQL = "SELECT q.bytes, q.globals, q.bookmarks, q.donations, q.fileBytes FROM ownerQuota AS q WHERE q.owner = ?1"
    /// The columns of `usageSQL` and `overridesSQL`, in order.
    static let fields = ["bytes", "globals", "bookmarks", "donations", "fileBytes"]

    init(_ db: Database, path: String, quotaDefaults: OwnerQuota) throws {
        guard let connection = db.sqliteConnection else {
            throw StoreError(.databaseError, "\(path): the database connection is closed", details: ["file": .string(path)])
        }
        self.db = db
        self.path = path
        self.quotaDefaults = quotaDefaults
        self.connection = connection
        insert = try db.cachedStatement(sql: Self.insertSQL)
        usage = try db.cachedStatement(sql: Self.usageSQL)
        overrides = try db.cachedStatement(sql: Self.overridesSQL)
    }

    /// Writes the batch; each entry's result, in order. Throws what ended the whole
    /// transaction (nothing of the batch is written then).
    func write(_ batch: [DonationGroupCommit.Entry]) throws -> [Result<Void, StoreError>] {
        try db.cachedStatement(sql: "BEGIN IMMEDIATE TRANSACTION").execute()
        do {
            let results = try writeEntries(batch)
            try db.cachedStatement(sql: "COMMIT TRANSACTION").execute()
            return results
        } catch {
            if db.isInsideTransaction { try? db.cachedStatement(sql: "ROLLBACK TRANSACTION").execute() }
            throw error
        }
    }

    private func writeEntries(_ batch: [DonationGroupCommit.Entry]) throws -> [Result<Void, StoreError>] {
        // A lone donation needs no savepoint: its error rolls the transaction back.
        if batch.count == 1 {
            var usage: [String: OwnerUsage] = [:]
            var limits: [String: OwnerQuota] = [:]
            try write(batch[0], usage: &usage, limits: &limits)
            return [.success(())]
        }
        let savepoint = try db.cachedStatement(sql: "SAVEPOINT donation")
        let release = try db.cachedStatement(sql: "RELEASE SAVEPOINT donation")
        let rollBack = try db.cachedStatement(sql: "ROLLBACK TRANSACTION TO SAVEPOINT donation")
        var results: [Result<Void, StoreError>] = []
        results.reserveCapacity(batch.count)
        var usage: [String: OwnerUsage] = [:]
        var limits: [String: OwnerQuota] = [:]
        for entry in batch {
            try savepoint.execute()
            do {
                try write(entry, usage: &usage, limits: &limits)
                try release.execute()
                results.append(.success(()))
            } catch {
                let failure = StoreDatabase.storeError(error, path: path)
                // SQLite rolled the whole transaction back (I/O error, full disk): nothing
                // of the batch is written, and each says why.
                guard db.isInsideTransaction else { throw failure }
                try rollBack.execute()
                try release.execute()
                results.append(.failure(failure))
            }
        }
        return results
    }

    /// One donation: the upsert, then the owner's quota (`quotaExceeded` when it grew past it).
    private func write(_ entry: DonationGroupCommit.Entry, usage: inout [String: OwnerUsage], limits: inout [String: OwnerQuota]) throws {
        let donation = entry.donation
        let owner = donation.owner
        let before = try usage[owner] ?? read(owner)
        try upsert(entry)
        let after = try read(owner)
        let quota = try limits[owner] ?? quotaOf(owner)
        limits[owner] = quota
        for field in OwnerQuota.fieldNames where after[field] > quota[field] && after[field] > before[field] {
            throw Quotas.exceeded(
                owner: owner, field: field, limit: quota[field], before: before[field], adding: after[field] - before[field],
                what: "donating '\(donation.identifier)'")
        }
        usage[owner] = after
    }

    private func upsert(_ entry: DonationGroupCommit.Entry) throws {
        let statement = insert.sqliteStatement
        defer { sqlite3_clear_bindings(statement) }
        let donation = entry.donation
        bind(donation.owner, at: 1, of: statement)
        bind(donation.identifier, at: 2, of: statement)
        if let group = donation.groupIdentifier { bind(group, at: 3, of: statement) } else { sqlite3_bind_null(statement, 3) }
        bind(donation.intent, at: 4, of: statement)
        bind(donation.plugin, at: 5, of: statement)
        bind(donation.source, at: 6, of: statement)
        bind(donation.created, at: 7, of: statement)
        entry.sealed.withUnsafeBytes { bytes in
            if let base = bytes.baseAddress, bytes.count > 0 {
                _ = sqlite3_bind_blob(statement, 8, base, Int32(bytes.count), sqliteTransient)
            } else {
                _ = sqlite3_bind_zeroblob(statement, 8, 0)
            }
        }
        let code = sqlite3_step(statement)
        guard code == SQLITE_DONE else { throw failure(of: statement, sql: Self.insertSQL) }
        sqlite3_reset(statement)
    }

    /// The owner's usage counters (zero when it has no row yet).
    private func read(_ owner: String) throws -> OwnerUsage {
        var counts = OwnerUsage()
        try row(of: usage, sql: Self.usageSQL, owner: owner) { statement in
            counts = OwnerUsage(
                bytes: sqlite3_column_int64(statement, 0), globals: sqlite3_column_int64(statement, 1),
                bookmarks: sqlite3_column_int64(statement, 2), donations: sqlite3_column_int64(statement, 3),
                fileBytes: sqlite3_column_int64(statement, 4))
        }
        return counts
    }

    /// The owner's limits: the defaults with its own overrides.
    private func quotaOf(_ owner: String) throws -> OwnerQuota {
        var quota = quotaDefaults
        try row(of: overrides, sql: Self.overridesSQL, owner: owner) { statement in
            for (index, field) in Self.fields.enumerated() where sqlite3_column_type(statement, Int32(index)) != SQLITE_NULL {
                quota[field] = sqlite3_column_int64(statement, Int32(index))
            }
        }
        return quota
    }

    /// Runs a one-row query on `owner`; `body` reads the row when there is one.
    private func row(of cached: Statement, sql: String, owner: String, _ body: (OpaquePointer) -> Void) throws {
        let statement = cached.sqliteStatement
        defer { sqlite3_clear_bindings(statement) }
        bind(owner, at: 1, of: statement)
        let code = sqlite3_step(statement)
        if code == SQLITE_ROW {
            body(statement)
        } else if code != SQLITE_DONE {
            throw failure(of: statement, sql: sql)
        }
        sqlite3_reset(statement)
    }

    private func bind(_ text: String, at index: Int32, of statement: OpaquePointer) {
        var text = text
        text.withUTF8 { bytes in
            bytes.withMemoryRebound(to: CChar.self) { chars in
                if let base = chars.baseAddress, chars.count > 0 {
                    _ = sqlite3_bind_text(statement, index, base, Int32(chars.count), sqliteTransient)
                } else {
                    _ = sqlite3_bind_text(statement, index, "", 0, nil)
                }
            }
        }
    }

    /// The error of a failed step, as GRDB reports one (its kinds map to the store's in
    /// `StoreDatabase.storeError`); the statement is reset for its next use.
    private func failure(of statement: OpaquePointer, sql: String) -> DatabaseError {
        let code = sqlite3_reset(statement)
        let message = String(cString: sqlite3_errmsg(connection))
        return DatabaseError(resultCode: ResultCode(rawValue: code == SQLITE_OK ? SQLITE_ERROR : code), message: message, sql: sql)
    }
}

/// SQLite copies a value bound with this destructor (SQLITE_TRANSIENT, a macro Swift does not import).
private let sqliteTransient = unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self)
