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

        /// - Parameter environment: for Scripts/lib/postgres.sh (`POSTGRES_DATA_TMPFS_MB`, `POSTGRES_WAL_OUTSIDE`).
        init(in directory: String, environment: [String: String] = [:]) throws {
            self.directory = directory
            let user: String
            if geteuid() == 0 {
                user = "extrun-postgres"
            } else {
                user = getpwuid(geteuid()).flatMap { $0.pointee.pw_name.map { String(cString: $0) } } ?? "extrun-test"
            }
            let line = try PostgresFaultTests.script(["start", directory, user], environment: environment)
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

    static func script(_ arguments: [String], environment: [String: String] = [:]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: root + "/Scripts/postgres")
        process.arguments = arguments
        if !environment.isEmpty {
            process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        }
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

    /// The processes whose command line names `path` (a server's data directory under it).
    static func processes(mentioning path: String) -> [String] {
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { entry -> String? in
            guard Int32(entry) != nil, let data = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline") else { return nil }
            let line = String(decoding: data.map { $0 == 0 ? 32 : $0 }, as: UTF8.self)
            return line.contains(path) ? "\(entry): \(line)" : nil
        }
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
        server.stop()
        server.expectGone()
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

/// Statement timeouts kept inside the caller's deadline (issue 34, item 6): another connection
/// holds the locks a store call needs; the call ends `storeBusy` with its numbers at its deadline
/// (plus `PostgresSession.deadlineGraceNanoseconds`), writes nothing, and the next call works.
@Suite struct PostgresDeadlineTests {
    /// How late after its deadline a call may end here: the store's grace (100 ms) plus a
    /// loaded 2-core machine's scheduling.
    static let marginMs: Int64 = 400

    /// The owner's row locked by another connection: a write waits for it inside its
    /// transaction, and the server's statement timeout (the deadline's) ends the wait.
    @Test(.enabled(if: StoreBackendKind.serverURL != nil))
    func aWriteWaitingForALockEndsAtItsDeadline() throws {
        let test = try BackendStore(.postgres)
        guard case .postgres(let location) = test.location else { return }
        let globals = try test.store.globals(of: "TEAM")
        try globals.set("before", to: 1)
        let holder = try LockHolder(location) { session in
            try session.execute("SELECT lastVersion FROM owner WHERE name = 'TEAM' FOR UPDATE")
        }
        let (error, elapsedMs) = PostgresDeadlineTests.underDeadline(ms: 400) { _ = try globals.set("during", to: 2) }
        holder.release()
        PostgresDeadlineTests.expectDeadlineError(error, elapsedMs: elapsedMs, deadlineMs: 400)
        let during = try globals.get("during")
        #expect(during == nil, "nothing of the timed-out write is there")
        let (next, _) = PostgresDeadlineTests.underDeadline(ms: 5_000) { _ = try globals.set("after", to: 3) }
        #expect(next == nil, "the next call works: \(String(describing: next))")
        let usage = try test.store.quota(of: "TEAM").usage.globals
        #expect(usage == 2, "the usage counts the two acknowledged globals")
        #expect(holder.failure == nil, "\(String(describing: holder.failure))")
    }

    /// Each statement has a timeout of its own on the server: a write whose first statement
    /// waited most of the deadline, and whose later statement waits again (the usage row,
    /// locked by a second connection), still ends at the deadline, not at twice it.
    @Test(.enabled(if: StoreBackendKind.serverURL != nil))
    func aWriteWaitingTwiceStillEndsAtItsDeadline() throws {
        let test = try BackendStore(.postgres)
        guard case .postgres(let location) = test.location else { return }
        let globals = try test.store.globals(of: "TEAM")
        try globals.set("before", to: 1)
        let ownerRow = try LockHolder(location) { session in
            try session.execute("SELECT lastVersion FROM owner WHERE name = 'TEAM' FOR UPDATE")
        }
        let usageRow = try LockHolder(location) { session in
            try session.execute("SELECT globals FROM ownerUsage WHERE owner = 'TEAM' FOR UPDATE")
        }
        // The owner's row comes free at 70% of the deadline; the usage row stays locked.
        let freeing = Thread {
            usleep(560_000)
            ownerRow.release()
        }
        freeing.start()
        let (error, elapsedMs) = PostgresDeadlineTests.underDeadline(ms: 800) { _ = try globals.set("during", to: 2) }
        usageRow.release()
        ownerRow.waitReleased()
        PostgresDeadlineTests.expectDeadlineError(error, elapsedMs: elapsedMs, deadlineMs: 800)
        let during = try globals.get("during")
        #expect(during == nil, "nothing of the timed-out write is there")
        let (next, _) = PostgresDeadlineTests.underDeadline(ms: 5_000) { _ = try globals.set("after", to: 3) }
        #expect(next == nil, "the next call works: \(String(describing: next))")
        let usage = try test.store.quota(of: "TEAM").usage.globals
        #expect(usage == 2)
    }

    /// A read outside any transaction, waiting for a table another connection locked whole (as
    /// a schema change does): it ends at the deadline too, and the next read works.
    @Test(.enabled(if: StoreBackendKind.serverURL != nil))
    func aReadWaitingForALockedTableEndsAtItsDeadline() throws {
        let test = try BackendStore(.postgres)
        guard case .postgres(let location) = test.location else { return }
        let globals = try test.store.globals(of: "TEAM")
        try globals.set("before", to: 1)
        let holder = try LockHolder(location) { session in
            try session.execute("LOCK TABLE global IN ACCESS EXCLUSIVE MODE")
        }
        let (error, elapsedMs) = PostgresDeadlineTests.underDeadline(ms: 400) { _ = try globals.get("before") }
        holder.release()
        PostgresDeadlineTests.expectDeadlineError(error, elapsedMs: elapsedMs, deadlineMs: 400)
        var value: JSONValue?
        let (next, _) = PostgresDeadlineTests.underDeadline(ms: 5_000) { value = try globals.get("before")?.value }
        #expect(next == nil, "the next call works: \(String(describing: next))")
        #expect(value == 1)
    }

    /// Runs `body` with a deadline `ms` from now: its error (nil when it succeeded) and how long it took.
    static func underDeadline(ms: Int64, _ body: () throws -> Void) -> (StoreError?, Int64) {
        let started = StoreDeadline.now()
        let error = StoreDeadline.$current.withValue(started + UInt64(ms) * 1_000_000) { () -> StoreError? in
            do {
                try body()
                return nil
            } catch let error as StoreError {
                return error
            } catch {
                return StoreError(.databaseError, "not a StoreError: \(error)")
            }
        }
        return (error, Int64((StoreDeadline.now() - started) / 1_000_000))
    }

    /// `storeBusy` at the deadline (not long before it, and at most `marginMs` after), naming how
    /// long the call waited and what it had, in its message and its details.
    static func expectDeadlineError(_ error: StoreError?, elapsedMs: Int64, deadlineMs: Int64) {
        #expect(error?.kind == .storeBusy, "\(String(describing: error))")
        #expect(elapsedMs >= deadlineMs - 100, "ended \(elapsedMs) ms into a \(deadlineMs) ms deadline: too early")
        #expect(elapsedMs <= deadlineMs + marginMs, "ended \(elapsedMs) ms into a \(deadlineMs) ms deadline: too late")
        guard let error else { return }
        let waited = error.details["waitedMs"].flatMap { value -> Int64? in if case .int(let n) = value { return n } else { return nil } }
        let had = error.details["deadlineMs"].flatMap { value -> Int64? in if case .int(let n) = value { return n } else { return nil } }
        #expect(waited.map { $0 >= deadlineMs - 100 && $0 <= elapsedMs } == true, "waitedMs: \(error.details)")
        #expect(had.map { $0 <= deadlineMs && $0 >= deadlineMs - 100 } == true, "deadlineMs: \(error.details)")
        if let waited, let had {
            #expect(error.message.contains("\(waited) ms") && error.message.contains("\(had) ms"), "\(error.message)")
        }
        #expect(error.message.contains("nothing was changed"), "\(error.message)")
    }
}

/// A transaction of its own on another connection, holding what `statements` lock until `release()`.
final class LockHolder: @unchecked Sendable {
    private let go = DispatchSemaphore(value: 0)
    private let held = DispatchSemaphore(value: 0)
    private let finished = DispatchSemaphore(value: 0)
    private(set) var failure: (any Error)?

    init(_ location: PostgresLocation, _ statements: @escaping @Sendable (PostgresSession) throws -> Void) throws {
        let store = try PostgresStore(location: location, migrating: false)
        let thread = Thread { [self] in
            do {
                try store.transaction { session in
                    try statements(session)
                    self.held.signal()
                    self.go.wait()
                }
            } catch {
                self.failure = error
                self.held.signal()
            }
            self.finished.signal()
        }
        thread.start()
        held.wait()
        if let failure { throw failure }
    }

    /// Ends the transaction (a commit: it wrote nothing) and waits for it.
    func release() {
        go.signal()
        finished.wait()
        finished.signal()
    }

    /// Waits until another thread's `release()` has ended the transaction.
    func waitReleased() {
        finished.wait()
        finished.signal()
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
