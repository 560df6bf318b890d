import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import GRDB
import Testing

@testable import ExtrunStore

#if canImport(Glibc)
import Glibc
#endif

/// OLD's data on one backend: values of every kind (three of 3 MB: more than one run of
/// values on PostgreSQL), `many` small globals (more than one page of names), and bookmarks
/// inside its container and outside.
private struct OldOwner {
    let test: BackendStore
    var store: Store { test.store }
    var values: [String: JSONValue]

    init(_ backend: StoreBackendKind, many: Int = 0) throws {
        test = try BackendStore(backend)
        values = [
            "text": "clam chowder", "count": 42, "ratio": 0.5, "flag": true, "none": .null, "list": [1, "two", [3]],
            "dict": ["a": 1, "b": ["c": false]], "é/ünïcode name": "ok", "empty": "",
        ]
        for index in 0..<3 { values["big \(index)"] = .string(String(repeating: "\(index)", count: 3_000_000)) }
        var document: [String: JSONValue] = [:]
        for index in 0..<many { document[String(format: "many-%05d", index)] = .string("value \(index)") }
        values.merge(document) { $1 }
        let globals = try test.store.globals(of: "OLD")
        for (name, value) in values where document[name] == nil { try globals.set(name, to: value) }
        if !document.isEmpty {
            let data = try JSONCoding.encoder().encode(
                JSONValue.object([
                    "format": "extrun-globals", "version": 1, "owner": "OLD", "exported": "2026-11-29T00:00:00Z", "globals": .object(document),
                ]))
            _ = try globals.import(data, mode: .merge)
        }
        let container = test.store.containerDirectory(of: "OLD")
        try FileManager.default.createDirectory(atPath: container + "/docs", withIntermediateDirectories: true)
        try Data("a".utf8).write(to: URL(fileURLWithPath: container + "/docs/a.txt"))
        try Data("note".utf8).write(to: URL(fileURLWithPath: container + "/note.txt"))
        let outside = try test.directory.makeFolder("outside")
        let bookmarks = try test.store.bookmarks(of: "OLD")
        try bookmarks.add("docs", path: container + "/docs", readOnly: false)
        try bookmarks.add("note", path: container + "/note.txt", readOnly: true)
        try bookmarks.add("outside", path: outside, readOnly: true)
    }

    func export(to recipient: OwnerPublicKey, _ name: String = "transfer.bundle") throws -> (path: String, summary: TransferExportSummary) {
        let path = test.directory.sub(name)
        return (path, try store.exportTransfer(from: "OLD", recipient: recipient, to: path))
    }
}

/// Flips one bit of a global's sealed value in the rows themselves, on either backend.
private func flipSealedBit(_ test: BackendStore, owner: String, global: String) throws {
    switch test.store.backend {
    case .sqlite(let database):
        try database.write { db in
            var blob = try #require(try Data.fetchOne(db, sql: "SELECT sealed FROM global WHERE owner = ? AND name = ?", arguments: [owner, global]))
            blob[blob.startIndex + 20] ^= 1
            try db.execute(sql: "UPDATE global SET sealed = ? WHERE owner = ? AND name = ?", arguments: [blob, owner, global])
        }
    case .postgres(let server):
        try server.run("UPDATE global SET sealed = set_byte(sealed, 20, get_byte(sealed, 20) # 1) WHERE owner = '\(owner)' AND name = '\(global)'")
    }
}

/// Transfer bundles on both backends: made on one, imported on the other, the same format and
/// the same typed errors (MigrationTransferTests holds the format's own cases on SQLite).
@Suite struct TransferBundleBackendTests {
    /// Nothing of a bundle reached NEW: no globals, no bookmarks, no migration record.
    private func expectNothingWritten(_ new: BackendStore, sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(try new.store.globals(of: "NEW").list().isEmpty, sourceLocation: sourceLocation)
        #expect(try new.store.bookmarks(of: "NEW").list().isEmpty, sourceLocation: sourceLocation)
        #expect(try new.number("SELECT COUNT(*) FROM ownerMigration WHERE target = $1", owner: "NEW") == 0, sourceLocation: sourceLocation)
    }

