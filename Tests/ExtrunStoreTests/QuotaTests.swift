import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import GRDB
import Testing

@testable import ExtrunStore

/// Per-owner quotas (issue 16): counts and bytes, defaults from the policy,
/// overrides per owner; a write over a limit is `quotaExceeded` with its numbers
/// and writes nothing.
@Suite("Owner quotas")
struct QuotaTests {
    /// The usage as the quota counts it, recomputed from the rows (what the triggers must keep).
    static func recomputed(_ store: Store, _ owner: String) throws -> OwnerUsage {
        try store.database.read { db in
            func int(_ sql: String) throws -> Int64 { try Int64.fetchOne(db, sql: sql, arguments: [owner]) ?? 0 }
            return OwnerUsage(
                bytes: try int("SELECT IFNULL(SUM(length(CAST(name AS BLOB)) + length(sealed)), 0) FROM global WHERE owner = ?")
                    + int("SELECT IFNULL(SUM(length(CAST(name AS BLOB)) + length(sealed)), 0) FROM bookmark WHERE owner = ?")
                    + int("SELECT IFNULL(SUM(length(CAST(identifier AS BLOB)) + length(sealed)), 0) FROM donation WHERE owner = ?"),
                globals: try int("SELECT COUNT(*) FROM global WHERE owner = ?"),
                bookmarks: try int("SELECT COUNT(*) FROM bookmark WHERE owner = ?"),
                donations: try int("SELECT COUNT(*) FROM donation WHERE owner = ?"))
        }
    }

    /// Every row of the owner's globals (name, version, sealed bytes).
    static func globalRows(_ store: Store, _ owner: String) throws -> [[String]] {
        try store.database.read { db in
            try Row.fetchAll(db, sql: "SELECT name, version, hex(sealed) AS s FROM global WHERE owner = ? ORDER BY name", arguments: [owner])
                .map { [$0["name"], String($0["version"] as Int64), $0["s"]] }
        }
    }

    @Test("the global count: the write past it is refused with limit and usage, nothing written; updates still pass", arguments: StoreBackendKind.all)
    func globalCount(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let store = test.store
        try store.setQuota(of: "TEAM", ["globals": 3])
        let globals = try store.globals(of: "TEAM")
        for name in ["a", "b", "c"] { try globals.set(name, to: "v") }
        let before = try globals.list()
        let error = try #require(throws: StoreError.self) { try globals.set("d", to: "v") }
        #expect(error.kind == .quotaExceeded)
        #expect(error.details["quota"] == "globals")
        #expect(error.details["limit"] == 3)
        #expect(error.details["usage"] == 3)
        #expect(error.details["adding"] == 1)
        #expect(error.message.contains("extrun owners quota TEAM --globals"))
        #expect(!error.message.lowercased().contains("reset"))
        #expect(try globals.list() == before)
        // Changing one that exists adds no global.
        try globals.set("a", to: "w")
        #expect(try store.quota(of: "TEAM").usage == test.recomputedUsage("TEAM"))
        // Deleting gives back what the global took; bytes are counted as the rows hold them.
        #expect(try globals.delete("b"))
        try store.setQuota(of: "TEAM", ["globals": nil])
        #expect(try store.quota(of: "TEAM").usage == test.recomputedUsage("TEAM"))
        #expect(try store.quota(of: "TEAM").usage.globals == 2)
    }

