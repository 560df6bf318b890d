import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

@testable import ExtrunStore

#if canImport(Glibc)
import Glibc
#endif

/// Faults against a real PostgreSQL server (issue 34): each test starts a server of its own
/// (Scripts/postgres), so that killing it disturbs no other test. Run when the suite has a
/// server (`EXTRUN_TEST_POSTGRES`, which Scripts/test sets), which also means one can be started.
@Suite struct PostgresFaultTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    /// A server in `directory` (its data, socket and log), stopped and removed by `stop()`.
    struct Server {
        let directory: String
        let location: StoreLocation

        init(in directory: String) throws {
            self.directory = directory
            let user: String
            if geteuid() == 0 {
                user = "extrun-postgres"
            } else {
                user = getpwuid(geteuid()).flatMap { $0.pointee.pw_name.map { String(cString: $0) } } ?? "extrun-test"
            }
            let line = try PostgresFaultTests.script(["start", directory, user])
            guard let start = line.firstIndex(of: "'"), let end = line.lastIndex(of: "'"), start < end else {
                throw StoreError(.invalidDocument, "Scripts/postgres start printed no URL: \(line)")
            }
            location = try StoreLocation.parse(String(line[line.index(after: start)..<end]))
        }

        /// SIGKILL to the postmaster and every process of its group (the backends): a crash.
        func kill() throws {
            let text = try String(contentsOfFile: directory + "/data/postmaster.pid", encoding: .utf8)
            guard let pid = text.split(separator: "\n").first.flatMap({ pid_t($0) }) else {
                throw StoreError(.invalidDocument, "no pid in postmaster.pid")
            }
            Glibc.kill(-pid, SIGKILL)
            Glibc.kill(pid, SIGKILL)
            // Gone once the socket no longer answers: wait for the process itself.
            let deadline = Date().addingTimeInterval(10)
            while Glibc.kill(pid, 0) == 0, Date() < deadline { usleep(10_000) }
        }

        func restart() throws { _ = try PostgresFaultTests.script(["restart", directory]) }
        func stop() { _ = try? PostgresFaultTests.script(["stop", directory]) }
    }

    static func script(_ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: root + "/Scripts/postgres")
        process.arguments = arguments
        // A file, not a pipe: the server the script starts would keep a pipe's end open.
        let outputFile = TempFile()
        let output = try FileHandle(forWritingTo: outputFile.url)
        process.standardOutput = output
        process.standardError = FileHandle.standardError
        try process.run()
        process.waitUntilExit()
        try output.close()
        let data = try Data(contentsOf: outputFile.url)
        guard process.terminationStatus == 0 else {
            throw StoreError(.ioError, "Scripts/postgres \(arguments.joined(separator: " ")) exited \(process.terminationStatus)")
        }
        return String(decoding: data, as: UTF8.self)
    }

    /// The server SIGKILLed while one Store writes: every write it acknowledged is there after
    /// the restart; the calls made while it is down end with `storeUnavailable` naming it; the
    /// first call after the restart works, through the same `Store` (no restart of extrun).
    @Test(.enabled(if: StoreBackendKind.serverURL != nil))
    func aServerKilledDuringWritesLosesNothingAcknowledged() throws {
        let tmp = try TempDirectory()
        let server = try Server(in: tmp.sub("pg"))
        defer { server.stop() }
        let store = try Store(home: URL(fileURLWithPath: tmp.sub("home")), location: server.location)
        let globals = try store.globals(of: "TEAM")
        var acknowledged: [String: Int64] = [:]
        var failures: [StoreError] = []
        var index: Int64 = 0
        var killed = false
        var restarted = false
        // Writes one after another; the kill comes after 50 acknowledged, the restart after 5 refused.
        while acknowledged.count < 150 {
            index += 1
            if !killed, acknowledged.count == 50 {
                try server.kill()
                killed = true
            }
            do {
                try globals.set("g\(index)", to: .int(index))
                acknowledged["g\(index)"] = index
            } catch let error as StoreError {
                failures.append(error)
                if failures.count == 5, !restarted {
                    try server.restart()
                    restarted = true
                }
            }
            #expect(index < 1000, "the writes never came back after the restart: \(failures.last.map { "\($0)" } ?? "")")
            if index >= 1000 { break }
        }
        #expect(killed && restarted)
        #expect(!failures.isEmpty)
        for failure in failures {
            #expect(failure.kind == .storeUnavailable, "\(failure)")
            #expect(failure.message.contains(server.directory), "names the server: \(failure.message)")
        }
        // Every acknowledged write is there, read back through a new connection too.
        let reopened = try Store(home: URL(fileURLWithPath: tmp.sub("home")), location: server.location).globals(of: "TEAM")
        for (name, value) in acknowledged {
            #expect(try reopened.get(name)?.value == .int(value), "\(name)")
        }
        #expect(try store.quota(of: "TEAM").usage.globals == Int64(try reopened.list().count))
    }

    /// The connection dropped by the server in the middle of a transaction (pg_terminate_backend
    /// of the store's backend): that call fails `storeUnavailable`, nothing of it is written, and
    /// the next call works on a new connection.
    @Test(.enabled(if: StoreBackendKind.serverURL != nil))
    func aConnectionDroppedMidTransactionIsUnavailableThenReconnects() throws {
        let test = try BackendStore(.postgres)
        let globals = try test.store.globals(of: "TEAM")
        try globals.set("before", to: 1)
        guard case .postgres(let server) = test.store.backend else { return }
        let pid = try server.number("SELECT pg_backend_pid()::bigint WHERE $1 <> ''", "x")
        // Another connection ends the store's backend while the store's next transaction holds
        // the owner's row: the row is locked here first, so the store's write waits inside its
        // transaction until its backend is terminated.
        guard case .postgres(let location) = test.location else { return }
        let other = try PostgresStore(location: location, migrating: false)
        let error = try other.transaction { session -> StoreError? in
            try session.execute("SELECT lastVersion FROM owner WHERE name = 'TEAM' FOR UPDATE")
            let result = Box()
            let writer = Thread {
                do { try globals.set("during", to: 2) } catch let error as StoreError { result.error = error } catch {}
                result.done = true
            }
            writer.start()
            usleep(300_000)
            try session.execute("SELECT pg_terminate_backend(\(Int32(pid)))")
            let deadline = Date().addingTimeInterval(10)
            while !result.done, Date() < deadline { usleep(10_000) }
            return result.error
        }
        #expect(error?.kind == .storeUnavailable, "\(String(describing: error))")
        #expect(try globals.get("during") == nil, "nothing of the dropped transaction was written")
        try globals.set("after", to: 3)
        #expect(try globals.get("after")?.value == 3)
        #expect(try globals.get("before")?.value == 1)
    }
}

/// An empty file of its own, removed when the value goes away.
private final class TempFile {
    let url = URL(fileURLWithPath: NSTemporaryDirectory()).appendingPathComponent("extrun-pg-\(UUID().uuidString)")
    init() { _ = FileManager.default.createFile(atPath: url.path, contents: nil) }
    deinit { try? FileManager.default.removeItem(at: url) }
}

private final class Box: @unchecked Sendable {
    var error: StoreError?
    var done = false
}
