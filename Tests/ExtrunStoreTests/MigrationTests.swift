import ExtrunProtocol
import ExtrunStoreFill
import Foundation
import Testing

@testable import ExtrunStore

#if canImport(Glibc)
import Glibc
#endif

/// What the migration tests read and change under the store's API, on either backend.
extension BackendStore {
    /// The sealed value of an item, as the store holds it.
    func sealedBlob(kind: String, owner: String, name: String) throws -> Data? {
        let kind = try #require(SealKind(rawValue: kind))
        return try store.migrationRead { rows in try rows.rows(kind, owner: owner, names: [name])[name]?.sealed }
    }

    /// Replaces an item's sealed value (its version kept), as a tamperer with access to the rows would.
    func replaceSealed(kind: String, owner: String, name: String, with sealed: Data) throws {
        let kind = try #require(SealKind(rawValue: kind))
        try store.migrationWrite { rows in
            let version = try rows.rows(kind, owner: owner, names: [name])[name]?.version
            try rows.write(kind, owner: owner, inserts: [], updates: [MigrationRowWrite(name: name, version: version, sealed: sealed)])
        }
    }

    /// Runs SQL (the same text on both backends, no parameters) on the rows, through a connection of its own.
    func tamper(_ sql: String) throws {
        switch try reopen().backend {
        case .sqlite(let database): try database.write { db in try db.execute(sql: sql) }
        case .postgres(let server): try server.run(sql)
        }
    }

    /// The store's records of owner migrations.
    func migrationRecords() throws -> Int64 {
        try number("SELECT COUNT(*) FROM ownerMigration WHERE $1 <> ''", owner: "-")
    }

    /// Fills `owner` with `count` globals named and valued as `BulkFill`'s, in batches of 1,000 (either backend).
    func fill(owner: String, globals count: Int, valueBytes: Int) throws {
        let key = try store.writeKey(owner)
        for start in stride(from: 0, to: count, by: 1_000) {
            let indices = start..<min(count, start + 1_000)
            try store.migrationWrite { rows in
                let last = try #require(try rows.reserveVersions(owner: owner, count: indices.count))
                let first = last - Int64(indices.count)
                let writes = try indices.map { index in
                    let name = BulkFill.globalName(index)
                    let plaintext = try Globals.serialize(.string(BulkFill.value(index, bytes: valueBytes)), name: name, owner: owner)
                    return MigrationRowWrite(
                        name: name, version: first + 1 + Int64(index - start),
                        sealed: try Sealing.seal(plaintext, with: key, context: SealContext(owner: owner, kind: .global, name: name)))
                }
                try rows.write(.global, owner: owner, inserts: writes, updates: [])
            }
        }
    }
}

/// A store with an old owner that has globals of every kind and bookmarks
/// inside and outside its container.
struct MigrationFixture {
    let test: BackendStore
    var store: Store { test.store }
    let values: [String: JSONValue] = [
        "text": "clam chowder", "count": 42, "ratio": 0.5, "flag": true, "none": .null,
        "list": [1, "two", [3]], "dict": ["a": 1, "b": ["c": false]], "date": "2026-11-22T10:30:00Z",
        "é/ünïcode name": "ok", "empty": "",
    ]
    let outside: String

    init(_ backend: StoreBackendKind = .sqlite) throws {
        test = try BackendStore(backend)
        outside = try test.directory.makeFolder("outside")
        try test.directory.write("outside/o.txt", "outside file")
        let globals = try test.store.globals(of: "OLD")
        for (name, value) in values { try globals.set(name, to: value) }
        let container = test.store.containerDirectory(of: "OLD")
        try FileManager.default.createDirectory(atPath: container + "/docs/sub", withIntermediateDirectories: true)
        try Data("a".utf8).write(to: URL(fileURLWithPath: container + "/docs/a.txt"))
        try Data("b".utf8).write(to: URL(fileURLWithPath: container + "/docs/sub/b.txt"))
        try Data("note".utf8).write(to: URL(fileURLWithPath: container + "/note.txt"))
        let bookmarks = try test.store.bookmarks(of: "OLD")
        try bookmarks.add("docs", path: container + "/docs", readOnly: false)
        try bookmarks.add("note", path: container + "/note.txt", readOnly: true)
        try bookmarks.add("outside", path: outside, readOnly: true)
    }
}

