import ExtrunHost
import ExtrunProtocol
import Foundation
import Testing

/// The host's side of resolution, confirmation and modes, driven by small Python plugins.
@Suite("Resolution and confirmation")
struct ResolutionTests {
    typealias Fixture = HostilePluginTests.Fixture

    static let twoParameters = #"""
        [{"name":"Echo","parameters":[
            {"name":"text","type":"string","required":true,"prompt":"What should I echo?"},
            {"name":"count","type":"integer"}]}]
        """#

    @Test("a required parameter the plugin does not resolve is asked for with the manifest's prompt")
    func requiredEnforcedByHost() throws {
        let f = try Fixture("required", intents: Self.twoParameters, script: "serve()")
        let report = f.run([:])
        let error = try #require(report.error)
        #expect(error.kind == .parameterUnresolved)
        #expect(error.message == "text: What should I echo?")
        #expect(error.details["parameter"] == "text")
        #expect(error.details["prompt"] == "What should I echo?")
        #expect(error.details["resolution"] == ["result": "notRequired"])
        try f.expectNoProcessLeft()
    }

    @Test("a resolved value replaces the given one, for later resolutions and for handle")
    func normalizedValues() throws {
        let f = try Fixture("normalize", intents: Self.twoParameters, script: #"""
            def resolve(msg):
                p = msg["params"]
                if p["parameter"] == "text":
                    reply(msg, {"result": "success", "value": p["parameters"]["text"].strip().upper()})
                else:
                    # The second resolution sees the first one's result.
                    reply(msg, {"result": "success", "value": len(p["parameters"]["text"])})
            def handle(msg):
                reply(msg, {"code": "success", "properties": msg["params"]["parameters"]})
            serve({"resolve": resolve, "handle": handle})
            """#)
        let report = f.run(["text": "  hi there  "])
        #expect(report.error == nil, "\(String(describing: report.error))")
        #expect(report.response?.properties == ["text": "HI THERE", "count": 8])
        try f.expectNoProcessLeft()
    }

    @Test("resolving to null removes the value; a required one is then asked for")
    func resolvedToNull() throws {
        let f = try Fixture("nulled", intents: Self.twoParameters, script: #"""
            serve({"resolve": lambda msg: reply(msg, {"result": "success", "value": None})})
            """#)
        let error = try #require(f.run(["text": "x"]).error)
        #expect(error.kind == .parameterUnresolved)
        #expect(error.details["parameter"] == "text")
        try f.expectNoProcessLeft()
    }

    @Test("confirmationRequired stops the run unless the caller accepts it (--yes)")
    func confirmationRequired() throws {
        let f = try Fixture("confirming", script: #"""
            def resolve(msg):
                reply(msg, {"result": "confirmationRequired", "value": "HI", "prompt": "Did you mean HI?"})
            serve({"resolve": resolve})
            """#)
        let asked = f.run(["text": "hi"])
        let error = try #require(asked.error)
        #expect(error.kind == .parameterUnresolved)
        #expect(error.message == "text: Did you mean HI? (run with --yes to accept it)")
        #expect(error.details["value"] == "HI")

        let accepted = f.run(["text": "hi"], options: .with { $0.assumeYes = true })
        #expect(accepted.error == nil, "\(String(describing: accepted.error))")
        #expect(accepted.response?.properties["echo"] == "HI")
        try f.expectNoProcessLeft()
    }

    @Test("disambiguation stops the run, listing the options")
    func disambiguation() throws {
        let f = try Fixture("ambiguous", script: #"""
            serve({"resolve": lambda msg: reply(msg, {"result": "disambiguation", "options": ["pea", "tomato"], "prompt": "Which soup?"})})
            """#)
        let error = try #require(f.run(["text": "soup"]).error)
        #expect(error.kind == .parameterUnresolved)
        #expect(error.message == "text: Which soup? (2 options; pass one in the intent file)")
        #expect(error.details["options"] == ["pea", "tomato"])
        try f.expectNoProcessLeft()
    }

    @Test("the mode is passed to the plugin, and a mode the manifest does not list is refused before launch")
    func modes() throws {
        let f = try Fixture("modal", script: #"""
            def init(msg):
                note("mode", msg["params"]["mode"] + " " + os.environ["EXTRUN_MODE"])
                handshake(msg)
            serve({"initialize": init})
            """#)
        #expect(f.run(options: .with { $0.mode = .inApp }).exitCode == 0)
        #expect(f.plugin.note("mode") == "in-app in-app")

        let tmp = try TempDirectory("extensiononly")
        let plugin = try ScriptPlugin(in: tmp.url.appendingPathComponent("plugins"), name: "extonly", script: "serve()")
        let manifest = plugin.directory.appendingPathComponent("manifest.json")
        try Data(manifestJSON(id: "test.extonly", modes: #"["extension"]"#).utf8).write(to: manifest)
        let host = ExtrunHost.Host(paths: HostPaths(home: tmp.url.appendingPathComponent("home"), pluginSearchPath: [tmp.url.appendingPathComponent("plugins")]))
        let report = host.handle(IntentInvocation(intent: "Echo", mode: .inApp, parameters: ["text": "x"], source: "test"))
        let error = try #require(report.error)
        #expect(error.kind == .invalidIntent)
        #expect(error.details["field"] == "mode")
        #expect(error.message == "test.extonly does not support in-app mode (it supports extension)")
        #expect(report.metrics == nil)
        #expect(plugin.note("pid") == nil, "the plugin should not have been started")
    }

    @Test("the plugin's environment is scrubbed: only the protocol's variables and a few locale ones")
    func environment() throws {
        let f = try Fixture("env", script: #"""
            def handle(msg):
                reply(msg, {"code": "success", "properties": {"env": sorted(os.environ.keys()), "fds": os.environ["EXTRUN_PROTOCOL_FDS"], "cwd": os.getcwd(), "home": os.environ["HOME"]}})
            serve({"handle": handle})
            """#)
        let report = f.run()
        let properties = try #require(report.response?.properties)
        let names = Set(properties["env"]?.arrayValue?.compactMap(\.stringValue) ?? [])
        let allowed: Set<String> = [
            "PATH", "HOME", "TMPDIR", "EXTRUN_PROTOCOL_FDS", "EXTRUN_MODE", "EXTRUN_PLUGIN_ID", "EXTRUN_PLUGIN_DIR", "SWIFT_BACKTRACE",
            "LANG", "LC_ALL", "LC_CTYPE", "TZ", "LC_CTYPE",
        ]
        #expect(names.isSubset(of: allowed), "unexpected variables: \(names.subtracting(allowed).sorted())")
        #expect(names.isSuperset(of: ["PATH", "HOME", "EXTRUN_PROTOCOL_FDS", "EXTRUN_MODE", "EXTRUN_PLUGIN_ID", "EXTRUN_PLUGIN_DIR"]))
        #expect(properties["fds"] == "3,4")
        // The working directory is a scratch directory, also HOME, removed after the run.
        let cwd = try #require(properties["cwd"]?.stringValue)
        #expect(properties["home"] == .string(cwd))
        #expect(!FileManager.default.fileExists(atPath: cwd), "the scratch directory \(cwd) was not removed")
        try f.expectNoProcessLeft()
    }
}