    @Test("bytes: an import over the limit is refused whole; a delete under a lowered limit passes", arguments: StoreBackendKind.all)
    func bytes(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let store = test.store
        let globals = try store.globals(of: "TEAM")
        try globals.set("small", to: "x")
        let used = try store.quota(of: "TEAM").usage.bytes
        try store.setQuota(of: "TEAM", ["bytes": used + 1000])
        let document = Data(#"{"format":"extrun-globals","version":1,"owner":"TEAM","globals":{"a":"\#(String(repeating: "a", count: 600))","b":"\#(String(repeating: "b", count: 600))"}}"#.utf8)
        let before = try globals.list()
        let error = try #require(throws: StoreError.self) { try globals.import(document, mode: .merge) }
        #expect(error.kind == .quotaExceeded, "\(error)")
        #expect(error.details["quota"] == "bytes")
        #expect(error.details["limit"] == .int(used + 1000))
        #expect(try globals.list() == before, "nothing of the import was written")
        // Lowered under the usage: deleting is fine, adding is not.
        try store.setQuota(of: "TEAM", ["bytes": 1])
        #expect(throws: StoreError.self) { try globals.set("more", to: "y") }
        #expect(try globals.delete("small"))
        #expect(try store.quota(of: "TEAM").usage == OwnerUsage())
        // Back to the default.
        let report = try store.setQuota(of: "TEAM", ["bytes": nil])
        #expect(report.quota.bytes == OwnerQuota.builtIn.bytes)
        #expect(report.overridden.isEmpty)
        // Under the limit, the import goes in and is counted as its rows are; replace deletes the rest.
        #expect(try globals.import(document, mode: .merge).created == 2)
        #expect(try store.quota(of: "TEAM").usage == test.recomputedUsage("TEAM"))
        try globals.set("small", to: "x")
        #expect(try globals.import(document, mode: .replace).deleted == 1)
        #expect(try store.quota(of: "TEAM").usage == test.recomputedUsage("TEAM"))
        #expect(try globals.list().map(\.name) == ["a", "b"])
    }

    @Test("bookmarks and donations have counts too", arguments: StoreBackendKind.all)
    func bookmarksAndDonations(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let tmp = test.directory
        let store = test.store
        try store.setQuota(of: "TEAM", ["bookmarks": 1, "donations": 2])
        try tmp.makeFolder("one")
        try tmp.makeFolder("two")
        try store.bookmarks(of: "TEAM").add("one", path: tmp.sub("one"), readOnly: true)
        let error = try #require(throws: StoreError.self) { try store.bookmarks(of: "TEAM").add("two", path: tmp.sub("two"), readOnly: true) }
        #expect(error.kind == .quotaExceeded && error.details["quota"] == "bookmarks")
        #expect(try store.bookmarks(of: "TEAM").list().map(\.bookmark.name) == ["one"])
        let donations = try store.donations(of: "TEAM")
        func donation(_ id: String) -> Donation {
            Donation(identifier: id, owner: "TEAM", plugin: "p", intent: "I", source: "handle", parameters: ["k": "v"], response: nil)
        }
        try donations.donate(donation("1"))
        try donations.donate(donation("2"))
        try donations.donate(donation("2"))  // donated again: replaced, not added
        let refused = try #require(throws: StoreError.self) { try donations.donate(donation("3"), durable: false) }
        #expect(refused.details["quota"] == "donations" && refused.details["limit"] == 2 && refused.details["usage"] == 2)
        #expect(try donations.list().map(\.identifier) == ["1", "2"])
        #expect(try store.quota(of: "TEAM").usage == test.recomputedUsage("TEAM"))
        try store.bookmarks(of: "TEAM").remove("one")
        #expect(try donations.delete(identifier: "1"))
        #expect(try store.quota(of: "TEAM").usage == test.recomputedUsage("TEAM"))
    }

    @Test("the defaults come from quota in policy.json; an owner's own limit wins; a bad policy is a clear error")
    func policyDefaults() throws {
        let tmp = try TempDirectory()
        _ = try Store(home: tmp.url)
        try tmp.write("policy.json", #"{"quota": {"globals": 1}}"#)
        chmod(tmp.sub("policy.json"), 0o600)
        let store = try Store(home: tmp.url)
        try store.globals(of: "A").set("x", to: 1)
        #expect(throws: StoreError.self) { try store.globals(of: "A").set("y", to: 1) }
        try store.setQuota(of: "B", ["globals": 5])
        try store.globals(of: "B").set("x", to: 1)
        try store.globals(of: "B").set("y", to: 1)
        let report = try store.quota(of: "A")
        #expect(report.quota.globals == 1 && report.quota.bytes == OwnerQuota.builtIn.bytes && report.overridden.isEmpty)

        try tmp.write("policy.json", #"{"quota": {"globals": -1}}"#)
        chmod(tmp.sub("policy.json"), 0o600)
        let error = try #require(throws: StoreError.self) { try Store(home: tmp.url).quota(of: "A") }
        #expect(error.message.contains("quota.globals"))
    }

    @Test("a store written before v7-donation-writes keeps its counts, also of a row without its owner row, and its group index becomes partial, group first")
    func donationWritesMigration() throws {
        let tmp = try TempDirectory()
        // The indexes and the donation insert's trigger as v3 and v4 made them.
        let v6 = try DatabaseQueue()
        try StoreDatabase.migrator.migrate(v6, upTo: "v6-bookmark-file-bytes")
        let earlier = try v6.read { db in
            try String.fetchAll(
                db, sql: "SELECT sql FROM sqlite_master WHERE name IN ('donation_group', 'donation_identifier', 'donation_usage_insert') ORDER BY name")
        }
        #expect(earlier.count == 3)
        func donate(_ store: Store, _ owner: String, _ identifier: String, group: String?) throws {
            try store.donations(of: owner).donate(
                Donation(identifier: identifier, owner: owner, plugin: "p", intent: "I", groupIdentifier: group, source: "handle", parameters: ["k": "v"], response: nil))
        }
        do {
            // A store as an extrun before v7 left it: two owners' donations, two of them in a group.
            let store = try Store(home: tmp.url)
            try donate(store, "OLD", "a", group: nil)
            try donate(store, "OLD", "b", group: "g")
            try donate(store, "OTHER", "c", group: "g")
            try store.database.write { db in
                try db.execute(sql: "DROP INDEX donation_group; DROP TRIGGER donation_usage_insert")
                for sql in earlier { try db.execute(sql: sql) }
                try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = 'v7-donation-writes'")
            }
            try donate(store, "OLD", "e", group: nil)  // counted by the earlier trigger
            // A row whose owner row is gone, as `recover` keeps them: the migration does not trip on it.
            try store.database.withoutTransaction { db in
                try db.execute(sql: "PRAGMA foreign_keys = OFF")
                try db.execute(
                    sql: "INSERT INTO donation (owner, identifier, intent, plugin, source, created, sealed) VALUES ('AAA-LOST', 'c', 'I', 'p', 'handle', 'now', x'01')")
                try db.execute(sql: "PRAGMA foreign_keys = ON")
            }
            #expect(try store.quota(of: "OLD").usage == Self.recomputed(store, "OLD"))
        }
        let store = try Store(home: tmp.url)
        let schema = try store.database.read { db in
            try String.fetchAll(
                db, sql: "SELECT sql FROM sqlite_master WHERE name IN ('donation_group', 'donation_identifier', 'donation_usage_insert') ORDER BY name")
        }
        #expect(schema.count == 2)  // no index on the identifier alone
        #expect(schema.first?.contains("(groupIdentifier, owner) WHERE groupIdentifier IS NOT NULL") == true)
        #expect(schema.last?.contains("ON CONFLICT (owner) DO UPDATE") == true)
        for owner in ["OLD", "OTHER", "AAA-LOST"] { #expect(try store.quota(of: owner).usage == Self.recomputed(store, owner), "\(owner)") }
        // New donations: a new owner's first, a replaced one, grouped and not, inside batches.
        for (owner, identifier, group) in [("NEW", "n1", nil), ("NEW", "n2", "h"), ("OLD", "a", "g"), ("OLD", "d", nil)] as [(String, String, String?)] {
            try donate(store, owner, identifier, group: group)
        }
        for owner in ["OLD", "OTHER", "NEW"] { #expect(try store.quota(of: owner).usage == Self.recomputed(store, owner), "\(owner)") }
        #expect(try store.quota(of: "NEW").usage.donations == 2)
        // The group's queries seek the index; another owner's group is still refused by name.
        let plans = try store.database.read { db in
            try ["DELETE FROM donation WHERE owner = ?1 AND groupIdentifier = ?2", "SELECT DISTINCT owner FROM donation WHERE groupIdentifier = ?1 AND owner <> ?2"]
                .map { sql in try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + sql, arguments: ["OLD", "g"]).map { $0["detail"] as String }.joined() }
        }
        for plan in plans { #expect(plan.contains("SEARCH donation USING COVERING INDEX donation_group (groupIdentifier=?"), "\(plan)") }
        #expect(try store.donations(of: "OLD").delete(group: "g") == 2)
        let refused = try #require(throws: StoreError.self) { try store.donations(of: "NEW").delete(group: "g") }
        #expect(refused.kind == .notYours && refused.details["donationOwner"] == "OTHER")
        for owner in ["OLD", "OTHER", "NEW"] { #expect(try store.quota(of: owner).usage == Self.recomputed(store, owner), "\(owner)") }
        // An identifier only other owners have is refused with the first of them by name, walking
        // the owners in the unique index, also a row whose owner row is gone (a salvaged store's).
        try donate(store, "ANOTHER", "c", group: nil)
        let others = try store.database.read { db in try String.fetchAll(db, sql: Donations.othersSQL, arguments: ["c", "NEW"]) }
        #expect(others == ["AAA-LOST", "ANOTHER", "OTHER"])
        #expect(try store.database.read { db in try String.fetchAll(db, sql: Donations.othersSQL, arguments: ["c", "OTHER"]) } == ["AAA-LOST", "ANOTHER"])
        #expect(try store.database.read { db in try String.fetchAll(db, sql: Donations.othersSQL, arguments: ["none", "NEW"]) }.isEmpty)
        let notYours = try #require(throws: StoreError.self) { try store.donations(of: "NEW").delete(identifier: "c") }
        #expect(notYours.kind == .notYours && notYours.details["donationOwner"] == "AAA-LOST")
        #expect(try !store.donations(of: "NEW").delete(identifier: "none"))
    }

    @Test("the counters stay right through every writer: sets, deletes, imports, bookmarks, donations and a migration's bulk copy")
    func countersFollowEveryWriter() throws {
        let tmp = try TempDirectory()
        let store = try Store(home: tmp.url)
        let old = try store.globals(of: "OLD")
        for i in 0..<20 { try old.set("g\(i)", to: .string(String(repeating: "x", count: i * 10))) }
        try old.delete("g3")
        try old.set("g4", to: "shorter")
        try store.globals(of: "NEW").set("g5", to: "already there")
        try tmp.makeFolder("docs")
        try store.bookmarks(of: "OLD").add("docs", path: tmp.sub("docs"), readOnly: false)
        try store.donations(of: "OLD").donate(
            Donation(identifier: "d", owner: "OLD", plugin: "p", intent: "I", source: "handle", parameters: [:], response: nil))
        var options = MigrationOptions()
        options.onConflict = .overwrite
        options.removeSource = true
        _ = try store.migrate(from: "OLD", to: "NEW", options: options)
        for owner in ["OLD", "NEW"] {
            #expect(try store.quota(of: owner).usage == Self.recomputed(store, owner), "\(owner)")
        }
    }
}
