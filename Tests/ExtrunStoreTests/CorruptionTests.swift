import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import GRDB
import Testing

@testable import ExtrunStore

#if canImport(Glibc)
import Glibc
#endif

/// A home whose store holds a few pages of data, with every connection closed
/// (so store.sqlite is complete on its own and has no -wal file).
private func populatedHome() throws -> (TempDirectory, home: String, database: String) {
    let directory = try TempDirectory()
    let home = directory.sub("home")
    do {
        let store = try Store(home: URL(fileURLWithPath: home))
        let globals = try store.globals(of: "TEAM")
        for index in 0..<20 { try globals.set("value-\(index)", to: .string(String(repeating: "v", count: 5000))) }
    }
    let database = home + "/store.sqlite"
    #expect(!FileManager.default.fileExists(atPath: database + "-wal"), "the last connection checkpointed and closed")
    return (directory, home, database)
}

private func overwrite(_ path: String, with data: Data, at offset: UInt64 = 0) throws {
    let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
    try handle.seek(toOffset: offset)
    try handle.write(contentsOf: data)
    try handle.close()
}

private func randomBytes(_ count: Int) -> Data {
    var generator = SystemRandomNumberGenerator()
    return Data((0..<count).map { _ in UInt8.random(in: 0...255, using: &generator) })
}

/// Opens the store and uses it; every step must fail with `kind`, naming the database file.
private func expectUnusable(_ home: String, _ database: String, _ kind: StoreErrorKind, mentioning: String) {
    let error = expectStoreError(kind) {
        let store = try Store(home: URL(fileURLWithPath: home))
        let globals = try store.globals(of: "TEAM")
        _ = try globals.list()
        for index in 0..<20 { _ = try globals.get("value-\(index)") }
        try globals.set("new", to: 1)
        return store.databasePath
    }
    #expect(error?.message.contains(database) == true, "\(error?.message ?? "")")
    #expect(error?.message.contains(mentioning) == true, "\(error?.message ?? "")")
}

@Suite struct CorruptionTests {
    @Test func aTruncatedDatabaseIsReportedAndLeftAlone() throws {
        let (directory, home, database) = try populatedHome()
        defer { withExtendedLifetime(directory) {} }
        let size = try #require(fileBytes(database)).count
        #expect(truncate(database, off_t(size / 2 / 4096 * 4096)) == 0)
        let before = fileBytes(database)
        expectUnusable(home, database, .corruptStore, mentioning: "truncated")
        #expect(fileBytes(database) == before)
    }

    /// A file cut inside its last page: a size that is not a whole number of pages is also
    /// what a checkpoint stopped by a full disk leaves, so SQLite judges (quick_check), and
    /// here finds the structure intact: the row whose bytes are gone is named by its broken
    /// seal, every other row reads.
    @Test func aDatabaseTruncatedMidPageNamesTheDamagedRowsAndReadsTheOthers() throws {
        let (directory, home, database) = try populatedHome()
        defer { withExtendedLifetime(directory) {} }
        let size = try #require(fileBytes(database)).count
        #expect(truncate(database, off_t(size - 1000)) == 0)
        let before = fileBytes(database)
        let globals = try Store(home: URL(fileURLWithPath: home)).globals(of: "TEAM")
        #expect(try globals.list().count == 20)
        var readable = 0
        var broken: [String] = []
        for index in 0..<20 {
            do {
                if try globals.get("value-\(index)") != nil { readable += 1 }
            } catch let error as StoreError where error.kind == .sealBroken || error.kind == .corruptStore {
                #expect(error.message.contains("value-\(index)") || error.kind == .corruptStore, "\(error)")
                broken.append("value-\(index)")
            }
        }
        #expect(!broken.isEmpty && readable + broken.count == 20, "readable \(readable), damaged \(broken)")
        #expect(fileBytes(database) == before)
    }

    @Test func anEmptiedDatabaseIsNotTakenForANewOne() throws {
        let (directory, home, database) = try populatedHome()
        defer { withExtendedLifetime(directory) {} }
        #expect(truncate(database, 0) == 0)
        expectUnusable(home, database, .corruptStore, mentioning: "empty (0 bytes)")
        #expect(fileBytes(database)?.count == 0, "not recreated")
    }

    @Test func garbageOverTheWholeFileIsReported() throws {
        let (directory, home, database) = try populatedHome()
        defer { withExtendedLifetime(directory) {} }
        let size = try #require(fileBytes(database)).count
        try overwrite(database, with: randomBytes(size))
        let before = fileBytes(database)
        expectUnusable(home, database, .corruptStore, mentioning: "not a SQLite database")
        #expect(fileBytes(database) == before)
    }

    @Test func garbageAfterTheFirstPageIsReported() throws {
        let (directory, home, database) = try populatedHome()
        defer { withExtendedLifetime(directory) {} }
        let size = try #require(fileBytes(database)).count
        try overwrite(database, with: randomBytes(size - 4096), at: 4096)
        let before = fileBytes(database)
        expectUnusable(home, database, .corruptStore, mentioning: "damaged")
        #expect(fileBytes(database) == before)
    }

    @Test func aForeignSQLiteFileIsRefused() throws {
        let directory = try TempDirectory()
        let home = try directory.makeFolder("home")
        let database = home + "/store.sqlite"
        let queue = try DatabaseQueue(path: database)
        try queue.write { db in try db.execute(sql: "CREATE TABLE notes (text TEXT); INSERT INTO notes VALUES ('mine')") }
        try queue.close()
        let before = fileBytes(database)
        expectUnusable(home, database, .incompatibleStore, mentioning: "not an extrun store")
        #expect(fileBytes(database) == before)
    }

    @Test func aStoreFromANewerExtrunIsRefused() throws {
        let (directory, home, database) = try populatedHome()
        defer { withExtendedLifetime(directory) {} }
        let queue = try DatabaseQueue(path: database)
        try queue.write { db in try db.execute(sql: "INSERT INTO grdb_migrations VALUES ('v9-from-the-future')") }
        try queue.close()
        let before = fileBytes(database)
        expectUnusable(home, database, .incompatibleStore, mentioning: "v9-from-the-future")
        #expect(fileBytes(database) == before)
    }

    @Test func aDeletedDatabaseIsNotSilentlyRecreated() throws {
        let (directory, home, database) = try populatedHome()
        defer { withExtendedLifetime(directory) {} }
        try FileManager.default.removeItem(atPath: database)
        expectUnusable(home, database, .storeMissing, mentioning: "is missing")
        #expect(!FileManager.default.fileExists(atPath: database))
        #expect(FileManager.default.fileExists(atPath: home + "/keys/TEAM.key"))
    }

    @Test func aFreshHomeGetsAStoreAndReopensIt() throws {
        let directory = try TempDirectory()
        let home = directory.sub("deep/new/home")
        do {
            let store = try Store(home: URL(fileURLWithPath: home))
            try store.globals(of: "TEAM").set("x", to: 1)
        }
        let store = try Store(home: URL(fileURLWithPath: home + "/"))
        #expect(try store.globals(of: "TEAM").get("x")?.value == 1)
        #expect(store.databasePath == home + "/store.sqlite")
        // WAL mode is recorded in the file itself (header bytes 18 and 19 are 2).
        let header = try #require(fileBytes(home + "/store.sqlite")).prefix(20)
        #expect(header[18] == 2 && header[19] == 2)
    }
}
