import Crypto
import ExtrunProtocol
import ExtrunSystem
import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// An owner's Ed25519 signing key pair: it signs the owner's plugins
/// (`extrun plugins sign`), and the host serves a plugin its owner's data only
/// when the plugin's signature verifies against a key that owner trusts (its own,
/// or an author's it trusts: `extrun owners trust`). docs/store.md, "Signing keys".
/// The private half stays inside the module.
public struct OwnerSigningKey: Sendable {
    public let owner: String
    public let created: Date
    /// The raw 32-byte Ed25519 public key.
    public var publicKey: Data { privateKey.publicKey.rawRepresentation }
    public var fingerprint: String { SigningKeyFingerprint.of(publicKey) }
    let privateKey: Curve25519.Signing.PrivateKey

    /// An Ed25519 signature of `message` (64 bytes).
    public func signature(for message: Data) throws -> Data {
        do {
            return try privateKey.signature(for: message)
        } catch {
            throw StoreError(.ioError, "cannot sign with owner '\(owner)''s signing key: \(error)", details: ["owner": .string(owner)])
        }
    }
}

/// Names an Ed25519 public key: `hex(SHA-256("extrun-signing-key-fingerprint-v1" ‖ key)[0..<16])`.
public enum SigningKeyFingerprint {
    public static func of(_ publicKey: Data) -> String {
        KeyFingerprint.hex(publicKey, domain: "extrun-signing-key-fingerprint-v1")
    }

    /// Whether `signature` is an Ed25519 signature of `message` by `publicKey`.
    public static func isValid(signature: Data, of message: Data, by publicKey: Data) -> Bool {
        guard let key = try? Curve25519.Signing.PublicKey(rawRepresentation: publicKey) else { return false }
        return key.isValidSignature(signature, for: message)
    }
}

/// A signing key an owner trusts besides its own: an author's, from the public
/// key file they gave (`extrun owners trust OWNER --signing-key FILE`).
public struct TrustedSigningKey: Sendable, Equatable {
    /// The owner named in the author's public key file (a label: trust is by key).
    public var author: String
    public var publicKey: Data
    public var added: Date
    public var fingerprint: String { SigningKeyFingerprint.of(publicKey) }

    public init(author: String, publicKey: Data, added: Date) {
        self.author = author
        self.publicKey = publicKey
        self.added = added
    }

    var jsonValue: JSONValue {
        .object([
            "author": .string(author), "publicKey": .string(publicKey.base64EncodedString()),
            "fingerprint": .string(fingerprint), "added": .string(ISODate.format(added)),
        ])
    }
}

/// `keys/<escaped owner>.signing` (the private signing key, 0600, written once) and
/// `keys/<escaped owner>.trusted` (the authors' keys the owner trusts, 0600, replaced
/// atomically). Read without Codable: the host reads them on every run that asks
/// for its owner's data (a first use of JSONDecoder is costly: docs/benchmarks.md, "Costs the source's comments point to").
extension Keystore {
    static let signingFormat = "extrun-owner-signing-key"
    static let trustFormat = "extrun-owner-trusted-keys"
    /// Trusted keys per owner (each is a line in `owners show`; more is a mistake).
    static let maxTrustedKeys = 256

    func signingPath(for owner: String) -> String {
        directory + "/" + Keystore.escape(owner) + ".signing"
    }

    func trustPath(for owner: String) -> String {
        directory + "/" + Keystore.escape(owner) + ".trusted"
    }

    /// Reads a private file of the keys folder (0600, yours, regular, no symlink); nil when absent.
    func readPrivateFile(_ path: String, owner: String, limit: Int = 1 << 20, what: String = "an extrun key file") throws -> Data? {
        try readPrivateFileWithIdentity(path, owner: owner, limit: limit, what: what)?.data
    }

