import Crypto
import ExtrunProtocol
import ExtrunSystem
import Foundation
import GRDB

#if canImport(Glibc)
import Glibc
#endif

/// The transfer bundle (`extrun migrate export` / `import`, docs/migration.md):
///
///     "EXTRUNTB" 0x01                         magic and format version
///     u32be n, header (n bytes of JSON)       TransferHeader: who, to whom, which keys
///     u16be m, encapsulated key (m bytes)     HPKE's enc
///     { u32be c, chunk (c bytes) }*           each one HPKE seal of the same context, in order
///
/// HPKE: DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-256-GCM in auth mode:
/// sealed to the recipient's public key and authenticated by the sender's
/// (the old owner's X25519 key). `info` is `"extrun-transfer-v1" 0x00 ‖
/// SHA-256(magic ‖ header)`, so the header cannot be changed either. Chunks
/// are sealed in sequence (the nonce counts them): a chunk dropped, repeated or
/// moved does not open. A chunk's plaintext starts with its type, 0 (items) or
/// 1 (end, with the totals); a bundle that ends before the end chunk, or has
/// anything after it, is refused.
///
/// Items: `u8 kind (1 global, 2 bookmark) ‖ u16be len ‖ name ‖ u32be len ‖ value`,
/// globals then bookmarks, each in byte order of their names; a global's value
/// is its JSON, a bookmark's its record as JSON (docs/store.md).
enum TransferFormat {
    static let magic = Data("EXTRUNTB".utf8) + Data([1])
    static let suite = HPKE.Ciphersuite(kem: .Curve25519_HKDF_SHA256, kdf: .HKDF_SHA256, aead: .AES_GCM_256)
    static let suiteName = "DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, AES-256-GCM, auth mode"
    /// Plaintext gathered into one chunk before it is sealed (a larger single item makes a larger chunk).
    static let chunkTarget = 1 << 20
    /// Refused above this: the largest item (4 MiB value) plus a full chunk, with room.
    static let maxChunk = 8 << 20
    static let maxHeader = 64 << 10

    static func info(headerBytes: Data) -> Data {
        var data = Data("extrun-transfer-v1".utf8)
        data.append(0)
        var hasher = SHA256()
        hasher.update(data: magic)
        hasher.update(data: headerBytes)
        data.append(contentsOf: hasher.finalize())
        return data
    }
}

struct TransferParty: Codable, Equatable {
    var owner: String
    var publicKey: Data
    var fingerprint: String
}

struct TransferHeader: Codable {
    static let formatName = "extrun-transfer"
    var format: String
    var version: Int
    /// A random id: an interrupted import of this bundle resumes by it.
    var bundle: String
    var created: Date
    var suite: String
    /// The old owner, whose data this is.
    var source: String
    var scope: MigrationScope
    var sender: TransferParty
    var recipient: TransferParty
    /// The old owner's container on the exporting machine (as written, and canonical).
    var sourceContainer: String
    var sourceContainerCanonical: String
}

/// The end chunk: what the exporter put in, to check nothing is missing.
struct TransferEnd: Codable {
    var globals: Int
    var bookmarks: Int
    var chunks: Int
    /// Items the exporter could not open (left out, listed here up to 1,000).
    var failed: Int
    var failedItems: [TransferFailure]
}

struct TransferFailure: Codable {
    var kind: String
    var name: String
    var error: String
    var message: String
}

struct TransferEntry {
    var kind: SealKind
    var name: String
    var value: Data
}

/// What `exportTransfer` wrote.
public struct TransferExportSummary: Sendable {
    public var from: String
    public var bundle: String
    public var recipient: String
    public var recipientFingerprint: String
    public var senderFingerprint: String
    public var globals: Int
    public var bookmarks: Int
    /// Items that did not open with the old owner's key: left out, listed in `items`.
    public var failed: Int
    public var items: [MigrationItemReport]
    public var bytes: Int64
    public var seconds: Double

