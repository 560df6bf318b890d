import Crypto
import ExtrunProtocol
import Foundation

/// An owner's public X25519 key as a small JSON file (`extrun owners pubkey`),
/// the recipient of a transfer bundle (docs/migration.md, "Two machines"),
/// with its Ed25519 signing key (what another host trusts, `extrun owners trust`):
///
///     {"fingerprint": "<32 hex digits>", "format": "extrun-owner-public-key",
///      "owner": "NEWTEAM", "publicKey": "<base64, 32 bytes>",
///      "signingFingerprint": "<32 hex digits>", "signingKey": "<base64, 32 bytes>", "version": 1}
///
/// (`signingKey` is absent from files of an earlier extrun.)
/// The fingerprint is `hex(SHA-256("extrun-public-key-fingerprint-v1" ‖ key)[0..<16])`:
/// read it out over another channel to check the file was not swapped.
public struct OwnerPublicKey: Sendable, Equatable {
    public static let formatName = "extrun-owner-public-key"
    public static let currentVersion = 1

    public var owner: String
    /// The raw 32-byte X25519 public key.
    public var publicKey: Data
    public var fingerprint: String { OwnerPublicKey.fingerprint(of: publicKey) }
    /// The raw 32-byte Ed25519 signing public key.
    public var signingKey: Data?
    public var signingFingerprint: String? { signingKey.map(SigningKeyFingerprint.of) }

    public init(owner: String, publicKey: Data, signingKey: Data? = nil) {
        self.owner = owner
        self.publicKey = publicKey
        self.signingKey = signingKey
    }

    public static func fingerprint(of publicKey: Data) -> String {
        KeyFingerprint.hex(publicKey, domain: "extrun-public-key-fingerprint-v1")
    }

    private struct File: Codable {
        var format: String
        var version: Int
        var owner: String
        var publicKey: Data
        var fingerprint: String
        var signingKey: Data?
        var signingFingerprint: String?
    }

    /// The key file's contents (pretty JSON, sorted keys, a final newline).
    public func encoded() throws -> Data {
        let file = File(
            format: OwnerPublicKey.formatName, version: OwnerPublicKey.currentVersion, owner: owner, publicKey: publicKey,
            fingerprint: fingerprint, signingKey: signingKey, signingFingerprint: signingFingerprint)
        return try JSONCoding.encoder(pretty: true).encode(file) + Data("\n".utf8)
    }

    /// Reads a public key file; `invalidKeyFile` naming `file` for anything wrong with it.
    public static func decode(_ data: Data, file: String) throws -> OwnerPublicKey {
        let details: [String: JSONValue] = ["file": .string(file)]
        let decoded: File
        do {
            decoded = try JSONCoding.decode(File.self, fromJSON: data)
        } catch {
            throw StoreError(.invalidKeyFile, "\(file) is not an extrun public key file: \(JSONCoding.describe(error))", details: details)
        }
        guard decoded.format == formatName else {
            throw StoreError(.invalidKeyFile, "\(file) has format '\(decoded.format)', expected '\(formatName)'", details: details)
        }
        guard decoded.version == currentVersion else {
            throw StoreError(.invalidKeyFile, "\(file) is version \(decoded.version); this extrun reads version \(currentVersion)", details: details)
        }
        try NameRules.validateOwner(decoded.owner)
        guard (try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: decoded.publicKey)) != nil else {
            throw StoreError(.invalidKeyFile, "\(file): publicKey is not a 32-byte X25519 public key", details: details)
        }
        let key = OwnerPublicKey(owner: decoded.owner, publicKey: decoded.publicKey, signingKey: decoded.signingKey)
        guard key.fingerprint == decoded.fingerprint.lowercased() else {
            throw StoreError(
                .invalidKeyFile, "\(file): the fingerprint \(decoded.fingerprint) does not match the key (\(key.fingerprint)); the file was altered",
                details: details)
        }
        if let signingKey = decoded.signingKey {
            guard (try? Curve25519.Signing.PublicKey(rawRepresentation: signingKey)) != nil else {
                throw StoreError(.invalidKeyFile, "\(file): signingKey is not a 32-byte Ed25519 public key", details: details)
            }
            guard key.signingFingerprint == decoded.signingFingerprint?.lowercased() else {
                throw StoreError(
                    .invalidKeyFile,
                    "\(file): the signing fingerprint \(decoded.signingFingerprint ?? "(none)") does not match the signing key (\(key.signingFingerprint ?? "")); the file was altered",
                    details: details)
            }
        }
        return key
    }
}

extension Store {
    /// The owner's public keys: the agreement key, to give to the machine that exports
    /// data for it, and the signing key, to give to hosts that run its plugins. Creates
    /// the owner's keys if it has none (like `createOwner`), its signing key if only that is missing.
    public func publicKey(of owner: String) throws -> OwnerPublicKey {
        try NameRules.validateOwner(owner)
        let key = try writeKey(owner)
        let signing = try signingKey(of: owner)
        return OwnerPublicKey(owner: owner, publicKey: key.publicKey.rawRepresentation, signingKey: signing.publicKey)
    }
}

/// A public key's name for people: `hex(SHA-256(domain ‖ key)[0..<16])`, one domain per
/// kind of key (X25519 for migrations, Ed25519 for signing), so the two never read alike.
enum KeyFingerprint {
    static func hex(_ publicKey: Data, domain: String) -> String {
        var hasher = SHA256()
        hasher.update(data: Data(domain.utf8))
        hasher.update(data: publicKey)
        return hasher.finalize().prefix(16).map { byte in
            let hex = String(byte, radix: 16)
            return byte < 16 ? "0" + hex : hex
        }.joined()
    }
}
