import ExtrunProtocol
import Foundation
import GRDB
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// The store under one home directory (the host passes `$EXTRUN_HOME`):
/// owners' keys in `keys/`, their sealed globals and bookmarks in
/// `store.sqlite` (or on a PostgreSQL server: `StoreLocation`), trashed files in
/// `trash/`. See docs/store.md.
///
/// Every operation on data goes through `globals(of:)` or `bookmarks(of:)`,
/// which bind one owner: an owner never reaches another owner's rows.
/// A `Store` is safe to share between tasks; several processes may open the
/// same home at once.
public final class Store: Sendable {
    /// The home directory.
    public let home: URL
    /// `<home>/store.sqlite`, or the PostgreSQL server's URL (without a password): what messages name.
    public var databasePath: String {
        switch backend {
        case .sqlite(let database): database.path
        case .postgres(let server): server.location.display
        }
    }
    /// `<home>/keys`.
    public var keysDirectory: String { keystore.directory }
    /// Whether the rows are on a PostgreSQL server, which other hosts may share.
    public var isOnServer: Bool {
        if case .postgres = backend { return true }
        return false
    }
    /// The file of `keys/` that lists the authors' signing keys `owner` trusts
    /// (`<home>/keys/<escaped owner>.trusted`): a file of this home, not a row of the store.
    public func trustFilePath(of owner: String) -> String { keystore.trustPath(for: owner) }
    /// `<home>/trash`.
    public var trashDirectory: String { homePath + "/trash" }

    let homePath: String
    let keystore: Keystore
    /// Where the rows are: the backend seam (docs/store.md, "Backends").
    package let backend: StoreBackend
    /// The SQLite file; `databaseError` on a PostgreSQL store (each operation takes its
    /// PostgreSQL path before asking for it; docs/store.md, "PostgreSQL").
    package var database: StoreDatabase {
        get throws {
            switch backend {
            case .sqlite(let database): return database
            case .postgres(let server):
                throw StoreError(
                    .databaseError,
                    "this operation reads the SQLite file, and the store is on PostgreSQL (\(server.location.display)); docs/store.md, \"PostgreSQL\", lists what each backend does",
                    details: ["store": .string(server.location.display)])
            }
        }
    }
    /// Keys already checked against the store, by owner.
    private let verifiedKeys = NIOLockedValueBox<[String: OwnerKey]>([:])
    /// The quota defaults from the policy, read on the first write that needs them (Quotas.swift).
    let quotaDefaults = NIOLockedValueBox<OwnerQuota?>(nil)
    /// Donations of this process's threads, written together (Donations.swift).
    let donationCommits = DonationGroupCommit()
    /// The owners' own public signing keys, with the key file's bytes and identity they were parsed from (SigningKeys.swift).
    let ownSigningKeys = KeyFileCache<Data>()
    /// The trusted keys files last parsed, by owner, with the file's identity (`trustedSigningKeys`).
    let trustedKeys = KeyFileCache<[TrustedSigningKey]>()

    /// Opens the store under `home`, creating `home` (0700), `keys/` (0700) and
    /// `store.sqlite` (0600) when they do not exist. Never recreates a
    /// store that existed: see `StoreErrorKind.storeMissing`.
    ///
    /// - Parameter checkpointOnClose: false leaves the write-ahead log as it is when
    ///   this store is closed, for a later connection's checkpoint, instead of folding
    ///   it into `store.sqlite` and syncing the disk then (what `extrun handle` does
    ///   for its one donation: the checkpoint cost every run, docs/benchmarks.md,
    ///   "Costs the source's comments point to"; nothing
    ///   committed is less durable for it). Its writes then keep the log under
    ///   `StoreLimits.maxLogBytes` themselves. docs/store.md.
    /// - Parameter logLimitBytes: that limit (a long-lived host's stores use
    ///   `StoreLimits.maxLogBytesLongLived` and fold the log when they stop: `foldLog()`).
    /// - Parameter location: where the rows are; nil: `EXTRUN_STORE`, else `store` in
    ///   `<home>/policy.json`, else `<home>/store.sqlite` (`StoreLocation`).
    public convenience init(
        home: URL, location: StoreLocation? = nil, checkpointOnClose: Bool = true, logLimitBytes: Int = StoreLimits.maxLogBytes
    ) throws {
        try self.init(home: home, location: location, checkpointOnClose: checkpointOnClose, logLimitBytes: logLimitBytes, newFile: false)
    }