    public var json: JSONValue {
        .object([
            "from": .string(from), "bundle": .string(bundle), "recipient": .string(recipient),
            "recipientFingerprint": .string(recipientFingerprint), "senderFingerprint": .string(senderFingerprint),
            "globals": .int(Int64(globals)), "bookmarks": .int(Int64(bookmarks)), "failed": .int(Int64(failed)),
            "items": .array(items.map(\.json)), "bytes": .int(bytes), "seconds": .double((seconds * 1000).rounded() / 1000),
        ])
    }
}

/// Who must have sealed a bundle for `importTransfer` to accept it.
public enum TransferSender: Sendable {
    /// The old owner's public key file (`extrun owners pubkey OLD` on the old machine).
    case publicKey(OwnerPublicKey)
    /// Its fingerprint, as `export` and `owners pubkey` print it.
    case fingerprint(String)
}

// MARK: - Writing

struct TransferWriter {
    let fd: Int32
    let path: String
    var sender: HPKE.Sender
    var buffer = Data()
    var chunks = 0
    var bytes: Int64 = 0

    mutating func add(_ kind: SealKind, _ name: String, _ value: Data) throws {
        let nameBytes = Data(name.utf8)
        if !buffer.isEmpty, buffer.count + nameBytes.count + value.count + 7 > TransferFormat.chunkTarget { try flush() }
        if buffer.isEmpty { buffer.append(0) }
        buffer.append(kind == .global ? 1 : 2)
        withUnsafeBytes(of: UInt16(nameBytes.count).bigEndian) { buffer.append(contentsOf: $0) }
        buffer.append(nameBytes)
        withUnsafeBytes(of: UInt32(value.count).bigEndian) { buffer.append(contentsOf: $0) }
        buffer.append(value)
    }

    mutating func flush() throws {
        guard !buffer.isEmpty else { return }
        try writeChunk(buffer)
        buffer.removeAll(keepingCapacity: true)
    }

    /// Seals what is pending, then the end chunk (whose chunk count includes itself).
    mutating func finish(_ end: TransferEnd) throws {
        try flush()
        var end = end
        end.chunks = chunks + 1
        var chunk = Data([1])
        chunk.append(try JSONCoding.encoder().encode(end))
        try writeChunk(chunk)
    }

    private mutating func writeChunk(_ plaintext: Data) throws {
        let sealed: Data
        do {
            sealed = try sender.seal(plaintext)
        } catch {
            throw StoreError(.databaseError, "cannot seal a chunk of \(path): \(error)")
        }
        var framed = Data()
        withUnsafeBytes(of: UInt32(sealed.count).bigEndian) { framed.append(contentsOf: $0) }
        framed.append(sealed)
        try write(framed)
        chunks += 1
    }

    mutating func write(_ data: Data) throws {
        do {
            try FileOps.writeAll(fd, data)
        } catch {
            throw StoreError(.ioError, "cannot write \(path): \(error.reason); the bundle was not made", details: ["file": .string(path)])
        }
        bytes += Int64(data.count)
    }
}

