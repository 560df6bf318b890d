import Crypto
import ExtrunProtocol
import ExtrunSystem
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// An owner's keys: the 256-bit data key that seals its rows, and an X25519
/// key agreement pair for moving the data key to another machine later.
/// The secret parts stay inside the module.
public struct OwnerKey: Sendable {
    public let owner: String
    public let created: Date
    /// Names the data key without revealing it: the first 16 bytes of
    /// SHA-256("extrun-key-fingerprint-v1" ‖ data key), in hex. The store
    /// records it per owner to tell a wrong key from tampered rows.
    public let fingerprint: String
    /// The public half of the owner's X25519 key agreement pair.
    public let publicKey: Curve25519.KeyAgreement.PublicKey

    let dataKey: SymmetricKey
    let sealingKey: SymmetricKey
    let agreementPrivateKey: Curve25519.KeyAgreement.PrivateKey

    init(owner: String, created: Date, dataKey: SymmetricKey, agreementPrivateKey: Curve25519.KeyAgreement.PrivateKey) {
        self.owner = owner
        self.created = created
        self.dataKey = dataKey
        self.sealingKey = Sealing.sealingKey(dataKey: dataKey)
        self.agreementPrivateKey = agreementPrivateKey
        self.publicKey = agreementPrivateKey.publicKey
        self.fingerprint = OwnerKey.fingerprint(of: dataKey)
    }

    static func fingerprint(of dataKey: SymmetricKey) -> String {
        var hasher = SHA256()
        hasher.update(data: Data("extrun-key-fingerprint-v1".utf8))
        dataKey.withUnsafeBytes { hasher.update(bufferPointer: $0) }
        return hasher.finalize().prefix(16).map { byte in
            let hex = String(byte, radix: 16)
            return byte < 16 ? "0" + hex : hex
        }.joined()
    }
}

/// The key file format, version 1 (docs/store.md, "Key files").
struct KeyFile: Codable {
    static let formatName = "extrun-owner-key"
    static let currentVersion = 1

    var format: String
    var version: Int
    var owner: String
    var created: Date
    /// The 32-byte data key, base64.
    var dataKey: Data
    /// The 32-byte raw X25519 private key, base64.
    var agreementPrivateKey: Data
    /// Its public key (checked against the private key when loading), base64.
    var agreementPublicKey: Data
}

extension KeyFile: JSONValueDecodable {
    /// Reads a key file without Codable (its first use in a process is costly, docs/benchmarks.md,
    /// "Costs the source's comments point to", and every `extrun handle` reads its owner's key for the donation);
    /// the same checks and error paths as the Codable conformance. `KeyFile(json:)` reads the bytes.
    init(jsonValue: JSONValue) throws {
        let fields = try JSONFields(jsonValue)
        self.init(
            format: try fields.string("format"), version: try fields.int("version"), owner: try fields.string("owner"),
            created: try fields.date("created"), dataKey: try fields.base64("dataKey"),
            agreementPrivateKey: try fields.base64("agreementPrivateKey"), agreementPublicKey: try fields.base64("agreementPublicKey"))
    }
}

/// Owners' key files under `<home>/keys/`: one `<escaped owner>.key` each,
/// mode 0600 in a 0700 folder, written atomically and never overwritten.
struct Keystore: Sendable {
    let directory: String

    init(home: String) {
        directory = home + "/keys"
    }

    func path(for owner: String) -> String {
        directory + "/" + Keystore.fileName(for: owner)
    }

    /// `<owner>.key` with every byte outside `A-Z a-z 0-9 _ - .` (and a leading
    /// `.`) written as `%XX`, so any valid owner name is one safe file name.
    static func fileName(for owner: String) -> String {
        escape(owner) + ".key"
    }

    /// The owner name as one safe file name (also used for the owner's trash folder).
    static func escape(_ owner: String) -> String {
        var name = ""
        for (index, byte) in owner.utf8.enumerated() {
            let isPlain = (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39)
                || byte == 0x5F || byte == 0x2D || (byte == 0x2E && index > 0)
            if isPlain {
                name.append(Character(Unicode.Scalar(byte)))
            } else {
                let hex = String(byte, radix: 16, uppercase: true)
                name += "%" + (byte < 16 ? "0" + hex : hex)
            }
        }
        return name
    }

