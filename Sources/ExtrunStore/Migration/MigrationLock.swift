import Crypto
import ExtrunProtocol
import ExtrunSystem
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// One migration at a time per (old owner, new owner) pair in a home: an exclusive
/// flock(2) on `<home>/locks/migrate-<hash of the pair>.lock`, held for the whole run and
/// released by the kernel when the process ends, however it ends. A second run of the
/// same pair is told plainly that one is running, and changes nothing (issue 17, item 3).
final class MigrationLock {
    private let fd: Int32

    private init(fd: Int32) { self.fd = fd }

    deinit { close(fd) }

    static func acquire(home: String, from: String, to: String) throws -> MigrationLock {
        let folder = home + "/locks"
        let digest = SHA256.hash(data: Data((from + "\n" + to).utf8)).prefix(16).map { String(format: "%02x", $0) }.joined()
        let path = folder + "/migrate-\(digest).lock"
        let details: [String: JSONValue] = ["file": .string(path), "from": .string(from), "to": .string(to)]
        do {
            try FileOps.makePrivateDirectory(folder)
        } catch {
            throw StoreError(.ioError, "cannot create \(folder): \(error.reason)", details: details)
        }
        let fd: Int32
        do {
            fd = try FileOps.open(path, O_RDWR | O_CREAT | O_NOFOLLOW, mode: 0o600)
        } catch {
            throw StoreError(.ioError, "cannot open the migration lock \(path): \(error.reason)", details: details)
        }
        let locked: NonBlocking<Int32>
        do {
            locked = try SystemCall.nonBlocking("flock") { flock(fd, LOCK_EX | LOCK_NB) }
        } catch {
            close(fd)
            throw StoreError(.ioError, "cannot lock \(path): \(error.reason)", details: details)
        }
        if locked == .wouldBlock {
            var holder = [UInt8](repeating: 0, count: 32)
            let count = holder.withUnsafeMutableBytes { pread(fd, $0.baseAddress, 31, 0) }
            close(fd)
            let pid = count > 0 ? String(decoding: holder[0..<count], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines) : "unknown"
            throw StoreError(
                .storeBusy,
                "a migration from '\(from)' to '\(to)' is already running in this store (process \(pid)); this one changed nothing. Let it finish (it prints its summary), then run this command again if anything is left to do",
                details: details.merging(["pid": .string(pid)]) { a, _ in a })
        }
        let text = Array("\(getpid())\n".utf8)
        _ = ftruncate(fd, 0)
        _ = text.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        return MigrationLock(fd: fd)
    }
}

extension Store {
    /// On a PostgreSQL store, the pair's lock on the server (`PostgresStore.migrationLock`),
    /// held while the value lives; nil for SQLite, whose file only this home's processes use.
    func migrationServerLock(from: String, to: String) throws -> AnyObject? {
        guard case .postgres(let server) = backend else { return nil }
        return try server.migrationLock(from: from, to: to)
    }
}
