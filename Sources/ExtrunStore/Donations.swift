import ExtrunProtocol
import Foundation
import GRDB

/// One donated interaction: an intent that was handled (or that a plugin
/// donated), with its parameters and response, so the system can suggest it
/// again. The identifier, group, intent, plugin and time are stored in clear
/// (they are what listing and deletion select on); the parameters and the
/// response are sealed with the owner's key.
public struct Donation: Sendable, Equatable {
    public var identifier: String
    public var owner: String
    /// The plugin that handled or donated it.
    public var plugin: String
    public var intent: String
    public var groupIdentifier: String?
    /// `handle` (the host donated a successful run) or `plugin` (the plugin donated it through the SDK).
    public var source: String
    /// When it was donated (ISO 8601).
    public var created: String
    public var parameters: [String: JSONValue]
    public var response: IntentResponse?

    public init(
        identifier: String, owner: String, plugin: String, intent: String, groupIdentifier: String? = nil, source: String,
        created: String = ISODate.format(Date()), parameters: [String: JSONValue], response: IntentResponse?
    ) {
        self.identifier = identifier
        self.owner = owner
        self.plugin = plugin
        self.intent = intent
        self.groupIdentifier = groupIdentifier
        self.source = source
        self.created = created
        self.parameters = parameters
        self.response = response
    }

    public var json: JSONValue {
        var object: [String: JSONValue] = [
            "identifier": .string(identifier), "owner": .string(owner), "plugin": .string(plugin), "intent": .string(intent),
            "source": .string(source), "created": .string(created), "parameters": .object(parameters),
        ]
        if let groupIdentifier { object["groupIdentifier"] = .string(groupIdentifier) }
        if let response { object["response"] = (try? JSONCoding.value(of: response)) ?? .null }
        return .object(object)
    }
}

/// What a donation seals: the parts that may hold people's data.
struct SealedDonation: Codable {
    var parameters: [String: JSONValue]
    var response: IntentResponse?

    /// The sealed plaintext: compact JSON with sorted keys, written without Codable (an
    /// `extrun handle` donates once per process, where JSONEncoder's first use is
    /// costly: docs/benchmarks.md, "Costs the source's comments point to"). Refuses what JSON cannot carry, as JSONEncoder does.
    func json() throws -> Data {
        var object: [String: JSONValue] = ["parameters": .object(parameters)]
        if let response { object["response"] = response.jsonValue }
        let value = JSONValue.object(object)
        if let problem = value.nonFiniteNumberPath() {
            throw EncodingError.invalidValue(
                problem, EncodingError.Context(codingPath: [], debugDescription: "Unable to encode the number at \(problem) directly in JSON."))
        }
        return Data(JSONWriter.bytes(value))
    }
}

extension JSONValue {
    /// The path of the first number that is not finite (JSON has no NaN or infinity), if any.
    func nonFiniteNumberPath(_ path: String = "") -> String? {
        switch self {
        case .double(let number): return number.isFinite ? nil : (path.isEmpty ? "the top level" : path)
        case .array(let items):
            for (index, item) in items.enumerated() {
                if let found = item.nonFiniteNumberPath("\(path)[\(index)]") { return found }
            }
            return nil
        case .object(let members):
            for (key, member) in members {
                if let found = member.nonFiniteNumberPath(path.isEmpty ? key : "\(path).\(key)") { return found }
            }
            return nil
        default: return nil
        }
    }
}

/// One owner's donation log. Get it from `Store.donations(of:)`.
public struct Donations: Sendable {
    public let owner: String
    let store: Store

    init(store: Store, owner: String) {
        self.store = store
        self.owner = owner
    }

    /// Records a donation. A donation with the same identifier of this owner is replaced
    /// (donating an interaction again refreshes it).
    ///
    /// With `durable: false` the commit does not wait for the disk (SQLite's
    /// `synchronous = NORMAL` in WAL mode, on this connection only): a crash of the
    /// process loses nothing, a power cut may lose the last donations, never damage
    /// the store. `extrun handle` donates that way, so that a donation costs
    /// no fsync on every run.
    public func donate(_ donation: Donation, durable: Bool = true) throws {
        guard donation.owner == owner else {
            throw StoreError(
                .invalidDocument, "a donation of owner '\(donation.owner)' cannot be recorded for owner '\(owner)'",
                details: ["owner": .string(owner)])
        }
        try NameRules.validateName(donation.identifier, kind: .donation)
        if let group = donation.groupIdentifier { try NameRules.validateName(group, kind: .donation) }
        let plaintext: Data
        do {
            plaintext = try SealedDonation(parameters: donation.parameters, response: donation.response).json()
        } catch {
            throw StoreError(
                .invalidValue, "donation '\(donation.identifier)' cannot be stored as JSON (numbers must be finite): \(error)",
                details: ["owner": .string(owner), "identifier": .string(donation.identifier)])
        }
        if plaintext.count > StoreLimits.maxValueBytes {
            throw StoreError(
                .tooLarge, "donation '\(donation.identifier)' is \(plaintext.count) bytes as JSON; the limit is \(StoreLimits.maxValueBytes) bytes (4 MiB)",
                details: ["owner": .string(owner), "identifier": .string(donation.identifier)])
        }
        let key = try store.writeKey(owner)
        let sealed = try Sealing.seal(plaintext, with: key, context: SealContext(owner: owner, kind: .donation, name: donation.identifier))
        // Committed with the donations other threads of this process make at the same
        // time, in one transaction (DonationGroupCommit): each still ends in its own
        // success or error, and returns only once its row is committed.
        try store.donationCommits.commit(DonationGroupCommit.Entry(donation: donation, sealed: sealed, durable: durable), file: store.databasePath) {
            batch in store.writeDonations(batch)
        }
    }

