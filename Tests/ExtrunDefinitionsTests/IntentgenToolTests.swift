import ExtrunDefinitions
import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

/// extrun-intentgen, the command-line generator (the build-tool plugin runs its `build` command).
@Suite("extrun-intentgen")
struct IntentgenToolTests {
    let tool: URL

    init() throws {
        guard let tool = BuiltProduct.url("extrun-intentgen") else {
            throw Missing(description: "extrun-intentgen is not built; run swift build (or Scripts/test)")
        }
        self.tool = tool
    }

    @Test("--help describes the commands and exits 0; no arguments is a usage error")
    func help() throws {
        let help = try run(tool, ["--help"])
        #expect(help.status == 0)
        for word in ["swift DEFINITION", "manifest DEFINITION", "check DEFINITION", "build DEFINITION", "--executable", "docs/definitions.md"] {
            #expect(help.stdout.contains(word), "\(word)")
        }
        let none = try run(tool, [])
        #expect(none.status == 64)
        #expect(none.stderr.contains("Usage:"))
    }

    @Test("wrong command lines exit 64 with a reason", arguments: [
        (["frobnicate", "x.json"], "unknown command 'frobnicate'"),
        (["swift"], "swift takes one definition file"),
        (["swift", "a.json", "b.json"], "swift takes one definition file"),
        (["manifest", "a.json", "--bogus"], "unknown option '--bogus'"),
        (["build", "a.json"], "build needs --swift OUT.swift"),
        (["swift", "a.json", "-o"], "-o needs a value"),
    ])
    func usage(_ arguments: [String], _ message: String) throws {
        let result = try run(tool, arguments)
        #expect(result.status == 64, "\(result)")
        #expect(result.stderr.contains(message), "\(result.stderr)")
    }

    @Test("check: ok for the examples; an invalid file exits 1 with file:line:column: error: path: message")
    func check() throws {
        let examples = ["MakeUppercase", "RenameFiles", "SoupChef", "People"].map { "Examples/\($0)/intents.json" }
        let ok = try run(tool, ["check"] + examples)
        #expect(ok.status == 0, "\(ok)")
        #expect(ok.stdout.contains("Examples/SoupChef/intents.json: ok (com.example.soupchef 1.0.0: OrderSoup)"))
        #expect(ok.stdout.contains("Examples/People/intents.json: ok (com.example.people 1.0.0: GetPeople, ViewPerson)"))

        let dir = try TempDirectory()
        let bad = try dir.write("Bad/intents.json", definition([("intents[0].parameters[1].default", "huge"), ("intents[0].phrases[1]", "Do")]))
        let result = try run(tool, ["check", bad.path])
        #expect(result.status == 1)
        let lines = result.stderr.split(separator: "\n").map(String.init)
        #expect(lines.count == 3, "\(result.stderr)")
        #expect(lines[0].range(of: #"^\#(NSRegularExpression.escapedPattern(for: bad.path)):\d+:\d+: error: intents\[0\]\.parameters\[1\]\.default: 'huge' is not one of the cases of Size"#, options: .regularExpression) != nil, "\(lines[0])")
        #expect(lines[1].contains(": error: intents[0].phrases[1]: 'Do' does not contain the app's name 'Test App'"))
        #expect(lines[2] == "extrun-intentgen: the definition is invalid; see docs/definitions.md")
    }

    @Test("manifest and swift write what the library generates; the executable defaults to the directory's name")
    func outputs() throws {
        let dir = try TempDirectory()
        let definitionFile = try dir.write("DoThings/intents.json", baseDefinition)
        let manifest = dir.url.appendingPathComponent("out/manifest.json")
        let swift = dir.url.appendingPathComponent("out/Intents.swift")
        #expect(try run(tool, ["manifest", definitionFile.path, "-o", manifest.path]).status == 0)
        #expect(try run(tool, ["swift", definitionFile.path, "-o", swift.path]).status == 0)
        let file = try DefinitionFile.load(path: definitionFile.path)
        #expect(try Data(contentsOf: manifest) == (try file.manifestJSON()))
        #expect(try JSONCoding.decode(PluginManifest.self, fromJSON: Data(contentsOf: manifest)).executable == "DoThings")
        #expect(try String(contentsOf: swift, encoding: .utf8) == file.swiftSource())

        let named = try run(tool, ["manifest", definitionFile.path, "--executable", "run-me"])
        #expect(try JSONCoding.decode(PluginManifest.self, fromJSON: Data(named.stdout.utf8)).executable == "run-me")
        let stdout = try run(tool, ["swift", definitionFile.path])
        #expect(stdout.stdout == file.swiftSource())
    }

    @Test("build writes both, and rewrites a file only when its contents change")
    func build() throws {
        let dir = try TempDirectory()
        let definitionFile = try dir.write("DoThings/intents.json", baseDefinition)
        let swift = dir.url.appendingPathComponent("gen/DoThingsIntents.swift")
        let manifest = dir.url.appendingPathComponent("gen/manifest.json")
        let arguments = ["build", definitionFile.path, "--swift", swift.path, "--manifest", manifest.path]
        #expect(try run(tool, arguments).status == 0)
        let old = Date(timeIntervalSince1970: 1_000_000)
        try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: swift.path)
        try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: manifest.path)
        #expect(try run(tool, arguments).status == 0)
        #expect(try FileManager.default.attributesOfItem(atPath: swift.path)[.modificationDate] as? Date == old, "unchanged: not rewritten")
        #expect(try FileManager.default.attributesOfItem(atPath: manifest.path)[.modificationDate] as? Date == old)

        try dir.write("DoThings/intents.json", baseDefinition.replacingOccurrences(of: "1.2.3", with: "1.2.4"))
        #expect(try run(tool, arguments).status == 0)
        #expect(try String(contentsOf: swift, encoding: .utf8).contains("static let version = \"1.2.4\""))
        #expect(try JSONCoding.decode(PluginManifest.self, fromJSON: Data(contentsOf: manifest)).version == "1.2.4")

        // An invalid definition fails the build and leaves the outputs alone.
        try dir.write("DoThings/intents.json", "{\"plugin\": 3}")
        let failed = try run(tool, arguments)
        #expect(failed.status == 1)
        #expect(failed.stderr.contains("intents.json:1:12: error: plugin: expected an object, got an integer"), "\(failed.stderr)")
        #expect(try JSONCoding.decode(PluginManifest.self, fromJSON: Data(contentsOf: manifest)).version == "1.2.4")
    }

    @Test("an unreadable output location exits 74")
    func unwritable() throws {
        let dir = try TempDirectory()
        let definitionFile = try dir.write("D/intents.json", baseDefinition)
        let blocker = try dir.write("file", "x")
        let result = try run(tool, ["swift", definitionFile.path, "-o", blocker.appendingPathComponent("sub/out.swift").path])
        #expect(result.status == 74, "\(result)")
        #expect(result.stderr.hasPrefix("extrun-intentgen: cannot write the output"))
    }
}
