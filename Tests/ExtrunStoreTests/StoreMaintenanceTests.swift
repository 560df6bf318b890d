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
}
