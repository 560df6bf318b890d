import ExtrunProtocol
import ExtrunStoreFill
import ExtrunTestSupport
import Foundation
import GRDB
import Testing

@testable import ExtrunStore

#if canImport(Glibc)
import Glibc
#endif

/// Runs `extrun` with `arguments` on `home`; returns (status, killed by a signal, stdout).
@discardableResult
func runExtrun(
    _ arguments: [String], home: String, killAfter delay: Double? = nil, environment extra: [String: String] = [:]
) throws -> (status: Int32, killed: Bool, stdout: Data) {
    let process = Process()
    process.executableURL = try ExtrunBinary.url()
    process.arguments = arguments
    var environment = ProcessInfo.processInfo.environment
    environment["EXTRUN_HOME"] = home
    environment.merge(extra) { _, new in new }
    process.environment = environment
    let output = Pipe()
    process.standardOutput = output
    process.standardError = FileHandle.nullDevice
    try process.run()
    if let delay {
        usleep(useconds_t(delay * 1_000_000))
        kill(process.processIdentifier, SIGKILL)
    }
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, process.terminationReason == .uncaughtSignal, data)
}

/// `extrun migrate` killed with SIGKILL at many points of a large migration,
/// then run again: it finishes, and every item is readable under exactly one
/// name of the new owner with its value; nothing is duplicated or missing.
@Suite(.serialized) struct MigrationKillTests {
    static let globals = 30_000
    static let bookmarks = 1_000
    static let containerFiles = 400
    static let valueBytes = 40
    /// NEW already has these names with other values (renamed on migration) ...
    static let conflicting = Array(stride(from: 7, to: globals, by: 400))
    /// ... and these with the same values (already present).
    static let same = Array(stride(from: 11, to: globals, by: 1_000))
    static let tampered = 123

    static func expected(_ index: Int) -> JSONValue { .string(BulkFill.value(index, bytes: valueBytes)) }

    /// The store before migrating: OLD full, NEW with a few names of its own, one of OLD's rows damaged.
    static func makeStore() throws -> TestStore {
        let test = try TestStore()
        let target = try test.directory.makeFolder("target")
        try test.store.populateForBenchmark(
            owner: "OLD",
            BulkFill(globals: globals, valueBytes: valueBytes, bookmarks: bookmarks, bookmarkTarget: target, containerFiles: containerFiles))
        let new = try test.store.globals(of: "NEW")
        for index in conflicting { try new.set(BulkFill.globalName(index), to: .string("NEW's own \(index)")) }
        for index in same { try new.set(BulkFill.globalName(index), to: expected(index)) }
        var blob = try #require(try test.sealedBlob(kind: "global", owner: "OLD", name: BulkFill.globalName(tampered)))
        blob[blob.startIndex + 20] ^= 0x40
        try test.tamper("UPDATE global SET sealed = ? WHERE owner = 'OLD' AND name = ?", [blob, BulkFill.globalName(tampered)])
        return test
    }