    /// The owner a key file name stands for, or nil if it is not one `fileName(for:)` makes.
    static func owner(fromFileName fileName: String) -> String? {
        guard fileName.hasSuffix(".key"), !fileName.hasPrefix(".") else { return nil }
        var bytes: [UInt8] = []
        var utf8 = Array(fileName.utf8.dropLast(4))[...]
        while let byte = utf8.popFirst() {
            if byte == 0x25 {
                guard utf8.count >= 2, let value = UInt8(String(decoding: utf8.prefix(2), as: UTF8.self), radix: 16) else { return nil }
                bytes.append(value)
                utf8 = utf8.dropFirst(2)
            } else {
                bytes.append(byte)
            }
        }
        guard let owner = String(validating: bytes, as: UTF8.self), (try? NameRules.validateOwner(owner)) != nil,
            Keystore.fileName(for: owner) == fileName
        else { return nil }
        return owner
    }

    /// Creates `keys/` (0700) if needed and refuses one other users can enter.
    func prepareDirectory() throws {
        do {
            try FileOps.makePrivateDirectory(directory)
        } catch {
            throw StoreError(.ioError, "cannot create the keys folder \(directory): \(error.reason)", details: ["file": .string(directory)])
        }
        var info = stat()
        guard stat(directory, &info) == 0 else {
            throw StoreError(.ioError, "cannot read the keys folder \(directory): \(SystemCall.lastReason)", details: ["file": .string(directory)])
        }
        if info.st_uid != geteuid() || info.st_mode & 0o077 != 0 {
            throw StoreError(
                .insecurePermissions,
                "the keys folder \(directory) has mode \(String(info.st_mode & 0o7777, radix: 8)) (owner uid \(info.st_uid)); it must belong to you with mode 700: chmod 700 '\(directory)'",
                details: ["file": .string(directory)])
        }
    }

