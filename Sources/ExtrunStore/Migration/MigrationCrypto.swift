import Crypto
import Dispatch
import ExtrunSystem
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Sealing and opening for migration batches: byte for byte the format and
/// authenticated data of `Sealing` (docs/store.md, "Sealing"; a test checks
/// they agree), made cheaper for a million rows: the authenticated data's
/// owner-and-kind prefix is built once, the batch's nonces come from one call
/// to the CSPRNG, and the work is spread over the processor's cores.
struct BatchSealing: Sendable {
    let key: OwnerKey
    let owner: String
    let kind: SealKind
    /// `"extrun-seal-v1" 0x00 ‖ u32be(len kind) ‖ kind ‖ u32be(len owner) ‖ owner`.
    private let prefix: [UInt8]

    init(key: OwnerKey, kind: SealKind) {
        self.key = key
        self.owner = key.owner
        self.kind = kind
        var prefix = Array(Sealing.label.utf8)
        prefix.append(0)
        for field in [kind.rawValue, key.owner] {
            let bytes = Array(field.utf8)
            withUnsafeBytes(of: UInt32(bytes.count).bigEndian) { prefix.append(contentsOf: $0) }
            prefix.append(contentsOf: bytes)
        }
        self.prefix = prefix
    }

    func authenticatedData(_ name: String) -> Data {
        var bytes = prefix
        let nameBytes = Array(name.utf8)
        bytes.reserveCapacity(prefix.count + 4 + nameBytes.count)
        withUnsafeBytes(of: UInt32(nameBytes.count).bigEndian) { bytes.append(contentsOf: $0) }
        bytes.append(contentsOf: nameBytes)
        return Data(bytes)
    }

    /// `count` fresh 12-byte nonces from one read of the kernel's CSPRNG
    /// (`/dev/urandom`); each nonce falls back to `AES.GCM.Nonce()` if that fails.
    static func nonces(_ count: Int) -> [AES.GCM.Nonce] {
        guard count > 0 else { return [] }
        var bytes = [UInt8](repeating: 0, count: 12 * count)
        var filled = 0
        let fd = Glibc.open("/dev/urandom", O_RDONLY | O_CLOEXEC)
        if fd >= 0 {
            defer { close(fd) }
            while filled < bytes.count {
                let offset = filled
                let got = (try? SystemCall.read(fd, into: &bytes, at: offset)) ?? -1
                if got <= 0 { break }
                filled += got
            }
        }
        return (0..<count).map { index in
            guard filled == bytes.count else { return AES.GCM.Nonce() }
            return (try? AES.GCM.Nonce(data: bytes[(index * 12)..<(index * 12 + 12)])) ?? AES.GCM.Nonce()
        }
    }

    func seal(_ plaintext: Data, name: String, nonce: AES.GCM.Nonce) throws -> Data {
        let box: AES.GCM.SealedBox
        do {
            box = try AES.GCM.seal(plaintext, using: key.sealingKey, nonce: nonce, authenticating: authenticatedData(name))
        } catch {
            throw StoreError(.databaseError, "could not seal \(kind.rawValue) '\(name)': \(error)")
        }
        guard let combined = box.combined else {
            throw StoreError(.databaseError, "AES-GCM produced no combined box (unexpected nonce size)")
        }
        var blob = Data(capacity: combined.count + 1)
        blob.append(Sealing.formatVersion)
        blob.append(combined)
        return blob
    }

    /// The plaintext; on any failure, the error `Sealing.open` reports for the row.
    func open(_ blob: Data, name: String, file: String) throws -> Data {
        if blob.count >= Sealing.overhead, blob.first == Sealing.formatVersion,
            let box = try? AES.GCM.SealedBox(combined: blob.dropFirst()),
            let plaintext = try? AES.GCM.open(box, using: key.sealingKey, authenticating: authenticatedData(name))
        {
            return plaintext
        }
        return try Sealing.open(blob, with: key, context: SealContext(owner: owner, kind: kind, name: name), file: file)
    }
}

enum Parallel {
    /// `(0..<count).map(transform)`, computed on all cores in contiguous stripes.
    /// `transform` must only read shared state.
    static func map<T>(_ count: Int, _ transform: (Int) -> T) -> [T] {
        let stripes = min(ProcessInfo.processInfo.activeProcessorCount, 8, count / 64)
        guard stripes > 1 else { return (0..<count).map(transform) }
        return withoutActuallyEscaping(transform) { transform in
            let results = UnsafeMutableBufferPointer<T>.allocate(capacity: count)
            defer { results.deallocate() }
            nonisolated(unsafe) let work = transform
            nonisolated(unsafe) let output = results
            DispatchQueue.concurrentPerform(iterations: stripes) { stripe in
                let start = count * stripe / stripes
                let end = count * (stripe + 1) / stripes
                for index in start..<end { output.initializeElement(at: index, to: work(index)) }
            }
            let mapped = Array(results)
            _ = results.deinitialize()
            return mapped
        }
    }
}
