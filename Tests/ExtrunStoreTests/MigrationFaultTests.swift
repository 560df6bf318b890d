import ExtrunProtocol
import ExtrunStoreFill
import Foundation
import GRDB
import Testing

@testable import ExtrunStore

#if canImport(Glibc)
import Glibc
#endif

/// The id of a process that has ended (a `true` started and waited for).
private func deadProcessID() throws -> pid_t {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/true")
    try process.run()
    process.waitUntilExit()
    return process.processIdentifier
}

/// Temporaries of a killed run (`dead`), of an older extrun (`legacy`) and of a run still
/// going (this process, `live`) in `folder`; returns their names.
private func plantTemporaries(_ folder: String, prefix: String) throws -> (dead: String, legacy: String, live: String) {
    let names = (
        dead: ".\(prefix)-\(try deadProcessID())-1a2b.tmp", legacy: ".\(prefix)-deadbeef.tmp", live: ".\(prefix)-\(getpid())-3c4d.tmp"
    )
    for name in [names.dead, names.legacy, names.live] {
        #expect(FileManager.default.createFile(atPath: folder + "/" + name, contents: Data("partial".utf8)))
    }
    return names
}

@Suite struct MigrationFaultTests {
    /// Two migrations of one pair at once (issue 17, item 3): the second says so and writes nothing.
    @Test(arguments: StoreBackendKind.all)
    func aSecondMigrationOfThePairSaysOneIsRunningAndWritesNothing(backend: StoreBackendKind) throws {
        let fixture = try MigrationFixture(backend)
        let running = try MigrationLock.acquire(home: fixture.test.home, from: "OLD", to: "NEW")
        let error = expectStoreError(.storeBusy) { try fixture.store.migrate(from: "OLD", to: "NEW") }
        #expect(error?.message.contains("already running") == true && error?.message.contains("\(getpid())") == true, "\(error?.message ?? "")")
        #expect(try fixture.store.globals(of: "NEW").list().isEmpty)
        // Another pair is not held up; a dry run needs no lock.
        #expect(try fixture.store.migrate(from: "OLD", to: "OTHER").isClean)
        #expect(try fixture.store.migrate(from: "OLD", to: "NEW", options: MigrationOptions(dryRun: true)).isClean)
        withExtendedLifetime(running) {}
        _ = consume running
        // The lock is the open file description: a process another test forks at this moment
        // (a sandbox supervisor, before it closes what it inherited) holds it until it has
        // closed its copy, which takes long on a loaded 2-core machine. Wait for that, briefly.
        let start = Date()
        while true {
            do {
                #expect(try fixture.store.migrate(from: "OLD", to: "NEW").isClean)
                break
            } catch let error as StoreError where error.kind == .storeBusy && Date().timeIntervalSince(start) < 30 {
                Thread.sleep(forTimeInterval: 0.05)
            }
        }
    }

    /// On a shared PostgreSQL store, one migration of a pair at a time among every host (whose
    /// homes, and so flocks, differ): the second says so and writes nothing.
    @Test(arguments: StoreBackendKind.postgresOnly)
    func aMigrationOnAnotherHostOfTheSharedStoreHoldsThePair(backend: StoreBackendKind) throws {
        let fixture = try MigrationFixture(backend)
        guard case .postgres(let otherHost) = try fixture.test.reopen().backend else { return }
        var running: PostgresMigrationLock? = try otherHost.migrationLock(from: "OLD", to: "NEW")
        let error = expectStoreError(.storeBusy) { try fixture.store.migrate(from: "OLD", to: "NEW") }
        #expect(error?.message.contains("already running on the store's server") == true, "\(error?.message ?? "")")
        #expect(try fixture.store.globals(of: "NEW").list().isEmpty)
        let records = try fixture.test.migrationRecords()
        #expect(records == 0)
        #expect(try fixture.store.migrate(from: "OLD", to: "NEW", options: MigrationOptions(dryRun: true)).isClean)
        #expect(try fixture.store.migrate(from: "OLD", to: "OTHER").isClean)
        #expect(running != nil)
        running = nil  // Its connection closes: the server releases the lock.
        let start = Date()
        while true {
            do {
                #expect(try fixture.store.migrate(from: "OLD", to: "NEW").isClean)
                break
            } catch let error as StoreError where error.kind == .storeBusy && Date().timeIntervalSince(start) < 10 {
                Thread.sleep(forTimeInterval: 0.05)
            }
        }
    }

    /// A migration removes the temporaries of killed runs in the folders it copies into, and
    /// leaves those of a run still going (issue 17, item 3).
    @Test(arguments: StoreBackendKind.all)
    func onlyTheTemporariesOfKilledRunsAreRemoved(backend: StoreBackendKind) throws {
        let fixture = try MigrationFixture(backend)
        let docs = fixture.store.containerDirectory(of: "NEW") + "/docs"
        try FileManager.default.createDirectory(atPath: docs, withIntermediateDirectories: true)
        let names = try plantTemporaries(docs, prefix: "extrun-migrate")
        #expect(try fixture.store.migrate(from: "OLD", to: "NEW").isClean)
        #expect(!FileManager.default.fileExists(atPath: docs + "/" + names.dead))
        #expect(!FileManager.default.fileExists(atPath: docs + "/" + names.legacy))
        #expect(FileManager.default.fileExists(atPath: docs + "/" + names.live), "a running migration's file is left alone")
        #expect(FileManager.default.fileExists(atPath: docs + "/sub/b.txt"))
    }