    /// The owners that have a key file, in byte order of their names.
    func owners() throws -> [String] {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory)
        } catch {
            if !FileManager.default.fileExists(atPath: directory) { return [] }
            throw StoreError(.ioError, "cannot list the keys folder \(directory): \(error.localizedDescription)", details: ["file": .string(directory)])
        }
        return names.compactMap(Keystore.owner(fromFileName:)).sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
    }

    /// Whether any key file is present (a sign that a store existed).
    func hasAnyKey() -> Bool {
        ((try? owners()) ?? []).isEmpty == false
    }

    /// The owner's key, or nil if it has no key file. Any problem with the file is an error naming it.
    func load(_ owner: String) throws -> OwnerKey? {
        let path = path(for: owner)
        let details: [String: JSONValue] = ["owner": .string(owner), "file": .string(path)]
        let fd: Int32
        do {
            fd = try FileOps.open(path, O_RDONLY | O_NOFOLLOW)
        } catch {
            switch error.code {
            case ENOENT: return nil
            case ELOOP:
                throw StoreError(.invalidKeyFile, "key file \(path) is a symbolic link; key files must be regular files", details: details)
            default:
                throw StoreError(.invalidKeyFile, "cannot open key file \(path): \(error.reason)", details: details)
            }
        }
        defer { close(fd) }
        let data: Data
        do {
            let info = try FileOps.fstat(fd)
            guard info.isRegularFile else {
                throw StoreError(.invalidKeyFile, "key file \(path) is not a regular file", details: details)
            }
            if info.st_uid != geteuid() || info.st_mode & 0o077 != 0 {
                throw StoreError(
                    .insecurePermissions,
                    "key file \(path) has mode \(String(info.st_mode & 0o7777, radix: 8)) (owner uid \(info.st_uid)); it must belong to you with mode 600: chmod 600 '\(path)'",
                    details: details)
            }
            guard let read = try FileOps.readAll(fd, limit: 64 * 1024, expectedSize: Int(info.st_size)) else {
                throw StoreError(.invalidKeyFile, "key file \(path) is over 64 KiB: not a key file", details: details)
            }
            data = read
        } catch let error as SystemCallError {
            throw StoreError(.invalidKeyFile, "cannot read key file \(path): \(error.reason)", details: details)
        }
        return try Keystore.decode(data, owner: owner, path: path)
    }

    static func decode(_ data: Data, owner: String, path: String) throws -> OwnerKey {
        let details: [String: JSONValue] = ["owner": .string(owner), "file": .string(path)]
        if data.isEmpty {
            throw StoreError(.invalidKeyFile, "key file \(path) is empty (0 bytes): it was truncated", details: details)
        }
        let file: KeyFile
        do {
            file = try KeyFile(json: data)
        } catch {
            throw StoreError(.invalidKeyFile, "key file \(path) is not a valid key file: \(JSONCoding.describe(error))", details: details)
        }
        guard file.format == KeyFile.formatName else {
            throw StoreError(.invalidKeyFile, "key file \(path) has format '\(file.format)', expected '\(KeyFile.formatName)'", details: details)
        }
        guard file.version == KeyFile.currentVersion else {
            throw StoreError(
                .invalidKeyFile,
                "key file \(path) is version \(file.version); this extrun reads version \(KeyFile.currentVersion) (written by a newer extrun?)",
                details: details)
        }
        guard file.owner.utf8.elementsEqual(owner.utf8) else {
            throw StoreError(
                .invalidKeyFile, "key file \(path) belongs to owner '\(file.owner)', not '\(owner)': it was copied or renamed",
                details: details)
        }
        guard file.dataKey.count == 32 else {
            throw StoreError(.invalidKeyFile, "key file \(path): dataKey is \(file.dataKey.count) bytes, expected 32", details: details)
        }
        guard let privateKey = try? Curve25519.KeyAgreement.PrivateKey(rawRepresentation: file.agreementPrivateKey),
            privateKey.publicKey.rawRepresentation == file.agreementPublicKey
        else {
            throw StoreError(
                .invalidKeyFile, "key file \(path): agreementPrivateKey is not a 32-byte X25519 key matching agreementPublicKey",
                details: details)
        }
        return OwnerKey(owner: owner, created: file.created, dataKey: SymmetricKey(data: file.dataKey), agreementPrivateKey: privateKey)
    }

    /// Makes a new key and writes its file atomically; `alreadyExists` if the
    /// owner has a key file (possibly written by another process a moment ago).
    func create(_ owner: String) throws -> OwnerKey {
        let path = path(for: owner)
        let created = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
        let key = OwnerKey(
            owner: owner, created: created, dataKey: SymmetricKey(size: .bits256),
            agreementPrivateKey: Curve25519.KeyAgreement.PrivateKey())
        let file = KeyFile(
            format: KeyFile.formatName, version: KeyFile.currentVersion, owner: owner, created: created,
            dataKey: key.dataKey.withUnsafeBytes { Data($0) },
            agreementPrivateKey: key.agreementPrivateKey.rawRepresentation,
            agreementPublicKey: key.publicKey.rawRepresentation)
        let data: Data
        do {
            data = try JSONCoding.encoder(pretty: true).encode(file) + Data("\n".utf8)
        } catch {
            throw StoreError(.ioError, "cannot encode key file \(path): \(error)")
        }
        let details: [String: JSONValue] = ["owner": .string(owner), "file": .string(path)]
        do {
            let dirfd = try FileOps.open(directory, O_RDONLY | O_DIRECTORY)
            defer { close(dirfd) }
            try FileOps.writeAtomically(
                dirfd: dirfd, name: Keystore.fileName(for: owner), data: data, createMode: 0o600, exactMode: 0o600, replace: false)
        } catch {
            if error.code == EEXIST {
                throw StoreError(.alreadyExists, "owner '\(owner)' already has a key file: \(path)", details: details)
            }
            throw StoreError(.ioError, "cannot write key file \(path): \(error.reason)", details: details)
        }
        return key
    }
}
