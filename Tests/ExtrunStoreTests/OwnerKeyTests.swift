import ExtrunProtocol
import Foundation
import Testing

@testable import ExtrunStore

#if canImport(Glibc)
import Glibc
#endif

@Suite struct OwnerKeyTests {
    @Test func createdFilesAreReadableOnlyByTheUser() throws {
        let test = try TestStore()
        try test.store.createOwner("EXAMPLETEAM")
        #expect(permissions(test.home) == 0o700)
        #expect(permissions(test.home + "/keys") == 0o700)
        #expect(permissions(test.home + "/keys/EXAMPLETEAM.key") == 0o600)
        #expect(permissions(test.home + "/store.sqlite") == 0o600)
        if FileManager.default.fileExists(atPath: test.home + "/store.sqlite-wal") {
            #expect(permissions(test.home + "/store.sqlite-wal") == 0o600)
        }
        // Nothing left behind by the atomic writes.
        let keys = try FileManager.default.contentsOfDirectory(atPath: test.home + "/keys")
        #expect(keys.sorted() == ["EXAMPLETEAM.key", "EXAMPLETEAM.signing"])
        #expect(permissions(test.home + "/keys/EXAMPLETEAM.signing") == 0o600)
        let home = try FileManager.default.contentsOfDirectory(atPath: test.home).filter { $0.hasPrefix(".") }
        #expect(home.isEmpty)
    }

    @Test func permissionsHoldUnderAPermissiveUmask() throws {
        let old = umask(0)
        defer { umask(old) }
        let test = try TestStore()
        try test.store.globals(of: "TEAM").set("x", to: 1)
        #expect(permissions(test.home) == 0o700)
        #expect(permissions(test.home + "/keys") == 0o700)
        #expect(permissions(test.home + "/keys/TEAM.key") == 0o600)
        #expect(permissions(test.home + "/store.sqlite") == 0o600)
    }

    @Test func keyFileFormat() throws {
        let test = try TestStore()
        let info = try test.store.createOwner("EXAMPLETEAM")
        let data = try #require(fileBytes(test.home + "/keys/EXAMPLETEAM.key"))
        let json = try JSONCoding.decode(JSONValue.self, fromJSON: data)
        #expect(json["format"] == "extrun-owner-key")
        #expect(json["version"] == 1)
        #expect(json["owner"] == "EXAMPLETEAM")
        #expect(ISODate.parse(json["created"]?.stringValue ?? "") != nil)
        #expect(Data(base64Encoded: json["dataKey"]?.stringValue ?? "")?.count == 32)
        #expect(Data(base64Encoded: json["agreementPrivateKey"]?.stringValue ?? "")?.count == 32)
        let key = try #require(info.key)
        #expect(json["agreementPublicKey"]?.stringValue == key.publicKey.rawRepresentation.base64EncodedString())
        #expect(key.fingerprint.count == 32)
        #expect(info.recordedFingerprint == key.fingerprint)
        #expect(info.isUsable)
        // The public key survives a reload.
        let again = try test.reopen().owner("EXAMPLETEAM")
        #expect(again.key?.publicKey.rawRepresentation == key.publicKey.rawRepresentation)
        #expect(again.key?.created == key.created)
    }

    @Test func ownerNamesAreValidatedAndEscaped() throws {
        let test = try TestStore()
        for bad in ["", "a/b", "a\\b", ".", "..", String(repeating: "x", count: 65), "tab\there", " lead", "trail ", "e\u{301}"] {
            expectStoreError(.invalidName) { try test.store.createOwner(bad) }
            expectStoreError(.invalidName) { try test.store.globals(of: bad) }
        }
        try test.store.createOwner(String(repeating: "x", count: 64))
        try test.store.createOwner("Équipe 7")
        try test.store.createOwner(".hidden")
        try test.store.createOwner("100%")
        let files = Set(try FileManager.default.contentsOfDirectory(atPath: test.home + "/keys"))
        #expect(files.contains("%C3%89quipe%207.key"))
        #expect(files.contains("%2Ehidden.key"))
        #expect(files.contains("100%25.key"))
        let owners = try test.store.owners().map(\.owner)
        #expect(Set(owners) == [String(repeating: "x", count: 64), "Équipe 7", ".hidden", "100%"])
        #expect(Keystore.owner(fromFileName: "%2e.key") == nil, "only canonical escapes are read back")
    }

