import ExtrunHost
import ExtrunProtocol
import Foundation
import Testing

private let base = URL(fileURLWithPath: "/nonexistent-base", isDirectory: true)

private func parse(_ text: String) throws(HostError) -> IntentInvocation {
    try IntentFileParser.parse(Data(text.utf8), source: "intent.json", baseDirectory: base)
}

/// The HostError `body` throws, recording an issue if it throws none.
private func failure<T>(_ body: () throws -> T, sourceLocation: SourceLocation = #_sourceLocation) -> HostError? {
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

private func definition(_ parameters: [ParameterDefinition]) -> IntentDefinition {
    IntentDefinition(name: "Test", parameters: parameters)
}

private func wire(
    _ parameters: [String: JSONValue], _ definition: IntentDefinition, baseDirectory: URL = base
) throws(HostError) -> [String: JSONValue] {
    try IntentFileParser.wireParameters(
        for: IntentInvocation(intent: definition.name, parameters: parameters, source: "intent.json", baseDirectory: baseDirectory),
        definition: definition)
}

@Suite("Intent files: parsing")
struct IntentFileParseTests {
    @Test("a complete intent file")
    func complete() throws {
        let invocation = try parse(#"{"intent":"MakeUppercase","parameters":{"text":"hi","n":2},"id":"run-1","mode":"in-app"}"#)
        #expect(invocation.intent == "MakeUppercase")
        #expect(invocation.parameters == ["text": "hi", "n": 2])
        #expect(invocation.id == "run-1")
        #expect(invocation.mode == .inApp)
        #expect(invocation.source == "intent.json")
        #expect(invocation.baseDirectory == base)
    }

    @Test("only intent is required; null optional fields count as absent")
    func minimal() throws {
        let invocation = try parse(#"{"intent":"A"}"#)
        #expect(invocation.parameters.isEmpty && invocation.id == nil && invocation.mode == nil)
        let nulls = try parse(#"{"intent":"A","parameters":null,"id":null,"mode":null}"#)
        #expect(nulls.parameters.isEmpty && nulls.id == nil && nulls.mode == nil)
    }

    @Test("malformed JSON names the file, the line and the column")
    func malformedJSON() throws {
        let error = try #require(failure { try parse("{\n  \"intent\": \"A\",\n  \"parameters\": {\"text\": 'hi'}\n}") })
        #expect(error.kind == .invalidIntent)
        #expect(error.message.hasPrefix("intent.json: not valid JSON: "), "\(error.message)")
        #expect(error.message.contains("line 3"), "\(error.message)")
        #expect(error.details == ["file": "intent.json"])
    }

    @Test("an empty file says so")
    func empty() throws {
        let error = try #require(failure { try parse("") })
        #expect(error.kind == .invalidIntent)
        #expect(error.message == "intent.json: the intent file is empty")
    }

    @Test("the file must be an object", arguments: ["[]", "\"MakeUppercase\"", "3", "null"])
    func notAnObject(text: String) throws {
        let error = try #require(failure { try parse(text) })
        #expect(error.kind == .invalidIntent)
        #expect(error.message.contains("expected a JSON object like"), "\(error.message)")
    }

    @Test("an unknown top-level field is named")
    func unknownField() throws {
        let error = try #require(failure { try parse(#"{"intent":"A","params":{"text":"hi"}}"#) })
        #expect(error.kind == .invalidIntent)
        #expect(error.details["field"] == "params")
        #expect(error.message == "intent.json: params: unknown field (allowed: intent, parameters, id, groupIdentifier, mode)")
    }

    @Test("a missing intent is named")
    func missingIntent() throws {
        let error = try #require(failure { try parse(#"{"parameters":{}}"#) })
        #expect(error.details["field"] == "intent")
        #expect(error.message == "intent.json: intent: missing: name the intent to handle")
    }

    @Test("wrongly typed top-level fields name the field and the type found", arguments: [
        (#"{"intent":5}"#, "intent", "expected a non-empty string, got integer"),
        (#"{"intent":""}"#, "intent", "expected a non-empty string, got string"),
        (#"{"intent":"A","id":7}"#, "id", "expected a string, got integer"),
        (#"{"intent":"A","mode":"app"}"#, "mode", "'app' is not a mode (extension or in-app)"),
        (#"{"intent":"A","mode":true}"#, "mode", #"expected "extension" or "in-app", got boolean"#),
        (#"{"intent":"A","parameters":["hi"]}"#, "parameters", "expected an object of parameter values, got array"),
    ])
    func wrongTypes(text: String, field: String, message: String) throws {
        let error = try #require(failure { try parse(text) })
        #expect(error.kind == .invalidIntent)
        #expect(error.details["field"] == .string(field))
        #expect(error.message == "intent.json: \(field): \(message)")
    }

    @Test("read(path:) resolves relative file parameters against the intent file's directory")
    func readFromDisk() throws {
        let tmp = try TempDirectory("intent")
        let file = try tmp.write("sub/intent.json", #"{"intent":"A"}"#)
        let invocation = try IntentFileParser.read(path: file.path)
        #expect(invocation.source == file.path)
        #expect(invocation.baseDirectory.standardizedFileURL.path == tmp.url.appendingPathComponent("sub").standardizedFileURL.path)
    }

    @Test("an unreadable intent file is invalidIntent naming the file", arguments: ["missing.json", "."])
    func unreadable(name: String) throws {
        let tmp = try TempDirectory("intent")
        let path = tmp.url.appendingPathComponent(name).path
        let error = try #require(failure { try IntentFileParser.read(path: path) })
        #expect(error.kind == .invalidIntent)
        #expect(error.message.hasPrefix("\(path): cannot read the intent file: "), "\(error.message)")
        #expect(error.details["file"] == .string(path))
    }
}

@Suite("Intent files: parameters against the manifest")
struct WireParameterTests {
    static let textDefinition = definition([ParameterDefinition(name: "text", type: .string, required: true)])

    @Test("values that fit pass through; missing values stay missing for resolution")
    func passThrough() throws {
        #expect(try wire(["text": "hi"], Self.textDefinition) == ["text": "hi"])
        #expect(try wire([:], Self.textDefinition) == [:])
        #expect(try wire(["text": nil], Self.textDefinition) == [:])
    }

    @Test("an unknown parameter is named, with the intent's parameters")
    func unknownParameter() throws {
        let error = try #require(failure { try wire(["text": "hi", "txet": "x"], Self.textDefinition) })
        #expect(error.kind == .invalidIntent)
        #expect(error.details["field"] == "parameters.txet")
        #expect(error.message == "intent.json: parameters.txet: unknown parameter of Test (its parameters: text)")
        let none = try #require(failure { try wire(["x": 1], definition([])) })
        #expect(none.message.hasSuffix("(its parameters: none)"))
    }

    @Test("a value of the wrong type names the field parameters.x")
    func wrongType() throws {
        let d = definition([
            ParameterDefinition(name: "x", type: .integer), ParameterDefinition(name: "when", type: .date),
            ParameterDefinition(name: "list", type: .boolean, multiple: true),
        ])
        let error = try #require(failure { try wire(["x": "three"], d) })
        #expect(error.kind == .invalidIntent)
        #expect(error.details == ["file": "intent.json", "field": "parameters.x"])
        #expect(error.message == "intent.json: parameters.x: expected an integer, got string")
        #expect(failure { try wire(["when": "someday"], d) }?.details["field"] == "parameters.when")
        let listError = try #require(failure { try wire(["list": [true, "no"]], d) })
        #expect(listError.message == "intent.json: parameters.list: [1]: expected a boolean (true or false), got string")
    }

    @Test("defaults are applied to missing and null values, not to given ones")
    func defaults() throws {
        let d = definition([
            ParameterDefinition(name: "format", type: .string, default: "yyyy-MM-dd"),
            ParameterDefinition(name: "flag", type: .boolean, default: false),
            ParameterDefinition(name: "none", type: .string, default: nil),
        ])
        #expect(try wire([:], d) == ["format": "yyyy-MM-dd", "flag": false])
        #expect(try wire(["format": nil], d) == ["format": "yyyy-MM-dd", "flag": false])
        #expect(try wire(["format": "HH", "flag": true], d) == ["format": "HH", "flag": true])
    }

    @Test("a single value is wrapped in a list for a multiple parameter")
    func singleWrapped() throws {
        let d = definition([ParameterDefinition(name: "tags", type: .string, multiple: true)])
        #expect(try wire(["tags": "one"], d) == ["tags": ["one"]])
        #expect(try wire(["tags": ["one", "two"]], d) == ["tags": ["one", "two"]])
    }

    @Test("an integer written as 3.0 becomes 3; 3.5 is refused")
    func integralDoubles() throws {
        let d = definition([ParameterDefinition(name: "n", type: .integer), ParameterDefinition(name: "ns", type: .integer, multiple: true)])
        let value = try wire(["n": .double(3)], d)
        #expect(value == ["n": .int(3)])
        #expect(value["n"]?.intValue == 3)
        #expect(failure { try wire(["n": 3.5], d) }?.details["field"] == "parameters.n")
    }

    @Test("a file parameter loads a path relative to the intent file's directory")
    func fileFromPath() throws {
        let tmp = try TempDirectory("files")
        try tmp.write("files/Meeting Notes.txt", "minutes")
        let d = definition([ParameterDefinition(name: "doc", type: .file)])
        let value = try wire(["doc": "files/Meeting Notes.txt"], d, baseDirectory: tmp.url)
        #expect(value["doc"] == ["filename": "Meeting Notes.txt", "typeIdentifier": "public.plain-text", "data": .string(Data("minutes".utf8).base64EncodedString())])
        // An absolute path, in an object, with a new name and an explicit type.
        let absolute = tmp.url.appendingPathComponent("files/Meeting Notes.txt").path
        let renamed = try wire(["doc": ["path": .string(absolute), "filename": "notes.md", "typeIdentifier": "com.example.notes"]], d)
        #expect(renamed["doc"]?["filename"] == "notes.md")
        #expect(renamed["doc"]?["typeIdentifier"] == "com.example.notes")
        #expect(renamed["doc"]?["data"] == .string(Data("minutes".utf8).base64EncodedString()))
    }

    @Test("while paths are refused (extrun serve), no path is read: not in an intent, an object, a prompt's answer; inline files still are")
    func pathsRefusedForACaller() throws {
        let tmp = try TempDirectory("files")
        try tmp.write("secret.txt", "root's secret")
        let secret = tmp.url.appendingPathComponent("secret.txt").path
        let d = definition([ParameterDefinition(name: "doc", type: .file)])
        let reason = "a caller of extrun serve gives files inline"
        IntentFileParser.$pathsRefused.withValue(reason) {
            for value: JSONValue in [.string(secret), .string("secret.txt"), ["path": .string(secret)], .array([.string(secret)])] {
                let error = failure { try wire(["doc": value], d, baseDirectory: tmp.url) }
                #expect(error?.kind == .invalidIntent, "\(value)")
                #expect(error?.details["reason"] == "path", "\(value)")
                #expect(error?.message.contains(reason) == true && error?.message.contains("root's secret") == false)
            }
            let inline = try? wire(["doc": ["filename": "a.txt", "text": "fine"]], d)
            #expect(inline?["doc"]?["filename"] == "a.txt")
        }
        // Outside, the same path is read as before.
        #expect((try wire(["doc": .string(secret)], d))["doc"]?["filename"] == "secret.txt")
    }

    @Test("a file parameter takes inline text or base64 data with a filename")
    func inlineFiles() throws {
        let d = definition([ParameterDefinition(name: "doc", type: .file)])
        let text = try wire(["doc": ["filename": "a.csv", "text": "a,b\n1,2\n"]], d)
        #expect(text["doc"] == ["filename": "a.csv", "typeIdentifier": "public.comma-separated-values-text", "data": .string(Data("a,b\n1,2\n".utf8).base64EncodedString())])
        let data = try wire(["doc": ["filename": "blob", "data": "AAEC/w=="]], d)
        #expect(data["doc"] == ["filename": "blob", "typeIdentifier": "public.data", "data": "AAEC/w=="])
    }

    @Test("malformed file values name the field", arguments: [
        (JSONValue.object(["filename": "a.txt", "data": "not base64!"]), "'data' is not valid base64"),
        (.object(["filename": "a.txt"]), "a file object needs 'path', or 'filename' with 'text' or 'data' (base64)"),
        (.object(["text": "hi"]), "a file object needs 'path', or 'filename' with 'text' or 'data' (base64)"),
        (.int(5), "expected a file: a path string, or an object with 'path', or 'filename' and 'text'/'data'; got integer"),
    ])
    func malformedFiles(value: JSONValue, message: String) throws {
        let d = definition([ParameterDefinition(name: "doc", type: .file)])
        let error = try #require(failure { try wire(["doc": value], d) })
        #expect(error.kind == .invalidIntent)
        #expect(error.details["field"] == "parameters.doc")
        #expect(error.message == "intent.json: parameters.doc: \(message)")
    }

    @Test("a file that cannot be read names the field and the path")
    func missingFile() throws {
        let tmp = try TempDirectory("files")
        let d = definition([ParameterDefinition(name: "files", type: .file, multiple: true)])
        try tmp.write("here.txt", "x")
        let error = try #require(failure { try wire(["files": ["here.txt", "gone.txt"]], d, baseDirectory: tmp.url) })
        #expect(error.kind == .invalidIntent)
        #expect(error.details["field"] == "parameters.files[1]")
        #expect(error.message.contains("cannot read \(tmp.url.appendingPathComponent("gone.txt").path)"), "\(error.message)")
    }

    @Test("a multiple file parameter loads each file; a single path is wrapped")
    func multipleFiles() throws {
        let tmp = try TempDirectory("files")
        try tmp.write("a.txt", "A")
        try tmp.write("b.png", "B")
        let d = definition([ParameterDefinition(name: "files", type: .file, multiple: true)])
        let list = try wire(["files": ["a.txt", ["path": "b.png"]]], d, baseDirectory: tmp.url)
        #expect(list["files"]?.arrayValue?.map { $0["filename"] } == ["a.txt", "b.png"])
        #expect(list["files"]?.arrayValue?.map { $0["typeIdentifier"] } == ["public.plain-text", "public.png"])
        let single = try wire(["files": "a.txt"], d, baseDirectory: tmp.url)
        #expect(single["files"]?.arrayValue?.count == 1)
    }

    @Test("allowedTypes accepts a type or one of its kinds, and refuses others, naming the file and its type")
    func allowedTypes() throws {
        let images = definition([ParameterDefinition(name: "photo", type: .file, allowedTypes: ["public.image"])])
        #expect(try wire(["photo": ["filename": "a.JPG", "text": "x"]], images)["photo"]?["typeIdentifier"] == "public.jpeg")
        let error = try #require(failure { try wire(["photo": ["filename": "a.txt", "text": "x"]], images) })
        #expect(error.kind == .invalidIntent)
        #expect(error.details["field"] == "parameters.photo")
        #expect(error.message == "intent.json: parameters.photo: 'a.txt' is of type public.plain-text; photo accepts public.image")
        // An explicit type identifier is what counts.
        #expect(try wire(["photo": ["filename": "a.txt", "text": "x", "typeIdentifier": "public.png"]], images)["photo"] != nil)

        let texts = definition([ParameterDefinition(name: "doc", type: .file, allowedTypes: ["public.text", "com.adobe.pdf"])])
        #expect(try wire(["doc": ["filename": "orders.csv", "text": "x"]], texts)["doc"] != nil)
        #expect(try wire(["doc": ["filename": "x.pdf", "text": "x"]], texts)["doc"] != nil)
        #expect(failure { try wire(["doc": ["filename": "x.zip", "text": "x"]], texts) }?.kind == .invalidIntent)

        let anything = definition([ParameterDefinition(name: "doc", type: .file, allowedTypes: ["public.data"])])
        #expect(try wire(["doc": ["filename": "x.weird", "text": "x"]], anything)["doc"]?["typeIdentifier"] == "public.data")
        let unrestricted = definition([ParameterDefinition(name: "doc", type: .file, allowedTypes: [])])
        #expect(try wire(["doc": ["filename": "x.zip", "text": "x"]], unrestricted)["doc"] != nil)
    }

    @Test("type identifiers from file extensions")
    func typeIdentifiers() {
        #expect(TypeIdentifiers.forFilename("Meeting Notes.txt") == "public.plain-text")
        #expect(TypeIdentifiers.forFilename("photo.JPEG") == "public.jpeg")
        #expect(TypeIdentifiers.forFilename("archive.tar.gz") == "public.data")
        #expect(TypeIdentifiers.forFilename("README") == "public.data")
        #expect(TypeIdentifiers.conforms("public.png", to: "public.image"))
        #expect(!TypeIdentifiers.conforms("public.png", to: "public.text"))
        #expect(TypeIdentifiers.conforms("anything", to: "public.item"))
    }
}

@Suite("Intent files: paths refused for a server's callers")
struct PathsRefusedTests {
    @Test("a prompt answered with a path while paths are refused: refused, told why, never read; nothing left")
    func promptedPathRefused() throws {
        let intents = #"[{"name":"Echo","parameters":[{"name":"doc","type":"file","required":true,"prompt":"Which file?"}]}]"#
        let f = try HostilePluginTests.Fixture("paths-refused", intents: intents, script: #"""
            def resolve(msg):
                p = msg["params"]
                value = p["parameters"].get("doc")
                if value is None:
                    reply(msg, {"result": "needsValue", "prompt": "Which file?"})
                else:
                    note("got", json.dumps(value))
                    reply(msg, {"result": "success", "value": value})
            serve({"resolve": resolve})
            """#)
        try f.tmp.write("secret.txt", "root's secret")
        let secret = f.tmp.url.appendingPathComponent("secret.txt").path
        let prompter = ScriptedPrompter([.text(secret), .text(secret), .text(secret)])
        let reason = "a caller of extrun serve gives files inline"
        let report = IntentFileParser.$pathsRefused.withValue(reason) {
            f.run(["doc": .null], options: .with { $0.prompter = prompter })
        }
        #expect(report.error?.kind == .parameterUnresolved, "\(String(describing: report.error))")
        #expect(prompter.told.contains { $0.contains(reason) }, "\(prompter.told)")
        #expect(f.plugin.note("got") == nil, "the plugin received the file")
        try f.expectNoProcessLeft()
    }
}