    /// `readPrivateFile`, with the identity of the file it read (from the descriptor it read).
    func readPrivateFileWithIdentity(_ path: String, owner: String, limit: Int = 1 << 20, what: String = "an extrun key file") throws
        -> (data: Data, identity: FileStamp)?
    {
        let details: [String: JSONValue] = ["owner": .string(owner), "file": .string(path)]
        let fd: Int32
        do {
            fd = try FileOps.open(path, O_RDONLY | O_NOFOLLOW)
        } catch {
            if error.code == ENOENT { return nil }
            throw StoreError(.invalidKeyFile, "cannot open \(path): \(error.reason)", details: details)
        }
        defer { close(fd) }
        do {
            let info = try FileOps.fstat(fd)
            guard info.isRegularFile else { throw StoreError(.invalidKeyFile, "\(path) is not a regular file", details: details) }
            if info.st_uid != geteuid() || info.st_mode & 0o077 != 0 {
                throw StoreError(
                    .insecurePermissions,
                    "\(path) has mode \(String(info.st_mode & 0o7777, radix: 8)) (owner uid \(info.st_uid)); it must belong to you with mode 600: chmod 600 '\(path)'",
                    details: details)
            }
            guard let data = try FileOps.readAll(fd, limit: limit, expectedSize: Int(info.st_size)) else {
                throw StoreError(.invalidKeyFile, "\(path) is over \(limit) bytes: not \(what)", details: details)
            }
            return (data, FileStamp(info))
        } catch let error as SystemCallError {
            throw StoreError(.invalidKeyFile, "cannot read \(path): \(error.reason)", details: details)
        }
    }

    func writePrivateFile(_ path: String, name: String, data: Data, owner: String, replace: Bool) throws {
        do {
            let dirfd = try FileOps.open(directory, O_RDONLY | O_DIRECTORY)
            defer { close(dirfd) }
            try FileOps.writeAtomically(dirfd: dirfd, name: name, data: data, createMode: 0o600, exactMode: 0o600, replace: replace)
        } catch {
            if error.code == EEXIST {
                throw StoreError(.alreadyExists, "\(path) exists already", details: ["owner": .string(owner), "file": .string(path)])
            }
            throw StoreError(.ioError, "cannot write \(path): \(error.reason)", details: ["owner": .string(owner), "file": .string(path)])
        }
    }

    /// The owner's signing key, or nil when it has none yet.
    func loadSigningKey(_ owner: String) throws -> OwnerSigningKey? {
        let path = signingPath(for: owner)
        guard let data = try readPrivateFile(path, owner: owner, limit: 64 * 1024) else { return nil }
        return try signingKey(from: data, path: path, owner: owner)
    }

    /// The key in a signing key file's bytes, checked (format, version, owner, the key pair).
    func signingKey(from data: Data, path: String, owner: String) throws -> OwnerSigningKey {
        let details: [String: JSONValue] = ["owner": .string(owner), "file": .string(path)]
        do {
            let fields = try JSONFields(try JSONCoding.parse(json: data))
            let format = try fields.string("format")
            guard format == Keystore.signingFormat else {
                throw StoreError(.invalidKeyFile, "\(path) has format '\(format)', expected '\(Keystore.signingFormat)'", details: details)
            }
            let version = try fields.int("version")
            guard version == 1 else {
                throw StoreError(.invalidKeyFile, "\(path) is version \(version); this extrun reads version 1", details: details)
            }
            let named = try fields.string("owner")
            guard named.utf8.elementsEqual(owner.utf8) else {
                throw StoreError(.invalidKeyFile, "\(path) belongs to owner '\(named)', not '\(owner)': it was copied or renamed", details: details)
            }
            guard let key = try? Curve25519.Signing.PrivateKey(rawRepresentation: try fields.base64("privateKey")),
                key.publicKey.rawRepresentation == (try fields.base64("publicKey"))
            else {
                throw StoreError(.invalidKeyFile, "\(path): privateKey is not a 32-byte Ed25519 key matching publicKey", details: details)
            }
            return OwnerSigningKey(owner: owner, created: try fields.date("created"), privateKey: key)
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError(.invalidKeyFile, "\(path) is not a valid signing key file: \(JSONCoding.describe(error))", details: details)
        }
    }

