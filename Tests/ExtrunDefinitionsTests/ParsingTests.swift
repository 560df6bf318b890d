import ExtrunDefinitions
import ExtrunProtocol
import Foundation
import Testing

@Suite("Parsing definition files")
struct ParsingTests {
    @Test("a complete definition reads into the model")
    func model() throws {
        let file = try valid(baseDefinition)
        let d = file.definition
        #expect(d.plugin.id == "com.example.test")
        #expect(d.plugin.version == "1.2.3")
        #expect(d.plugin.owner == "TEAM")
        #expect(d.plugin.appName == "Test App")
        #expect(d.plugin.modes == [.extension, .inApp])
        #expect(d.plugin.limits?.extension?.memoryBytes == 62_914_560)
        #expect(d.enums.map(\.name) == ["Size"])
        #expect(d.enums[0].cases.map(\.value) == ["small", "extra_large"])
        #expect(d.enums[0].cases.map(\.title) == [nil, "Extra Large"])
        #expect(d.types[0].display == DisplayTemplate(title: "${label}", subtitle: "${count} left", image: "things/${identifier}.png"))
        let intent = try #require(d.intents.first)
        #expect(intent.parameters.map(\.name) == ["thing", "size", "fancy", "style", "when", "attachments"])
        #expect(intent.parameters[0].unsupportedReasons == [UnsupportedReason(code: "gone", message: "It is gone.")])
        #expect(intent.parameters[3].parent == ParentCondition(parameter: "fancy", value: true))
        #expect(intent.parameters[3].values?.map(\.value) == ["plain", "bold"])
        #expect(intent.parameters[1].default == "small")
        #expect(intent.outputs.map(\.name) == ["thing", "message"])
        #expect(intent.responses.map(\.code) == ["success", "failureGone", "doneLater"])
        #expect(intent.phrases == ["Do ${thing} in Test App", "Do something in Test App"])
        #expect(d.valueType(of: intent.parameters[0], in: intent) == .custom("Thing"))
        #expect(d.valueType(of: intent.parameters[1], in: intent) == .enumeration(.named("Size")))
        #expect(d.valueType(of: intent.parameters[3], in: intent) == .enumeration(.inline(intent: "DoThing", parameter: "style")))
    }

