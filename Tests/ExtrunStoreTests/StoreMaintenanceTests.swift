import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import GRDB
import Testing

@testable import ExtrunStore

#if canImport(Glibc)
import Glibc
#endif

/// The store files' bytes, to show a command left them as they were (a reader may add an
/// empty -wal and a -shm where there were none, as SQLite's readers do).
private func storeFiles(_ home: String) -> [String: Data] {
    var files: [String: Data] = [:]
    for suffix in ["", "-wal", "-shm"] { files[suffix] = fileBytes(home + "/store.sqlite" + suffix) }
    return files
}

/// Every file of `before` is still there with the same bytes.
private func unchanged(_ before: [String: Data], _ home: String) -> Bool {
    let now = storeFiles(home)
    return before[""] != nil && before.allSatisfy { now[$0.key] == $0.value }
}

/// A home with 40 globals of owner TEAM, every connection closed (no log).
private func homeWithGlobals(_ directory: TempDirectory) throws -> (home: String, values: [String: JSONValue]) {
    let home = directory.sub("home")
    var values: [String: JSONValue] = [:]
    let globals = try Store(home: URL(fileURLWithPath: home)).globals(of: "TEAM")
    for index in 0..<40 {
        let value = JSONValue.string(String(repeating: "v\(index)-", count: 700))
        try globals.set("value-\(index)", to: value)
        values["value-\(index)"] = value
    }
    return (home, values)
}

/// Opens a recovered file as the store of a new home that has the same keys.
private func openRecovered(_ file: String, keysFrom home: String, in directory: TempDirectory) throws -> Store {
    let newHome = try directory.makeFolder("recovered-home")
    chmod(newHome, 0o700)
    try FileManager.default.copyItem(atPath: home + "/keys", toPath: newHome + "/keys")
    try FileManager.default.moveItem(atPath: file, toPath: newHome + "/store.sqlite")
    return try Store(home: URL(fileURLWithPath: newHome))
}