    /// Makes the owner's signing key pair and writes its file (never over an existing one).
    func createSigningKey(_ owner: String) throws -> OwnerSigningKey {
        let key = OwnerSigningKey(
            owner: owner, created: Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down)),
            privateKey: Curve25519.Signing.PrivateKey())
        let file = JSONValue.object([
            "format": .string(Keystore.signingFormat), "version": 1, "owner": .string(owner), "created": .string(ISODate.format(key.created)),
            "privateKey": .string(key.privateKey.rawRepresentation.base64EncodedString()),
            "publicKey": .string(key.publicKey.base64EncodedString()),
        ])
        try writePrivateFile(
            signingPath(for: owner), name: Keystore.escape(owner) + ".signing", data: Data(JSONWriter.prettyBytes(file)) + Data("\n".utf8),
            owner: owner, replace: false)
        return key
    }

    /// The authors' keys the owner trusts (not its own), in the order they were trusted.
    func loadTrusted(_ owner: String) throws -> [TrustedSigningKey] {
        let path = trustPath(for: owner)
        guard let data = try readPrivateFile(path, owner: owner) else { return [] }
        return try parseTrusted(data, path: path, owner: owner)
    }

    /// The keys of a trusted keys file's bytes (`loadTrusted`).
    func parseTrusted(_ data: Data, path: String, owner: String) throws -> [TrustedSigningKey] {
        let details: [String: JSONValue] = ["owner": .string(owner), "file": .string(path)]
        do {
            let fields = try JSONFields(try JSONCoding.parse(json: data))
            guard try fields.string("format") == Keystore.trustFormat, try fields.int("version") == 1 else {
                throw StoreError(.invalidKeyFile, "\(path) is not a version 1 '\(Keystore.trustFormat)' file", details: details)
            }
            guard try fields.string("owner").utf8.elementsEqual(owner.utf8) else {
                throw StoreError(.invalidKeyFile, "\(path) belongs to another owner than '\(owner)': it was copied or renamed", details: details)
            }
            return try fields.objects("keys") { key in
                let publicKey = try key.base64("publicKey")
                guard publicKey.count == 32 else {
                    throw StoreError(.invalidKeyFile, "\(path): a publicKey is \(publicKey.count) bytes, expected 32", details: details)
                }
                return TrustedSigningKey(author: try key.string("author"), publicKey: publicKey, added: try key.date("added"))
            }
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError(.invalidKeyFile, "\(path) is not a valid trusted keys file: \(JSONCoding.describe(error))", details: details)
        }
    }

    func writeTrusted(_ owner: String, _ keys: [TrustedSigningKey]) throws {
        let file = JSONValue.object([
            "format": .string(Keystore.trustFormat), "version": 1, "owner": .string(owner), "keys": .array(keys.map(\.jsonValue)),
        ])
        try writePrivateFile(
            trustPath(for: owner), name: Keystore.escape(owner) + ".trusted", data: Data(JSONWriter.prettyBytes(file)) + Data("\n".utf8),
            owner: owner, replace: true)
    }
}

/// Who signed a plugin, as far as an owner is concerned.
public enum SignerStanding: Sendable, Equatable {
    /// The owner's own signing key.
    case ownKey
    /// An author's key the owner trusts.
    case trustedAuthor(TrustedSigningKey)
}

extension Store {
    /// The owner's signing key, made (with the owner's sealing key, if it has none yet) on first need.
    public func signingKey(of owner: String) throws -> OwnerSigningKey {
        try NameRules.validateOwner(owner)
        _ = try writeKey(owner)
        if let key = try keystore.loadSigningKey(owner) { return key }
        do {
            return try keystore.createSigningKey(owner)
        } catch let error as StoreError where error.kind == .alreadyExists {
            // Another process made it a moment ago: use theirs.
            guard let key = try keystore.loadSigningKey(owner) else { throw error }
            return key
        }
    }

