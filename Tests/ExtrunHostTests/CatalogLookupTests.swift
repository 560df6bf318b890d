import ExtrunHost
import ExtrunProtocol
import Foundation
import Testing

/// `PluginCatalog.handler(for:paths:)` decodes only the manifests that matter;
/// whatever the plugin path holds, it must answer exactly as the full catalog
/// (`discover(paths:).handler(for:)`) does: the same plugin, or the same error.
@Suite("PluginCatalog lookup of one intent")
struct CatalogLookupTests {
    let dir: TempDirectory

    init() throws { dir = try TempDirectory("lookup") }

    /// Writes `<search>/<name>/manifest.json` (and an executable `run` unless told otherwise).
    func plugin(_ search: String, _ name: String, id: String, intents: [String], executable: Bool = true) throws {
        let list = intents.map { #"{"name":"\#($0)"}"# }.joined(separator: ",")
        try dir.write("\(search)/\(name)/manifest.json", manifestJSON(id: id, executable: "run", intents: "[\(list)]"))
        if executable {
            let run = try dir.write("\(search)/\(name)/run", "#!/bin/sh\nexit 0\n")
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: run.path)
        }
    }

    enum Outcome: Equatable {
        case found(manifest: String, intent: String)
        case failed(ErrorKind, String)
    }

    func outcome(_ body: () throws(HostError) -> (DiscoveredPlugin, IntentDefinition)) -> Outcome {
        do {
            let (plugin, definition) = try body()
            return .found(manifest: plugin.manifestURL.path, intent: definition.name)
        } catch {
            return .failed(error.kind, error.message)
        }
    }

    /// Both ways agree for `intent`; returns the outcome.
    @discardableResult
    func agree(_ intent: String, searchPath: [String], sourceLocation: SourceLocation = #_sourceLocation) -> Outcome {
        let paths = HostPaths(home: dir.url.appendingPathComponent("home"), pluginSearchPath: searchPath.map { dir.url.appendingPathComponent($0) })
        let full = outcome { () throws(HostError) in try PluginCatalog.discover(paths: paths).handler(for: intent) }
        let quick = outcome { () throws(HostError) in try PluginCatalog.handler(for: intent, paths: paths) }
        #expect(quick == full, sourceLocation: sourceLocation)
        return quick
    }

    @Test("the plugin that declares the intent, among others")
    func found() throws {
        try plugin("p", "a", id: "test.a", intents: ["A1", "A2"])
        try plugin("p", "b", id: "test.b", intents: ["B"])
        try plugin("p", "c", id: "test.c", intents: ["C"])
        guard case .found(let manifest, "B") = agree("B", searchPath: ["p"]) else {
            Issue.record("B not found")
            return
        }
        #expect(manifest.hasSuffix("/p/b/manifest.json"))
        agree("A2", searchPath: ["p"])
    }

    @Test("no handler: the same message, known intents and unreadable manifests included")
    func noHandler() throws {
        try plugin("p", "a", id: "test.a", intents: ["A"])
        try dir.write("p/broken/manifest.json", "{\"id\": ")
        guard case .failed(.noHandler, let message) = agree("Nope", searchPath: ["p", "missing"]) else {
            Issue.record("expected noHandler")
            return
        }
        #expect(message.contains("known intents: A") && message.contains("could not be read"))
    }

    @Test("two plugins claiming the intent: the same conflict")
    func conflict() throws {
        try plugin("p", "a", id: "test.a", intents: ["X"])
        try plugin("p", "b", id: "test.b", intents: ["X", "Y"])
        guard case .failed(.configurationError, let message) = agree("X", searchPath: ["p"]) else {
            Issue.record("expected a conflict")
            return
        }
        #expect(message.contains("claimed by more than one plugin"))
        agree("Y", searchPath: ["p"])
    }

    @Test("an earlier directory's plugin with the same id shadows the one that declares the intent")
    func shadowedByID() throws {
        try plugin("first", "old", id: "test.same", intents: ["Old"])
        try plugin("second", "new", id: "test.same", intents: ["New", "Old"])
        guard case .failed(.noHandler, _) = agree("New", searchPath: ["first", "second"]) else {
            Issue.record("the shadowed plugin's intent must not be found")
            return
        }
        agree("Old", searchPath: ["first", "second"])
        // The other way round, the declaring plugin comes first and wins.
        guard case .found(let manifest, "New") = agree("New", searchPath: ["second", "first"]) else {
            Issue.record("New not found")
            return
        }
        #expect(manifest.hasSuffix("/second/new/manifest.json"))
    }

    @Test("an unreadable or invalid manifest anywhere, and a declaring plugin without its executable")
    func problems() throws {
        try plugin("p", "a", id: "test.a", intents: ["A"])
        try dir.write("p/notjson/manifest.json", "not json")
        agree("A", searchPath: ["p"])
        // Valid JSON, but not a valid manifest (no executable field), declaring the intent.
        try dir.write("q/invalid/manifest.json", #"{"id":"test.invalid","intents":[{"name":"Q"}]}"#)
        agree("Q", searchPath: ["q"])
        try plugin("r", "noexe", id: "test.noexe", intents: ["R"], executable: false)
        guard case .failed(.configurationError, let message) = agree("R", searchPath: ["r"]) else {
            Issue.record("expected the missing executable")
            return
        }
        #expect(message.contains("is missing"))
    }

    @Test("a manifest changed on disk is read again")
    func changedManifest() throws {
        try plugin("p", "a", id: "test.a", intents: ["First"])
        agree("First", searchPath: ["p"])
        try plugin("p", "a", id: "test.a", intents: ["Second", "Third"])
        guard case .found(_, "Second") = agree("Second", searchPath: ["p"]) else {
            Issue.record("the changed manifest was not read again")
            return
        }
        guard case .failed(.noHandler, _) = agree("First", searchPath: ["p"]) else {
            Issue.record("the old intent is still found")
            return
        }
    }
}
