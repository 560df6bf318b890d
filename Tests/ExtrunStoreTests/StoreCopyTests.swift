import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import GRDB
import Testing

@testable import ExtrunStore

/// `extrun store copy --to URL` (`Store.copy(to:)`): a SQLite home into a PostgreSQL database
/// and back, the sealed bytes unchanged, resumable, verified row for row (issue 34).
@Suite struct StoreCopyTests {
    /// What an owner's rows look like through the API: compared before and after each copy.
    static func snapshot(_ store: Store) throws -> [String] {
        var lines: [String] = []
        for owner in ["ALICE", "BOB"] {
            // Values as compact JSON with sorted keys (a dictionary's description has no fixed order).
            func json(_ value: JSONValue?) throws -> String {
                String(decoding: try Globals.serialize(value ?? .null, name: "x", owner: owner), as: UTF8.self)
            }
            for global in try store.globals(of: owner).list() {
                lines.append("\(owner) global \(global.name) v\(global.version) = \(try json(try store.globals(of: owner).get(global.name)?.value))")
            }
            for entry in try store.bookmarks(of: owner).list() { lines.append("\(owner) bookmark \(entry.bookmark.name) \(entry.bookmark.path)") }
            for donation in try store.donations(of: owner).list() {
                lines.append("\(owner) donation \(donation.identifier) \(try json(.object(donation.parameters)))")
            }
            let quota = try store.quota(of: owner)
            lines.append("\(owner) quota \(quota.quota) \(quota.overridden.sorted()) usage \(quota.usage)")
        }
        return lines
    }

    @Test(arguments: StoreBackendKind.postgresOnly)
    func aSQLiteHomeGoesToPostgreSQLAndBackUnchanged(backend: StoreBackendKind) throws {
        let source = try BackendStore(.sqlite)
        let server = try BackendStore(backend)  // its empty database
        let folder = try source.directory.makeFolder("docs")
        for owner in ["ALICE", "BOB"] {
            let globals = try source.store.globals(of: owner)
            for index in 0..<30 { try globals.set("g\(index)", to: ["n": .int(Int64(index)), "owner": .string(owner)]) }
            try globals.delete("g3")
            try source.store.bookmarks(of: owner).add("docs", path: folder, readOnly: owner == "BOB")
            for id in ["b", "a", "c"] {
                try source.store.donations(of: owner).donate(
                    Donation(identifier: id, owner: owner, plugin: "p", intent: "I", source: "handle", parameters: ["id": .string(id)], response: nil))
            }
        }
        try source.store.setQuota(of: "BOB", ["globals": 40])
        let before = try Self.snapshot(source.store)

        let report = try source.store.copy(to: server.location)
        #expect(report.copied["global"] == 58)
        #expect(report.copied["donation"] == 6)
        let onServer = try Store(home: source.homeURL, location: server.location)
        let after = try Self.snapshot(onServer)
        #expect(after == before, "\(after.difference(from: before))")
        // Run again: nothing new, everything already there.
        let again = try source.store.copy(to: server.location)
        #expect(again.copied.values.reduce(0, +) == 0)
        #expect(again.alreadyThere["global"] == 58)

        // Back, into a home with the same keys and no store.sqlite.
        let back = try TempDirectory()
        try FileManager.default.copyItem(atPath: source.home, toPath: back.sub("home"))
        for file in ["store.sqlite", "store.sqlite-wal", "store.sqlite-shm"] { try? FileManager.default.removeItem(atPath: back.sub("home/" + file)) }
        let fromServer = try Store(home: URL(fileURLWithPath: back.sub("home")), location: server.location)
        let backReport = try fromServer.copy(to: .sqlite)
        #expect(backReport.copied["global"] == 58)
        let restored = try Store(home: URL(fileURLWithPath: back.sub("home")), location: .sqlite)
        let restoredSnapshot = try Self.snapshot(restored)
        #expect(restoredSnapshot == before, "\(restoredSnapshot.difference(from: before))")
        // The sealed bytes themselves went through unchanged.
        func sealed(_ store: Store) throws -> Data? {
            try store.database.read { db in try Data.fetchOne(db, sql: "SELECT sealed FROM global WHERE owner = 'ALICE' AND name = 'g7'") }
        }
        #expect(try sealed(source.store) != nil)
        #expect(try sealed(source.store) == sealed(restored))

        // A destination holding other rows is refused after the copy, naming the table.
        try onServer.globals(of: "ALICE").set("g1", to: "changed there")
        let refused = expectStoreError(.corruptStore) { try source.store.copy(to: server.location) }
        #expect(refused?.details["table"] == "owner", "its version counter moved first")
    }
}
