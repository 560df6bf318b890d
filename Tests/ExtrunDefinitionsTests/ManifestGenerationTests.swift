import ExtrunDefinitions
import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

@Suite("Generating manifests")
struct ManifestGenerationTests {
    @Test("the base definition's manifest, field by field")
    func base() throws {
        let manifest = try valid(baseDefinition).manifest(executable: "DoThings")
        let expected = PluginManifest(
            id: "com.example.test", version: "1.2.3", owner: "TEAM", executable: "DoThings", modes: [.extension, .inApp],
            intents: [
                IntentDefinition(
                    name: "DoThing", title: "Do Thing", description: "Does a thing.",
                    parameters: [
                        ParameterDefinition(
                            name: "thing", type: .custom, required: true, prompt: "Which thing?", customType: "Thing", dynamicOptions: true,
                            confirmationPrompt: "Really ${thing}?", unsupportedReasons: [UnsupportedReason(code: "gone", message: "It is gone.")]),
                        ParameterDefinition(
                            name: "size", type: .enum, default: "small", values: ["small", "extra_large"], valueTitles: ["extra_large": "Extra Large"]),
                        ParameterDefinition(name: "fancy", type: .boolean, default: false),
                        ParameterDefinition(
                            name: "style", type: .enum, prompt: "Which style?", values: ["plain", "bold"],
                            parent: ParentCondition(parameter: "fancy", value: true)),
                        ParameterDefinition(name: "when", type: .date),
                        ParameterDefinition(name: "attachments", type: .file, multiple: true, allowedTypes: ["public.image"]),
                    ],
                    responses: [
                        ResponseDefinition(code: "failureGone", success: false, dialog: "${thing} is gone.", properties: ["thing"]),
                        ResponseDefinition(code: "doneLater", success: true),
                    ],
                    runsInBackground: true, phrases: ["Do ${thing} in Test App", "Do something in Test App"], confirmation: "Do ${thing}?",
                    outputs: [OutputDefinition(name: "thing", type: .custom, customType: "Thing"), OutputDefinition(name: "message", type: .string)]),
            ],
            limits: ManifestLimits(extension: .init(memoryBytes: 62_914_560)), appName: "Test App",
            types: [
                CustomTypeDefinition(
                    name: "Thing",
                    properties: [.init(name: "label", type: .string), .init(name: "count", type: .integer), .init(name: "sizes", type: .enum, multiple: true)],
                    display: DisplayTemplate(title: "${label}", subtitle: "${count} left", image: "things/${identifier}.png")),
            ])
        #expect(manifest.intents == expected.intents)
        #expect(manifest.types == expected.types)
        #expect(manifest == expected)
        #expect(manifest.problems() == [])
    }

    @Test("manifest.json: pretty, keys sorted, a final newline; decodes to the same manifest")
    func json() throws {
        let file = try valid(baseDefinition)
        let data = try file.manifestJSON(executable: "x")
        let text = String(decoding: data, as: UTF8.self)
        #expect(text.hasPrefix("{\n  \"appName\" : \"Test App\",\n"))
        #expect(text.hasSuffix("}\n"))
        #expect(try JSONCoding.decode(PluginManifest.self, fromJSON: data) == file.manifest(executable: "x"))
    }