@Suite struct StoreMaintenanceTests {
    @Test func anIntactStoreChecksOkAndRecoversEveryRow() throws {
        let directory = try TempDirectory()
        let (home, values) = try homeWithGlobals(directory)
        let before = storeFiles(home)
        let report = try StoreMaintenance.check(home: URL(fileURLWithPath: home), full: true)
        #expect(report.intact && report.sqlite == ["ok"], "\(report.json)")
        #expect(report.rows["global"] == 40)
        let recovered = directory.sub("recovered.sqlite")
        let summary = try StoreMaintenance.recover(home: URL(fileURLWithPath: home), into: recovered)
        #expect(summary.complete && summary.copied["global"] == 40 && summary.destinationCheck == ["ok"], "\(summary.json)")
        let left = try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted()
        #expect(left == ["home", "recovered.sqlite"], "no temporary file is left: \(left)")
        #expect(unchanged(before, home), "the store's files were not written")
        let globals = try openRecovered(recovered, keysFrom: home, in: directory).globals(of: "TEAM")
        for (name, value) in values { #expect(try globals.get(name)?.value == value) }
        // An existing destination is never written over.
        try directory.write("taken.sqlite", "mine")
        expectStoreError(.alreadyExists) { try StoreMaintenance.recover(home: URL(fileURLWithPath: home), into: directory.sub("taken.sqlite")) }
        #expect(try directory.read("taken.sqlite") == "mine")
    }

    /// Garbage over pages in the middle of the file: check says so; recover copies every
    /// row SQLite can still read, names what it cannot, and leaves the store as it is.
    @Test func aDamagedStoreIsCheckedAndItsReadableRowsRecovered() throws {
        let directory = try TempDirectory()
        let (home, values) = try homeWithGlobals(directory)
        let database = home + "/store.sqlite"
        let size = try #require(fileBytes(database)).count
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: database))
        try handle.seek(toOffset: UInt64(size / 4096 * 3 / 5 * 4096))
        try handle.write(contentsOf: Data((0..<8192).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 13) }))
        try handle.close()
        let before = storeFiles(home)

        let report = try StoreMaintenance.check(home: URL(fileURLWithPath: home), full: false)
        #expect(!report.intact && report.sqlite != ["ok"], "\(report.json)")
        let recovered = directory.sub("recovered.sqlite")
        let summary = try StoreMaintenance.recover(home: URL(fileURLWithPath: home), into: recovered)
        #expect(summary.destinationCheck == ["ok"], "\(summary.json)")
        #expect(unchanged(before, home), "the store's files were not written")
        let globals = try openRecovered(recovered, keysFrom: home, in: directory).globals(of: "TEAM")
        var intact = 0
        for (name, value) in values {
            if let global = try? globals.get(name), global.value == value { intact += 1 }
        }
        #expect(intact >= 20, "most rows were recovered intact: \(intact) of 40; \(summary.json)")
    }

    /// A connection that does not checkpoint at close (`extrun handle`'s) leaves its writes in
    /// the log; the log is then deleted while -shm still records them (issue 17, item 6).
    @Test func aDeletedLogIsRefusedInsteadOfSilentlyRollingBack() throws {
        let directory = try TempDirectory()
        let home = directory.sub("home")
        try Store(home: URL(fileURLWithPath: home)).globals(of: "TEAM").set("before", to: 1)
        do {
            let store = try Store(home: URL(fileURLWithPath: home), checkpointOnClose: false)
            try store.globals(of: "TEAM").set("inTheLog", to: 2)
        }
        let database = home + "/store.sqlite"
        let log = try #require(fileBytes(database + "-wal"), "the write stayed in the log")
        #expect(unlink(database + "-wal") == 0)
        let before = storeFiles(home)
        let error = expectStoreError(.corruptStore) { try Store(home: URL(fileURLWithPath: home)).globals(of: "TEAM").get("before") }
        #expect(error?.message.contains("write-ahead log") == true && error?.message.contains("-wal") == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("empty") == false)
        #expect(storeFiles(home) == before, "nothing was changed: the evidence in -shm stays, no log was made")
        let report = try StoreMaintenance.check(home: URL(fileURLWithPath: home), full: false)
        #expect(!report.intact && report.problems.contains { $0.message.contains("write-ahead log") }, "\(report.json)")
        #expect(storeFiles(home) == before)

        // Recover reads store.sqlite alone (a copy), and says what is missing.
        let recovered = directory.sub("recovered.sqlite")
        let summary = try StoreMaintenance.recover(home: URL(fileURLWithPath: home), into: recovered)
        #expect(!summary.complete && summary.copied["global"] == 1, "\(summary.json)")
        #expect(storeFiles(home) == before)

        // The log put back: everything is there.
        #expect(FileManager.default.createFile(atPath: database + "-wal", contents: log, attributes: [.posixPermissions: 0o600]))
        let globals = try Store(home: URL(fileURLWithPath: home)).globals(of: "TEAM")
        #expect(try globals.get("before")?.value == 1)
        #expect(try globals.get("inTheLog")?.value == 2)
    }

    /// No message of the store advises deleting, resetting, or starting an empty store.
    @Test func noStoreMessageAdvisesLosingData() throws {
        let directory = try TempDirectory()
        let home = directory.sub("home")
        try Store(home: URL(fileURLWithPath: home)).globals(of: "TEAM").set("x", to: 1)
        let database = home + "/store.sqlite"
        var messages: [String] = [StoreDatabase.damageAdvice(database)]
        let original = try #require(fileBytes(database))
        for damage in [Data(), Data(repeating: 0x41, count: original.count)] {
            #expect(FileManager.default.createFile(atPath: database, contents: damage))
            do { _ = try Store(home: URL(fileURLWithPath: home)) } catch let error as StoreError { messages.append(error.message) }
        }
        unlink(database)
        do { _ = try Store(home: URL(fileURLWithPath: home)) } catch let error as StoreError { messages.append(error.message) }
        #expect(messages.count == 4)
        for message in messages {
            for advice in ["move it aside", "start an empty", "start over", "delete it", "remove it", "reset it", "recreate it"] {
                #expect(!message.lowercased().contains(advice), "\(message)")
            }
        }
    }

    // MARK: - Either backend: owners, keys, seals, usage

    /// TEAM: 5 globals, a bookmark and a donation; OTHER: 2 globals.
    private func populated(_ backend: StoreBackendKind) throws -> BackendStore {
        let test = try BackendStore(backend)
        let globals = try test.store.globals(of: "TEAM")
        for name in ["a", "b", "c", "d", "é"] { try globals.set(name, to: .string("value of \(name)")) }
        let folder = try test.directory.makeFolder("docs")
        try test.store.bookmarks(of: "TEAM").add("docs", path: folder, readOnly: true)
        try test.store.donations(of: "TEAM").donate(
            Donation(identifier: "d1", owner: "TEAM", plugin: "p", intent: "I", source: "plugin", parameters: ["x": 1], response: nil))
        try test.store.globals(of: "OTHER").set("x", to: 1)
        try test.store.globals(of: "OTHER").set("y", to: 2)
        return test
    }

    /// Runs `sql` on the test's rows, on either backend.
    private func execute(_ test: BackendStore, _ sql: String) throws {
        switch test.store.backend {
        case .sqlite(let database): try database.write { db in try db.execute(sql: sql) }
        case .postgres(let server): try server.run(sql)
        }
    }

    /// Flips one bit of a sealed value in the rows themselves, as damage or an edit outside extrun would.
    private func flipBit(_ test: BackendStore, owner: String, global: String) throws {
        switch test.store.backend {
        case .sqlite(let database):
            try database.write { db in
                var blob = try #require(
                    try Data.fetchOne(db, sql: "SELECT sealed FROM global WHERE owner = ? AND name = ?", arguments: [owner, global]))
                blob[blob.startIndex + 20] ^= 1
                try db.execute(sql: "UPDATE global SET sealed = ? WHERE owner = ? AND name = ?", arguments: [blob, owner, global])
            }
        case .postgres(let server):
            try server.run("UPDATE global SET sealed = set_byte(sealed, 20, get_byte(sealed, 20) # 1) WHERE owner = '\(owner)' AND name = '\(global)'")
        }
    }

    private func check(_ test: BackendStore, full: Bool = false) throws -> StoreMaintenance.CheckReport {
        try StoreMaintenance.check(home: test.homeURL, full: full, location: test.location)
    }

    private func owner(_ report: StoreMaintenance.CheckReport, _ name: String) -> StoreMaintenance.OwnerCheck? {
        report.owners.first { $0.owner == name }
    }

    private func outcome(_ report: StoreMaintenance.CheckReport, _ step: String) -> StoreMaintenance.CheckStep.Outcome? {
        report.steps.first { $0.name == step }?.outcome
    }

    @Test(arguments: StoreBackendKind.all)
    func anIntactStoreOpensEveryOwnersRows(backend: StoreBackendKind) throws {
        let test = try populated(backend)
        let report = try check(test)
        #expect(report.intact && report.problems.isEmpty, "\(report.json)")
        #expect(report.backend == (backend == .sqlite ? "sqlite" : "postgresql"))
        #expect(report.owners.map(\.owner) == ["OTHER", "TEAM"])
        let team = try #require(owner(report, "TEAM"))
        #expect(team.key == "ok" && team.opened == 7 && team.broken == 0 && team.usageAgrees, "\(team.json)")
        #expect(team.rows == ["global": 5, "bookmark": 1, "donation": 1])
        #expect(team.countedUsage.globals == 5 && team.countedUsage.bytes > 0)
        #expect(owner(report, "OTHER")?.opened == 2)
        #expect(report.rows["global"] == 7 && report.rows["owner"] == 2, "\(report.rows)")
        for step in ["permissions", "schema", "tables", "owners"] {
            #expect(outcome(report, step) == .ok, "\(step): \(report.json)")
        }
        switch backend {
        case .sqlite:
            #expect(report.sqlite == ["ok"] && outcome(report, "quick_check") == .ok && outcome(report, "header and log") == .ok)
            #expect(outcome(report, "server") == .notApplicable && outcome(report, "advisory locks") == .notApplicable)
        case .postgres:
            // SQLite's file checks say they do not apply, rather than failing.
            #expect(outcome(report, "quick_check") == .notApplicable && outcome(report, "header and log") == .notApplicable)
            #expect(outcome(report, "server") == .ok && outcome(report, "advisory locks") == .ok)
            #expect(outcome(report, "amcheck") == .skipped)
            // checksumFailures is null unless the server has page checksums (initdb --data-checksums).
            let version = report.server["version"]
            let checksums = report.server["dataChecksums"]
            #expect(version != nil && checksums != nil && report.server["database"] != nil, "\(report.server)")
        }
    }

    /// A sealed value changed in the rows themselves (an UPDATE outside extrun) is found, named,
    /// and counted against its owner; the other rows still open.
    @Test(arguments: StoreBackendKind.all)
    func aCorruptedSealedRowIsFound(backend: StoreBackendKind) throws {
        let test = try populated(backend)
        try flipBit(test, owner: "TEAM", global: "b")
        let report = try check(test)
        #expect(!report.intact, "\(report.json)")
        let broken = report.problems.filter { $0.kind == .sealBroken }
        #expect(broken.count == 1 && broken.first?.details["name"] == .string("b"), "\(report.json)")
        #expect(broken.first?.message.contains("global 'b' of owner 'TEAM'") == true)
        let team = try #require(owner(report, "TEAM"))
        #expect(team.opened == 6 && team.broken == 1 && team.usageAgrees, "\(team.json)")
        #expect(owner(report, "OTHER")?.broken == 0)
        #expect(outcome(report, "owners") == .problems)

        // Usage counters that disagree with the rows.
        try execute(test, "UPDATE ownerUsage SET globals = globals + 3 WHERE owner = 'OTHER'")
        let counters = try check(test)
        let other = try #require(owner(counters, "OTHER"))
        #expect(!other.usageAgrees && other.recordedUsage.globals == other.countedUsage.globals + 3)
        let usage = counters.problems.filter { $0.kind == .corruptStore && $0.message.contains("usage counters of owner 'OTHER'") }
        #expect(usage.count == 1, "\(counters.json)")
    }

    @Test(arguments: StoreBackendKind.all)
    func aMissingOrReplacedKeyIsFound(backend: StoreBackendKind) throws {
        let test = try populated(backend)
        let keyFile = test.home + "/keys/TEAM.key"
        let kept = test.directory.sub("TEAM.key.kept")
        #expect(rename(keyFile, kept) == 0)
        let missing = try check(test)
        #expect(owner(missing, "TEAM")?.key == "keyMissing" && owner(missing, "TEAM")?.opened == nil, "\(missing.json)")
        #expect(missing.problems.map(\.kind) == [.keyMissing], "\(missing.json)")
        #expect(owner(missing, "OTHER")?.opened == 2)

        // Another TEAM key, made in another home.
        let elsewhere = try TempDirectory()
        try Store(home: URL(fileURLWithPath: elsewhere.sub("home")), location: .sqlite).createOwner("TEAM")
        try FileManager.default.copyItem(atPath: elsewhere.sub("home") + "/keys/TEAM.key", toPath: keyFile)
        let replaced = try check(test)
        #expect(replaced.problems.map(\.kind) == [.wrongKey] && owner(replaced, "TEAM")?.key == "wrongKey", "\(replaced.json)")
        #expect(unlink(keyFile) == 0 && rename(kept, keyFile) == 0)
        #expect(try check(test).intact)
    }

    // MARK: - PostgreSQL: the server's own checks

    @Test(arguments: StoreBackendKind.postgresOnly)
    func onPostgreSQLTheServerLocksAndPagesAreChecked(backend: StoreBackendKind) throws {
        let test = try populated(backend)
        guard case .postgres(let server) = test.location, case .postgres(let rows) = test.store.backend else { return }
        // A host migrating the schema holds the advisory lock: a note, not a problem.
        let other = try PostgresStore(location: server, migrating: false)
        try other.run("SELECT pg_advisory_lock(\(PostgresStore.schemaLockKey))")
        let locked = try check(test)
        #expect(locked.intact, "\(locked.json)")
        #expect(locked.notes.contains { $0.contains("advisory lock schema migrations is held by server process") }, "\(locked.notes)")
        guard case .array(let locks) = locked.server["advisoryLocks"] ?? .null else {
            Issue.record("no advisoryLocks in \(locked.server)")
            return
        }
        #expect(locks.count == 1)
        try other.run("SELECT pg_advisory_unlock(\(PostgresStore.schemaLockKey))")
        #expect(try check(test).notes.allSatisfy { !$0.contains("advisory lock") })
        // A migration's lock is named by the pair its record names; what it wrote checks intact.
        let moved = try test.store.migrate(from: "OTHER", to: "MOVED")
        #expect(moved.isClean, "\(moved.json)")
        let key = PostgresStore.migrationLockKey(from: "OTHER", to: "MOVED")
        try other.run("SELECT pg_advisory_lock(\(key))")
        let migrating = try check(test)
        #expect(migrating.intact && migrating.owners.first { $0.owner == "MOVED" }?.opened == 2, "\(migrating.json)")
        #expect(migrating.notes.contains { $0.contains("advisory lock migration 'OTHER' -> 'MOVED' is held") }, "\(migrating.notes)")
        try other.run("SELECT pg_advisory_unlock(\(key))")

        // --full: amcheck when the database has it (the tests' server user is a superuser).
        let without = try check(test, full: true)
        #expect(outcome(without, "amcheck") == .skipped && without.intact, "\(without.json)")
        try rows.run("CREATE EXTENSION amcheck")
        let full = try check(test, full: true)
        #expect(outcome(full, "amcheck") == .ok && full.intact, "\(full.json)")

        // A table of a recorded migration dropped outside extrun.
        try rows.run("DROP TABLE ownerMigrationWrite")
        let dropped = try check(test)
        #expect(!dropped.intact && dropped.problems.contains { $0.message.contains("no table ownerMigrationWrite") }, "\(dropped.json)")

        // store recover has no file to read: a typed refusal naming why, nothing written.
        let destination = test.directory.sub("recovered.sqlite")
        let refused = expectStoreError(.wrongType) { try StoreMaintenance.recover(home: test.homeURL, into: destination, location: test.location) }
        #expect(refused?.message.contains("PostgreSQL server") == true && refused?.message.contains("store copy --to sqlite") == true)
        #expect(!FileManager.default.fileExists(atPath: destination))
    }

    /// A database no extrun has used holds no store: `storeMissing`, and the check creates no schema.
    @Test(arguments: StoreBackendKind.postgresOnly)
    func aDatabaseWithoutTheSchemaHoldsNoStore(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        guard case .postgres(let server) = test.location else { return }
        let name = "extrun_check_empty_\(getpid())_\(UInt32.random(in: 0...UInt32.max))"
        try PostgresStore(location: server, migrating: false).run("CREATE DATABASE \(name)")
        defer { try? PostgresStore(location: server, migrating: false).run("DROP DATABASE IF EXISTS \(name) WITH (FORCE)") }
        let empty = StoreLocation.postgres(server.with(database: name))
        expectStoreError(.storeMissing) { try StoreMaintenance.check(home: test.homeURL, full: false, location: empty) }
        let tables = try PostgresStore(location: server.with(database: name), migrating: false).number(
            "SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'public' AND tablename <> $1", "")
        #expect(tables == 0)
    }
}