extension Store {
    /// Writes all of `from`'s globals and bookmarks (or those of `scope`) to a
    /// new file at `output`, sealed to `recipient` and authenticated by `from`'s
    /// key. Memory stays flat: items are read in key order and sealed in
    /// chunks of about 1 MiB. Items that do not open are left out and reported.
    public func exportTransfer(
        from: String, recipient: OwnerPublicKey, to output: String, scope: MigrationScope = .all,
        progress: ((MigrationProgress) -> Void)? = nil
    ) throws -> TransferExportSummary {
        let started = Date()
        try NameRules.validateOwner(from)
        guard let oldKey = try readKey(from) else {
            throw StoreError(
                .notFound, "owner '\(from)' has nothing to export: no key file \(keystore.path(for: from)) and nothing in \(databasePath)",
                details: ["owner": .string(from)])
        }
        let recipientKey: Curve25519.KeyAgreement.PublicKey
        do {
            recipientKey = try Curve25519.KeyAgreement.PublicKey(rawRepresentation: recipient.publicKey)
        } catch {
            throw StoreError(.invalidKeyFile, "the recipient's public key is not an X25519 key")
        }
        let details: [String: JSONValue] = ["file": .string(output)]
        var info = stat()
        if lstat(output, &info) == 0 {
            throw StoreError(.alreadyExists, "\(output) already exists; the bundle is never written over a file", details: details)
        }
        if case .sqlite(let database) = backend { try database.verifyBeforeBulkWork("exporting '\(from)'") }
        let folder = (output as NSString).deletingLastPathComponent.isEmpty ? "." : (output as NSString).deletingLastPathComponent
        let name = (output as NSString).lastPathComponent
        let dirfd: Int32
        do { dirfd = try FileOps.open(folder, O_RDONLY | O_DIRECTORY) } catch {
            throw StoreError(.ioError, "cannot write in \(folder): \(error.reason)", details: details)
        }
        defer { close(dirfd) }
        // Those of exports that were killed (up to a whole bundle each) go now.
        ProcessTemporaries.removeStale(in: folder, prefix: "extrun-bundle")
        let temporary = ProcessTemporaries.name("extrun-bundle")
        let fd: Int32
        do { fd = try FileOps.openat(dirfd, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o600) } catch {
            throw StoreError(.ioError, "cannot create a file in \(folder): \(error.reason)", details: details)
        }
        var renamed = false
        defer {
            close(fd)
            if !renamed { unlinkat(dirfd, temporary, 0) }
        }
        fchmod(fd, 0o600)

        let containers = ContainerMap.local(store: self, from: from, to: from)
        var idBytes = [UInt8](repeating: 0, count: 16)
        for index in idBytes.indices { idBytes[index] = UInt8.random(in: 0...255) }
        let sender = TransferParty(
            owner: from, publicKey: oldKey.publicKey.rawRepresentation, fingerprint: OwnerPublicKey.fingerprint(of: oldKey.publicKey.rawRepresentation))
        let header = TransferHeader(
            format: TransferHeader.formatName, version: 1, bundle: idBytes.map { String(format: "%02x", $0) }.joined(),
            created: Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down)), suite: TransferFormat.suiteName, source: from,
            scope: scope, sender: sender,
            recipient: TransferParty(owner: recipient.owner, publicKey: recipient.publicKey, fingerprint: recipient.fingerprint),
            sourceContainer: containers.sourceLiteral, sourceContainerCanonical: containers.sourceReadRoot ?? containers.sourceLiteral)
        let headerBytes = try JSONCoding.encoder().encode(header)
        let hpke: HPKE.Sender
        do {
            hpke = try HPKE.Sender(
                recipientKey: recipientKey, ciphersuite: TransferFormat.suite, info: TransferFormat.info(headerBytes: headerBytes),
                authenticatedBy: oldKey.agreementPrivateKey)
        } catch {
            throw StoreError(.invalidKeyFile, "cannot seal to the recipient's key: \(error)")
        }
        var writer = TransferWriter(fd: fd, path: output, sender: hpke)
        var preamble = TransferFormat.magic
        withUnsafeBytes(of: UInt32(headerBytes.count).bigEndian) { preamble.append(contentsOf: $0) }
        preamble.append(headerBytes)
        withUnsafeBytes(of: UInt16(hpke.encapsulatedKey.count).bigEndian) { preamble.append(contentsOf: $0) }
        preamble.append(hpke.encapsulatedKey)
        try writer.write(preamble)

        var counts: [SealKind: Int] = [:]
        var failures: [TransferFailure] = []
        var failed = 0
        var totals = 0
        var done = 0
        // One snapshot of the owner, read in key order.
        try forEachSealedRow(owner: from, kinds: scope.kinds, total: { totals = $0 }) { kind, name, sealed in
            do {
                let plaintext = try Sealing.open(sealed, with: oldKey, context: SealContext(owner: from, kind: kind, name: name), file: databasePath)
                try writer.add(kind, name, plaintext)
                counts[kind, default: 0] += 1
            } catch let error as StoreError where error.kind == .sealBroken {
                failed += 1
                if failures.count < MigrationSummary.itemLimit {
                    failures.append(TransferFailure(kind: kind.rawValue, name: name, error: error.kind.rawValue, message: error.message))
                }
            }
            done += 1
            if done % 10_000 == 0 { progress?(MigrationProgress(phase: "export", done: done, total: totals)) }
        }
        try writer.finish(TransferEnd(
            globals: counts[.global] ?? 0, bookmarks: counts[.bookmark] ?? 0, chunks: 0, failed: failed, failedItems: failures))
        progress?(MigrationProgress(phase: "export", done: done, total: totals))
        do {
            try FileOps.fsync(fd)
            try StoreShims.renameat2(dirfd, temporary, dirfd, name, flags: LinuxABI.RENAME_NOREPLACE)
            renamed = true
            try FileOps.fsync(dirfd)
        } catch {
            if error.code == EEXIST {
                throw StoreError(.alreadyExists, "\(output) appeared while the bundle was written; it was not replaced", details: details)
            }
            throw StoreError(.ioError, "cannot write \(output): \(error.reason)", details: details)
        }
        return TransferExportSummary(
            from: from, bundle: output, recipient: recipient.owner, recipientFingerprint: recipient.fingerprint,
            senderFingerprint: sender.fingerprint, globals: counts[.global] ?? 0, bookmarks: counts[.bookmark] ?? 0, failed: failed,
            items: failures.map {
                MigrationItemReport(kind: $0.kind, name: $0.name, outcome: "failed", errorKind: $0.error, message: $0.message)
            },
            bytes: writer.bytes, seconds: Date().timeIntervalSince(started))
    }
}