    @Test(arguments: StoreBackendKind.all, StoreBackendKind.all)
    func anOwnerCrossesBackendsInABundle(from: StoreBackendKind, to: StoreBackendKind) throws {
        let old = try OldOwner(from, many: 1_200)
        let new = try BackendStore(to)
        let recipient = try new.store.publicKey(of: "NEW")
        let sender = try old.store.publicKey(of: "OLD")
        let (bundle, export) = try old.export(to: recipient)
        #expect(export.globals == old.values.count && export.bookmarks == 3 && export.failed == 0, "\(export.json)")
        #expect(export.bytes > 9_000_000 && permissions(bundle) == 0o600)
        // The other machine has the container's files (copied by ops).
        let newContainer = new.store.containerDirectory(of: "NEW")
        try FileManager.default.createDirectory(atPath: newContainer + "/docs", withIntermediateDirectories: true)
        try Data("a".utf8).write(to: URL(fileURLWithPath: newContainer + "/docs/a.txt"))

        let summary = try new.store.importTransfer(from: bundle, to: "NEW", sender: .publicKey(sender))
        #expect(summary.isClean && summary.complete, "\(summary.json)")
        #expect(summary.globals.migrated == old.values.count && summary.bookmarks.migrated == 3 && summary.bookmarks.rewritten == 2)
        let host = try new.reopen()
        let globals = try host.globals(of: "NEW")
        #expect(try globals.list().count == old.values.count)
        for (name, value) in old.values { #expect(try globals.get(name)?.value == value, "\(name)") }
        let docs = try host.bookmarks(of: "NEW").show("docs")
        #expect(docs.bookmark.path == newContainer + "/docs" && docs.status == .ok)
        #expect(try host.bookmarks(of: "NEW").access("docs").read("a.txt") == Data("a".utf8))
        #expect(try host.bookmarks(of: "NEW").show("note").status.isStale, "note.txt was not copied to the new machine")

        // Importing again writes nothing new.
        let again = try new.store.importTransfer(from: bundle, to: "NEW", sender: .publicKey(sender))
        #expect(again.globals.alreadyPresent == old.values.count && again.bookmarks.alreadyPresent == 3, "\(again.json)")
        // What was written opens with NEW's key and its usage counters agree with its rows.
        let check = try StoreMaintenance.check(home: new.homeURL, full: false, location: new.location)
        let newOwner = check.owners.first { $0.owner == "NEW" }
        #expect(check.intact && newOwner?.opened == old.values.count + 3 && newOwner?.usageAgrees == true, "\(check.json)")
    }

    /// SQLite → PostgreSQL → SQLite: a bundle made on each, the values unchanged at the end.
    @Test(arguments: StoreBackendKind.postgresOnly)
    func aBundleMadeOnSQLiteGoesToPostgreSQLAndBack(backend: StoreBackendKind) throws {
        let old = try OldOwner(.sqlite)
        let server = try BackendStore(backend)
        let back = try BackendStore(.sqlite)
        let (first, _) = try old.export(to: try server.store.publicKey(of: "NEW"))
        let there = try server.store.importTransfer(from: first, to: "NEW", sender: .publicKey(try old.store.publicKey(of: "OLD")))
        #expect(there.isClean && there.globals.migrated == old.values.count, "\(there.json)")

        let second = server.directory.sub("back.bundle")
        let export = try server.store.exportTransfer(from: "NEW", recipient: try back.store.publicKey(of: "BACK"), to: second)
        #expect(export.globals == old.values.count && export.bookmarks == 3)
        let returned = try back.store.importTransfer(from: second, to: "BACK", sender: .fingerprint(export.senderFingerprint))
        #expect(returned.isClean && returned.globals.migrated == old.values.count, "\(returned.json)")
        let globals = try back.reopen().globals(of: "BACK")
        for (name, value) in old.values { #expect(try globals.get(name)?.value == value, "\(name)") }
        #expect(try back.store.bookmarks(of: "BACK").list().map(\.bookmark.name) == ["docs", "note", "outside"])
        // The same format from either backend: the preamble's header names the same format and suite.
        let headers = try [first, second].map { try TransferReader(path: $0).header }
        #expect(headers.map(\.format) == ["extrun-transfer", "extrun-transfer"] && headers[0].suite == headers[1].suite)
        #expect(headers.map(\.version) == [1, 1])
    }

    /// Two hosts importing the same bundle into one server: the pair's advisory lock lets one
    /// run at a time; the other stops with storeBusy, having written nothing.
    @Test(arguments: StoreBackendKind.postgresOnly)
    func anImportRunningElsewhereHoldsTheServersLock(backend: StoreBackendKind) throws {
        let old = try OldOwner(.sqlite)
        let new = try BackendStore(backend)
        guard case .postgres(let server) = new.location else { return }
        let (bundle, _) = try old.export(to: try new.store.publicKey(of: "NEW"))
        let elsewhere = try PostgresStore(location: server, migrating: false)
        try elsewhere.run("SELECT pg_advisory_lock(\(PostgresStore.migrationLockKey(from: "OLD", to: "NEW")))")
        let busy = expectStoreError(.storeBusy) {
            try new.store.importTransfer(from: bundle, to: "NEW", sender: .publicKey(try old.store.publicKey(of: "OLD")))
        }
        #expect(busy?.message.contains("already running") == true, "\(String(describing: busy))")
        try expectNothingWritten(new)
        try elsewhere.run("SELECT pg_advisory_unlock(\(PostgresStore.migrationLockKey(from: "OLD", to: "NEW")))")
        let summary = try new.store.importTransfer(from: bundle, to: "NEW", sender: .publicKey(try old.store.publicKey(of: "OLD")))
        #expect(summary.isClean && summary.globals.migrated == old.values.count)
    }

    /// A tampered, truncated, extended, misaddressed or unsigned bundle is refused with the
    /// same typed errors on either backend, and nothing is written.
    @Test(arguments: StoreBackendKind.all)
    func aBadBundleIsRefusedWithNothingWritten(backend: StoreBackendKind) throws {
        let old = try OldOwner(.sqlite)
        let new = try BackendStore(backend)
        let sender = try old.store.publicKey(of: "OLD")
        let (bundle, _) = try old.export(to: try new.store.publicKey(of: "NEW"))
        let original = try Data(contentsOf: URL(fileURLWithPath: bundle))
        func variant(_ data: Data, _ name: String) throws -> String {
            let path = new.directory.sub(name)
            try data.write(to: URL(fileURLWithPath: path))
            return path
        }
        for offset in [3, 40, original.count / 2, original.count - 1] {
            var damaged = original
            damaged[offset] ^= 0x20
            let path = try variant(damaged, "tampered-\(offset).bundle")
            do {
                _ = try new.store.importTransfer(from: path, to: "NEW", sender: .publicKey(sender))
                Issue.record("a bundle flipped at byte \(offset) was accepted")
            } catch let error as StoreError {
                #expect([.invalidDocument, .wrongKey].contains(error.kind), "\(offset): \(error)")
            }
            try expectNothingWritten(new)
        }
        for length in [0, 200, original.count - 100] {
            let path = try variant(original.prefix(length), "truncated-\(length).bundle")
            expectStoreError(.invalidDocument) { try new.store.importTransfer(from: path, to: "NEW", sender: .publicKey(sender)) }
            try expectNothingWritten(new)
        }
        let extended = try variant(original + Data("more".utf8), "extended.bundle")
        let after = expectStoreError(.invalidDocument) { try new.store.importTransfer(from: extended, to: "NEW", sender: .publicKey(sender)) }
        #expect(after?.message.contains("after its end marker") == true)
        let wrongSender = expectStoreError(.wrongKey) {
            try new.store.importTransfer(from: bundle, to: "NEW", sender: .fingerprint(String(repeating: "0", count: 32)))
        }
        #expect(wrongSender?.message.contains("not by the expected sender") == true)
        expectStoreError(.notFound) { try new.store.importTransfer(from: bundle, to: "NOBODY", sender: .publicKey(sender)) }
        try expectNothingWritten(new)
        // Sealed to another NEW (another machine's key): refused there.
        let third = try BackendStore(backend)
        _ = try third.store.publicKey(of: "NEW")
        let wrongRecipient = expectStoreError(.wrongKey) { try third.store.importTransfer(from: bundle, to: "NEW", sender: .publicKey(sender)) }
        #expect(wrongRecipient?.message.contains("sealed to the key") == true)
        try expectNothingWritten(third)
        // A dry run writes nothing either; the real import then takes everything.
        let plan = try new.store.importTransfer(from: bundle, to: "NEW", sender: .publicKey(sender), options: MigrationOptions(dryRun: true))
        #expect(plan.globals.migrated == old.values.count && !plan.complete, "\(plan.json)")
        try expectNothingWritten(new)
        let summary = try new.store.importTransfer(from: bundle, to: "NEW", sender: .publicKey(sender))
        #expect(summary.isClean && summary.globals.migrated == old.values.count)
    }

    /// A row that does not open on the exporting store is left out of the bundle and reported,
    /// on either backend, and the import reports it as failed on the exporting machine.
    @Test(arguments: StoreBackendKind.all)
    func aRowThatDoesNotOpenIsLeftOutAndReported(backend: StoreBackendKind) throws {
        let old = try OldOwner(backend)
        let new = try BackendStore(.sqlite)
        try flipSealedBit(old.test, owner: "OLD", global: "flag")
        let (bundle, export) = try old.export(to: try new.store.publicKey(of: "NEW"))
        #expect(export.failed == 1 && export.items.first?.name == "flag" && export.globals == old.values.count - 1, "\(export.json)")
        let summary = try new.store.importTransfer(from: bundle, to: "NEW", sender: .publicKey(try old.store.publicKey(of: "OLD")))
        #expect(summary.globals.failed == 1 && summary.globals.migrated == old.values.count - 1, "\(summary.json)")
        #expect(summary.items.contains { $0.name == "flag" && $0.outcome == "failed" })
        // The exporting store's own errors stay typed: an owner with nothing, an existing file.
        expectStoreError(.notFound) {
            try old.store.exportTransfer(from: "NOBODY", recipient: try new.store.publicKey(of: "NEW"), to: old.test.directory.sub("none.bundle"))
        }
        expectStoreError(.alreadyExists) { try old.store.exportTransfer(from: "OLD", recipient: try new.store.publicKey(of: "NEW"), to: bundle) }
    }
}
