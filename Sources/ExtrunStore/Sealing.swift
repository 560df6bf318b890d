import Crypto
import ExtrunProtocol
import Foundation

/// What a sealed blob holds; part of its authenticated data.
package enum SealKind: String, Sendable {
    case global
    case bookmark
    case donation
}

/// The owner, kind and name a sealed blob belongs to. They are not encrypted
/// (they are the row's key) but authenticated: a blob copied under another
/// owner, kind or name no longer opens.
package struct SealContext: Sendable {
    var owner: String
    var kind: SealKind
    var name: String

    package init(owner: String, kind: SealKind, name: String) {
        self.owner = owner
        self.kind = kind
        self.name = name
    }

    /// The authenticated data, byte for byte (docs/store.md, "Sealing"):
    /// `"extrun-seal-v1" 0x00` then kind, owner and name, each as a 4-byte
    /// big-endian length followed by its UTF-8 bytes.
    /// Built in one buffer of its size (a donation seals one: with an array per field and
    /// `Data` appends it cost ~6 µs of a donation's CPU, `perf` of 8 donating callers).
    var authenticatedData: Data {
        let kind = kind.rawValue
        var bytes: [UInt8] = []
        bytes.reserveCapacity(Sealing.label.utf8.count + 1 + 12 + kind.utf8.count + owner.utf8.count + name.utf8.count)
        bytes.append(contentsOf: Sealing.label.utf8)
        bytes.append(0)
        func append(_ field: String) {
            withUnsafeBytes(of: UInt32(truncatingIfNeeded: field.utf8.count).bigEndian) { bytes.append(contentsOf: $0) }
            bytes.append(contentsOf: field.utf8)
        }
        append(kind)
        append(owner)
        append(name)
        return Data(bytes)
    }
}

/// AES-256-GCM sealing of stored values with an owner's data key.
///
/// A sealed blob is `0x01 ‖ nonce (12 bytes, random) ‖ ciphertext ‖ tag (16 bytes)`.
/// The AES key is derived from the owner's data key with HKDF-SHA256, so the
/// data key itself can later serve other purposes under other labels.
package enum Sealing {
    static let label = "extrun-seal-v1"
    static let formatVersion: UInt8 = 1
    /// Bytes a sealed blob adds to its plaintext: version, nonce and tag.
    static let overhead = 1 + 12 + 16

    static func sealingKey(dataKey: SymmetricKey) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(
            inputKeyMaterial: dataKey, info: Data("extrun-seal-v1 aes-256-gcm".utf8), outputByteCount: 32)
    }

    package static func seal(_ plaintext: Data, with key: OwnerKey, context: SealContext) throws -> Data {
        do {
            let box = try AES.GCM.seal(plaintext, using: key.sealingKey, nonce: AES.GCM.Nonce(), authenticating: context.authenticatedData)
            guard let combined = box.combined else {
                throw StoreError(.databaseError, "AES-GCM produced no combined box (unexpected nonce size)")
            }
            var blob = Data(capacity: 1 + combined.count)
            blob.append(formatVersion)
            blob.append(combined)
            return blob
        } catch let error as StoreError {
            throw error
        } catch {
            throw StoreError(.databaseError, "could not seal \(context.kind.rawValue) '\(context.name)': \(error)")
        }
    }

    static func open(_ blob: Data, with key: OwnerKey, context: SealContext, file: String) throws -> Data {
        let details: [String: JSONValue] = [
            "owner": .string(context.owner), "kind": .string(context.kind.rawValue),
            "name": .string(context.name), "file": .string(file),
        ]
        let what = "\(context.kind.rawValue) '\(context.name)' of owner '\(context.owner)' in \(file)"
        guard let version = blob.first else {
            throw StoreError(.sealBroken, "\(what) is empty: it was modified outside extrun", details: details)
        }
        guard version == formatVersion else {
            throw StoreError(
                .sealBroken,
                "\(what) uses sealing format \(version), which this extrun does not know (written by a newer extrun, or modified outside extrun)",
                details: details)
        }
        guard blob.count >= overhead else {
            throw StoreError(.sealBroken, "\(what) is \(blob.count) bytes, shorter than any sealed value: it was truncated or modified", details: details)
        }
        do {
            let box = try AES.GCM.SealedBox(combined: blob.dropFirst())
            return try AES.GCM.open(box, using: key.sealingKey, authenticating: context.authenticatedData)
        } catch {
            throw StoreError(
                .sealBroken,
                "\(what) does not open with the owner's key (authentication failed): it was modified, or copied from another owner or name",
                details: details)
        }
    }
}
