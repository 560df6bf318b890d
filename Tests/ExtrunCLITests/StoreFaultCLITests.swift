import ExtrunProtocol
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Runs SQL on a store file with Python's sqlite3 module (a tamperer with file access).
private func tamper(_ database: String, _ sql: String) throws {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
    process.arguments = ["-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.executescript(sys.argv[2]); c.commit(); c.close()", database, sql]
    try process.run()
    process.waitUntilExit()
    #expect(process.terminationStatus == 0, "python3 sqlite3 \(sql)")
}

@Suite struct StoreFaultCLITests {
    /// issue 17, item 7: one damaged bookmark hides none of the others.
    @Test func bookmarksListPrintsTheReadableOnesAndNamesTheDamagedOne() throws {
        let cli = try CLI()
        let target = try TempDirectory("bookmark-targets")
        for name in ["b1", "b2", "b3", "b4"] {
            let folder = target.url.appendingPathComponent(name).path
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            let added = try cli.run(["bookmarks", "add", name, folder, "--owner", "TEAM"])
            #expect(added.status == 0, "\(added)")
        }
        try tamper(cli.home.url.path + "/store.sqlite", "UPDATE bookmark SET sealed = zeroblob(64) WHERE name = 'b2'")
        let text = try cli.run(["bookmarks", "list", "--owner", "TEAM"])
        #expect(text.status == 16, "\(text)")
        for name in ["b1", "b3", "b4"] { #expect(text.stdout.contains("\(name)  folder"), "\(text)") }
        #expect(text.stdout.contains("b2  DAMAGED (sealBroken)") && text.stderr.contains("'b2'"), "\(text)")
        let json = try cli.run(["bookmarks", "list", "--owner", "TEAM", "--format", "json"])
        #expect(json.status == 16)
        let entries = try #require(try JSONDecoder().decode(JSONValue.self, from: Data(json.stdout.utf8)).arrayValue)
        #expect(entries.count == 4 && entries.filter { $0["status"] == "damaged" }.count == 1, "\(json)")
    }

    /// issue 17, item 8: `owners list` that lists a problem exits non-zero.
    @Test func ownersListExitsNonZeroWhenItListsAProblem() throws {
        let cli = try CLI()
        #expect(try cli.run(["globals", "set", "x", "1", "--owner", "TEAM"]).status == 0)
        #expect(try cli.run(["globals", "set", "x", "1", "--owner", "OTHER"]).status == 0)
        #expect(try cli.run(["owners", "list"]).status == 0)
        let keys = try FileManager.default.contentsOfDirectory(atPath: cli.home.url.path + "/keys").filter { $0.hasPrefix("TEAM") }
        #expect(keys.count == 1)
        for key in keys { try FileManager.default.moveItem(atPath: cli.home.url.path + "/keys/" + key, toPath: cli.home.url.path + "/" + key) }
        let listed = try cli.run(["owners", "list"])
        #expect(listed.status == 15 && listed.stdout.contains("TEAM") && listed.stdout.contains("OTHER") && listed.stderr.contains("keyMissing"), "\(listed)")
    }

    /// `store check` and `store recover`: exit statuses, and the store's file left as it was.
    @Test func storeCheckAndRecover() throws {
        let cli = try CLI()
        for index in 0..<30 {
            #expect(try cli.run(["globals", "set", "g\(index)", "--string", String(repeating: "v", count: 3000), "--owner", "TEAM"]).status == 0)
        }
        let check = try cli.run(["store", "check"])
        let checked = try check.json()
        #expect(check.status == 0 && checked["intact"] == true, "\(check)")
        let database = cli.home.url.path + "/store.sqlite"
        let recovered = cli.home.url.path + "/recovered.sqlite"
        let recover = try cli.run(["store", "recover", recovered])
        #expect(recover.status == 0 && FileManager.default.fileExists(atPath: recovered), "\(recover)")
        #expect(try cli.run(["store", "recover", recovered]).status == 14, "an existing file is not written over")

        let size = try #require(FileManager.default.attributesOfItem(atPath: database)[.size] as? Int)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: database))
        try handle.seek(toOffset: UInt64(size / 4096 / 2 * 4096))
        try handle.write(contentsOf: Data(repeating: 0xA5, count: 4096))
        try handle.close()
        let before = FileManager.default.contents(atPath: database)
        let damaged = try cli.run(["store", "check"])
        let verdict = try damaged.json()
        #expect(damaged.status == 16 && verdict["intact"] == false, "\(damaged)")
        #expect(damaged.stderr.contains("store recover") && !damaged.stderr.contains("aside"), "\(damaged)")
        let partial = try cli.run(["store", "recover", cli.home.url.path + "/partial.sqlite"])
        #expect(partial.status == 0 || partial.status == 16, "\(partial)")
        #expect(FileManager.default.contents(atPath: database) == before, "check and recover wrote nothing to the store")
    }
}

@Suite struct StoreUnreachableCLITests {
    /// issue 34/35: a plugin whose store call failed because the store's server cannot be
    /// reached ends as pluginError (the plugin's own answer), and the report names the
    /// store's failure, typed: `error.store.kind` storeUnavailable, with what to check.
    @Test("A plugin failed by an unreachable PostgreSQL store: the report's error carries store.kind storeUnavailable and the socket to check")
    func pluginFailedByTheStoreSaysSo() throws {
        var cli = try CLI()
        let nowhere = try TempDirectory("no-server")
        cli.environment["EXTRUN_STORE"] = "postgresql:///extrun?host=\(nowhere.url.path)&port=5999"
        let result = try cli.run(["handle", "Examples/intents/increment-global-variable.json"])
        #expect(result.status == 12, "\(result)")
        let error = try result.json()["error"]
        #expect(error?["kind"] == "pluginError", "\(result)")
        #expect(error?["store"]?["kind"] == "storeUnavailable", "\(result)")
        let message = error?["store"]?["message"]?.stringValue ?? ""
        #expect(message.contains("\(nowhere.url.path)/.s.PGSQL.5999") && message.contains("the next call tries again"), "\(message)")
        // A plugin that failed on its own says nothing of the store.
        let own = try cli.run(["handle", "Examples/intents/make-uppercase.json"])
        #expect(own.status == 0, "\(own)")
    }
}
