import ExtrunProtocol
import Foundation

/// An owner as `extrun owners list | show` reports it.
public struct OwnerInfo: Sendable {
    public var owner: String
    /// `<home>/keys/<escaped owner>.key`.
    public var keyFile: String
    /// The key from the key file; nil when it is missing or unreadable.
    public var key: OwnerKey?
    /// The key fingerprint the store recorded for this owner; nil if it has nothing in the store yet.
    public var recordedFingerprint: String?
    public var globalCount: Int
    public var bookmarkCount: Int
    /// Why the owner's data cannot be used (the error its operations would
    /// throw: `keyMissing`, `wrongKey`, `invalidKeyFile`, `insecurePermissions`); nil when all is well.
    public var problem: StoreError?
    /// `<home>/keys/<escaped owner>.signing`, and the public half of the key in it (nil: none yet, or unreadable).
    public var signingKeyFile: String
    public var signingKey: Data?
    /// The authors' signing keys the owner trusts besides its own (`extrun owners trust`).
    public var trustedSigningKeys: [TrustedSigningKey] = []

    public var isUsable: Bool { problem == nil }
}

extension Store {
    /// Every owner that has a key file or data in the store, in byte order of
    /// their names. An owner whose key is missing or wrong is listed with its `problem`.
    public func owners() throws -> [OwnerInfo] {
        var names = Set(try keystore.owners())
        let recorded: [String]
        switch backend {
        case .sqlite(let database):
            recorded = try database.read { db in try String.fetchAll(db, sql: "SELECT name FROM owner") }
        case .postgres(let server):
            recorded = try server.ownerNames()
        }
        names.formUnion(recorded)
        return try names.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }.map(info(for:))
    }

    /// One owner; `notFound` if it has neither a key file nor data.
    public func owner(_ owner: String) throws -> OwnerInfo {
        try NameRules.validateOwner(owner)
        let info = try info(for: owner)
        if info.key == nil, info.recordedFingerprint == nil, info.globalCount == 0, info.bookmarkCount == 0,
            info.problem == nil
        {
            throw StoreError(
                .notFound, "owner '\(owner)' does not exist: no key file \(info.keyFile) and nothing in \(databasePath)",
                details: ["owner": .string(owner)])
        }
        return info
    }

    /// Creates the owner's key (and key file); `alreadyExists` if it has one,
    /// `keyMissing` if the store has data for it but its key file is gone.
    @discardableResult
    public func createOwner(_ owner: String) throws -> OwnerInfo {
        try NameRules.validateOwner(owner)
        if try keystore.load(owner) != nil {
            throw StoreError(
                .alreadyExists, "owner '\(owner)' already exists (key file \(keystore.path(for: owner)))",
                details: ["owner": .string(owner)])
        }
        _ = try writeKey(owner)
        _ = try signingKey(of: owner)
        return try info(for: owner)
    }

    private func info(for owner: String) throws -> OwnerInfo {
        let recorded = try recordedOwner(owner)
        var info = OwnerInfo(
            owner: owner, keyFile: keystore.path(for: owner), key: nil, recordedFingerprint: recorded?.fingerprint,
            globalCount: recorded?.globals ?? 0, bookmarkCount: recorded?.bookmarks ?? 0, problem: nil,
            signingKeyFile: keystore.signingPath(for: owner))
        do {
            info.key = try keystore.load(owner)
            info.signingKey = try keystore.loadSigningKey(owner)?.publicKey
            info.trustedSigningKeys = try keystore.loadTrusted(owner)
            if info.key == nil, let recorded {
                info.problem = missingKeyError(owner, recorded: recorded)
            } else if info.key != nil {
                _ = try readKey(owner)
            }
        } catch let error as StoreError {
            switch error.kind {
            case .keyMissing, .wrongKey, .invalidKeyFile, .insecurePermissions: info.problem = error
            default: throw error
            }
        }
        return info
    }
}