    /// Loads and checks the owner's key now, if the owner has one, so that a donation
    /// made later costs only the sealing and the write (`extrun handle` does this on
    /// another thread while the plugin runs). Creates nothing.
    public func prepare() throws {
        _ = try store.readKey(owner)
        _ = try store.quotaDefaultsForWrite()
    }

    /// The owner's donations, oldest first, optionally only those of one intent.
    public func list(intent: String? = nil) throws -> [Donation] {
        guard let key = try store.readKey(owner) else { return [] }
        if case .postgres(let server) = store.backend {
            return try server.donationRows(owner: owner, intent: intent).map { row in
                let (identifier, group, intent, plugin, source, created, sealed) = try row.decode(
                    (String, String?, String, String, String, String, Data).self)
                let opened = try openDonation(sealed, identifier: identifier, key: key)
                return Donation(
                    identifier: identifier, owner: owner, plugin: plugin, intent: intent, groupIdentifier: group, source: source,
                    created: created, parameters: opened.parameters, response: opened.response)
            }
        }
        let rows = try store.database.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT identifier, groupIdentifier, intent, plugin, source, created, sealed FROM donation
                    WHERE owner = ? AND (? IS NULL OR intent = ?) ORDER BY id
                    """,
                arguments: [owner, intent, intent])
        }
        return try rows.map { row in
            let identifier: String = row["identifier"]
            let opened = try openDonation(row["sealed"], identifier: identifier, key: key)
            return Donation(
                identifier: identifier, owner: owner, plugin: row["plugin"], intent: row["intent"], groupIdentifier: row["groupIdentifier"],
                source: row["source"], created: row["created"], parameters: opened.parameters, response: opened.response)
        }
    }

    private func openDonation(_ sealed: Data, identifier: String, key: OwnerKey) throws -> SealedDonation {
        let plaintext = try Sealing.open(
            sealed, with: key, context: SealContext(owner: owner, kind: .donation, name: identifier), file: store.databasePath)
        do {
            return try JSONCoding.decoder().decode(SealedDonation.self, from: plaintext)
        } catch {
            throw StoreError(
                .sealBroken, "donation '\(identifier)' of owner '\(owner)' opened but is not a donation: \(JSONCoding.describe(error))",
                details: ["owner": .string(owner), "identifier": .string(identifier), "file": .string(store.databasePath)])
        }
    }

    /// Deletes the donation with this identifier. Returns false when the owner has none by
    /// that identifier; throws `notYours` when only other owners have one (an owner deletes
    /// only its own donations).
    @discardableResult
    public func delete(identifier: String) throws -> Bool {
        if case .postgres(let server) = store.backend {
            let (deleted, others) = try server.deleteDonations(owner: owner, identifier: identifier)
            if deleted > 0 { return true }
            if let other = others.first {
                throw StoreError(
                    .notYours,
                    "donation '\(identifier)' belongs to owner '\(other)', not to '\(owner)': an owner can delete only its own donations; nothing was deleted",
                    details: ["owner": .string(owner), "identifier": .string(identifier), "donationOwner": .string(other)])
            }
            return false
        }
        return try store.database.write { db in
            try db.execute(sql: "DELETE FROM donation WHERE owner = ? AND identifier = ?", arguments: [owner, identifier])
            if db.changesCount > 0 { return true }
            let others = try String.fetchAll(
                db, sql: "SELECT owner FROM donation WHERE identifier = ? AND owner <> ? ORDER BY owner", arguments: [identifier, owner])
            if !others.isEmpty {
                throw StoreError(
                    .notYours,
                    "donation '\(identifier)' belongs to owner '\(others[0])', not to '\(owner)': an owner can delete only its own donations; nothing was deleted",
                    details: ["owner": .string(owner), "identifier": .string(identifier), "donationOwner": .string(others[0])])
            }
            return false
        }
    }

    /// Deletes every donation of the group; returns how many. Throws `notYours` when
    /// the owner has none in the group but other owners have.
    @discardableResult
    public func delete(group: String) throws -> Int {
        if case .postgres(let server) = store.backend {
            let (deleted, others) = try server.deleteDonations(owner: owner, group: group)
            if deleted == 0, let other = others.first {
                throw StoreError(
                    .notYours,
                    "the donations of group '\(group)' belong to owner '\(other)', not to '\(owner)': an owner can delete only its own donations; nothing was deleted",
                    details: ["owner": .string(owner), "groupIdentifier": .string(group), "donationOwner": .string(other)])
            }
            return deleted
        }
        return try store.database.write { db in
            try db.execute(sql: "DELETE FROM donation WHERE owner = ? AND groupIdentifier = ?", arguments: [owner, group])
            let deleted = db.changesCount
            if deleted == 0 {
                let others = try String.fetchAll(
                    db, sql: "SELECT DISTINCT owner FROM donation WHERE groupIdentifier = ? AND owner <> ? ORDER BY owner",
                    arguments: [group, owner])
                if !others.isEmpty {
                    throw StoreError(
                        .notYours,
                        "the donations of group '\(group)' belong to owner '\(others[0])', not to '\(owner)': an owner can delete only its own donations; nothing was deleted",
                        details: ["owner": .string(owner), "groupIdentifier": .string(group), "donationOwner": .string(others[0])])
                }
            }
            return deleted
        }
    }

    /// Deletes all of the owner's donations; returns how many.
    @discardableResult
    public func deleteAll() throws -> Int {
        if case .postgres(let server) = store.backend { return try server.deleteDonations(owner: owner).deleted }
        return try store.database.write { db in
            try db.execute(sql: "DELETE FROM donation WHERE owner = ?", arguments: [owner])
            return db.changesCount
        }
    }

    /// The owners that have donations, in name order.
    static func owners(in store: Store) throws -> [String] {
        if case .postgres(let server) = store.backend { return try server.donationOwners() }
        return try store.database.read { db in
            try String.fetchAll(db, sql: "SELECT DISTINCT owner FROM donation ORDER BY owner")
        }
    }
}

extension Store {
    /// The owner's donation log. Throws `invalidName` for a bad owner name.
    public func donations(of owner: String) throws -> Donations {
        try NameRules.validateOwner(owner)
        return Donations(store: self, owner: owner)
    }

    /// Every owner's donations (each opened with its owner's key), by owner then age.
    public func allDonations(intent: String? = nil) throws -> [Donation] {
        try Donations.owners(in: self).flatMap { owner in try donations(of: owner).list(intent: intent) }
    }
}

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
                if let deadline = entry.deadline, pending.contains(where: { $0 === entry }) {
                    let now = StoreDeadline.now()
                    if now < deadline { _ = condition.wait(until: Date(timeIntervalSinceNow: Double(deadline - now) / 1e9)) }
                } else {
                    condition.wait()
                }
                continue
            }
            writing = true
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
        var results: [Result<Void, StoreError>] = []
        results.reserveCapacity(batch.count)
        var ended: StoreError?
        do {
            let quota = try quotaDefaultsForWrite()
            if case .postgres(let server) = backend { return server.writeDonations(batch, quota: quota) }
            // Not durable: at synchronous = NORMAL, which the connection keeps until a
            // durable write sets FULL again (StoreDatabase.access(durable:)); no other write
            // runs with the relaxed setting. Statements compiled once per connection
            // (each compile ran GRDB's authorizer).
            try database.access(durable: durable) { db in
                try db.inTransaction(.immediate) {
                    let insert = try db.cachedStatement(
                        sql: """
                            INSERT INTO donation (owner, identifier, groupIdentifier, intent, plugin, source, created, sealed)
                            VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                            ON CONFLICT (owner, identifier) DO UPDATE SET
                                groupIdentifier = excluded.groupIdentifier, intent = excluded.intent, plugin = excluded.plugin,
                                source = excluded.source, created = excluded.created, sealed = excluded.sealed
                            """)
                    func write(_ entry: DonationGroupCommit.Entry) throws {
                        let donation = entry.donation
                        let before = try Quotas.usage(db, owner: donation.owner)
                        try insert.execute(arguments: [
                            donation.owner, donation.identifier, donation.groupIdentifier, donation.intent, donation.plugin,
                            donation.source, donation.created, entry.sealed,
                        ])
                        try Quotas.enforce(db, owner: donation.owner, before: before, defaults: quota, what: "donating '\(donation.identifier)'")
                    }
                    // A lone donation needs no savepoint: its error rolls the transaction back.
                    if batch.count == 1 {
                        do {
                            try write(batch[0])
                        } catch {
                            ended = StoreDatabase.storeError(error, path: databasePath)
                            throw error
                        }
                        results.append(.success(()))
                        return .commit
                    }
                    for entry in batch {
                        do {
                            try db.inSavepoint {
                                try write(entry)
                                return .commit
                            }
                            results.append(.success(()))
                        } catch {
                            let failure = StoreDatabase.storeError(error, path: databasePath)
                            if !db.isInsideTransaction {
                                // SQLite rolled the whole transaction back (I/O error, full disk):
                                // nothing of the batch is written, and each says why.
                                ended = failure
                                throw failure
                            }
                            results.append(.failure(failure))
                        }
                    }
                    return .commit
                }
            }
        } catch {
            let failure = ended ?? (error as? StoreError ?? StoreDatabase.storeError(error, path: databasePath))
            results = Array(repeating: .failure(failure), count: batch.count)
        }
        return results
    }

    /// How many donation batches this connection wrote, and how many donations they held.
    public var donationBatchCounts: (batches: Int, donations: Int) { donationCommits.counts }
}