@Suite struct MigrationTests {
    @Test(arguments: StoreBackendKind.all)
    func everythingMovesAndTheNewOwnerSeesIt(backend: StoreBackendKind) throws {
        let fixture = try MigrationFixture(backend)
        let summary = try fixture.store.migrate(from: "OLD", to: "NEW")
        #expect(summary.isClean, "\(summary.json)")
        #expect(summary.globals.migrated == fixture.values.count)
        #expect(summary.bookmarks.migrated == 3 && summary.bookmarks.rewritten == 2 && summary.bookmarks.stale == 0)
        #expect(summary.bookmarks.filesCopied == 3)

        // Another handle, as the host serving a plugin of NEW opens it.
        let host = try fixture.test.reopen()
        let globals = try host.globals(of: "NEW")
        for (name, value) in fixture.values { #expect(try globals.get(name)?.value == value, "\(name)") }
        let bookmarks = try host.bookmarks(of: "NEW")
        let container = host.containerDirectory(of: "NEW")
        #expect(try bookmarks.list().map(\.bookmark.name) == ["docs", "note", "outside"])
        #expect(try bookmarks.list().allSatisfy { $0.status == .ok })
        #expect(try bookmarks.show("docs").bookmark.path == container + "/docs")
        #expect(try bookmarks.show("note").bookmark.readOnly)
        #expect(try bookmarks.show("outside").bookmark.path == fixture.outside)
        #expect(try bookmarks.access("docs").read("sub/b.txt") == Data("b".utf8))
        #expect(try bookmarks.access("note").read("") == Data("note".utf8))
        #expect(try bookmarks.access("outside").read("o.txt") == Data("outside file".utf8))
        // The default keeps the source.
        #expect(try host.globals(of: "OLD").list().count == fixture.values.count)
        #expect(try host.bookmarks(of: "OLD").list().count == 3)
        #expect(FileManager.default.fileExists(atPath: host.containerDirectory(of: "OLD") + "/docs/a.txt"))
    }

    @Test(arguments: StoreBackendKind.all)
    func removeSourceLeavesTheOldOwnerEmptyAndTheNewOneWhole(backend: StoreBackendKind) throws {
        let fixture = try MigrationFixture(backend)
        let summary = try fixture.store.migrate(from: "OLD", to: "NEW", options: MigrationOptions(removeSource: true))
        #expect(summary.isClean && summary.complete, "\(summary.json)")
        #expect(summary.globals.removed == fixture.values.count && summary.bookmarks.removed == 3)
        let host = try fixture.test.reopen()
        #expect(try host.globals(of: "OLD").list().isEmpty, "plugins of OLD see none")
        #expect(try host.bookmarks(of: "OLD").list().isEmpty)
        #expect(try host.globals(of: "OLD").get("text") == nil)
        for (name, value) in fixture.values { #expect(try host.globals(of: "NEW").get(name)?.value == value) }
        #expect(try host.bookmarks(of: "NEW").list().count == 3)
        // Running it again finds nothing left to do.
        let again = try host.migrate(from: "OLD", to: "NEW", options: MigrationOptions(removeSource: true))
        #expect(again.globals.total == 0 && again.isClean)
    }

    @Test(arguments: StoreBackendKind.all)
    func rowsAreSealedForTheNewOwner(backend: StoreBackendKind) throws {
        let fixture = try MigrationFixture(backend)
        _ = try fixture.store.migrate(from: "OLD", to: "NEW")
        let old = try #require(try fixture.test.sealedBlob(kind: "global", owner: "OLD", name: "text"))
        let new = try #require(try fixture.test.sealedBlob(kind: "global", owner: "NEW", name: "text"))
        #expect(old != new)
        let newKey = try #require(try fixture.store.readKey("NEW"))
        let oldKey = try #require(try fixture.store.readKey("OLD"))
        #expect(newKey.fingerprint != oldKey.fingerprint)
        let context = SealContext(owner: "NEW", kind: .global, name: "text")
        #expect(try Sealing.open(new, with: newKey, context: context, file: "") == Data(#""clam chowder""#.utf8))
        expectStoreError(.sealBroken) { try Sealing.open(new, with: oldKey, context: context, file: "") }
        expectStoreError(.sealBroken) {
            try Sealing.open(new, with: newKey, context: SealContext(owner: "OLD", kind: .global, name: "text"), file: "")
        }
        // The new owner's key file was written before anything was sealed with it.
        #expect(FileManager.default.fileExists(atPath: fixture.store.keystore.path(for: "NEW")))
    }

    @Test(arguments: StoreBackendKind.all)
    func aTamperedItemIsReportedAndTheRestMigrates(backend: StoreBackendKind) throws {
        let fixture = try MigrationFixture(backend)
        var blob = try #require(try fixture.test.sealedBlob(kind: "global", owner: "OLD", name: "count"))
        blob[blob.startIndex + 20] ^= 0x01
        try fixture.test.replaceSealed(kind: "global", owner: "OLD", name: "count", with: blob)
        let summary = try fixture.store.migrate(from: "OLD", to: "NEW", options: MigrationOptions(removeSource: true))
        #expect(!summary.isClean)
        #expect(summary.globals.failed == 1 && summary.globals.migrated == fixture.values.count - 1)
        let item = try #require(summary.items.first { $0.name == "count" })
        #expect(item.outcome == "failed" && item.errorKind == "sealBroken")
        let host = try fixture.test.reopen()
        #expect(try host.globals(of: "NEW").get("count") == nil)
        #expect(try host.globals(of: "NEW").get("text")?.value == "clam chowder")
        // The damaged row stays where it was, as it was; everything else moved.
        #expect(try host.globals(of: "OLD").list().map(\.name) == ["count"])
        #expect(summary.globals.kept == 1 && summary.globals.removed == fixture.values.count - 1)
    }

    @Test(arguments: StoreBackendKind.all)
    func conflictPolicies(backend: StoreBackendKind) throws {
        for policy in ConflictPolicy.allCases {
            let fixture = try MigrationFixture(backend)
            let new = try fixture.store.globals(of: "NEW")
            try new.set("text", to: "NEW's own")
            try new.set("count", to: 42)  // The same value: not a conflict.
            let options = MigrationOptions(onConflict: policy)
            let summary = try fixture.store.migrate(from: "OLD", to: "NEW", options: options)
            let host = try fixture.test.reopen().globals(of: "NEW")
            #expect(summary.globals.conflicting == 1, "\(policy)")
            switch policy {
            case .fail:
                #expect(summary.stoppedBecause != nil && !summary.complete && !summary.isClean)
                #expect(summary.items.map(\.name) == ["text"])
                #expect(try host.list().count == 2, "nothing was written")
                #expect(try fixture.store.bookmarks(of: "NEW").list().isEmpty)
                // And the summary says so (issue 17, item 8): nothing counted as migrated or copied.
                #expect(summary.globals.migrated == 0 && summary.globals.alreadyPresent == 0 && summary.bookmarks.migrated == 0, "\(summary.json)")
                #expect(summary.bookmarks.filesCopied == 0 && summary.globals.skipped == 1, "\(summary.json)")
            case .skip:
                #expect(summary.isClean && summary.globals.skipped == 1)
                #expect(try host.get("text")?.value == "NEW's own")
                #expect(try host.list().count == fixture.values.count)
            case .overwrite:
                #expect(summary.isClean && summary.globals.overwritten == 1)
                #expect(try host.get("text")?.value == "clam chowder")
            case .rename:
                #expect(summary.isClean && summary.globals.renamed == 1)
                #expect(try host.get("text")?.value == "NEW's own")
                #expect(try host.get("text (from OLD)")?.value == "clam chowder")
                #expect(summary.items.first?.targetName == "text (from OLD)")
            }
            if policy != .fail {
                #expect(summary.globals.alreadyPresent == 1, "count had the same value")
                // Running it again changes nothing and duplicates nothing.
                let count = try host.list().count
                let again = try fixture.store.migrate(from: "OLD", to: "NEW", options: options)
                #expect(try host.list().count == count, "\(policy)")
                #expect(again.globals.alreadyPresent == fixture.values.count - (policy == .skip ? 1 : 0), "\(policy): \(again.json)")
            }
        }
    }

    @Test(arguments: StoreBackendKind.all)
    func aDryRunWritesNothing(backend: StoreBackendKind) throws {
        let fixture = try MigrationFixture(backend)
        try fixture.store.globals(of: "NEW").set("text", to: "other")
        let summary = try fixture.store.migrate(from: "OLD", to: "NEW", options: MigrationOptions(onConflict: .rename, dryRun: true))
        #expect(summary.globals.migrated == fixture.values.count && summary.globals.renamed == 1)
        #expect(summary.bookmarks.migrated == 3 && summary.bookmarks.rewritten == 2)
        #expect(!summary.complete && summary.isClean)
        #expect(try fixture.store.globals(of: "NEW").list().map(\.name) == ["text"])
        #expect(try fixture.store.bookmarks(of: "NEW").list().isEmpty)
        #expect(!FileManager.default.fileExists(atPath: fixture.store.containerDirectory(of: "NEW")))
        let records = try fixture.test.migrationRecords()
        #expect(records == 0)
        // A dry run for an owner without a key creates none.
        _ = try fixture.store.migrate(from: "OLD", to: "FRESH", options: MigrationOptions(dryRun: true))
        #expect(!FileManager.default.fileExists(atPath: fixture.store.keystore.path(for: "FRESH")))
    }

    @Test(arguments: StoreBackendKind.all)
    func onlyOneKind(backend: StoreBackendKind) throws {
        let fixture = try MigrationFixture(backend)
        let summary = try fixture.store.migrate(from: "OLD", to: "NEW", options: MigrationOptions(scope: .bookmarks, removeSource: true))
        #expect(summary.isClean && summary.globals.total == 0 && summary.bookmarks.migrated == 3)
        #expect(try fixture.store.globals(of: "NEW").list().isEmpty)
        #expect(try fixture.store.globals(of: "OLD").list().count == fixture.values.count)
        #expect(try fixture.store.bookmarks(of: "OLD").list().isEmpty)
    }

    @Test(arguments: StoreBackendKind.all)
    func aStaleBookmarkMigratesAsItIs(backend: StoreBackendKind) throws {
        let fixture = try MigrationFixture(backend)
        let gone = try fixture.test.directory.makeFolder("gone")
        try fixture.store.bookmarks(of: "OLD").add("gone", path: gone, readOnly: false)
        try FileManager.default.removeItem(atPath: gone)
        let summary = try fixture.store.migrate(from: "OLD", to: "NEW")
        #expect(summary.bookmarks.stale == 1 && summary.bookmarks.migrated == 4)
        let entry = try fixture.test.reopen().bookmarks(of: "NEW").show("gone")
        #expect(entry.status == .stale(.missing) && entry.bookmark.lastKnownPath == gone)
    }

    @Test(arguments: StoreBackendKind.all)
    func aDifferentFileInTheNewContainerIsNotReplaced(backend: StoreBackendKind) throws {
        let fixture = try MigrationFixture(backend)
        let target = fixture.store.containerDirectory(of: "NEW")
        try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: true)
        try Data("NEW's note".utf8).write(to: URL(fileURLWithPath: target + "/note.txt"))
        let summary = try fixture.store.migrate(from: "OLD", to: "NEW", options: MigrationOptions(removeSource: true))
        #expect(summary.bookmarks.failed == 1 && summary.bookmarks.migrated == 2)
        #expect(summary.items.first { $0.name == "note" }?.errorKind == "alreadyExists")
        #expect(try Data(contentsOf: URL(fileURLWithPath: target + "/note.txt")) == Data("NEW's note".utf8))
        #expect(try fixture.store.bookmarks(of: "OLD").list().map(\.bookmark.name) == ["note"], "kept in the old owner")
    }

    @Test(arguments: StoreBackendKind.all)
    func badRequestsWriteNothing(backend: StoreBackendKind) throws {
        let fixture = try MigrationFixture(backend)
        expectStoreError(.invalidName) { try fixture.store.migrate(from: "OLD", to: "OLD") }
        expectStoreError(.notFound) { try fixture.store.migrate(from: "NOBODY", to: "NEW") }
        expectStoreError(.invalidName) { try fixture.store.migrate(from: "OLD", to: "a/b") }
        #expect(!FileManager.default.fileExists(atPath: fixture.store.keystore.path(for: "NEW")))
    }

    @Test(arguments: StoreBackendKind.all)
    func anUnfinishedMigrationIsResumedWithItsOwnOptionsOnly(backend: StoreBackendKind) throws {
        let fixture = try MigrationFixture(backend)
        // An interrupted migration, as a killed run leaves it: the record and the first batch.
        _ = try fixture.store.migrate(from: "OLD", to: "NEW", options: MigrationOptions(batchSize: 3))
        try fixture.test.tamper("UPDATE ownerMigration SET finished = NULL, phase = 'copy-globals', cursor = 'date'")
        expectStoreError(.alreadyExists) {
            try fixture.store.migrate(from: "OLD", to: "NEW", options: MigrationOptions(onConflict: .skip))
        }
        let resumed = try fixture.store.migrate(from: "OLD", to: "NEW", options: MigrationOptions(batchSize: 3))
        #expect(resumed.resumed && resumed.complete)
        #expect(try fixture.store.globals(of: "NEW").list().count == fixture.values.count)
    }

    @Test func renameCandidatesFitTheLimit() {
        #expect(MigrationRun.renameCandidate("a", source: "OLD", attempt: 1) == "a (from OLD)")
        #expect(MigrationRun.renameCandidate("a", source: "OLD", attempt: 3) == "a (from OLD 3)")
        let long = String(repeating: "é", count: 128)  // 256 bytes
        let candidate = MigrationRun.renameCandidate(long, source: "OLD", attempt: 2)
        #expect(candidate?.utf8.count ?? 999 <= 256)
        #expect(candidate?.hasSuffix(" (from OLD 2)") == true)
    }

    @Test(arguments: StoreBackendKind.all)
    func manyItemsInSmallBatches(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        try test.fill(owner: "OLD", globals: 2_500, valueBytes: 40)
        let summary = try test.store.migrate(from: "OLD", to: "NEW", options: MigrationOptions(removeSource: true, batchSize: 97))
        #expect(summary.isClean && summary.globals.migrated == 2_500 && summary.globals.removed == 2_500)
        let globals = try test.reopen().globals(of: "NEW")
        #expect(try globals.list().count == 2_500)
        for index in stride(from: 0, to: 2_500, by: 101) {
            #expect(try globals.get(BulkFill.globalName(index))?.value == .string(BulkFill.value(index, bytes: 40)))
        }
    }
}