    /// - Parameter newFile: with `location` `.sqlite`, creates `store.sqlite` even where keys
    ///   show that a store existed (`copy(to:)` back from a PostgreSQL server).
    package init(home: URL, location: StoreLocation?, checkpointOnClose: Bool, logLimitBytes: Int, newFile: Bool) throws {
        var path = home.standardizedFileURL.path
        while path.count > 1, path.hasSuffix("/") { path.removeLast() }
        self.home = URL(fileURLWithPath: path, isDirectory: true)
        homePath = path
        do {
            try FileOps.makePrivateDirectory(path)
        } catch {
            throw StoreError(.ioError, "cannot create the home directory \(path): \(error.reason)", details: ["file": .string(path)])
        }
        try StorePermissions.checkHomeAndKeys(home: path)
        keystore = Keystore(home: path)
        try keystore.prepareDirectory()
        switch try location ?? StoreLocation.configured(home: path, keystore: keystore) {
        case .sqlite:
            backend = .sqlite(
                try StoreDatabase.open(
                    home: path, keystore: keystore, checkpointOnClose: checkpointOnClose, logLimitBytes: logLimitBytes, newFile: newFile))
            try StorePermissions.checkDatabase(home: path)
        case .postgres(let server):
            backend = .postgres(try PostgresStore(location: server))
        }
    }

    /// The owner's globals. Throws `invalidName` for a bad owner name.
    public func globals(of owner: String) throws -> Globals {
        try NameRules.validateOwner(owner)
        return Globals(store: self, owner: owner)
    }

    /// The owner's bookmarks. Throws `invalidName` for a bad owner name.
    public func bookmarks(of owner: String) throws -> Bookmarks {
        try NameRules.validateOwner(owner)
        return Bookmarks(store: self, owner: owner)
    }

    // MARK: - Keys

    /// The owner's key, checked against the fingerprint the store recorded for it.
    ///
    /// Without a key file: nil for an owner that has nothing in the store
    /// (or a new key and key file if `create`), but `keyMissing` for an owner
    /// that has data. A key is never created for an owner that has data.
    func key(for owner: String, create: Bool) throws -> OwnerKey? {
        if let key = verifiedKeys.withLockedValue({ $0[owner] }) { return key }
        var key = try keystore.load(owner)
        if key == nil {
            let recorded = try recordedOwner(owner)
            if let recorded {
                throw missingKeyError(owner, recorded: recorded)
            }
            guard create else { return nil }
            do {
                key = try keystore.create(owner)
            } catch let error as StoreError where error.kind == .alreadyExists {
                key = try keystore.load(owner)  // Another process won the race: use its key.
            }
        }
        guard let key else {
            throw StoreError(.invalidKeyFile, "key file \(keystore.path(for: owner)) vanished while it was being read", details: ["owner": .string(owner)])
        }
        try verify(key)
        verifiedKeys.withLockedValue { $0[owner] = key }
        return key
    }

    /// What the store records about an owner: its key fingerprint and row counts (nil if nothing).
    struct RecordedOwner {
        var fingerprint: String?
        var globals: Int
        var bookmarks: Int
    }

    func recordedOwner(_ owner: String) throws -> RecordedOwner? {
        if case .postgres(let server) = backend { return try server.recordedOwner(owner) }
        return try database.read { db in
            let fingerprint = try String.fetchOne(db, sql: "SELECT keyFingerprint FROM owner WHERE name = ?", arguments: [owner])
            let globals = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM global WHERE owner = ?", arguments: [owner]) ?? 0
            let bookmarks = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM bookmark WHERE owner = ?", arguments: [owner]) ?? 0
            if fingerprint == nil && globals == 0 && bookmarks == 0 { return nil }
            return RecordedOwner(fingerprint: fingerprint, globals: globals, bookmarks: bookmarks)
        }
    }