extension Store {
    /// Calls `total` with the number of `owner`'s rows of `kinds`, then `row` for each of
    /// them, kind by kind and each in byte order of the names, all from one snapshot (one
    /// read transaction), on either backend.
    func forEachSealedRow(
        owner: String, kinds: [SealKind], total: (Int) throws -> Void, row: (SealKind, String, Data) throws -> Void
    ) throws {
        switch backend {
        case .postgres(let server):
            try server.forEachSealedRow(owner: owner, kinds: kinds, total: total, row: row)
        case .sqlite(let database):
            try database.read { db in
                var count = 0
                for kind in kinds {
                    count += try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM \(kind.rawValue) WHERE owner = ?", arguments: [owner]) ?? 0
                }
                try total(count)
                for kind in kinds {
                    let rows = try Row.fetchCursor(
                        db, sql: "SELECT name, sealed FROM \(kind.rawValue) WHERE owner = ? ORDER BY name", arguments: [owner])
                    while let found = try rows.next() {
                        try row(kind, found[0], found[1])
                    }
                }
            }
        }
    }
}

// MARK: - Reading

/// Reads a bundle sequentially with a fixed buffer: memory stays flat
/// whatever its size. Every problem is `invalidDocument` naming the file and
/// saying that nothing was imported (the caller reads everything once before writing).
final class TransferReader {
    let path: String
    let fd: Int32
    let header: TransferHeader
    let headerBytes: Data
    let encapsulatedKey: Data
    private var recipient: HPKE.Recipient?
    private var buffer = [UInt8](repeating: 0, count: 1 << 20)
    private var start = 0
    private var end = 0
    private(set) var sawEnd = false
    private(set) var chunks = 0

    func invalid(_ message: String) -> StoreError {
        StoreError(.invalidDocument, "the transfer bundle \(path) \(message); nothing was imported", details: ["file": .string(path)])
    }