    @Test func ownersListShowCreate() throws {
        let test = try TestStore()
        #expect(try test.store.owners().isEmpty)
        expectStoreError(.notFound) { try test.store.owner("TEAM") }
        try test.store.createOwner("TEAM")
        expectStoreError(.alreadyExists) { try test.store.createOwner("TEAM") }
        try test.store.globals(of: "TEAM").set("a", to: 1)
        try test.store.globals(of: "TEAM").set("b", to: 2)
        let folder = try test.directory.makeFolder("f")
        try test.store.bookmarks(of: "TEAM").add("f", path: folder, readOnly: false)
        let info = try test.store.owner("TEAM")
        #expect(info.globalCount == 2)
        #expect(info.bookmarkCount == 1)
        #expect(info.keyFile == test.home + "/keys/TEAM.key")
        try test.store.globals(of: "AAA").set("x", to: 1)
        #expect(try test.store.owners().map(\.owner) == ["AAA", "TEAM"])
    }

    @Test func aKeyIsCreatedOnFirstWriteNotOnRead() throws {
        let test = try TestStore()
        let globals = try test.store.globals(of: "TEAM")
        #expect(try globals.get("x") == nil)
        #expect(try globals.list().isEmpty)
        #expect(try globals.delete("x") == false)
        #expect(try test.store.bookmarks(of: "TEAM").list().isEmpty)
        #expect(!FileManager.default.fileExists(atPath: test.home + "/keys/TEAM.key"))
        try globals.set("x", to: 1)
        #expect(FileManager.default.fileExists(atPath: test.home + "/keys/TEAM.key"))
    }

