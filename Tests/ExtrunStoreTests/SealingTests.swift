import Crypto
import ExtrunProtocol
import Foundation
import Testing

@testable import ExtrunStore

@Suite struct SealingTests {
    static func key(_ owner: String = "TEAM") -> OwnerKey {
        OwnerKey(
            owner: owner, created: Date(), dataKey: SymmetricKey(size: .bits256),
            agreementPrivateKey: Curve25519.KeyAgreement.PrivateKey())
    }

    @Test func authenticatedDataIsExactlyTheDocumentedBytes() {
        let context = SealContext(owner: "TEAM", kind: .global, name: "x")
        var expected = Data("extrun-seal-v1".utf8) + [0]
        expected += [0, 0, 0, 6] + Data("global".utf8)
        expected += [0, 0, 0, 4] + Data("TEAM".utf8)
        expected += [0, 0, 0, 1] + Data("x".utf8)
        #expect(context.authenticatedData == expected)
        // Length prefixes keep ("ab", "c") and ("a", "bc") apart.
        #expect(
            SealContext(owner: "ab", kind: .global, name: "c").authenticatedData
                != SealContext(owner: "a", kind: .global, name: "bc").authenticatedData)
    }

    @Test func roundTripAndLayout() throws {
        let key = Self.key()
        let context = SealContext(owner: "TEAM", kind: .global, name: "greeting")
        for plaintext in [Data(), Data("a".utf8), Data(repeating: 7, count: 100_000)] {
            let blob = try Sealing.seal(plaintext, with: key, context: context)
            #expect(blob.first == 1)
            #expect(blob.count == plaintext.count + Sealing.overhead)
            #expect(try Sealing.open(blob, with: key, context: context, file: "test") == plaintext)
        }
        // Random nonces: the same plaintext seals differently each time.
        let one = try Sealing.seal(Data("same".utf8), with: key, context: context)
        let two = try Sealing.seal(Data("same".utf8), with: key, context: context)
        #expect(one != two)
    }

    @Test func everyContextFieldIsBound() throws {
        let key = Self.key()
        let context = SealContext(owner: "TEAM", kind: .global, name: "greeting")
        let blob = try Sealing.seal(Data("hello".utf8), with: key, context: context)
        for other in [
            SealContext(owner: "OTHER", kind: .global, name: "greeting"),
            SealContext(owner: "TEAM", kind: .bookmark, name: "greeting"),
            SealContext(owner: "TEAM", kind: .global, name: "greeting2"),
        ] {
            expectStoreError(.sealBroken) { try Sealing.open(blob, with: key, context: other, file: "test") }
        }
        // Another key (same owner name) does not open it either.
        expectStoreError(.sealBroken) { try Sealing.open(blob, with: Self.key(), context: context, file: "test") }
    }

    @Test func everyFlippedByteIsDetected() throws {
        let key = Self.key()
        let context = SealContext(owner: "TEAM", kind: .global, name: "n")
        let blob = try Sealing.seal(Data("twelve bytes".utf8), with: key, context: context)
        for index in blob.indices {
            var damaged = blob
            damaged[index] ^= 0x01
            expectStoreError(.sealBroken) { try Sealing.open(damaged, with: key, context: context, file: "test") }
        }
        expectStoreError(.sealBroken) { try Sealing.open(blob.prefix(20), with: key, context: context, file: "test") }
        expectStoreError(.sealBroken) { try Sealing.open(Data(), with: key, context: context, file: "test") }
    }

    // MARK: - In the database

    @Test func aByteFlippedInTheDatabaseIsReportedNotReturned() throws {
        let test = try TestStore()
        let globals = try test.store.globals(of: "TEAM")
        try globals.set("secret", to: "the value")
        let blob = try #require(try test.sealedBlob(kind: "global", owner: "TEAM", name: "secret"))
        #expect(!blob.contains(Data("the value".utf8)), "values are sealed at rest")
        for index in [0, 5, blob.count / 2, blob.count - 1] {
            var damaged = blob
            damaged[index] ^= 0x80
            try test.tamper("UPDATE global SET sealed = ? WHERE owner = 'TEAM' AND name = 'secret'", [damaged])
            let error = expectStoreError(.sealBroken) { try test.store.globals(of: "TEAM").get("secret") }
            #expect(error?.message.contains("'secret'") == true)
            #expect(error?.message.contains(test.databasePath) == true)
        }
        try test.tamper("UPDATE global SET sealed = ? WHERE owner = 'TEAM' AND name = 'secret'", [blob])
        #expect(try globals.get("secret")?.value == "the value")
    }

    @Test func aRowCopiedToAnotherOwnerDoesNotOpen() throws {
        let test = try TestStore()
        try test.store.globals(of: "ALICE").set("token", to: "alice's")
        try test.store.globals(of: "BOB").set("other", to: 1)
        try test.tamper(
            "INSERT INTO global (owner, name, version, sealed) SELECT 'BOB', name, version, sealed FROM global WHERE owner = 'ALICE' AND name = 'token'")
        let error = expectStoreError(.sealBroken) { try test.store.globals(of: "BOB").get("token") }
        #expect(error?.message.contains("owner 'BOB'") == true)
        #expect(try test.store.globals(of: "ALICE").get("token")?.value == "alice's")
    }

    @Test func aRenamedRowDoesNotOpen() throws {
        let test = try TestStore()
        let globals = try test.store.globals(of: "TEAM")
        try globals.set("admin", to: false)
        try globals.set("visitor", to: true)
        // Swap the sealed values of the two names.
        try test.tamper("UPDATE global SET name = 'tmp' WHERE owner = 'TEAM' AND name = 'admin'")
        try test.tamper("UPDATE global SET name = 'admin' WHERE owner = 'TEAM' AND name = 'visitor'")
        try test.tamper("UPDATE global SET name = 'visitor' WHERE owner = 'TEAM' AND name = 'tmp'")
        expectStoreError(.sealBroken) { try globals.get("admin") }
        expectStoreError(.sealBroken) { try globals.get("visitor") }
        expectStoreError(.sealBroken) { try globals.export() }
    }

    @Test func aGlobalPlantedAsABookmarkDoesNotOpen() throws {
        let test = try TestStore()
        try test.store.globals(of: "TEAM").set("docs", to: ["path": "/etc"])
        try test.tamper("INSERT INTO bookmark (owner, name, sealed) SELECT owner, name, sealed FROM global WHERE name = 'docs'")
        expectStoreError(.sealBroken) { try test.store.bookmarks(of: "TEAM").show("docs") }
    }

    @Test func anEditedBookmarkDoesNotOpen() throws {
        let test = try TestStore()
        let folder = try test.directory.makeFolder("docs")
        let bookmarks = try test.store.bookmarks(of: "TEAM")
        try bookmarks.add("docs", path: folder, readOnly: true)
        let blob = try #require(try test.sealedBlob(kind: "bookmark", owner: "TEAM", name: "docs"))
        var damaged = blob
        damaged[blob.count - 20] ^= 1
        try test.tamper("UPDATE bookmark SET sealed = ? WHERE name = 'docs'", [damaged])
        expectStoreError(.sealBroken) { try bookmarks.access("docs") }
        expectStoreError(.sealBroken) { try bookmarks.list() }
    }
}
