import ExtrunProtocol
import Foundation
import GRDB
import NIOConcurrencyHelpers

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
    /// When it was donated (ISO 8601, to the second; now when not given).
    public var created: String
    public var parameters: [String: JSONValue]
    public var response: IntentResponse?

    public init(
        identifier: String, owner: String, plugin: String, intent: String, groupIdentifier: String? = nil, source: String,
        created: String? = nil, parameters: [String: JSONValue], response: IntentResponse?
    ) {
        self.identifier = identifier
        self.owner = owner
        self.plugin = plugin
        self.intent = intent
        self.groupIdentifier = groupIdentifier
        self.source = source
        self.created = created ?? DonationClock.now()
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
        let parameters = JSONValue.object(parameters)
        let response = response?.jsonValue
        if let problem = parameters.nonFiniteNumberPath("parameters") ?? response?.nonFiniteNumberPath("response") {
            throw EncodingError.invalidValue(
                problem, EncodingError.Context(codingPath: [], debugDescription: "Unable to encode the number at \(problem) directly in JSON."))
        }
        // {"parameters": ..., "response": ...}: the two keys in sorted order, written around
        // the values (no dictionary built and sorted for them).
        var out: [UInt8] = []
        out.reserveCapacity(256)
        out.append(contentsOf: #"{"parameters":"#.utf8)
        JSONWriter.write(parameters, into: &out)
        if let response {
            out.append(contentsOf: #","response":"#.utf8)
            JSONWriter.write(response, into: &out)
        }
        out.append(UInt8(ascii: "}"))
        return Data(out)
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

/// The time of a donation made now, as `Donation.created` records it: ISO 8601 to the
/// second, formatted once per second rather than for every donation of a busy host.
enum DonationClock {
    private static let last = NIOLockedValueBox<(seconds: Int, text: String)>((.min, ""))

    static func now() -> String {
        let date = Date()
        let seconds = Int(date.timeIntervalSince1970.rounded(.down))
        if let text = last.withLockedValue({ $0.seconds == seconds ? $0.text : nil }) { return text }
        let text = ISODate.format(date)
        last.withLockedValue { $0 = (seconds, text) }
        return text
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
            let others = try String.fetchAll(db, sql: Self.othersSQL, arguments: [identifier, owner])
            if !others.isEmpty {
                throw StoreError(
                    .notYours,
                    "donation '\(identifier)' belongs to owner '\(others[0])', not to '\(owner)': an owner can delete only its own donations; nothing was deleted",
                    details: ["owner": .string(owner), "identifier": .string(identifier), "donationOwner": .string(others[0])])
            }
            return false
        }
    }

    /// The other owners that have a donation `?1` (not `?2`), for `notYours`. The store has no
    /// index on the identifier alone (schema migration v7, `Quotas.donationWritesSQL`): the
    /// owners that have donations are walked in `UNIQUE (owner, identifier)`, one seek to the
    /// next owner and one for the identifier each (3.7 ms for 1,000 owners and 300,000
    /// donations, against 12.5 for a scan of the index), whether or not an owner row is there
    /// (a salvaged store keeps rows whose owner row was lost).
    static let othersSQL = """
        WITH RECURSIVE owners(name) AS (
            SELECT MIN(owner) FROM donation
            UNION ALL
            SELECT (SELECT MIN(owner) FROM donation WHERE owner > owners.name) FROM owners WHERE owners.name IS NOT NULL
        )
        SELECT name FROM owners
        WHERE name IS NOT NULL AND name <> ?2 AND EXISTS (SELECT 1 FROM donation WHERE owner = owners.name AND identifier = ?1)
        ORDER BY name
        """

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