    /// The authors' keys the owner trusts besides its own.
    public func trustedSigningKeys(of owner: String) throws -> [TrustedSigningKey] {
        try NameRules.validateOwner(owner)
        return try keystore.loadTrusted(owner)
    }

    /// Trusts an author's signing key for the owner (made if it has no keys yet). Trusting a key twice changes nothing.
    @discardableResult
    public func trust(_ owner: String, author: String, signingKey publicKey: Data) throws -> TrustedSigningKey {
        try NameRules.validateOwner(owner)
        guard (try? Curve25519.Signing.PublicKey(rawRepresentation: publicKey)) != nil else {
            throw StoreError(.invalidKeyFile, "the signing key is not a 32-byte Ed25519 public key", details: ["owner": .string(owner)])
        }
        _ = try signingKey(of: owner)
        var keys = try keystore.loadTrusted(owner)
        if let known = keys.first(where: { $0.publicKey == publicKey }) { return known }
        guard keys.count < Keystore.maxTrustedKeys else {
            throw StoreError(
                .tooLarge, "owner '\(owner)' trusts \(keys.count) signing keys already; the limit is \(Keystore.maxTrustedKeys)",
                details: ["owner": .string(owner), "limit": .int(Int64(Keystore.maxTrustedKeys)), "count": .int(Int64(keys.count))])
        }
        let key = TrustedSigningKey(author: author, publicKey: publicKey, added: Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down)))
        keys.append(key)
        try keystore.writeTrusted(owner, keys)
        return key
    }

    /// Stops trusting the author's key with this fingerprint (or a unique prefix of it, 8 digits at least);
    /// `notFound` if the owner trusts no such key.
    @discardableResult
    public func untrust(_ owner: String, fingerprint: String) throws -> TrustedSigningKey {
        try NameRules.validateOwner(owner)
        var keys = try keystore.loadTrusted(owner)
        let wanted = fingerprint.lowercased()
        let matches = wanted.count >= 8 ? keys.filter { $0.fingerprint.hasPrefix(wanted) } : []
        guard matches.count == 1, let key = matches.first else {
            let known = keys.map { "\($0.fingerprint) (\($0.author))" }.joined(separator: ", ")
            throw StoreError(
                matches.count > 1 ? .invalidName : .notFound,
                matches.count > 1
                    ? "'\(fingerprint)' names \(matches.count) keys owner '\(owner)' trusts; give more digits"
                    : "owner '\(owner)' trusts no signing key with fingerprint '\(fingerprint)' (it trusts: \(known.isEmpty ? "none besides its own" : known))",
                details: ["owner": .string(owner), "fingerprint": .string(fingerprint)])
        }
        keys.removeAll { $0.publicKey == key.publicKey }
        try keystore.writeTrusted(owner, keys)
        return key
    }

    /// How the owner stands to a plugin's signer: its own key, an author's it trusts, or
    /// `untrustedSigner` (what it trusts, and how to trust this key, in the message).
    public func standing(of signer: Data, for owner: String) throws -> SignerStanding {
        try NameRules.validateOwner(owner)
        if let own = try ownSigningPublicKey(owner), own == signer { return .ownKey }
        if let trusted = try trustedSigningKeys(owner).first(where: { $0.publicKey == signer }) { return .trustedAuthor(trusted) }
        let fingerprint = SigningKeyFingerprint.of(signer)
        throw StoreError(
            .untrustedSigner,
            "the plugin is signed with key \(fingerprint), which owner '\(owner)' does not trust: sign it with the owner's key (extrun plugins sign DIR --owner \(owner)), or trust its author's key (extrun owners trust \(owner) --signing-key FILE)",
            details: ["owner": .string(owner), "signingKey": .string(fingerprint)])
    }
}