    /// The hand-written manifests these examples had before they moved to definition files.
    static let handWritten: [String: String] = [
        "MakeUppercase": #"""
            {"id": "com.example.uppercase", "version": "1.0.0", "owner": "EXAMPLETEAM", "protocolVersion": 1, "executable": "MakeUppercase",
             "modes": ["extension", "in-app"],
             "intents": [{"name": "MakeUppercase", "title": "Make Uppercase", "description": "Makes the given text uppercase.",
                          "parameters": [{"name": "text", "type": "string", "title": "Text", "required": true,
                                          "prompt": "Which text would you like to make uppercase?"}]}]}
            """#,
        "RenameFiles": #"""
            {"id": "com.example.renamefiles", "version": "1.0.0", "owner": "EXAMPLETEAM", "protocolVersion": 1, "executable": "RenameFiles",
             "modes": ["extension", "in-app"],
             "intents": [{"name": "RenameFiles", "title": "Rename Files",
                          "description": "Adds the current date to the names of files, before or after the name, and optionally changes their case.",
                          "parameters": [
                            {"name": "files", "type": "file", "title": "Files", "multiple": true, "required": true, "prompt": "Which files would you like to rename?"},
                            {"name": "dateFormat", "type": "string", "title": "Date Format", "default": "yyyy-MM-dd"},
                            {"name": "changeCase", "type": "boolean", "title": "Change Case", "default": false},
                            {"name": "newCase", "type": "enum", "title": "New Case", "values": ["lowercase", "uppercase"], "prompt": "Which case should the names be in?"},
                            {"name": "position", "type": "enum", "title": "Position", "values": ["prepend", "append"], "default": "prepend"}]}]}
            """#,
    ]

    @Test("MakeUppercase's generated manifest is its old one, plus the declared unsupported reason and the typed output")
    func makeUppercase() throws {
        var expected = try JSONCoding.decode(PluginManifest.self, fromJSON: Data(try #require(Self.handWritten["MakeUppercase"]).utf8))
        expected.intents[0].parameters[0].unsupportedReasons = [UnsupportedReason(code: "empty", message: "Please enter some text")]
        expected.intents[0].outputs = [OutputDefinition(name: "result", type: .string, title: "Result")]
        let generated = try DefinitionFile.load(path: StagedPlugins.packageRoot.appendingPathComponent("Examples/MakeUppercase/intents.json").path).manifest()
        #expect(generated == expected)
    }

    @Test("RenameFiles' generated manifest is its old one, plus titles, the parent condition, the unsupported reason and the typed output")
    func renameFiles() throws {
        var expected = try JSONCoding.decode(PluginManifest.self, fromJSON: Data(try #require(Self.handWritten["RenameFiles"]).utf8))
        expected.intents[0].parameters[1].unsupportedReasons = [UnsupportedReason(code: "empty", message: "Please enter a date format, such as yyyy-MM-dd")]
        expected.intents[0].parameters[3].valueTitles = ["lowercase": "Lowercase", "uppercase": "Uppercase"]
        expected.intents[0].parameters[3].parent = ParentCondition(parameter: "changeCase", value: true)
        expected.intents[0].parameters[4].valueTitles = ["prepend": "Before the name", "append": "After the name"]
        expected.intents[0].outputs = [OutputDefinition(name: "files", type: .file, title: "Renamed files", multiple: true)]
        let generated = try DefinitionFile.load(path: StagedPlugins.packageRoot.appendingPathComponent("Examples/RenameFiles/intents.json").path).manifest()
        #expect(generated.intents[0].parameters == expected.intents[0].parameters)
        #expect(generated == expected)
    }

    @Test("SoupChef: the custom type, the dynamic options, the custom code with its dialog, the phrases")
    func soupChef() throws {
        let m = try DefinitionFile.load(path: StagedPlugins.packageRoot.appendingPathComponent("Examples/SoupChef/intents.json").path).manifest()
        #expect(m.id == "com.example.soupchef")
        #expect(m.appName == "Soup Chef")
        #expect(m.types.map(\.name) == ["Soup"])
        let intent = try #require(m.intent(named: "OrderSoup"))
        #expect(intent.parameters.map(\.name) == ["soup", "quantity", "toppings"])
        #expect(intent.parameter(named: "soup")?.customType == "Soup")
        #expect(intent.parameter(named: "soup")?.dynamicOptions == true)
        #expect(intent.parameter(named: "quantity")?.default == 1)
        #expect(intent.parameter(named: "toppings")?.multiple == true)
        #expect(intent.parameter(named: "toppings")?.valueTitles?["red_pepper"] == "Red Pepper")
        #expect(intent.responses == [ResponseDefinition(code: "failureOutOfStock", dialog: "Sorry, ${soup} is out of stock today.", properties: ["soup"])])
        #expect(intent.phrases?.first == "Order ${soup} in Soup Chef")
        #expect(intent.confirmation == "Order ${quantity} ${soup}?")
        #expect(intent.runsInBackground == true)
    }
}