    @Test func twoStoresCreatingTheSameOwnerAtOnceAgreeOnOneKey() async throws {
        let test = try TestStore()
        let other = try test.reopen()
        let stores = [test.store, other]
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<8 {
                group.addTask { try stores[index % 2].globals(of: "RACE").set("n\(index)", to: .int(Int64(index))) }
            }
            try await group.waitForAll()
        }
        for store in stores {
            #expect(try store.globals(of: "RACE").list().count == 8)
            #expect(try store.globals(of: "RACE").get("n3")?.value == 3)
        }
    }

    // MARK: - Missing and wrong keys

    @Test func aMissingKeyForAnOwnerWithDataIsAnErrorNotANewKey() throws {
        let test = try TestStore()
        try test.store.globals(of: "TEAM").set("kept", to: "precious")
        let keyFile = test.home + "/keys/TEAM.key"
        let savedKey = try #require(fileBytes(keyFile))
        try FileManager.default.removeItem(atPath: keyFile)
        let before = fileBytes(test.databasePath)

        let store = try test.reopen()
        let globals = try store.globals(of: "TEAM")
        for error in [
            expectStoreError(.keyMissing) { try globals.get("kept") },
            expectStoreError(.keyMissing) { try globals.set("new", to: 1) },
            expectStoreError(.keyMissing) { try globals.list() },
            expectStoreError(.keyMissing) { try store.createOwner("TEAM") },
            expectStoreError(.keyMissing) { try globals.export() },
            expectStoreError(.keyMissing) {
                try globals.import(Data(#"{"format":"extrun-globals","version":1,"owner":"TEAM","globals":{}}"#.utf8), mode: .merge)
            },
            expectStoreError(.keyMissing) { try store.bookmarks(of: "TEAM").list() },
        ] {
            #expect(error?.message.contains(keyFile) == true)
            #expect(error?.message.contains("1 globals") == true)
        }
        #expect(!FileManager.default.fileExists(atPath: keyFile), "no new key was made")
        let listed = try store.owners()
        #expect(listed.first?.problem?.kind == .keyMissing)
        #expect(try store.owner("TEAM").problem?.kind == .keyMissing)
        #expect(fileBytes(test.databasePath) == before, "store.sqlite unchanged")

        // Restoring the key file brings everything back.
        try savedKey.write(to: URL(fileURLWithPath: keyFile))
        chmod(keyFile, 0o600)
        #expect(try test.reopen().globals(of: "TEAM").get("kept")?.value == "precious")
    }

    @Test func aReplacedKeyFileIsAWrongKeyError() throws {
        let test = try TestStore()
        try test.store.globals(of: "TEAM").set("kept", to: "precious")
        // A key file for the same owner name, made by another home.
        let elsewhere = try TestStore()
        try elsewhere.store.createOwner("TEAM")
        let keyFile = test.home + "/keys/TEAM.key"
        try FileManager.default.removeItem(atPath: keyFile)
        try FileManager.default.copyItem(atPath: elsewhere.home + "/keys/TEAM.key", toPath: keyFile)
        let before = fileBytes(test.databasePath)

        let store = try test.reopen()
        let error = expectStoreError(.wrongKey) { try store.globals(of: "TEAM").get("kept") }
        #expect(error?.message.contains(keyFile) == true)
        #expect(error?.message.contains(test.databasePath) == true)
        expectStoreError(.wrongKey) { try store.globals(of: "TEAM").set("kept", to: "overwritten") }
        #expect(try store.owner("TEAM").problem?.kind == .wrongKey)
        #expect(fileBytes(test.databasePath) == before, "store.sqlite unchanged")
    }

    @Test func anotherOwnersKeyFileIsRefused() throws {
        let test = try TestStore()
        try test.store.createOwner("ALICE")
        try test.store.globals(of: "BOB").set("x", to: 1)
        try FileManager.default.removeItem(atPath: test.home + "/keys/BOB.key")
        try FileManager.default.copyItem(atPath: test.home + "/keys/ALICE.key", toPath: test.home + "/keys/BOB.key")
        let error = expectStoreError(.invalidKeyFile) { try test.reopen().globals(of: "BOB").get("x") }
        #expect(error?.message.contains("belongs to owner 'ALICE'") == true)
    }

    @Test func damagedKeyFilesAreNamedInTheError() throws {
        let test = try TestStore()
        try test.store.globals(of: "TEAM").set("x", to: 1)
        let keyFile = test.home + "/keys/TEAM.key"
        let good = try #require(fileBytes(keyFile))
        let cases: [(Data, String)] = [
            (Data(), "empty"),
            (good.prefix(good.count / 2), "not a valid key file"),
            (Data("garbage\u{1}".utf8), "not a valid key file"),
            (Data(String(decoding: good, as: UTF8.self).replacingOccurrences(of: "\"version\" : 1", with: "\"version\" : 9").utf8), "version 9"),
        ]
        for (contents, expected) in cases {
            try contents.write(to: URL(fileURLWithPath: keyFile))
            chmod(keyFile, 0o600)
            let error = expectStoreError(.invalidKeyFile) { try test.reopen().globals(of: "TEAM").get("x") }
            #expect(error?.message.contains(keyFile) == true)
            #expect(error?.message.contains(expected) == true, "\(error?.message ?? "")")
        }
    }

    @Test func keysReadableByOthersAreRefused() throws {
        let test = try TestStore()
        try test.store.globals(of: "TEAM").set("x", to: 1)
        let keyFile = test.home + "/keys/TEAM.key"
        chmod(keyFile, 0o644)
        let error = expectStoreError(.insecurePermissions) { try test.reopen().globals(of: "TEAM").get("x") }
        #expect(error?.message.contains("chmod 600") == true)
        chmod(keyFile, 0o600)
        chmod(test.home + "/keys", 0o755)
        expectStoreError(.insecurePermissions) { try test.reopen() }
        chmod(test.home + "/keys", 0o700)
        #expect(try test.reopen().globals(of: "TEAM").get("x")?.value == 1)
    }
}