extension Store {
    /// The owner's own public signing key (nil: it has none). The file is looked at every
    /// time: a `stat` (its owner and mode checked, as `Keystore.loadSigningKey` does) whose
    /// identity is the one of the file last read and parsed gives that key; any other file
    /// is read and checked, and parsed again when its bytes differ (deriving the key costs
    /// ~100 µs, on every intent of a warm process: docs/benchmarks.md, "extrun serve").
    func ownSigningPublicKey(_ owner: String) throws -> Data? {
        try ownSigningKeys.value(of: keystore.signingPath(for: owner), owner: owner, keystore: keystore, limit: 64 * 1024) { bytes, path in
            try keystore.signingKey(from: bytes, path: path, owner: owner).publicKey
        }
    }

    /// The keys the owner trusts, as `Keystore.loadTrusted`: the file is looked at every
    /// time (a key removed with `extrun owners untrust` counts for the next intent), read
    /// again when its identity (`FileStamp`) is not the one last read, and parsed
    /// (JSON, base64, dates) again when its bytes differ (docs/benchmarks.md, "The donation's own cost").
    func trustedSigningKeys(_ owner: String) throws -> [TrustedSigningKey] {
        try trustedKeys.value(of: keystore.trustPath(for: owner), owner: owner, keystore: keystore, limit: 1 << 20) { bytes, path in
            try keystore.parseTrusted(bytes, path: path, owner: owner)
        } ?? []
    }
}

/// What a key file of each owner said when last read (`Store.ownSigningPublicKey`,
/// `Store.trustedSigningKeys`): its bytes, their identity (`FileStamp`) and what was
/// parsed from them. A file whose identity had settled when it was read, and is the same
/// now, is only `stat`ed (still a regular file of yours that others cannot read, as
/// `Keystore.readPrivateFile` requires); any other is read and checked again, and parsed
/// again when its bytes differ.
final class KeyFileCache<Value: Sendable>: Sendable {
    struct Entry: Sendable {
        var bytes: Data
        var identity: FileStamp
        /// Whether the file had settled when it was read (`FileStamp.hasSettled`): only
        /// then does the same identity later mean the same bytes.
        var settled: Bool
        var value: Value
    }

    /// Per owner: its file's path, and what the file said when last read.
    private let entries = NIOLockedValueBox<[String: (path: String, entry: Entry?)]>([:])

    func entry(_ owner: String) -> Entry? { entries.withLockedValue { $0[owner]?.entry } }

    /// The parsed file of `owner` at `path`, nil when there is none. The path is made
    /// once per owner, and an absent file costs one `lstat` (docs/benchmarks.md,
    /// "The donation's own cost").
    func value(
        of path: @autoclosure () -> String, owner: String, keystore: Keystore, limit: Int, parse: (Data, String) throws -> Value
    ) throws -> Value? {
        let known = entries.withLockedValue { $0[owner] }
        let path = known?.path ?? path()
        let cached = known?.entry
        var info = stat()
        if lstat(path, &info) != 0, errno == ENOENT {
            // What was read before is forgotten: a file made later is read.
            if known == nil || cached != nil { remember(owner, path: path, entry: nil) }
            return nil
        }
        if let cached, cached.settled, Self.privateFileStamp(info) == cached.identity { return cached.value }
        guard let (bytes, identity) = try keystore.readPrivateFileWithIdentity(path, owner: owner, limit: limit) else { return nil }
        let value = try cached.flatMap { $0.bytes == bytes ? $0.value : nil } ?? parse(bytes, path)
        remember(owner, path: path, entry: Entry(bytes: bytes, identity: identity, settled: identity.hasSettled, value: value))
        return value
    }

    private func remember(_ owner: String, path: String, entry: Entry?) {
        entries.withLockedValue { known in
            if known.count >= 64 { known.removeAll() }
            known[owner] = (path, entry)
        }
    }

    /// The identity of the file `lstat` gave `info` for when it is a regular file of yours
    /// that others cannot read; nil otherwise (anything `readPrivateFile` refuses: it is
    /// then read, and refused, the slow way).
    private static func privateFileStamp(_ info: stat) -> FileStamp? {
        guard info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid(), info.st_mode & 0o077 == 0 else { return nil }
        return FileStamp(info)
    }
}
