import ExtrunProtocol
import Foundation
import Testing

private func manifest(_ text: String) throws -> PluginManifest {
    try JSONCoding.decode(PluginManifest.self, fromJSON: Data(text.utf8))
}

/// A valid manifest whose intents are `intents` (JSON text of the array).
private func manifest(intents: String, protocolVersion: Int = 1, extra: String = "") throws -> PluginManifest {
    try manifest(
        #"{"id":"com.example.t","version":"1.0","owner":"TEAM","protocolVersion":\#(protocolVersion),"executable":"run"\#(extra),"intents":\#(intents)}"#)
}

@Suite("Manifest")
struct ManifestTests {
    @Test("a minimal manifest gets the documented defaults")
    func defaults() throws {
        let m = try manifest(intents: #"[{"name":"A","parameters":[{"name":"p","type":"string"}]}]"#)
        #expect(m.id == "com.example.t")
        #expect(m.arguments == [])
        #expect(m.modes == [.extension, .inApp])
        #expect(m.defaultMode == .extension)
        let intent = try #require(m.intent(named: "A"))
        #expect(intent.title == nil && intent.description == nil)
        #expect(intent.responses == [])
        let p = try #require(intent.parameter(named: "p"))
        #expect(p.required == false)
        #expect(p.multiple == false)
        #expect(p.default == nil && p.prompt == nil && p.values == nil && p.allowedTypes == nil)
        #expect(m.intent(named: "B") == nil)
        #expect(intent.parameter(named: "q") == nil)
        #expect(m.problems() == [])

        let noParameters = try manifest(intents: #"[{"name":"A"}]"#)
        #expect(noParameters.intents[0].parameters == [])
    }

    @Test("every field is read")
    func allFields() throws {
        let m = try manifest(
            intents: #"""
                [{"name":"Order","title":"Order Soup","description":"Orders soup.",
                  "parameters":[{"name":"soup","type":"enum","title":"Soup","required":true,"multiple":true,
                                 "default":["tomato"],"prompt":"Which soup?","values":["tomato","pea"]},
                                {"name":"photo","type":"file","allowedTypes":["public.image"]}],
                  "responses":[{"code":"soldOut","success":false,"dialog":"Sorry, {soup} is sold out.","properties":["soup"]},
                               {"code":"ordered","success":true}]}]
                """#, extra: #","arguments":["--serve"],"modes":["in-app"]"#)
        #expect(m.arguments == ["--serve"])
        #expect(m.modes == [.inApp])
        #expect(m.defaultMode == .inApp)
        let intent = m.intents[0]
        #expect(intent.title == "Order Soup")
        #expect(intent.description == "Orders soup.")
        #expect(intent.parameters[0] == ParameterDefinition(
            name: "soup", type: .enum, title: "Soup", required: true, multiple: true, default: ["tomato"], prompt: "Which soup?",
            values: ["tomato", "pea"]))
        #expect(intent.parameters[1].allowedTypes == ["public.image"])
        #expect(intent.responses == [
            ResponseDefinition(code: "soldOut", success: false, dialog: "Sorry, {soup} is sold out.", properties: ["soup"]),
            ResponseDefinition(code: "ordered", success: true),
        ])
        #expect(m.problems() == [])

        #expect(intent.isKnownResponseCode("success"))
        #expect(intent.isKnownResponseCode("continueInApp"))
        #expect(intent.isKnownResponseCode("soldOut"))
        #expect(!intent.isKnownResponseCode("sortOf"))
        #expect(intent.isSuccessCode("success"))
        #expect(intent.isSuccessCode("ordered"))
        #expect(!intent.isSuccessCode("soldOut"))
        #expect(!intent.isSuccessCode("ready"))
        #expect(!intent.isSuccessCode("failure"))
    }

    @Test("defaultMode prefers extension wherever it is listed")
    func defaultMode() {
        let intents = [IntentDefinition(name: "A")]
        #expect(PluginManifest(id: "a", version: "1", owner: "o", executable: "x", modes: [.inApp, .extension], intents: intents).defaultMode == .extension)
        #expect(PluginManifest(id: "a", version: "1", owner: "o", executable: "x", modes: [.inApp], intents: intents).defaultMode == .inApp)
    }

    @Test("decoding errors name the field that is wrong")
    func decodingErrors() throws {
        func describe(_ text: String) -> String {
            do {
                _ = try manifest(text)
                return "no error"
            } catch {
                return JSONCoding.describe(error)
            }
        }
        #expect(describe(#"{"version":"1","owner":"o","protocolVersion":1,"executable":"x","intents":[]}"#) == "missing required field 'id'")
        #expect(
            describe(#"{"id":"a","version":"1","owner":"o","protocolVersion":1,"executable":"x","intents":[{"name":"A","parameters":[{"name":"p"}]}]}"#)
                == "intents[0].parameters[0]: missing required field 'type'")
        #expect(
            describe(#"{"id":"a","version":"1","owner":"o","protocolVersion":"1","executable":"x","intents":[]}"#)
                .hasPrefix("protocolVersion: expected an integer"))
        let badType = describe(
            #"{"id":"a","version":"1","owner":"o","protocolVersion":1,"executable":"x","intents":[{"name":"A","parameters":[{"name":"p","type":"text"}]}]}"#)
        #expect(badType.hasPrefix("intents[0].parameters[0].type:"), "\(badType)")
        let badMode = describe(#"{"id":"a","version":"1","owner":"o","protocolVersion":1,"executable":"x","modes":["app"],"intents":[]}"#)
        #expect(badMode.hasPrefix("modes[0]:"), "\(badMode)")
    }

    @Test("problems: a wrong protocolVersion")
    func wrongProtocolVersion() throws {
        let m = try manifest(intents: #"[{"name":"A"}]"#, protocolVersion: 2)
        #expect(m.problems() == ["protocolVersion: 2 is not supported (this host speaks version 1)"])
    }

    @Test("problems: an intent declared twice")
    func duplicateIntents() throws {
        let m = try manifest(intents: #"[{"name":"A"},{"name":"B"},{"name":"A"}]"#)
        #expect(m.problems() == ["intents[2].name: intent 'A' is declared twice"])
    }

    @Test("problems: a parameter declared twice")
    func duplicateParameters() throws {
        let m = try manifest(intents: #"[{"name":"A","parameters":[{"name":"p","type":"string"},{"name":"p","type":"integer"}]}]"#)
        #expect(m.problems() == ["intents[0].parameters[1].name: parameter 'p' is declared twice"])
    }

    @Test("problems: an enum without values, or values on a non-enum")
    func enumValues() throws {
        let m = try manifest(
            intents: #"""
                [{"name":"A","parameters":[{"name":"e","type":"enum"},{"name":"f","type":"enum","values":[]},
                                           {"name":"s","type":"string","values":["a"]}]}]
                """#)
        #expect(m.problems() == [
            "intents[0].parameters[0].values: an enum parameter must list its values",
            "intents[0].parameters[1].values: an enum parameter must list its values",
            "intents[0].parameters[2].values: only enum parameters take values",
        ])
    }

    @Test("problems: defaults that do not fit their type")
    func badDefaults() throws {
        let m = try manifest(
            intents: #"""
                [{"name":"A","parameters":[
                    {"name":"i","type":"integer","default":"x"},
                    {"name":"e","type":"enum","values":["a","b"],"default":"c"},
                    {"name":"d","type":"date","default":"yesterday"},
                    {"name":"f","type":"file","default":"notes.txt"},
                    {"name":"m","type":"string","multiple":true,"default":"single"},
                    {"name":"ok1","type":"number","default":2},
                    {"name":"ok2","type":"boolean","default":null},
                    {"name":"ok3","type":"date","default":"2026-11-22"}]}]
                """#)
        #expect(m.problems() == [
            "intents[0].parameters[0].default: expected an integer, got string",
            "intents[0].parameters[1].default: 'c' is not one of a, b",
            "intents[0].parameters[2].default: 'yesterday' is not an ISO 8601 date (e.g. 2026-11-22 or 2026-11-22T10:30:00Z)",
            "intents[0].parameters[3].default: a file parameter cannot have a default",
            "intents[0].parameters[4].default: expected a list of string values, got string",
        ])
    }

    @Test("problems: a standard code declared as custom, and other response-code mistakes")
    func responseCodes() throws {
        let m = try manifest(
            intents: #"[{"name":"A","responses":[{"code":"failure"},{"code":"soldOut"},{"code":"soldOut"},{"code":""}]}]"#)
        #expect(m.problems() == [
            "intents[0].responses[0].code: 'failure' is a standard code; custom codes need their own names",
            "intents[0].responses[2].code: 'soldOut' is declared twice",
            "intents[0].responses[3].code: must not be empty",
        ])
    }

    @Test("problems: identity, executable, modes and intents")
    func topLevel() throws {
        let m = try manifest(#"{"id":"com example/x","version":"1","owner":"","protocolVersion":1,"executable":"","modes":[],"intents":[]}"#)
        #expect(m.problems() == [
            "id: 'com example/x' is not a valid plugin id (use reverse-DNS, e.g. com.example.uppercase)",
            "owner: must not be empty",
            "executable: must not be empty",
            "modes: must list at least one of extension, in-app",
            "intents: the plugin declares no intent",
        ])
        let unnamed = try manifest(intents: #"[{"name":"","parameters":[{"name":"","type":"string"}]}]"#)
        #expect(unnamed.problems() == ["intents[0].name: must not be empty", "intents[0].parameters[0].name: must not be empty"])
    }

    @Test("the hand-written manifests of the examples are valid (generated ones are checked once staged, in ExtrunHostTests)")
    func exampleManifests() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let examples = root.appendingPathComponent("Examples")
        let names = try FileManager.default.contentsOfDirectory(atPath: examples.path).sorted()
        var checked = 0
        for name in names {
            let url = examples.appendingPathComponent("\(name)/manifest.json")
            guard FileManager.default.fileExists(atPath: url.path) else { continue }
            let m = try JSONCoding.decode(PluginManifest.self, fromJSON: Data(contentsOf: url))
            #expect(m.problems() == [], "\(name)")
            checked += 1
        }
        #expect(checked > 0, "no hand-written manifest under \(examples.path)")
    }
}
