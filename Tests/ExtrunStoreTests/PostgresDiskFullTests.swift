import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

@testable import ExtrunStore

#if canImport(Glibc)
import Glibc
#endif

/// The server's data directory on a full file system (issue 34, item 6): a server of its own
/// whose data directory is a small tmpfs (Scripts/lib/postgres.sh, `POSTGRES_DATA_TMPFS_MB`),
/// filled to the last byte by a file of the test's. Root only: mounting needs it.
@Suite(.serialized) struct PostgresDiskFullTests {
    static let enabled = geteuid() == 0 && StoreBackendKind.serverURL != nil
    static let reason: Comment = "needs root (it mounts a tmpfs for the server's data directory) and a PostgreSQL for the tests (EXTRUN_TEST_POSTGRES)"

    /// The write-ahead log elsewhere (`initdb --waldir`), the tables on the full disk: a write
    /// that needs a new page ends `ioError` naming the full disk (SQLSTATE 53100), the server
    /// stays up and reads work; once there is room the next write works through the same
    /// `Store`, with no restart of anything; every acknowledged write is there, also after the
    /// server is killed and started again.
    @Test(.enabled(if: enabled, reason))
    func aFullDataDirectoryIsIoErrorAndTheNextWriteAfterFreeingWorks() throws {
        let tmp = try TempDirectory()
        let server = try PostgresFaultTests.Server(
            in: tmp.sub("pg"), environment: ["POSTGRES_DATA_TMPFS_MB": "48", "POSTGRES_WAL_OUTSIDE": "1"])
        var stopped = false
        defer {
            if !stopped { server.stop() }
            withExtendedLifetime(tmp) {}
        }
        let store = try Store(home: URL(fileURLWithPath: tmp.sub("home")), location: server.location)
        let globals = try store.globals(of: "TEAM")
        var acknowledged = try PostgresDiskFullTests.seed(globals)
        let filler = server.directory + "/data/filler"
        let filled = try PostgresDiskFullTests.fill(filler)
        #expect(filled > 0)

        // Writes on the full disk: the first that needs a page fails; the ones that fit are acknowledged.
        var index = 20
        let failures = PostgresDiskFullTests.writeUntilFiveFail(globals, from: &index, acknowledged: &acknowledged)
        for failure in failures {
            #expect(failure.kind == .ioError, "\(failure)")
            #expect(failure.message.contains("disk is full") && failure.message.contains("53100"), "\(failure.message)")
            #expect(failure.details["cause"] == .string("diskFull"), "\(failure.details)")
        }
        // The server is up: reads work on the full disk.
        let read = try globals.get("g0")?.value
        #expect(read == .string(PostgresDiskFullTests.value(0)))

        // Room again: the next write works through the same Store.
        try FileManager.default.removeItem(atPath: filler)
        _ = try globals.set("after", to: "room again")
        acknowledged["after"] = "room again"
        try PostgresDiskFullTests.expectAll(acknowledged, in: globals)

        // Nothing acknowledged is lost: the server killed and started again (recovery from its log).
        try server.kill()
        try server.restart()
        let reopened = try Store(home: URL(fileURLWithPath: tmp.sub("home")), location: server.location)
        try PostgresDiskFullTests.expectAll(acknowledged, in: reopened.globals(of: "TEAM"))
        let usage = try reopened.quota(of: "TEAM").usage.globals
        #expect(usage == Int64(acknowledged.count))

        stopped = true
        server.stop()
        server.expectGone()
    }