    @Test("a minimal definition: the documented defaults")
    func minimal() throws {
        let file = try valid(#"{"plugin": {"id": "a.b", "version": "1", "owner": "O"}, "intents": [{"name": "Go"}]}"#, path: "/x/Thing/intents.json")
        let manifest = file.manifest()
        #expect(manifest.executable == "Thing", "the directory's name")
        #expect(file.manifest(executable: "other").executable == "other")
        #expect(manifest.modes == [.extension, .inApp])
        #expect(manifest.intents.map(\.name) == ["Go"])
        #expect(manifest.intents[0].parameters == [])
        #expect(manifest.limits == nil)
        #expect(manifest.appName == nil)
        #expect(manifest.protocolVersion == ProtocolVersion.current)
        let declared = try valid(#"{"plugin": {"id": "a.b", "version": "1", "owner": "O", "executable": "run"}, "intents": [{"name": "Go"}]}"#)
        #expect(declared.manifest().executable == "run")
    }

    @Test("JSON syntax errors give the file, the line and the column")
    func syntax() {
        let cases: [(String, Int, Int, String)] = [
            ("{\n  \"plugin\": {,\n}", 2, 14, "expected a member name"),
            ("{\"a\": 1,}", 1, 9, "trailing commas"),
            ("{\"a\": [1, 2}", 1, 12, "expected ',' or ']'"),
            ("{\"a\": \"x\ny\"}", 1, 9, "line break inside a string"),
            ("{\"a\": 01}", 1, 7, "leading zero"),
            ("{\"a\": tru}", 1, 7, "expected 'true'"),
            ("{} {}", 1, 4, "after the end of the document"),
            ("", 1, 1, "a value is missing"),
            ("{\"a\": \"\\q\"}", 1, 8, "invalid escape"),
            ("{\"a\": 1, \"a\": 2}", 1, 10, "the key 'a' appears twice in this object (first at 1:2)"),
        ]
        for (json, line, column, fragment) in cases {
            let found = diagnostics(json)
            #expect(found.count == 1, "\(json)")
            let d = found.first
            #expect(d?.file == "test/intents.json")
            #expect(d?.location == FilePosition(line: line, column: column), "\(json): \(String(describing: d))")
            #expect(d?.message.hasPrefix("not valid JSON: ") == true)
            #expect(d?.message.contains(fragment) == true, "\(json): \(String(describing: d))")
        }
    }

    @Test("strings: escapes, surrogate pairs and UTF-8; numbers: integers and doubles")
    func values() throws {
        let node = try JSONNodeParser.parse(Data(#"{"s": "a\"\\\/\b\f\n\r\t\u00e9\ud83c\udf72 ç", "i": -12, "d": 1.5e2, "n": null, "l": [true, false]}"#.utf8))
        #expect(node.json == ["s": "a\"\\/\u{08}\u{0C}\n\r\té🍲 ç", "i": -12, "d": 150.0, "n": nil, "l": [true, false]])
        #expect(node.location == FilePosition(line: 1, column: 1))
        guard case .object(let members) = node.value else { Issue.record("not an object"); return }
        #expect(members.map(\.key) == ["s", "i", "d", "n", "l"], "members keep the file's order")
        #expect(members[1].keyLocation.column == 48)
    }

    @Test("a column counts characters, not bytes")
    func columns() {
        let d = diagnostics("{\"é🍲\": x}")
        #expect(d.first?.location == FilePosition(line: 1, column: 8))
    }

    @Test("unknown fields are errors, with the closest known name")
    func unknownFields() {
        let d = diagnostics(definition([("intents[0].parameters[0].requried", true), ("plugin.colour", "red")]))
        #expect(d.map(\.path) == ["plugin.colour", "intents[0].parameters[0].requried"])
        #expect(d[1].message == "unknown field 'requried'; did you mean 'required'?")
        #expect(d[0].message.hasPrefix("unknown field 'colour' (known here: id, version, owner"))
        #expect(d.allSatisfy { $0.location != nil })
    }

    @Test("members whose name starts with $ are comments")
    func comments() throws {
        _ = try valid(definition([("$schema", "x"), ("intents[0].$note", "y"), ("intents[0].parameters[0].$why", ["a"])]))
    }

    @Test("missing and mistyped fields name their path")
    func shapes() {
        let cases: [([(String, JSONValue?)], String, String)] = [
            ([("plugin.id", nil)], "plugin", "missing required field 'id'"),
            ([("intents[0].parameters[1].type", nil)], "intents[0].parameters[1]", "missing required field 'type'"),
            ([("intents[0].parameters[0].required", "yes")], "intents[0].parameters[0].required", "expected true or false, got a string"),
            ([("intents[0].phrases", "Do it")], "intents[0].phrases", "expected a list of strings, got a string"),
            ([("intents[0].phrases[0]", 3)], "intents[0].phrases[0]", "expected a string, got an integer"),
            ([("intents[0].parameters", ["a": 1])], "intents[0].parameters", "expected a list, got an object"),
            ([("intents[0].parameters[0]", "thing")], "intents[0].parameters[0]", "expected an object, got a string"),
            ([("enums[0].cases[1]", 7)], "enums[0].cases[1]", "expected a string or an object with 'value' and 'title', got an integer"),
            ([("plugin.modes", ["extension", "background"])], "plugin.modes[1]", "'background' is not a mode (use extension or in-app)"),
            ([("plugin.limits.extension.deadlineMs", 0)], "plugin.limits.extension.deadlineMs", "expected a positive integer, got 0"),
            ([("plugin.limits.in-app.memory", 1)], "plugin.limits.in-app.memory", "unknown field 'memory'"),
            ([("intents[0].parameters[0].unsupportedReasons[0].message", nil)], "intents[0].parameters[0].unsupportedReasons[0]", "missing required field 'message'"),
        ]
        for (changes, path, fragment) in cases {
            let d = diagnostics(definition(changes))
            #expect(d.contains { $0.path == path && $0.message.contains(fragment) }, "\(path): \(d)")
        }
    }

    @Test("not an object at the top")
    func topLevel() {
        let d = diagnostics("[1, 2]")
        #expect(d.map(\.description) == ["test/intents.json:1:1: error: expected an object, got a list"])
    }

    @Test("a diagnostic reads like a compiler's: file:line:column: error: path: message")
    func description() {
        let d = diagnostics(definition([("intents[0].parameters[1].default", "huge")]))
        #expect(d.count == 1)
        let text = d.first?.description ?? ""
        #expect(text.range(of: #"^test/intents\.json:\d+:\d+: error: intents\[0\]\.parameters\[1\]\.default: 'huge' is not one of the cases of Size \(small, extra_large\)$"#, options: .regularExpression) != nil, "\(text)")
        let error = DefinitionError(d)
        #expect(error.description == text)
    }

    @Test("a file that cannot be read is a diagnostic naming it")
    func unreadable() {
        #expect(throws: DefinitionError.self) { try DefinitionFile.load(path: "/nonexistent/intents.json") }
        do {
            _ = try DefinitionFile.load(path: "/nonexistent/intents.json")
        } catch {
            #expect(error.description.hasPrefix("/nonexistent/intents.json: error: cannot read the definition file"), "\(error)")
        }
    }
}