    init(path: String) throws {
        self.path = path
        do {
            fd = try FileOps.open(path, O_RDONLY)
        } catch {
            throw StoreError(.notFound, "cannot open the transfer bundle \(path): \(error.reason)", details: ["file": .string(path)])
        }
        do {
            // Read the preamble through a temporary reader state (self is not fully initialized yet).
            let preamble = PreambleReader(fd: fd, path: path)
            let magic = try preamble.read(TransferFormat.magic.count)
            guard magic == TransferFormat.magic else {
                throw StoreError(.invalidDocument, "\(path) is not an extrun transfer bundle (wrong magic bytes); nothing was imported", details: ["file": .string(path)])
            }
            let headerLength = Int(try preamble.uint32())
            guard headerLength <= TransferFormat.maxHeader else {
                throw StoreError(.invalidDocument, "the transfer bundle \(path) has a header of \(headerLength) bytes: damaged; nothing was imported", details: ["file": .string(path)])
            }
            headerBytes = try preamble.read(headerLength)
            do {
                header = try JSONCoding.decode(TransferHeader.self, fromJSON: headerBytes)
            } catch {
                throw StoreError(.invalidDocument, "the transfer bundle \(path) has a damaged header (\(JSONCoding.describe(error))); nothing was imported", details: ["file": .string(path)])
            }
            let encLength = Int(try preamble.uint16())
            encapsulatedKey = try preamble.read(encLength)
        } catch {
            close(fd)
            throw error
        }
        guard header.format == TransferHeader.formatName, header.version == 1 else {
            close(fd)
            throw StoreError(
                .invalidDocument, "the transfer bundle \(path) is format '\(header.format)' version \(header.version); this extrun reads '\(TransferHeader.formatName)' version 1",
                details: ["file": .string(path)])
        }
    }

    deinit { close(fd) }

    /// Checks that the bundle is for `key` and from the expected sender, and starts decrypting.
    func open(with key: OwnerKey, sender: TransferSender) throws {
        guard header.recipient.publicKey == key.publicKey.rawRepresentation else {
            throw StoreError(
                .wrongKey,
                "the transfer bundle \(path) is sealed to the key \(header.recipient.fingerprint) (owner '\(header.recipient.owner)'), not to the key of '\(key.owner)' here (\(OwnerPublicKey.fingerprint(of: key.publicKey.rawRepresentation))); nothing was imported",
                details: ["file": .string(path), "owner": .string(key.owner)])
        }
        let senderFingerprint = OwnerPublicKey.fingerprint(of: header.sender.publicKey)
        let expected: String
        switch sender {
        case .publicKey(let publicKey): expected = publicKey.fingerprint
        case .fingerprint(let fingerprint): expected = fingerprint.lowercased().filter { $0 != ":" && $0 != " " }
        }
        guard senderFingerprint == expected else {
            throw StoreError(
                .wrongKey,
                "the transfer bundle \(path) was sealed by the key \(senderFingerprint) (owner '\(header.sender.owner)'), not by the expected sender \(expected); nothing was imported",
                details: ["file": .string(path), "senderFingerprint": .string(senderFingerprint), "expectedFingerprint": .string(expected)])
        }
        do {
            let senderKey = try Curve25519.KeyAgreement.PublicKey(rawRepresentation: header.sender.publicKey)
            recipient = try HPKE.Recipient(
                privateKey: key.agreementPrivateKey, ciphersuite: TransferFormat.suite, info: TransferFormat.info(headerBytes: headerBytes),
                encapsulatedKey: encapsulatedKey, authenticatedBy: senderKey)
        } catch {
            throw invalid("cannot be opened with this owner's key (\(error))")
        }
        try NameRules.validateOwner(header.source)
    }