    /// The default layout, the write-ahead log on the full disk too: once the log cannot grow
    /// the server stops (PostgreSQL PANICs: a log it cannot write is not a state it runs in), and
    /// cannot start again until it has room. Every call meanwhile ends with a typed error, the
    /// full disk (`ioError`, 53100) or the server gone (`storeUnavailable`, naming it), never
    /// `internalError` or `databaseError`; after room is made and the server started, the next
    /// call through the same `Store` works and every acknowledged write is there.
    @Test(.enabled(if: enabled, reason))
    func aFullDiskUnderTheLogStopsTheServerAndLosesNothingAcknowledged() throws {
        let tmp = try TempDirectory()
        // Room for the log's next segments (16 MiB each) once the test's file is gone: the server's
        // recovery needs one.
        let server = try PostgresFaultTests.Server(in: tmp.sub("pg"), environment: ["POSTGRES_DATA_TMPFS_MB": "96"])
        var stopped = false
        defer {
            if !stopped { server.stop() }
            withExtendedLifetime(tmp) {}
        }
        let store = try Store(home: URL(fileURLWithPath: tmp.sub("home")), location: server.location)
        let globals = try store.globals(of: "TEAM")
        var acknowledged = try PostgresDiskFullTests.seed(globals)
        let filler = server.directory + "/data/filler"
        _ = try PostgresDiskFullTests.fill(filler)
        // The log's next segment is needed now (another connection switches to it): the next
        // write must create it on the full disk.
        guard case .postgres(let location) = server.location else { return }
        let admin = try PostgresStore(location: location, migrating: false)
        _ = try? admin.number("SELECT 1::bigint FROM pg_switch_wal() WHERE $1 <> ''", "x")

        var index = 20
        let failures = PostgresDiskFullTests.writeUntilFiveFail(globals, from: &index, acknowledged: &acknowledged)
        for failure in failures {
            switch failure.kind {
            case .ioError:
                #expect(failure.message.contains("disk is full"), "\(failure.message)")
            case .storeUnavailable:
                #expect(failure.message.contains(server.directory), "names the server: \(failure.message)")
            default:
                Issue.record("neither the full disk nor the server gone: \(failure)")
            }
        }
        // The log's new segment cannot be made: the server PANICs, its recovery cannot write its
        // log either, and it stops. Calls meanwhile end with the same typed errors.
        let stopBy = Date().addingTimeInterval(20)
        while server.running(), Date() < stopBy {
            let value = PostgresDiskFullTests.value(index)
            do {
                _ = try globals.set("g\(index)", to: .string(value))
                acknowledged["g\(index)"] = value
            } catch let error as StoreError {
                #expect(error.kind == .ioError || error.kind == .storeUnavailable, "\(error)")
            }
            index += 1
            usleep(100_000)
        }
        #expect(!server.running(), "the server did not stop on a full log disk")
        let log = (try? String(contentsOfFile: server.directory + "/server.log", encoding: .utf8)) ?? ""
        #expect(log.contains("PANIC") && log.contains("No space left on device"), "the server's log names the full disk")
        do {
            _ = try globals.set("down", to: 1)
            Issue.record("a write to a stopped server succeeded")
        } catch let error as StoreError {
            #expect(error.kind == .storeUnavailable && error.message.contains(server.directory), "\(error)")
        }

        // Room again, and the server started: the next call through the same Store works.
        try FileManager.default.removeItem(atPath: filler)
        if server.running() { try server.kill() }
        try server.restart()
        _ = try globals.set("after", to: "room again")
        acknowledged["after"] = "room again"
        try PostgresDiskFullTests.expectAll(acknowledged, in: globals)
        let usage = try store.quota(of: "TEAM").usage.globals
        #expect(usage == Int64(acknowledged.count))

        stopped = true
        server.stop()
        server.expectGone()
    }

    /// Globals g0 … g19, acknowledged: their values by name.
    static func seed(_ globals: Globals) throws -> [String: String] {
        var acknowledged: [String: String] = [:]
        for index in 0..<20 {
            let value = PostgresDiskFullTests.value(index)
            _ = try globals.set("g\(index)", to: .string(value))
            acknowledged["g\(index)"] = value
        }
        return acknowledged
    }

    /// Writes g`index`, g`index + 1` … on the full disk until 5 have failed (or 2,000 were
    /// tried): the ones that fit are added to `acknowledged`; the 5 failures, which it expects.
    static func writeUntilFiveFail(
        _ globals: Globals, from index: inout Int, acknowledged: inout [String: String]
    ) -> [StoreError] {
        let first = index
        var failures: [StoreError] = []
        while failures.count < 5, index < 2_000 {
            let value = PostgresDiskFullTests.value(index)
            do {
                _ = try globals.set("g\(index)", to: .string(value))
                acknowledged["g\(index)"] = value
            } catch let error as StoreError {
                failures.append(error)
            } catch {
                Issue.record("not a StoreError: \(error)")
            }
            index += 1
        }
        #expect(failures.count == 5, "writes on a full disk did not fail (\(index - first) tried)")
        return failures
    }

    /// A value of about 1.5 KB (a few to a page: the table needs new pages soon).
    static func value(_ index: Int) -> String {
        "value \(index) " + String(repeating: "v", count: 1_500)
    }

    static func expectAll(_ acknowledged: [String: String], in globals: Globals) throws {
        for (name, value) in acknowledged.sorted(by: { $0.key < $1.key }) {
            let stored = try globals.get(name)?.value
            #expect(stored == .string(value), "\(name)")
        }
    }

    /// Writes `path` until the file system has no byte left (smaller and smaller writes); its size.
    static func fill(_ path: String) throws -> Int {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw StoreError(.ioError, "cannot create \(path): errno \(errno)") }
        defer { close(fd) }
        let chunk = [UInt8](repeating: 0xA5, count: 1 << 20)
        var size = chunk.count
        var total = 0
        while size >= 512 {
            let written = chunk.withUnsafeBytes { write(fd, $0.baseAddress, size) }
            if written > 0 {
                total += written
            } else if errno == ENOSPC {
                size /= 2
            } else {
                throw StoreError(.ioError, "cannot write \(path): errno \(errno)")
            }
        }
        return total
    }
}

extension PostgresFaultTests.Server {
    /// Whether the postmaster of the server's data directory runs.
    func running() -> Bool {
        guard let pid = postmasterPID() else { return false }
        return Glibc.kill(pid, 0) == 0
    }

    func postmasterPID() -> pid_t? {
        let text = try? String(contentsOfFile: directory + "/data/postmaster.pid", encoding: .utf8)
        return text?.split(separator: "\n").first.flatMap { pid_t($0) }
    }

    /// After `stop()`: no directory, no mount under it, no server process of it.
    func expectGone() {
        #expect(!FileManager.default.fileExists(atPath: directory), "\(directory) is left")
        let mounts = (try? String(contentsOfFile: "/proc/mounts", encoding: .utf8)) ?? ""
        #expect(!mounts.contains(directory), "a mount under \(directory) is left")
        let left = PostgresFaultTests.processes(mentioning: directory)
        #expect(left.isEmpty, "processes of the server are left: \(left)")
    }
}
