import ExtrunDefinitions
import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

/// docs/schemas: every example fits its schema, broken documents do not (with the line and
/// column of each problem), the binaries carry the files as they are, and extrun's own
/// validator agrees file by file with Python's jsonschema (the reference implementation).
@Suite struct SchemaTests {
    static let schemaFolder = StagedPlugins.packageRoot.appendingPathComponent("docs/schemas")

    static func schema(_ which: BundledSchema) throws -> JSONSchema {
        try JSONSchema(data: Data(which.text.utf8))
    }

    /// Every document the repository holds for a schema, and documents that must not fit:
    /// (schema, path, should fit).
    static func corpus(scratch: URL) throws -> [(BundledSchema, String, Bool)] {
        var files: [(BundledSchema, String, Bool)] = []
        let examples = StagedPlugins.packageRoot.appendingPathComponent("Examples")
        for name in try FileManager.default.contentsOfDirectory(atPath: examples.path).sorted() {
            let folder = examples.appendingPathComponent(name)
            if FileManager.default.fileExists(atPath: folder.appendingPathComponent("manifest.json").path) {
                files.append((.manifest, folder.appendingPathComponent("manifest.json").path, true))
            }
            if FileManager.default.fileExists(atPath: folder.appendingPathComponent("intents.json").path) {
                let definition = folder.appendingPathComponent("intents.json")
                files.append((.definitions, definition.path, true))
                // The manifest generated from it, as Scripts/stage-plugins writes it.
                let generated = scratch.appendingPathComponent("\(name)-generated-manifest.json")
                try DefinitionFile.load(path: definition.path).manifestJSON().write(to: generated)
                files.append((.manifest, generated.path, true))
            }
        }
        for (folder, schema) in [("intents", BundledSchema.intentFile), ("activities", .activityFile)] {
            let directory = examples.appendingPathComponent(folder)
            for name in try FileManager.default.contentsOfDirectory(atPath: directory.path).sorted() where name.hasSuffix(".json") {
                files.append((schema, directory.appendingPathComponent(name).path, true))
            }
        }
        let broken = StagedPlugins.packageRoot.appendingPathComponent("Tests/ExtrunCLITests/Fixtures/BrokenPlugins")
        for name in try FileManager.default.contentsOfDirectory(atPath: broken.path).sorted() where !name.hasSuffix(".py") {
            files.append((.manifest, broken.appendingPathComponent("\(name)/manifest.json").path, name != "bad-manifest"))
        }
        for (name, schema, text) in invalidSamples {
            let file = scratch.appendingPathComponent(name)
            try Data(text.utf8).write(to: file)
            files.append((schema, file.path, false))
        }
        return files
    }