    /// What must hold after any kill: NEW's rows all open with NEW's key and hold the right
    /// values, each item of OLD is in OLD or in NEW (or both, before removal), never twice in NEW.
    static func checkInvariants(_ home: String, final: Bool, full: Bool, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let store = try Store(home: URL(fileURLWithPath: home))
        // Names always; values (every row of NEW opened with NEW's key) on full checks.
        let newNames = Set(try store.globals(of: "NEW").list().map(\.name))
        var newGlobals: [String: JSONValue] = [:]
        if full {
            let document = try JSONCoding.decode(JSONValue.self, fromJSON: try store.globals(of: "NEW").export())
            guard case .object(let root) = document, case .object(let values)? = root["globals"] else {
                Issue.record("NEW's export is not a document", sourceLocation: sourceLocation)
                return
            }
            newGlobals = values
            #expect(Set(values.keys) == newNames, sourceLocation: sourceLocation)
        }
        let oldNames = Set(try store.globals(of: "OLD").list().map(\.name))
        let conflicting = Set(conflicting)
        var seen = 0
        for index in 0..<globals {
            let name = BulkFill.globalName(index)
            let renamed = name + " (from OLD)"
            let inNew: Bool
            if conflicting.contains(index) {
                #expect(newNames.contains(name), "\(name)", sourceLocation: sourceLocation)
                if full { #expect(newGlobals[name] == .string("NEW's own \(index)"), "\(name)", sourceLocation: sourceLocation) }
                inNew = newNames.contains(renamed)
                if inNew && full { #expect(newGlobals[renamed] == expected(index), "\(renamed)", sourceLocation: sourceLocation) }
            } else {
                #expect(!newNames.contains(renamed), "\(renamed) must not exist", sourceLocation: sourceLocation)
                inNew = newNames.contains(name) && index != tampered
                if full, let value = newGlobals[name] { #expect(value == expected(index), "\(name)", sourceLocation: sourceLocation) }
            }
            if inNew { seen += 1 }
            if index == tampered {
                #expect(oldNames.contains(name), "the damaged row stays in OLD", sourceLocation: sourceLocation)
                #expect(!newNames.contains(name), sourceLocation: sourceLocation)
            } else if !inNew {
                #expect(oldNames.contains(name), "\(name) is neither in OLD nor in NEW", sourceLocation: sourceLocation)
            }
        }
        #expect(newNames.count == seen + conflicting.count, "no names in NEW besides its own and the migrated ones", sourceLocation: sourceLocation)
        let newBookmarks = try store.bookmarks(of: "NEW").list()
        let oldBookmarks = Set(try store.bookmarks(of: "OLD").list().map(\.bookmark.name))
        for entry in newBookmarks {
            #expect(entry.status == .ok, "\(entry.bookmark.name): \(entry.status)", sourceLocation: sourceLocation)
        }
        let newBookmarkNames = Set(newBookmarks.map(\.bookmark.name))
        #expect(newBookmarkNames.count == newBookmarks.count)
        #expect(newBookmarkNames.union(oldBookmarks).count == bookmarks, "every bookmark is in OLD or NEW", sourceLocation: sourceLocation)
        if final {
            #expect(seen == globals - 1, sourceLocation: sourceLocation)
            #expect(oldNames == [BulkFill.globalName(tampered)], sourceLocation: sourceLocation)
            #expect(newBookmarks.count == bookmarks && oldBookmarks.isEmpty, sourceLocation: sourceLocation)
            let container = store.containerDirectory(of: "NEW") + "/files"
            let files = try FileManager.default.contentsOfDirectory(atPath: container)
            #expect(files.count == containerFiles, "\(files.filter { $0.hasPrefix(".") })", sourceLocation: sourceLocation)
            let access = try store.bookmarks(of: "NEW").access(BulkFill.containerBookmarkName(5))
            #expect(try access.read("") == Data("contents of file 5\n".utf8), sourceLocation: sourceLocation)
        }
    }

    /// The store's record of each migration of OLD to NEW, oldest first.
    struct RecordedMigration: CustomStringConvertible {
        var id: Int64
        var phase: String
        var finished: Bool
        var counts: MigrationRecord.Counts
        var description: String { "migration \(id) (\(phase), \(finished ? "finished" : "unfinished")): \(counts)" }
    }

    static func recordedMigrations(_ test: TestStore) throws -> [RecordedMigration] {
        let rows = try test.store.database.read { db in
            try GRDB.Row.fetchAll(
                db, sql: "SELECT id, phase, finished IS NOT NULL AS finished, counts FROM ownerMigration WHERE source = 'OLD' AND target = 'NEW' ORDER BY id")
        }
        return try rows.map { row in
            RecordedMigration(
                id: row["id"], phase: row["phase"], finished: row["finished"],
                counts: try MigrationRecord.decode(MigrationRecord.Counts.self, row["counts"], file: test.home))
        }
    }

    @Test func killedAtTwentyPointsThenRunAgainItFinishesLosingNothing() throws {
        let arguments = ["migrate", "--from", "OLD", "--to", "NEW", "--on-conflict", "rename", "--remove-source", "--batch-size", "250"]
        // How long one uninterrupted run takes on this machine (on a store of its own):
        // each kill below lands within 1–7% of that, so that most of them cut
        // a run short whether the machine is slow or fast. (2–14% let the migration
        // finish after 6 kills when the calibration ran at a busy moment of a
        // parallel test run: the later runs were much faster than it.)
        let calibration = try Self.makeStore()
        let calibrationStart = Date()
        try runExtrun(arguments, home: calibration.home)
        let fullRun = min(Date().timeIntervalSince(calibrationStart), 9.0)
        let test = try Self.makeStore()
        var generator = SplitMix(seed: 20_261_122)
        var killed = 0
        var phases: [String] = []
        /// What every run that was not killed printed: the summary of the migration it ran.
        var printed: [Data] = []
        var completed = false
        // At least twenty attempts; more (up to forty) while the migration has not finished,
        // so that the kills reach the remove phase on a quiet machine too.
        for attempt in 0..<40 {
            if attempt >= 20 && completed { break }
            let delay = fullRun * (0.01 + 0.06 * Double(generator.next() % 1000) / 1000)
            let run = try runExtrun(arguments, home: test.home, killAfter: delay)
            if run.killed { killed += 1 } else { printed.append(run.stdout) }
            let phase = try test.store.database.read { db in
                try String.fetchOne(db, sql: "SELECT phase || ' ' || cursor FROM ownerMigration ORDER BY id DESC LIMIT 1")
            }
            completed = try Self.recordedMigrations(test).first?.finished == true
            phases.append("\(attempt): \(run.killed ? "killed" : "exit \(run.status)") after \(Int(delay * 1000)) ms at \(phase ?? "start")")
            try Self.checkInvariants(test.home, final: false, full: attempt % 5 == 4)
        }
        // The record says where each kill landed; most of them must have cut a run short
        // (spread over copy, verify and remove: the delays scale with the machine).
        #expect(killed >= 10, "\(phases.joined(separator: "\n"))")
        let last = try runExtrun(arguments, home: test.home)
        #expect(last.status == 18, "one item does not open: reported, so not clean")
        printed.append(last.stdout)
        // The counts come from the store's record of the migration that did the work (the
        // first one of OLD to NEW, resumed by every run until it finished), not from whichever
        // run printed: the kill may land after the run that finished it committed and before
        // it printed, and the next run then starts a new migration of what is left (the one
        // damaged item). Counts cover the whole migration, over every interrupted run.
        let migrations = try Self.recordedMigrations(test)
        let record = try #require(migrations.first, "no migration recorded\n\(phases.joined(separator: "\n"))")
        #expect(record.finished && record.phase == "done", "the first migration did not finish: \(record.phase)\n\(phases.joined(separator: "\n"))")
        let globals = record.counts.global
        #expect(globals.total == Self.globals && globals.migrated == Self.globals - 1, "\(globals)")
        #expect(globals.failed == 1 && globals.renamed == Self.conflicting.count, "\(globals)")
        #expect(globals.alreadyPresent == Self.same.count, "\(globals)")
        #expect(globals.removed == Self.globals - 1 && globals.kept == 1, "\(globals)")
        #expect(record.counts.bookmark.migrated == Self.bookmarks && record.counts.bookmark.removed == Self.bookmarks, "\(record.counts.bookmark)")
        // Every later migration found only the damaged item left, and moved nothing.
        for later in migrations.dropFirst() {
            #expect(later.finished && later.counts.global.total == 1 && later.counts.global.failed == 1, "\(later)")
            #expect(later.counts.global.migrated == 0 && later.counts.bookmark.total == 0, "\(later)")
        }
        // What the runs printed agrees with the record: the summary of the work migration
        // (when the run that finished it lived to print it) has its counts, and every other
        // summary is a later migration's, of the damaged item alone.
        for output in printed {
            let summary = try JSONCoding.decode(JSONValue.self, fromJSON: output)
            guard case .object(let fields) = summary, case .object(let counts)? = fields["globals"] else {
                Issue.record("no summary: \(String(decoding: output, as: UTF8.self))")
                continue
            }
            #expect(fields["complete"] == true, "\(summary)")
            let expected = counts["total"] == .int(Int64(Self.globals)) ? globals : migrations.dropFirst().first?.counts.global ?? globals
            for (field, value) in [
                ("total", expected.total), ("migrated", expected.migrated), ("failed", expected.failed), ("renamed", expected.renamed),
                ("alreadyPresent", expected.alreadyPresent), ("removed", expected.removed), ("kept", expected.kept),
            ] {
                #expect(counts[field] == .int(Int64(value)), "\(field) of \(summary)")
            }
        }
        try Self.checkInvariants(test.home, final: true, full: true)
        print("kill points (\(killed) of \(phases.count) cut a run short):\n" + phases.joined(separator: "\n"))
    }
}

/// The same on a store on PostgreSQL (globals only, fewer): `extrun migrate` killed at points
/// spread over a run, then run to the end; after each kill every global is in OLD or in NEW
/// (renamed where NEW had the name) with its value, none twice, and the end moves everything.
@Suite(.serialized) struct MigrationKillPostgresTests {
    static let globals = 6_000
    static let valueBytes = 40
    static let conflicting = Array(stride(from: 5, to: globals, by: 300))

    /// Names of OLD and NEW, and NEW's values, through a store of its own.
    static func check(_ test: BackendStore, final: Bool, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let store = try test.reopen()
        let document = try JSONCoding.decode(JSONValue.self, fromJSON: try store.globals(of: "NEW").export())
        guard case .object(let root) = document, case .object(let new)? = root["globals"] else {
            Issue.record("NEW's export is not a document", sourceLocation: sourceLocation)
            return
        }
        let old = Set(try store.globals(of: "OLD").list().map(\.name))
        let conflicting = Set(conflicting)
        var expectedInNew = 0
        for index in 0..<globals {
            let name = BulkFill.globalName(index)
            let value = JSONValue.string(BulkFill.value(index, bytes: valueBytes))
            let target = conflicting.contains(index) ? name + " (from OLD)" : name
            if conflicting.contains(index) {
                #expect(new[name] == .string("NEW's own \(index)"), "\(name)", sourceLocation: sourceLocation)
                expectedInNew += 1
            }
            if let migrated = new[target] {
                #expect(migrated == value, "\(target)", sourceLocation: sourceLocation)
                expectedInNew += 1
            } else {
                #expect(old.contains(name), "\(name) is neither in OLD nor in NEW", sourceLocation: sourceLocation)
            }
        }
        #expect(new.count == expectedInNew, "no other names in NEW", sourceLocation: sourceLocation)
        if final {
            #expect(old.isEmpty, sourceLocation: sourceLocation)
            #expect(new.count == globals + conflicting.count, sourceLocation: sourceLocation)
        }
    }

    @Test(arguments: StoreBackendKind.postgresOnly)
    func killedThenRunAgainItFinishesLosingNothing(backend: StoreBackendKind) throws {
        func filled() throws -> BackendStore {
            let test = try BackendStore(backend)
            try test.fill(owner: "OLD", globals: Self.globals, valueBytes: Self.valueBytes)
            let new = try test.store.globals(of: "NEW")
            for index in Self.conflicting { try new.set(BulkFill.globalName(index), to: .string("NEW's own \(index)")) }
            return test
        }
        let arguments = ["migrate", "--from", "OLD", "--to", "NEW", "--on-conflict", "rename", "--remove-source", "--batch-size", "200"]
        // How long one uninterrupted run takes on this machine (on a store of its own): each
        // kill below lands within 5–25% of that, so that three kills cannot finish the work
        // whether the machine is slow or fast (fixed delays of 0.3–2.5 s let a fast machine
        // finish it at the third run).
        let calibration = try filled()
        let calibrationStart = Date()
        let calibrated = try runExtrun(arguments, home: calibration.home, environment: ["EXTRUN_STORE": calibration.storeVariable])
        #expect(calibrated.status == 0, "\(String(decoding: calibrated.stdout, as: UTF8.self))")
        let fullRun = min(Date().timeIntervalSince(calibrationStart), 9.0)
        let test = try filled()
        let environment = ["EXTRUN_STORE": test.storeVariable]
        var generator = SplitMix(seed: 20_261_129)
        var killed = 0
        var log: [String] = []
        var completed = false
        var phases: Set<String> = []
        for attempt in 0..<12 {
            // Kills spread over the process's start, the copy, verify and removal.
            let delay = fullRun * (0.05 + 0.2 * Double(generator.next() % 1000) / 1000)
            let run = try runExtrun(arguments, home: test.home, killAfter: delay, environment: environment)
            if run.killed { killed += 1 }
            let at = try test.reopen().migrationRead { rows in try rows.unfinishedMigration(source: "OLD", target: "NEW", origin: "local") }
            phases.insert(at?.phase ?? "start")
            log.append("\(attempt): \(run.killed ? "killed" : "exit \(run.status)") after \(Int(delay * 1000)) ms at \(at.map { "\($0.phase) \($0.cursor)" } ?? "start or done")")
            try Self.check(test, final: false)
            if !run.killed {
                #expect(run.status == 0, "\(log.joined(separator: "\n"))")
                completed = true
                break
            }
        }
        #expect(killed >= 3 && phases.count >= 2, "kills in more than one phase: \(log.joined(separator: "\n"))")
        let last = try runExtrun(arguments, home: test.home, environment: environment)
        #expect(last.status == 0, "\(String(decoding: last.stdout, as: UTF8.self))")
        try Self.check(test, final: true)
        // The first migration did the work over every run; counts cover all of them.
        let migrated = try test.number("SELECT COUNT(*) FROM ownerMigration WHERE source = $1 AND finished IS NOT NULL", owner: "OLD")
        #expect(migrated >= 1)
        print("PostgreSQL kill points (\(killed) cut a run short, completed before the last run: \(completed)):\n" + log.joined(separator: "\n"))
    }
}

/// A small deterministic generator for kill delays.
struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
