import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import GRDB
import Testing

@testable import ExtrunStore

#if canImport(Glibc)
import Glibc
#endif

/// The states a crash, a full disk or a concurrent checkpoint leave a store in: the store
/// must open and every acknowledged write must be there (issue 17, items 1 and 2).
/// docs/store.md, "Guarantees".

/// The big-endian UInt32 at `offset`.
private func bigEndian32(_ data: Data, _ offset: Int) -> UInt32 {
    data[data.startIndex + offset..<data.startIndex + offset + 4].reduce(0) { $0 << 8 | UInt32($1) }
}

/// The newest copy of page 1 in the write-ahead log `wal` (nil if it holds none).
func newestPageOne(inLog wal: Data) -> Data? {
    guard wal.count >= 32 else { return nil }
    let pageSize = Int(bigEndian32(wal, 8))
    var offset = 32
    var found: Data?
    while offset + 24 + pageSize <= wal.count {
        if bigEndian32(wal, offset) == 1 { found = wal.subdata(in: wal.startIndex + offset + 24..<wal.startIndex + offset + 24 + pageSize) }
        offset += 24 + pageSize
    }
    return found
}

/// Writes `count` values of `size` bytes through a connection that leaves them in the log.
private func writeIntoLog(home: String, prefix: String, count: Int, size: Int) throws -> [String: JSONValue] {
    var written: [String: JSONValue] = [:]
    let store = try Store(home: URL(fileURLWithPath: home), checkpointOnClose: false)
    let globals = try store.globals(of: "TEAM")
    for index in 0..<count {
        let value = JSONValue.string(String(repeating: Character(UnicodeScalar(UInt8(97 + index % 26))), count: size))
        try globals.set("\(prefix)-\(index)", to: value)
        written["\(prefix)-\(index)"] = value
    }
    return written
}

private func expectAllPresent(home: String, _ written: [String: JSONValue], sourceLocation: SourceLocation = #_sourceLocation) throws {
    let globals = try Store(home: URL(fileURLWithPath: home)).globals(of: "TEAM")
    for (name, value) in written {
        #expect(try globals.get(name)?.value == value, "\(name)", sourceLocation: sourceLocation)
    }
    #expect(try globals.list().count >= written.count, sourceLocation: sourceLocation)
}