    func missingKeyError(_ owner: String, recorded: RecordedOwner) -> StoreError {
        let path = keystore.path(for: owner)
        return StoreError(
            .keyMissing,
            "owner '\(owner)' has data in \(databasePath) (\(recorded.globals) globals, \(recorded.bookmarks) bookmarks, sealed with key \(recorded.fingerprint ?? "unknown")) but its key file \(path) is missing. Restore the key file from a backup; extrun never creates a new key for an owner that has data, since that data could not be opened again.",
            details: [
                "owner": .string(owner), "file": .string(path), "store": .string(databasePath),
                "expectedFingerprint": recorded.fingerprint.map(JSONValue.string) ?? .null,
            ])
    }

    /// Checks the key against the fingerprint recorded in the store, or records it
    /// (only then is anything written).
    private func verify(_ key: OwnerKey) throws {
        if case .postgres(let server) = backend {
            if let recorded = try server.fingerprint(of: key.owner) {
                try check(key, recorded: recorded)
                return
            }
            let stored = try server.recordOwner(key.owner, fingerprint: key.fingerprint, created: ISODate.format(key.created))
            try check(key, recorded: stored ?? key.fingerprint)
            return
        }
        let recorded = try database.read { db in
            try String.fetchOne(db, sql: "SELECT keyFingerprint FROM owner WHERE name = ?", arguments: [key.owner])
        }
        if let recorded {
            try check(key, recorded: recorded)
            return
        }
        let stored = try database.write { db in
            try db.execute(
                sql: "INSERT OR IGNORE INTO owner (name, keyFingerprint, created) VALUES (?, ?, ?)",
                arguments: [key.owner, key.fingerprint, ISODate.format(key.created)])
            return try String.fetchOne(db, sql: "SELECT keyFingerprint FROM owner WHERE name = ?", arguments: [key.owner])
        }
        try check(key, recorded: stored ?? key.fingerprint)
    }

    private func check(_ key: OwnerKey, recorded: String) throws {
        guard recorded == key.fingerprint else {
            let path = keystore.path(for: key.owner)
            throw StoreError(
                .wrongKey,
                "key file \(path) holds key \(key.fingerprint), but the data of owner '\(key.owner)' in \(databasePath) was sealed with key \(recorded): the key file was replaced. Restore the original key file from a backup; nothing was changed.",
                details: [
                    "owner": .string(key.owner), "file": .string(path), "store": .string(databasePath),
                    "fingerprint": .string(key.fingerprint), "expectedFingerprint": .string(recorded),
                ])
        }
    }

    /// The key for reading: nil means the owner has nothing (and no key), so reads find nothing.
    func readKey(_ owner: String) throws -> OwnerKey? {
        try key(for: owner, create: false)
    }

    /// Folds the write-ahead log into `store.sqlite` now and empties it (a long-lived host
    /// stopping, so that the next process to open the store finds a short log); false
    /// when another connection kept it busy for 50 ms (it stays for a later fold).
    @discardableResult
    public func foldLog() -> Bool {
        guard case .sqlite(let database) = backend else { return true }
        return database.foldLog()
    }

    /// The key for writing: created on the owner's first write.
    package func writeKey(_ owner: String) throws -> OwnerKey {
        guard let key = try key(for: owner, create: true) else {
            throw StoreError(.databaseError, "no key for owner '\(owner)' after creating one")
        }
        return key
    }
}

/// The backend seam: where a `Store` keeps its rows. Everything above it (names, sealing,
/// keys, quotas' defaults, the typed errors) is shared; each backend does an operation its
/// own way, at the level of the operation (a global's compare-and-set, a quota's charge),
/// because the two make them atomic differently (docs/store.md, "Backends").
package enum StoreBackend: Sendable {
    /// `<home>/store.sqlite` through GRDB.
    case sqlite(StoreDatabase)
    /// A PostgreSQL server through postgres-nio.
    case postgres(PostgresStore)
}