    /// The next chunk's entries, or the end; nil after the end chunk (and only there).
    func next() throws -> ([TransferEntry]?, TransferEnd?)? {
        guard var recipient else { throw invalid("was not opened") }
        defer { self.recipient = recipient }
        guard try fill(4) else {
            if sawEnd, end == start { return nil }
            if sawEnd { throw invalid("has data after its end marker") }
            throw invalid("is truncated: it ends after \(chunks) chunk(s), without its end marker")
        }
        if sawEnd { throw invalid("has data after its end marker") }
        let length = Int(UInt32(buffer[start]) << 24 | UInt32(buffer[start + 1]) << 16 | UInt32(buffer[start + 2]) << 8 | UInt32(buffer[start + 3]))
        start += 4
        guard length > 16, length <= TransferFormat.maxChunk + 16 else { throw invalid("has a damaged chunk length (\(length) bytes) at chunk \(chunks + 1)") }
        guard try fill(length) else { throw invalid("is truncated inside chunk \(chunks + 1)") }
        let sealed = Data(buffer[start..<start + length])
        start += length
        let plaintext: Data
        do {
            plaintext = try recipient.open(sealed)
        } catch {
            throw invalid("does not open at chunk \(chunks + 1): it was modified, truncated, or not sealed by the sender it names")
        }
        chunks += 1
        guard let type = plaintext.first else { throw invalid("has an empty chunk") }
        let body = plaintext.dropFirst()
        if type == 1 {
            sawEnd = true
            do {
                return (nil, try JSONCoding.decode(TransferEnd.self, fromJSON: Data(body)))
            } catch {
                throw invalid("has a damaged end marker")
            }
        }
        guard type == 0 else { throw invalid("has a chunk of unknown type \(type)") }
        return (try parse(Data(body)), nil)
    }

    private func parse(_ body: Data) throws -> [TransferEntry] {
        var entries: [TransferEntry] = []
        var index = body.startIndex
        func take(_ count: Int) throws -> Data {
            guard body.endIndex - index >= count else { throw invalid("has a malformed item in chunk \(chunks)") }
            defer { index += count }
            return body[index..<index + count]
        }
        while index < body.endIndex {
            let kindByte = try take(1).first ?? 0
            guard let kind: SealKind = kindByte == 1 ? .global : kindByte == 2 ? .bookmark : nil else {
                throw invalid("has an item of unknown kind \(kindByte) in chunk \(chunks)")
            }
            let nameLength = try take(2).reduce(0) { $0 << 8 | Int($1) }
            guard let name = String(data: try take(nameLength), encoding: .utf8) else { throw invalid("has a name that is not UTF-8") }
            let valueLength = try take(4).reduce(0) { $0 << 8 | Int($1) }
            guard valueLength <= StoreLimits.maxValueBytes else { throw invalid("has a value over 4 MiB") }
            entries.append(TransferEntry(kind: kind, name: name, value: Data(try take(valueLength))))
        }
        return entries
    }

    /// Makes `count` bytes available at `start`; false if the file ends before.
    private func fill(_ count: Int) throws -> Bool {
        if end - start >= count { return true }
        if start > 0 {
            buffer.withUnsafeMutableBufferPointer { pointer in
                guard let base = pointer.baseAddress else { return }
                memmove(base, base + start, end - start)
            }
            end -= start
            start = 0
        }
        if buffer.count < count { buffer += [UInt8](repeating: 0, count: count - buffer.count) }
        while end < count {
            let filled = end
            let read: Int
            do throws(SystemCallError) {
                read = try SystemCall.read(fd, into: &buffer, at: filled)
            } catch {
                throw StoreError(.ioError, "cannot read \(path): \(error.reason)", details: ["file": .string(path)])
            }
            if read == 0 { return false }
            end += read
        }
        return true
    }
}

/// Reads the fixed-size parts at the start of a bundle.
private struct PreambleReader {
    let fd: Int32
    let path: String

    func read(_ count: Int) throws -> Data {
        var data = Data(count: count)
        var done = 0
        while done < count {
            let offset = done
            let got: Int
            do throws(SystemCallError) {
                got = try SystemCall.read(fd, into: &data, at: offset)
            } catch {
                throw StoreError(.ioError, "cannot read \(path): \(error.reason)", details: ["file": .string(path)])
            }
            if got == 0 {
                throw StoreError(.invalidDocument, "the transfer bundle \(path) is truncated (it ends inside its header); nothing was imported", details: ["file": .string(path)])
            }
            done += got
        }
        return data
    }

    func uint32() throws -> UInt32 { try read(4).reduce(0) { $0 << 8 | UInt32($1) } }
    func uint16() throws -> UInt16 { try read(2).reduce(0) { $0 << 8 | UInt16($1) } }
}