    /// An export removes the bundles that killed exports left half-written in its folder (issue 17, item 8).
    @Test func anExportRemovesTheTemporariesOfKilledExports() throws {
        let fixture = try MigrationFixture()
        let folder = try fixture.test.directory.makeFolder("out")
        let names = try plantTemporaries(folder, prefix: "extrun-bundle")
        let recipient = try fixture.store.publicKey(of: "NEW")
        _ = try fixture.store.exportTransfer(from: "OLD", recipient: recipient, to: folder + "/transfer.bundle")
        let left = try FileManager.default.contentsOfDirectory(atPath: folder).sorted()
        #expect(left == [names.live, "transfer.bundle"].sorted(), "\(left)")
    }

    /// Damage in the middle of the file, in rows the migration does not read (issue 17,
    /// item 5): migrate and export stop before writing anything.
    @Test func damageAnywhereStopsMigrateAndExportBeforeTheyWrite() throws {
        let fixture = try MigrationFixture()
        try fixture.store.populateForBenchmark(owner: "BULK", BulkFill(globals: 400, valueBytes: 1_000))
        let database = fixture.store.databasePath
        _ = try fixture.test.reopen()  // a checkpoint: everything in store.sqlite
        let size = try #require(fileBytes(database)).count
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: database))
        try handle.seek(toOffset: UInt64(size / 4096 * 3 / 5 * 4096))
        try handle.write(contentsOf: Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }))
        try handle.close()

        let store = try Store(home: URL(fileURLWithPath: fixture.test.home))
        let error = expectStoreError(.corruptStore) { try store.migrate(from: "OLD", to: "NEW") }
        #expect(error?.message.contains("quick_check") == true && error?.message.contains("nothing was written") == true, "\(error?.message ?? "")")
        #expect(error?.message.contains("store recover") == true)
        let records = try? store.database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ownerMigration") }
        #expect(records == 0 || records == nil)
        let bundle = fixture.test.directory.sub("transfer.bundle")
        expectStoreError(.corruptStore) { try store.exportTransfer(from: "OLD", recipient: try store.publicKey(of: "NEW"), to: bundle) }
        #expect(!FileManager.default.fileExists(atPath: bundle))
    }

    /// A global changed in OLD during a --remove-source migration is kept there; running the
    /// same command again carries it, under the default `fail`, as long as NEW's value is still
    /// the migration's copy, and never over a write NEW made since (issue 17, item 4).
    @Test(arguments: StoreBackendKind.all)
    func rerunningRemoveSourceCarriesChangesButNotOverNewWrites(backend: StoreBackendKind) throws {
        // NEW's own write: none, after the first run, or while the first run was still copying
        // (after its copy of "text", before its copying ended: a version below the last one it wrote).
        for newWrites in ["never", "after", "during the copy"] {
            let newWritesMeanwhile = newWrites != "never"
            let fixture = try MigrationFixture(backend)
            let changed = ChangeOnce {
                _ = try? fixture.test.reopen().globals(of: "OLD").set("text", to: "changed during the migration")
            }
            let newWrite = ChangeOnce {
                _ = try? fixture.test.reopen().globals(of: "NEW").set("text", to: "NEW's own")
            }
            let options = MigrationOptions(removeSource: true)
            let first = try fixture.store.migrate(from: "OLD", to: "NEW", options: options) { progress in
                if progress.phase == "copy globals", newWrites == "during the copy" { newWrite.run() }
                if progress.phase == "verify" { changed.run() }
            }
            #expect(first.globals.kept == 1 && first.items.contains { $0.name == "text" }, "\(newWrites): \(first.json)")
            let new = try fixture.test.reopen().globals(of: "NEW")
            #expect(try new.get("text")?.value == (newWrites == "during the copy" ? "NEW's own" : "clam chowder"))
            if newWrites == "after" { try new.set("text", to: "NEW's own") }

            let again = try fixture.store.migrate(from: "OLD", to: "NEW", options: options)
            let old = try fixture.test.reopen().globals(of: "OLD")
            if newWritesMeanwhile {
                #expect(!again.isClean && again.globals.migrated == 0, "\(newWrites): a conflict under fail: \(again.json)")
                #expect(try new.get("text")?.value == "NEW's own", "NEW's own write is never replaced")
                #expect(try old.get("text")?.value == "changed during the migration", "and OLD's change is kept")
            } else {
                #expect(again.isClean && again.globals.overwritten == 1 && again.globals.removed == 1, "\(again.json)")
                #expect(try new.get("text")?.value == "changed during the migration")
                #expect(try old.list().isEmpty)
            }
        }
    }
}

extension MigrationFaultTests {
    /// Files a killed run copied before its batch committed are counted by the run that
    /// finishes the migration (issue 17, item 8).
    @Test(arguments: StoreBackendKind.all)
    func filesAKilledRunCopiedAreCounted(backend: StoreBackendKind) throws {
        let fixture = try MigrationFixture(backend)
        let old = fixture.store.containerDirectory(of: "OLD")
        let new = fixture.store.containerDirectory(of: "NEW")
        try FileManager.default.createDirectory(atPath: new + "/docs/sub", withIntermediateDirectories: true)
        for file in ["docs/a.txt", "docs/sub/b.txt"] { try FileManager.default.copyItem(atPath: old + "/" + file, toPath: new + "/" + file) }
        let summary = try fixture.store.migrate(from: "OLD", to: "NEW")
        #expect(summary.isClean && summary.bookmarks.filesCopied == 3 && summary.bookmarks.bytesCopied == 6, "\(summary.json)")
    }
}

/// Runs its body once, from whichever callback comes first.
final class ChangeOnce: @unchecked Sendable {
    private var done = false
    private let body: () -> Void
    init(_ body: @escaping () -> Void) { self.body = body }
    func run() {
        guard !done else { return }
        done = true
        body()
    }
}
