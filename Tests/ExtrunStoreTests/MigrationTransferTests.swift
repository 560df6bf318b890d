import ExtrunProtocol
import ExtrunStoreFill
import Foundation
import GRDB
import Testing

@testable import ExtrunStore

#if canImport(Glibc)
import Glibc
#endif

/// Two machines (two homes): OLD's data exported on one, imported as NEW on the other.
struct TwoMachines {
    let old: MigrationFixture
    let new: TestStore
    let bundle: String
    let sender: OwnerPublicKey
    let recipient: OwnerPublicKey

    init(extraGlobals: Int = 0) throws {
        old = try MigrationFixture()
        if extraGlobals > 0 {
            try old.store.populateForBenchmark(owner: "OLD", BulkFill(globals: extraGlobals, valueBytes: 1_000))
        }
        new = try TestStore()
        recipient = try new.store.publicKey(of: "NEW")
        sender = try old.store.publicKey(of: "OLD")
        bundle = old.test.directory.sub("transfer.bundle")
        _ = try old.store.exportTransfer(from: "OLD", recipient: recipient, to: bundle)
    }

    func importBundle(_ path: String? = nil, sender: TransferSender? = nil, options: MigrationOptions = MigrationOptions()) throws -> MigrationSummary {
        try new.store.importTransfer(from: path ?? bundle, to: "NEW", sender: sender ?? .publicKey(self.sender), options: options)
    }

    /// Nothing of the bundle reached NEW: no globals, no bookmarks, no migration record.
    func expectNothingWritten(sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(try new.store.globals(of: "NEW").list().isEmpty, sourceLocation: sourceLocation)
        #expect(try new.store.bookmarks(of: "NEW").list().isEmpty, sourceLocation: sourceLocation)
        let records = try new.store.database.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM ownerMigration") ?? -1 }
        #expect(records == 0, sourceLocation: sourceLocation)
    }

    func bytes() throws -> Data { try Data(contentsOf: URL(fileURLWithPath: bundle)) }

    func write(_ data: Data, _ name: String) throws -> String {
        let path = new.directory.sub(name)
        try data.write(to: URL(fileURLWithPath: path))
        return path
    }
}

