import ExtrunHost
import ExtrunProtocol
import Foundation
import Testing

/// Writes a plugin directory `<dir>/<name>` with a manifest and (unless told otherwise) an executable `run`.
@discardableResult
private func plugin(
    _ dir: TempDirectory, _ name: String, id: String, intents: [String] = ["Echo"], executable: Bool = true, executableMode: Int = 0o755
) throws -> URL {
    let list = intents.map { #"{"name":"\#($0)"}"# }.joined(separator: ",")
    let manifest = try dir.write("\(name)/manifest.json", manifestJSON(id: id, executable: "run", intents: "[\(list)]"))
    if executable {
        let run = try dir.write("\(name)/run", "#!/bin/sh\nexit 0\n")
        try FileManager.default.setAttributes([.posixPermissions: executableMode], ofItemAtPath: run.path)
    }
    return manifest
}

private func catalog(_ paths: [URL], home: URL) -> PluginCatalog {
    PluginCatalog.discover(paths: HostPaths(home: home, pluginSearchPath: paths))
}

private func hostError<T>(_ body: () throws -> T, sourceLocation: SourceLocation = #_sourceLocation) -> HostError? {
    do {
        let value = try body()
        Issue.record("expected a HostError, got \(value)", sourceLocation: sourceLocation)
        return nil
    } catch let error as HostError {
        return error
    } catch {
        Issue.record("expected a HostError, got \(type(of: error)): \(error)", sourceLocation: sourceLocation)
        return nil
    }
}

@Suite("PluginCatalog")
struct PluginCatalogTests {
    @Test("a plugin directory can be on the path itself")
    func pluginDirectoryOnPath() throws {
        let tmp = try TempDirectory("catalog")
        try plugin(tmp, "one", id: "test.one")
        try plugin(tmp, "one/nested", id: "test.nested")  // not searched: "one" is a plugin, not a parent
        let found = catalog([tmp.url.appendingPathComponent("one")], home: tmp.url)
        #expect(found.plugins.map(\.manifest.id) == ["test.one"])
        #expect(found.plugins[0].directory.lastPathComponent == "one")
        #expect(found.plugins[0].executableURL.path == tmp.url.appendingPathComponent("one/run").path)
        #expect(found.plugins[0].problem == nil)
        #expect(found.problems.isEmpty)
    }

    @Test("a parent directory's plugin subdirectories are found in name order; other entries are ignored")
    func parentDirectoryOnPath() throws {
        let tmp = try TempDirectory("catalog")
        try plugin(tmp, "plugins/b", id: "test.b", intents: ["B"])
        try plugin(tmp, "plugins/a", id: "test.a", intents: ["A"])
        try tmp.write("plugins/README.txt", "not a plugin")
        _ = try tmp.directory("plugins/empty")
        let found = catalog([tmp.url.appendingPathComponent("plugins")], home: tmp.url)
        #expect(found.plugins.map(\.manifest.id) == ["test.a", "test.b"])
        #expect(found.problems.isEmpty)
        let (handler, definition) = try found.handler(for: "B")
        #expect(handler.manifest.id == "test.b")
        #expect(definition.name == "B")
    }

    @Test("directories that do not exist, and files, on the path are skipped")
    func missingDirectories() throws {
        let tmp = try TempDirectory("catalog")
        try plugin(tmp, "plugins/a", id: "test.a")
        let file = try tmp.write("file", "x")
        let found = catalog([tmp.url.appendingPathComponent("nowhere"), file, tmp.url.appendingPathComponent("plugins")], home: tmp.url)
        #expect(found.plugins.map(\.manifest.id) == ["test.a"])
        #expect(found.problems.isEmpty)
        #expect(found.searchPath.count == 3)
    }

    @Test("a manifest that does not parse is a problem naming the file and where it is wrong")
    func unparsableManifest() throws {
        let tmp = try TempDirectory("catalog")
        try plugin(tmp, "plugins/good", id: "test.good", intents: ["Good"])
        let bad = try tmp.write("plugins/bad/manifest.json", "{\n  \"id\": \"test.bad\",\n  \"version\": 1,,\n}")
        let found = catalog([tmp.url.appendingPathComponent("plugins")], home: tmp.url)
        #expect(found.plugins.map(\.manifest.id) == ["test.good"])
        let problem = try #require(found.problems.first)
        #expect(found.problems.count == 1)
        #expect(problem.file == bad.path)
        #expect(problem.message.hasPrefix("invalid manifest: not valid JSON"), "\(problem.message)")
        #expect(problem.message.contains("line 3"), "\(problem.message)")
        #expect(problem.description.hasPrefix(bad.path + ": "))

        // The other plugin still works, and asking for an unknown intent mentions the broken manifest.
        #expect(try found.handler(for: "Good").0.manifest.id == "test.good")
        let error = try #require(hostError { try found.handler(for: "Bad") })
        #expect(error.kind == .noHandler)
        #expect(error.message.contains("these manifests could not be read: \(bad.path)"), "\(error.message)")
    }

    @Test("a manifest with the wrong field types or semantic problems is a problem naming the field")
    func invalidManifest() throws {
        let tmp = try TempDirectory("catalog")
        let typed = try tmp.write("plugins/typed/manifest.json", #"{"id":"t","version":"1","owner":"o","protocolVersion":"one","executable":"x","intents":[]}"#)
        let versioned = try tmp.write("plugins/versioned/manifest.json", manifestJSON(id: "test.v").replacingOccurrences(of: #""protocolVersion":1"#, with: #""protocolVersion":9"#))
        let found = catalog([tmp.url.appendingPathComponent("plugins")], home: tmp.url)
        #expect(found.plugins.isEmpty)
        #expect(found.problems.map(\.file) == [typed.path, versioned.path])
        #expect(found.problems[0].message.hasPrefix("invalid manifest: protocolVersion: expected an integer"), "\(found.problems[0].message)")
        #expect(found.problems[1].message == "invalid manifest: protocolVersion: 9 is not supported (this host speaks version 1)")
    }

    @Test("a missing executable is a problem, and a configurationError naming the manifest when its intent is asked for")
    func missingExecutable() throws {
        let tmp = try TempDirectory("catalog")
        let manifest = try plugin(tmp, "plugins/broken", id: "test.broken", intents: ["Broken"], executable: false)
        try plugin(tmp, "plugins/fine", id: "test.fine", intents: ["Fine"])
        let found = catalog([tmp.url.appendingPathComponent("plugins")], home: tmp.url)
        #expect(found.plugins.map(\.manifest.id) == ["test.broken", "test.fine"])
        #expect(found.problems.map(\.file) == [manifest.path])
        #expect(found.problems.first?.message.contains("executable 'run' is missing") == true)

        #expect(try found.handler(for: "Fine").0.manifest.id == "test.fine")
        let error = try #require(hostError { try found.handler(for: "Broken") })
        #expect(error.kind == .configurationError)
        #expect(error.message.hasPrefix(manifest.path + ": executable 'run' is missing"), "\(error.message)")
        #expect(error.details["file"] == .string(manifest.path))
    }

    @Test("an executable without the execute bit is a problem")
    func notExecutable() throws {
        let tmp = try TempDirectory("catalog")
        let manifest = try plugin(tmp, "p", id: "test.p", executableMode: 0o644)
        let found = catalog([tmp.url.appendingPathComponent("p")], home: tmp.url)
        let error = try #require(hostError { try found.handler(for: "Echo") })
        #expect(error.kind == .configurationError)
        #expect(error.message.contains("is not executable"), "\(error.message)")
        #expect(error.details["file"] == .string(manifest.path))
    }

    @Test("two plugins claiming one intent is a configurationError naming both manifests")
    func twoClaimants() throws {
        let tmp = try TempDirectory("catalog")
        let first = try plugin(tmp, "one/a", id: "test.a", intents: ["Shared", "OnlyA"])
        let second = try plugin(tmp, "two/b", id: "test.b", intents: ["Shared"])
        let found = catalog([tmp.url.appendingPathComponent("one"), tmp.url.appendingPathComponent("two")], home: tmp.url)
        let error = try #require(hostError { try found.handler(for: "Shared") })
        #expect(error.kind == .configurationError)
        #expect(error.message.contains(first.path), "\(error.message)")
        #expect(error.message.contains(second.path), "\(error.message)")
        #expect(error.message.contains("test.a") && error.message.contains("test.b"))
        #expect(error.details["files"] == .array([.string(first.path), .string(second.path)]))
        // Only the intent both claim is affected.
        #expect(try found.handler(for: "OnlyA").0.manifest.id == "test.a")
    }

    @Test("the same plugin id twice: the first on the path wins, the later one is shadowed")
    func shadowing() throws {
        let tmp = try TempDirectory("catalog")
        try plugin(tmp, "first/p", id: "test.same", intents: ["Echo"])
        try plugin(tmp, "second/p", id: "test.same", intents: ["Echo", "Extra"])
        let found = catalog([tmp.url.appendingPathComponent("first"), tmp.url.appendingPathComponent("second")], home: tmp.url)
        #expect(found.plugins.count == 1)
        #expect(found.plugins[0].directory.path == tmp.url.appendingPathComponent("first/p").path)
        #expect(found.shadowed.count == 1)
        #expect(found.shadowed[0].directory.path == tmp.url.appendingPathComponent("second/p").path)
        #expect(found.problems.isEmpty)
        // Not a conflict: the shadowed copy does not claim anything.
        #expect(try found.handler(for: "Echo").0.directory.path == tmp.url.appendingPathComponent("first/p").path)
        #expect(hostError { try found.handler(for: "Extra") }?.kind == .noHandler)
    }

    @Test("a shadowed copy's problem is not reported as a manifest that could not be read")
    func shadowedProblemWording() throws {
        let tmp = try TempDirectory("catalog")
        try plugin(tmp, "first/p", id: "test.same")
        let shadowed = try plugin(tmp, "second/p", id: "test.same", executable: false)
        let found = catalog([tmp.url.appendingPathComponent("first"), tmp.url.appendingPathComponent("second")], home: tmp.url)
        #expect(found.shadowed.count == 1)
        let error = try #require(hostError { try found.handler(for: "Nope") })
        #expect(error.kind == .noHandler)
        #expect(!error.message.contains("could not be read: \(shadowed.path)"), "\(error.message)")
    }

    @Test("an unknown intent is noHandler, listing the known intents and the plugin path")
    func unknownIntent() throws {
        let tmp = try TempDirectory("catalog")
        try plugin(tmp, "plugins/a", id: "test.a", intents: ["Zeta", "Alpha"])
        let dir = tmp.url.appendingPathComponent("plugins")
        let error = try #require(hostError { try catalog([dir], home: tmp.url).handler(for: "Nope") })
        #expect(error.kind == .noHandler)
        #expect(error.message.hasPrefix("no plugin handles the intent 'Nope'; known intents: Alpha, Zeta"), "\(error.message)")
        #expect(error.message.contains("(plugin path: \(dir.path))"), "\(error.message)")
        #expect(error.details["intent"] == "Nope")

        let empty = try #require(hostError { try catalog([tmp.url.appendingPathComponent("none")], home: tmp.url).handler(for: "Nope") })
        #expect(empty.kind == .noHandler)
        #expect(empty.message.contains("no plugins were found"), "\(empty.message)")
    }

    @Test("HostPaths from the environment: EXTRUN_PLUGIN_PATH first, then $EXTRUN_HOME/plugins")
    func hostPaths() {
        // (A PREFIX/share/extrun/plugins next to the running binary may follow; not here.)
        let paths = HostPaths.fromEnvironment(["EXTRUN_HOME": "/h", "EXTRUN_PLUGIN_PATH": "/a::/b:", "HOME": "/home/u"])
        #expect(paths.home.path == "/h")
        #expect(paths.pluginSearchPath.prefix(3).map(\.path) == ["/a", "/b", "/h/plugins"])

        let defaults = HostPaths.fromEnvironment(["HOME": "/home/u"])
        #expect(defaults.home.path == "/home/u/.local/share/extrun")
        #expect(defaults.pluginSearchPath.first?.path == "/home/u/.local/share/extrun/plugins")

        let emptyHome = HostPaths.fromEnvironment(["EXTRUN_HOME": "", "HOME": "/home/v"])
        #expect(emptyHome.home.path == "/home/v/.local/share/extrun")
    }

    @Test("$EXTRUN_HOME/plugins is searched")
    func homePlugins() throws {
        let tmp = try TempDirectory("catalog")
        try plugin(tmp, "home/plugins/a", id: "test.a")
        let paths = HostPaths.fromEnvironment(["EXTRUN_HOME": tmp.url.appendingPathComponent("home").path])
        #expect(PluginCatalog.discover(paths: paths).plugins.map(\.manifest.id) == ["test.a"])
    }
}
