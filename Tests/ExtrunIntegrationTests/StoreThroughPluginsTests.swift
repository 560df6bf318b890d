import ExtrunHost
import ExtrunProtocol
import ExtrunStore
import ExtrunTestSupport
import Foundation
import Testing

/// Globals and bookmarks as plugins reach them: through the host, bound to the
/// owner in the plugin's manifest, with the real example plugins and a real store.
@Suite struct StoreThroughPluginsTests {
    let home: URL
    let host: ExtrunHost.Host

    init() throws {
        home = try makeTemporaryFolder("integration-home")
        host = try StagedPlugins.host(home: home)
    }

    func handle(_ intent: String, _ parameters: [String: JSONValue], host: ExtrunHost.Host? = nil) -> HandleReport {
        (host ?? self.host).handle(IntentInvocation(intent: intent, parameters: parameters))
    }

    @Test(arguments: [0, 1, 29, 30, 31, 1_000, 1 << 20])
    func aGlobalOfAnySizeRoundTrips(length: Int) throws {
        let value = String(repeating: "x", count: max(0, length - 1)) + (length > 0 ? "é" : "")
        let set = handle("SetGlobalVariable", ["name": "v", "value": .string(value)])
        #expect(set.response?.code == "success", "\(String(describing: set.error))")
        let get = handle("GetGlobalVariable", ["name": "v"])
        #expect(get.response?.properties["value"] == .string(value))
        // And the ops' view agrees, from the same sealed store.
        #expect(try Store(home: home).globals(of: "EXAMPLETEAM").get("v")?.value == .string(value))
    }

    @Test func theOwnersQuotaReachesTheSwiftPluginAsItsMessage() throws {
        try Store(home: home).setQuota(of: "EXAMPLETEAM", ["globals": 0])
        let report = handle("SetGlobalVariable", ["name": "v", "value": "x"])
        #expect(report.response?.code == "failure")
        let dialog = "\(String(describing: report.response?.dialog))"
        #expect(dialog.contains("its quota is 0 globals"), "\(dialog)")
        #expect(try Store(home: home).globals(of: "EXAMPLETEAM").list().isEmpty)
    }

    @Test func aMissingGlobalIsTheDeclaredCustomCode() {
        let report = handle("GetGlobalVariable", ["name": "never-set"])
        #expect(report.response?.code == "notSet")
        #expect(report.exitCode == 1)
    }

    @Test func anotherOwnersPluginSeesNoneOfIt() throws {
        _ = handle("SetGlobalVariable", ["name": "secret", "value": "for EXAMPLETEAM only"])
        let other = try Fixture.pluginCopy(named: "GlobalVariables", owner: "OTHERTEAM", signedIn: home)
        let otherHost = ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [other]))
        let report = handle("GetGlobalVariable", ["name": "secret"], host: otherHost)
        #expect(report.response?.code == "notSet", "\(String(describing: report.response))")
        // Its own write goes to its own owner.
        _ = handle("SetGlobalVariable", ["name": "secret", "value": "OTHERTEAM's"], host: otherHost)
        #expect(handle("GetGlobalVariable", ["name": "secret"]).response?.properties["value"] == "for EXAMPLETEAM only")
    }

    @Test func bookmarksAreReadBeneathTheirRootOnly() throws {
        let folder = try makeTemporaryFolder("integration-bookmarked")
        try Data("hello".utf8).write(to: folder.appendingPathComponent("a.txt"))
        try Data("{}".utf8).write(to: folder.appendingPathComponent("b.json"))
        let outside = try makeTemporaryFolder("integration-outside")
        try Data("secret".utf8).write(to: outside.appendingPathComponent("secret.txt"))
        try FileManager.default.createSymbolicLink(
            atPath: folder.appendingPathComponent("link").path, withDestinationPath: outside.appendingPathComponent("secret.txt").path)
        try Store(home: home).bookmarks(of: "EXAMPLETEAM").add("docs", path: folder.path, readOnly: true)

        let list = handle("ListBookmarkFolder", ["bookmark": "docs", "glob": "*.txt"])
        #expect(list.response?.properties["count"] == .int(1), "\(String(describing: list.response))")
        let read = handle("ReadBookmarkFile", ["bookmark": "docs", "path": "a.txt"])
        #expect(read.response?.properties["text"] == "hello")

        for path in ["../outside/secret.txt", outside.appendingPathComponent("secret.txt").path, "link"] {
            let escape = handle("ReadBookmarkFile", ["bookmark": "docs", "path": .string(path)])
            #expect(escape.response?.code == "failure", "\(path): \(String(describing: escape.response))")
            #expect(escape.response?.properties["reason"] == "pathEscape", "\(path)")
        }

        let other = try Fixture.pluginCopy(named: "Bookmarks", owner: "OTHERTEAM", signedIn: home)
        let otherHost = ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [other]))
        let foreign = handle("ReadBookmarkFile", ["bookmark": "docs", "path": "a.txt"], host: otherHost)
        #expect(foreign.response?.properties["reason"] == "notFound")
    }

    @Test func twoHostsIncrementingAtOnceLoseNothing() throws {
        let binary = try ExtrunBinary.url()
        let intent = try makeTemporaryFolder("integration-intents").appendingPathComponent("inc.json")
        try Data(#"{"intent": "IncrementGlobalVariable", "parameters": {"name": "counter"}}"#.utf8).write(to: intent)
        let environment = ["EXTRUN_HOME": home.path, "EXTRUN_PLUGIN_PATH": try StagedPlugins.directory().path, "PATH": "/usr/bin:/bin"]
        // Two sequences of 10 runs each, side by side.
        let script = "for i in 1 2 3 4 5 6 7 8 9 10; do \"$0\" handle \"$1\" >/dev/null || exit 1; done"
        var runners: [Process] = []
        for _ in 0..<2 {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", script, binary.path, intent.path]
            process.environment = environment
            try process.run()
            runners.append(process)
        }
        for runner in runners {
            runner.waitUntilExit()
            #expect(runner.terminationStatus == 0)
        }
        #expect(try Store(home: home).globals(of: "EXAMPLETEAM").get("counter")?.value == .int(20))
    }
}

enum Fixture {
    /// A copy of a staged example plugin's directory with another owner in its manifest,
    /// signed for that owner with its key in `home`.
    static func pluginCopy(named name: String, owner: String, signedIn home: URL) throws -> URL {
        let source = try StagedPlugins.directory().appendingPathComponent(name)
        let root = try makeTemporaryFolder("integration-plugins")
        let target = root.appendingPathComponent(name)
        try FileManager.default.createDirectory(at: target, withIntermediateDirectories: true)
        var manifest = try JSONCoding.decode(PluginManifest.self, fromJSON: Data(contentsOf: source.appendingPathComponent("manifest.json")))
        manifest.owner = owner
        manifest.executable = source.appendingPathComponent(manifest.executable).resolvingSymlinksInPath().path
        try JSONCoding.encoder().encode(manifest).write(to: target.appendingPathComponent("manifest.json"))
        try ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [])).sign(pluginIn: target)
        return root
    }
}