    /// One way to break each schema's main rules.
    static let invalidSamples: [(String, BundledSchema, String)] = [
        ("manifest-no-intents.json", .manifest, #"{"id": "a.b", "version": "1", "owner": "T", "protocolVersion": 1, "executable": "x", "intents": []}"#),
        ("manifest-space-id.json", .manifest, #"{"id": "a b", "version": "1", "owner": "T", "protocolVersion": 1, "executable": "x", "intents": [{"name": "I"}]}"#),
        ("manifest-version-2.json", .manifest, #"{"id": "a.b", "version": "1", "owner": "T", "protocolVersion": 2, "executable": "x", "intents": [{"name": "I"}]}"#),
        ("manifest-bad-mode.json", .manifest, #"{"id": "a.b", "version": "1", "owner": "T", "protocolVersion": 1, "executable": "x", "modes": ["inapp"], "intents": [{"name": "I"}]}"#),
        ("manifest-bad-type.json", .manifest, #"{"id": "a.b", "version": "1", "owner": "T", "protocolVersion": 1, "executable": "x", "intents": [{"name": "I", "parameters": [{"name": "p", "type": "text"}]}]}"#),
        ("manifest-zero-limit.json", .manifest, #"{"id": "a.b", "version": "1", "owner": "T", "protocolVersion": 1, "executable": "x", "limits": {"extension": {"memoryBytes": 0}}, "intents": [{"name": "I"}]}"#),
        // At or below 64 KiB the host refuses a memory cap (EffectiveLimits.resolve); the schemas say so too.
        ("manifest-tiny-limit.json", .manifest, #"{"id": "a.b", "version": "1", "owner": "T", "protocolVersion": 1, "executable": "x", "limits": {"in-app": {"memoryBytes": 65536}}, "intents": [{"name": "I"}]}"#),
        ("definitions-tiny-limit.json", .definitions, #"{"plugin": {"id": "a.b", "version": "1", "owner": "T", "limits": {"extension": {"memoryBytes": 4096}}}, "intents": [{"name": "I"}]}"#),
        ("intent-unknown-field.json", .intentFile, #"{"intent": "MakeUppercase", "parameter": {"text": "x"}}"#),
        ("intent-bad-mode.json", .intentFile, #"{"intent": "MakeUppercase", "mode": "app"}"#),
        ("activity-no-type.json", .activityFile, #"{"title": "x"}"#),
        ("definitions-typo.json", .definitions, #"{"plugin": {"id": "a.b", "version": "1", "owner": "T"}, "intents": [{"name": "I", "paramters": []}]}"#),
        ("definitions-bad-case.json", .definitions, #"{"plugin": {"id": "a.b", "version": "1", "owner": "T"}, "enums": [{"name": "E", "cases": [{"title": "no value"}]}], "intents": [{"name": "I"}]}"#),
    ]

    @Test func theBinariesCarryTheSchemaFilesAsTheyAre() throws {
        for schema in BundledSchema.allCases {
            let file = try String(contentsOf: Self.schemaFolder.appendingPathComponent(schema.fileName), encoding: .utf8)
            #expect(
                file == schema.text + "\n",
                "docs/schemas/\(schema.fileName) differs from BundledSchemas.swift: run Scripts/embed-schemas")
        }
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.schemaFolder.path).filter { $0.hasSuffix(".schema.json") }
        #expect(Set(files) == Set(BundledSchema.allCases.map(\.fileName)))
    }

    @Test func everyExampleFitsAndEveryBrokenDocumentFails() throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("extrun-schemas-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let corpus = try Self.corpus(scratch: scratch)
        #expect(corpus.filter { $0.0 == .manifest && $0.2 }.count >= 10)
        for (schema, path, shouldFit) in corpus {
            let document = try JSONNodeParser.parse(Data(contentsOf: URL(fileURLWithPath: path)))
            let violations = try Self.schema(schema).validate(document)
            if shouldFit {
                #expect(violations.isEmpty, "\(path) should fit \(schema.fileName): \(violations)")
            } else {
                #expect(!violations.isEmpty, "\(path) should not fit \(schema.fileName)")
            }
        }
    }

    @Test func problemsNameTheirPathLineAndColumn() throws {
        let text = """
            {
              "id": "com.example.x", "version": "1", "owner": "T", "protocolVersion": 1, "executable": "x",
              "intents": [
                {"name": "I", "parameters": [{"name": "p", "type": "string", "requried": true}]}
              ],
              "retryInAppOnMemoryLimit": "yes"
            }
            """
        let violations = try Self.schema(.manifest).validate(JSONNodeParser.parse(Data(text.utf8)))
        let shown = violations.map(\.description)
        #expect(shown.contains("4:66: intents[0].parameters[0].requried: unknown field 'requried' (did you mean 'required'?)"), "\(shown)")
        #expect(shown.contains("6:30: retryInAppOnMemoryLimit: expected a boolean, got a string"), "\(shown)")
        #expect(violations.count == 2, "\(shown)")
        let missing = try Self.schema(.intentFile).validate(JSONNodeParser.parse(Data(#"{"parameters": {}}"#.utf8)))
        #expect(missing.map(\.description) == ["1:1: the required field 'intent' is missing"])
    }

    @Test func aSchemaWithAKeywordTheValidatorSkipsIsRefused() {
        #expect(throws: JSONSchema.SchemaError.self) { try JSONSchema(.object(["type": "object", "dependentRequired": .object([:])])) }
        #expect(throws: JSONSchema.SchemaError.self) { try JSONSchema(.object(["$ref": "#/$defs/missing"])) }
        #expect(throws: JSONSchema.SchemaError.self) { try JSONSchema(.object(["pattern": "("])) }
    }

    /// The same files pass and fail with Python's jsonschema 4.26.0 (Draft 2020-12), which
    /// also checks that each schema is a valid schema. Scripts/test provides it in its own venv.
    @Test func pythonJSONSchemaAgreesFileByFile() throws {
        guard let python = ProcessInfo.processInfo.environment["EXTRUN_TEST_PYTHON"] else {
            Issue.record("EXTRUN_TEST_PYTHON is not set: run the tests with Scripts/test, which makes a venv with jsonschema")
            return
        }
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("extrun-schemas-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let corpus = try Self.corpus(scratch: scratch)
        let list = corpus.map { "\(Self.schemaFolder.appendingPathComponent($0.0.fileName).path)\t\($0.1)" }.joined(separator: "\n")
        let script = """
            import json, sys
            from jsonschema import Draft202012Validator
            for line in sys.stdin.read().splitlines():
                schema_path, path = line.split("\\t")
                schema = json.load(open(schema_path))
                Draft202012Validator.check_schema(schema)
                errors = list(Draft202012Validator(schema).iter_errors(json.load(open(path))))
                print(("fits" if not errors else "fails") + "\\t" + path)
            """
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = ["-c", script]
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        input.fileHandleForWriting.write(Data(list.utf8))
        try input.fileHandleForWriting.close()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        var verdicts: [String: Bool] = [:]
        for line in String(decoding: data, as: UTF8.self).split(separator: "\n") {
            let parts = line.split(separator: "\t", maxSplits: 1)
            if parts.count == 2 { verdicts[String(parts[1])] = parts[0] == "fits" }
        }
        #expect(verdicts.count == corpus.count)
        for (schema, path, _) in corpus {
            let ours = try Self.schema(schema).validate(JSONNodeParser.parse(Data(contentsOf: URL(fileURLWithPath: path)))).isEmpty
            #expect(verdicts[path] == ours, "\(path) against \(schema.fileName): jsonschema says \(verdicts[path].map { $0 ? "fits" : "fails" } ?? "nothing"), extrun says \(ours ? "fits" : "fails")")
        }
    }
}