@Suite struct MigrationTransferTests {
    @Test func aBundleCarriesEverythingToTheOtherMachine() throws {
        let machines = try TwoMachines()
        #expect(permissions(machines.bundle) == 0o600)
        // The other machine has the container's files (copied by ops, as docs/migration.md says).
        let newContainer = machines.new.store.containerDirectory(of: "NEW")
        try FileManager.default.createDirectory(atPath: newContainer + "/docs/sub", withIntermediateDirectories: true)
        try Data("a".utf8).write(to: URL(fileURLWithPath: newContainer + "/docs/a.txt"))
        let summary = try machines.importBundle()
        #expect(summary.isClean && summary.complete, "\(summary.json)")
        #expect(summary.globals.migrated == machines.old.values.count && summary.bookmarks.migrated == 3)
        #expect(summary.bookmarks.rewritten == 2)
        #expect(summary.bookmarks.stale == 1, "note.txt was not copied to the new machine")
        let host = try machines.new.reopen()
        for (name, value) in machines.old.values { #expect(try host.globals(of: "NEW").get(name)?.value == value) }
        let docs = try host.bookmarks(of: "NEW").show("docs")
        #expect(docs.bookmark.path == newContainer + "/docs" && docs.status == .ok)
        #expect(try host.bookmarks(of: "NEW").access("docs").read("a.txt") == Data("a".utf8))
        #expect(try host.bookmarks(of: "NEW").show("note").status.isStale)
        // Importing again writes nothing new.
        let again = try machines.importBundle()
        #expect(again.globals.alreadyPresent == machines.old.values.count && again.bookmarks.alreadyPresent == 3)
    }

    @Test func aLargeBundleIsChunked() throws {
        let machines = try TwoMachines(extraGlobals: 3_000)
        try machines.old.store.globals(of: "OLD").set("big", to: .string(String(repeating: "b", count: 4_000_000)))
        try FileManager.default.removeItem(atPath: machines.bundle)
        let export = try machines.old.store.exportTransfer(from: "OLD", recipient: machines.recipient, to: machines.bundle)
        #expect(export.globals == 3_000 + machines.old.values.count + 1)
        #expect(export.bytes > 7_000_000)
        let summary = try machines.importBundle(options: MigrationOptions(batchSize: 500))
        #expect(summary.isClean && summary.globals.migrated == export.globals)
        #expect(try machines.new.store.globals(of: "NEW").get("big")?.value == .string(String(repeating: "b", count: 4_000_000)))
        #expect(try machines.new.store.globals(of: "NEW").get(BulkFill.globalName(2_999))?.value == .string(BulkFill.value(2_999, bytes: 1_000)))
    }

    @Test func aTamperedBundleIsRefusedWithNothingWritten() throws {
        let machines = try TwoMachines(extraGlobals: 1_500)
        let original = try machines.bytes()
        // Bytes in the magic, the header, the encapsulated key, the first and the last chunks.
        for offset in [3, 40, 300, original.count / 3, original.count / 2, original.count - 40, original.count - 1] {
            var damaged = original
            damaged[offset] ^= 0x20
            let path = try machines.write(damaged, "tampered-\(offset).bundle")
            do {
                _ = try machines.importBundle(path)
                Issue.record("a bundle flipped at byte \(offset) was accepted")
            } catch let error as StoreError {
                #expect([.invalidDocument, .wrongKey].contains(error.kind), "\(offset): \(error)")
            }
            try machines.expectNothingWritten()
        }
    }

    @Test func aTruncatedOrExtendedBundleIsRefusedWithNothingWritten() throws {
        let machines = try TwoMachines(extraGlobals: 1_500)
        let original = try machines.bytes()
        for length in [0, 5, 200, original.count / 2, original.count - 100, original.count - 1] {
            let path = try machines.write(original.prefix(length), "truncated-\(length).bundle")
            expectStoreError(.invalidDocument) { try machines.importBundle(path) }
            try machines.expectNothingWritten()
        }
        let extended = try machines.write(original + Data("more".utf8), "extended.bundle")
        let error = expectStoreError(.invalidDocument) { try machines.importBundle(extended) }
        #expect(error?.message.contains("after its end marker") == true, "\(String(describing: error))")
        try machines.expectNothingWritten()
    }

    @Test func aBundleForAnotherKeyOrFromAnotherSenderIsRefused() throws {
        let machines = try TwoMachines()
        // Sealed to NEW on the other machine; this machine's NEW has another key.
        let third = try TestStore()
        _ = try third.store.publicKey(of: "NEW")
        let wrongRecipient = expectStoreError(.wrongKey) {
            try third.store.importTransfer(from: machines.bundle, to: "NEW", sender: .publicKey(machines.sender))
        }
        #expect(wrongRecipient?.message.contains("sealed to the key") == true)
        #expect(try third.store.globals(of: "NEW").list().isEmpty)
        let wrongSender = expectStoreError(.wrongKey) {
            try machines.importBundle(sender: .fingerprint(String(repeating: "0", count: 32)))
        }
        #expect(wrongSender?.message.contains("not by the expected sender") == true)
        // An owner without a key here cannot receive anything.
        expectStoreError(.notFound) {
            try third.store.importTransfer(from: machines.bundle, to: "NOBODY", sender: .publicKey(machines.sender))
        }
        try machines.expectNothingWritten()
        // The right fingerprint, as printed by export, works.
        let summary = try machines.importBundle(sender: .fingerprint(machines.sender.fingerprint.uppercased()))
        #expect(summary.isClean)
    }

    @Test func aBundleWhoseSenderKeyWasSwappedDoesNotOpen() throws {
        // Someone rewrites the header to name their own key as the sender: the header is
        // part of HPKE's info and the sender's key of its key schedule, so nothing opens.
        let machines = try TwoMachines()
        let impostor = try TestStore()
        let impostorKey = try impostor.store.publicKey(of: "OLD")
        let original = try machines.bytes()
        let oldKey = machines.sender.publicKey.base64EncodedString()
        let text = String(decoding: original, as: UTF8.self)
        #expect(text.contains(oldKey))
        guard let range = original.range(of: Data(oldKey.utf8)) else { return }
        var swapped = original
        swapped.replaceSubrange(range, with: Data(impostorKey.publicKey.base64EncodedString().utf8))
        let path = try machines.write(swapped, "swapped.bundle")
        expectStoreError(.invalidDocument) { try machines.importBundle(path, sender: .publicKey(impostorKey)) }
        try machines.expectNothingWritten()
    }

    @Test func importDryRunAndConflictsUnderFail() throws {
        let machines = try TwoMachines()
        let plan = try machines.importBundle(options: MigrationOptions(dryRun: true))
        #expect(plan.globals.migrated == machines.old.values.count && plan.isClean && !plan.complete)
        try machines.expectNothingWritten()
        try machines.new.store.globals(of: "NEW").set("text", to: "mine")
        let refused = try machines.importBundle()
        #expect(refused.stoppedBecause != nil && refused.items.map(\.name) == ["text"])
        #expect(try machines.new.store.globals(of: "NEW").list().count == 1)
        let renamed = try machines.importBundle(options: MigrationOptions(onConflict: .rename))
        #expect(renamed.isClean && renamed.globals.renamed == 1)
        #expect(try machines.new.store.globals(of: "NEW").get("text (from OLD)")?.value == "clam chowder")
    }

    @Test func aDamagedItemIsLeftOutOfTheBundleAndReported() throws {
        let machines = try TwoMachines()
        var blob = try #require(try machines.old.test.sealedBlob(kind: "global", owner: "OLD", name: "flag"))
        blob[blob.startIndex + 15] ^= 1
        try machines.old.test.replaceSealed(kind: "global", owner: "OLD", name: "flag", with: blob)
        let path = machines.old.test.directory.sub("second.bundle")
        let export = try machines.old.store.exportTransfer(from: "OLD", recipient: machines.recipient, to: path)
        #expect(export.failed == 1 && export.items.first?.name == "flag")
        let summary = try machines.importBundle(path)
        #expect(summary.globals.failed == 1 && summary.globals.migrated == machines.old.values.count - 1)
        #expect(summary.items.contains { $0.name == "flag" && $0.outcome == "failed" })
    }

    @Test func publicKeyFiles() throws {
        let test = try TestStore()
        let key = try test.store.publicKey(of: "NEW")
        #expect(key.publicKey.count == 32 && key.fingerprint.count == 32)
        #expect(try test.store.publicKey(of: "NEW") == key, "the same key every time")
        let data = try key.encoded()
        #expect(try OwnerPublicKey.decode(data, file: "k") == key)
        var object = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        object["fingerprint"] = String(repeating: "a", count: 32)
        let altered = try JSONSerialization.data(withJSONObject: object)
        expectStoreError(.invalidKeyFile) { try OwnerPublicKey.decode(altered, file: "k") }
        expectStoreError(.invalidKeyFile) { try OwnerPublicKey.decode(Data("{}".utf8), file: "k") }
        object["fingerprint"] = key.fingerprint
        object["publicKey"] = Data([1, 2, 3]).base64EncodedString()
        expectStoreError(.invalidKeyFile) { try OwnerPublicKey.decode(try JSONSerialization.data(withJSONObject: object), file: "k") }
    }

    @Test func batchSealingIsTheStoresSealing() throws {
        let key = SealingTests.key("TEAM")
        for kind in [SealKind.global, .bookmark] {
            let sealing = BatchSealing(key: key, kind: kind)
            for name in ["a", "é/ü", String(repeating: "n", count: 256)] {
                let context = SealContext(owner: "TEAM", kind: kind, name: name)
                #expect(sealing.authenticatedData(name) == context.authenticatedData)
                let nonce = try #require(BatchSealing.nonces(3).last)
                let blob = try sealing.seal(Data("42".utf8), name: name, nonce: nonce)
                #expect(try Sealing.open(blob, with: key, context: context, file: "") == Data("42".utf8))
                let other = try Sealing.seal(Data("43".utf8), with: key, context: context)
                #expect(try sealing.open(other, name: name, file: "") == Data("43".utf8))
                expectStoreError(.sealBroken) { try sealing.open(other, name: name + "x", file: "") }
            }
        }
        let nonces = BatchSealing.nonces(1_000).map { $0.withUnsafeBytes { Data($0) } }
        #expect(Set(nonces).count == 1_000)
    }
}