@Suite struct CrashStateTests {
    /// A checkpoint copies the log into store.sqlite in page order: page 1 (whose header
    /// says how many pages the database has) first. Killed after it, the file is shorter
    /// than its header says, and the log holds the rest. Made here by doing exactly that
    /// first step by hand; `Scripts/faults` makes it with real SIGKILLs.
    @Test func aCheckpointKilledAfterItsFirstPageLeavesAStoreThatOpens() throws {
        let directory = try TempDirectory()
        let home = directory.sub("home")
        _ = try Store(home: URL(fileURLWithPath: home))
        let written = try writeIntoLog(home: home, prefix: "logged", count: 20, size: 5000)
        let database = home + "/store.sqlite"
        let wal = try #require(fileBytes(database + "-wal"))
        let pageOne = try #require(newestPageOne(inLog: wal))
        let before = try #require(fileBytes(database))
        #expect(Int(bigEndian32(pageOne, 28)) * pageOne.count > before.count, "the header in the log names pages the file lacks")
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: database))
        try handle.write(contentsOf: pageOne)
        try handle.close()
        unlink(database + "-shm")  // The killed process's index of the log goes with it; the log stays.

        try expectAllPresent(home: home, written)
        let store = try Store(home: URL(fileURLWithPath: home))
        try store.globals(of: "TEAM").set("after", to: 1)
        #expect(try store.globals(of: "TEAM").get("after")?.value == 1)
    }

    /// Other connections checkpoint while stores are opened: the file grows under the
    /// opener, page 1 first. No open may fail (issue 17, item 2). Threads, not tasks: the
    /// work blocks, and the cooperative pool has one thread per core.
    @Test func storesOpenWhileAnotherConnectionCheckpoints() throws {
        let directory = try TempDirectory()
        let home = directory.sub("home")
        let url = URL(fileURLWithPath: home)
        _ = try Store(home: url)
        let writer = try Store(home: url, checkpointOnClose: false)
        let globals = try writer.globals(of: "TEAM")
        try globals.set("big-0", to: "first")
        let state = OpenerState()
        let group = DispatchGroup()
        for _ in 0..<2 {
            group.enter()
            Thread.detachNewThread {
                defer { group.leave() }
                // At least 40 opens each, for at least 2 s, at most 60 s.
                let started = Date()
                var opened = 0
                while (opened < 40 || Date().timeIntervalSince(started) < 2), Date().timeIntervalSince(started) < 60 {
                    do {
                        let store = try Store(home: url)
                        _ = try store.globals(of: "TEAM").get("big-0")
                        opened += 1
                    } catch {
                        state.record(error)
                        return
                    }
                }
                state.add(opened)
            }
        }
        // Big values grow the file by hundreds of pages at each checkpoint, until the openers are done.
        var index = 1
        while group.wait(timeout: .now()) == .timedOut {
            try globals.set("big-\(index % 50)", to: .string(String(repeating: "x", count: 600_000 + index)))
            _ = try writer.database.withoutTransaction { db in try db.execute(sql: "PRAGMA wal_checkpoint(PASSIVE)") }
            index += 1
        }
        #expect(state.errors.isEmpty, "\(state.errors)")
        #expect(state.opens >= 80, "\(state.opens) opens while \(index) checkpoints ran")
    }

    /// A full disk during a checkpoint (a small tmpfs, root only): the header is written,
    /// the pages that would grow the file are not. The store must still open and read on
    /// the full disk, and take writes once there is room again.
    @Test(.enabled(if: getuid() == 0, "needs root to mount a small tmpfs (runs in the root half of Scripts/test)"))
    func aCheckpointStoppedByAFullDiskLeavesAStoreThatOpens() throws {
        let directory = try TempDirectory()
        let disk = try SmallDisk(at: directory.sub("disk"), megabytes: 2)
        defer { disk.unmount() }
        let home = disk.path + "/home"
        _ = try Store(home: URL(fileURLWithPath: home))
        let written = try writeIntoLog(home: home, prefix: "logged", count: 20, size: 5000)
        let database = home + "/store.sqlite"
        let filler = try disk.fill(leaving: 8 << 10)
        do { _ = try Store(home: URL(fileURLWithPath: home)) }  // closing it checkpoints, and runs out of room
        let header = try #require(fileBytes(database)).prefix(100)
        let size = try #require(fileBytes(database)).count
        #expect(Int(bigEndian32(header, 28)) * 4096 > size, "the checkpoint was cut short by the full disk (file \(size) bytes)")
        try expectAllPresent(home: home, written)
        unlink(filler)
        try expectAllPresent(home: home, written)
        try Store(home: URL(fileURLWithPath: home)).globals(of: "TEAM").set("after", to: 1)
    }
}

/// A tmpfs of a few megabytes mounted for one test (root only): ENOSPC on demand.
struct SmallDisk {
    let path: String

    init(at path: String, megabytes: Int) throws {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let status = runTool("/bin/mount", ["-t", "tmpfs", "-o", "size=\(megabytes)m,mode=0711", "tmpfs", path])
        guard status == 0 else { throw StoreError(.ioError, "mount -t tmpfs on \(path) failed with status \(status)") }
        self.path = path
    }

    /// Fills the disk with one file, then gives `leaving` bytes back; returns the file.
    func fill(leaving: Int) throws -> String {
        let file = path + "/filler"
        let fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        guard fd >= 0 else { throw StoreError(.ioError, "cannot create \(file)") }
        defer { close(fd) }
        var chunk = 1 << 16
        let zeros = [UInt8](repeating: 0, count: chunk)
        var total = 0
        while chunk > 0 {
            let count = zeros.withUnsafeBytes { write(fd, $0.baseAddress, chunk) }
            if count > 0 { total += count } else { chunk /= 2 }
        }
        _ = ftruncate(fd, off_t(max(0, total - leaving)))
        return file
    }

    func unmount() {
        _ = runTool("/bin/umount", ["-l", path])
    }
}

@discardableResult
func runTool(_ tool: String, _ arguments: [String]) -> Int32 {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: tool)
    process.arguments = arguments
    do { try process.run() } catch { return -1 }
    process.waitUntilExit()
    return process.terminationStatus
}

/// What the opener threads of `storesOpenWhileAnotherConnectionCheckpoints` saw.
final class OpenerState: @unchecked Sendable {
    private let lock = NSLock()
    private var _opens = 0
    private var _errors: [String] = []
    var opens: Int { lock.withLock { _opens } }
    var errors: [String] { lock.withLock { _errors } }
    func add(_ count: Int) { lock.withLock { _opens += count } }
    func record(_ error: any Error) { lock.withLock { _errors.append("\(error)") } }
}
