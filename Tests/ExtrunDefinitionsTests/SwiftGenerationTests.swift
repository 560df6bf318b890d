import ExtrunDefinitions
import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

/// A definition that stresses names and literals: keywords, digits, escapes, dates, numbers, parents of every kind.
let trickyDefinition = #"""
    {
      "plugin": {"id": "t.tricky", "version": "0.1", "owner": "O", "appName": "Tricky"},
      "enums": [{"name": "Kind", "cases": ["for", "in", "default", "2x", "a-b", {"value": "x y", "title": "X \"and\" Y"}]}],
      "types": [
        {"name": "Box", "properties": [
           {"name": "default", "type": "string"}, {"name": "inner", "type": "Inner"}, {"name": "when", "type": "date"},
           {"name": "files", "type": "file", "multiple": true}, {"name": "kinds", "type": "Kind", "multiple": true},
           {"name": "ratio", "type": "number"}, {"name": "ok", "type": "boolean"}, {"name": "boxes", "type": "Box", "multiple": true}],
         "display": {"title": "${default} \\(${ratio}) ${ok}", "subtitle": "${when}: ${kinds} ${files}", "image": "${inner}"}},
        {"name": "Inner", "properties": [{"name": "n", "type": "integer"}]}
      ],
      "intents": [
        {
          "name": "Default", "phrases": ["Default ${in} in Tricky"],
          "parameters": [
            {"name": "in", "type": "string", "dynamicOptions": true, "default": "x\"y\\z\n\u0001"},
            {"name": "default", "type": "Kind", "default": "for"},
            {"name": "switch", "type": "enum", "values": ["on", "off"], "default": "on", "parent": {"parameter": "default", "value": "in"}},
            {"name": "count", "type": "integer", "dynamicOptions": true, "parent": {"parameter": "switch", "value": "on"}},
            {"name": "ratio", "type": "number", "default": 2, "dynamicOptions": true, "parent": {"parameter": "count", "value": 3}},
            {"name": "label", "type": "string", "parent": {"parameter": "in", "value": "yes"}, "required": true, "multiple": true},
            {"name": "date", "type": "date", "default": "2026-11-22"},
            {"name": "dates", "type": "date", "multiple": true, "default": ["2026-11-22", "2026-11-23T10:00:00Z"]},
            {"name": "ratios", "type": "number", "multiple": true, "default": [1, 2.5]},
            {"name": "box", "type": "Box", "multiple": true, "required": true, "confirmationPrompt": "Use ${box}?", "dynamicOptions": true}
          ],
          "outputs": [
            {"name": "boxes", "type": "Box", "multiple": true}, {"name": "when", "type": "date"}, {"name": "kind", "type": "Kind"},
            {"name": "ratio", "type": "number"}, {"name": "ok", "type": "boolean"}, {"name": "file", "type": "file"}, {"name": "default", "type": "string"}
          ],
          "responses": [
            {"code": "success", "dialog": "${boxes} ${when} ${kind} ${ratio} ${ok} ${file} ${default} \\(not) \"quoted\" ${unclosed"},
            {"code": "failure", "dialog": "Failed: ${kind}", "properties": ["kind"]},
            {"code": "continueInApp", "dialog": "Open the app."},
            {"code": "failureLater", "properties": ["when"]},
            {"code": "in", "success": true}
          ]
        },
        {"name": "Empty"}
      ]
    }
    """#

/// Code written against the base definition's generated API.
let baseAuthorCode = #"""
    import ExtrunSDK
    import Foundation

    struct DoThingHandler: DoThingHandling {
        func resolveThing(for intent: DoThingIntent, context: IntentContext) async throws -> DoThingIntent.ThingResolution {
            guard let thing = intent.thing else { return .needsValue }
            switch thing.identifier {
            case "gone": return .unsupported(.gone)
            case "two": return .disambiguation([thing, Thing(identifier: "z", label: "Z")], prompt: "Which one?")
            case "sure": return .confirmationRequired(thing)
            case "ask": return .needsValue(prompt: "Which thing, really?")
            default: return .success(thing)
            }
        }

        func provideThingOptions(for intent: DoThingIntent, search: String?, context: IntentContext) async throws -> [Thing] {
            [Thing(identifier: "a", label: "A", count: 2, sizes: [.small, .extraLarge])]
        }

        // Titled sections of the same values (the default is one untitled section).
        func provideThingOptionSections(for intent: DoThingIntent, search: String?, context: IntentContext) async throws
            -> [(title: String?, values: [Thing])]
        {
            let all = try await provideThingOptions(for: intent, search: search, context: context)
            return [(title: "Small", values: all.filter { $0.sizes?.contains(.small) == true }), (title: "Others", values: all)]
        }

        func resolveSize(for intent: DoThingIntent, context: IntentContext) async throws -> DoThingIntent.SizeResolution {
            .success(intent.size ?? DoThingIntent.defaultSize)
        }

        func confirm(intent: DoThingIntent, context: IntentContext) async throws -> DoThingResponse {
            intent.fancy == true ? .ready : .failure("Not fancy.")
        }

        func handle(intent: DoThingIntent, context: IntentContext) async throws -> DoThingResponse {
            let size: Size = intent.size ?? DoThingIntent.defaultSize
            let style: DoThingIntent.Style? = intent.style
            let when: Date? = intent.when
            let files: [IntentFile]? = intent.attachments
            context.log("\(size.title) \(style?.title ?? "-") \(String(describing: when)) \(files?.count ?? 0)")
            guard let thing = intent.thing else { return .doneLater() }
            if thing.identifier == "gone" { return .failureGone(thing: thing) }
            var response = DoThingResponse.success(thing: thing, message: "ok")
            response.userActivity = UserActivity(activityType: "com.example.test.view")
            let _: IntentResponse = response.intentResponse
            switch response.code {
            case .success, .doneLater: break
            case .failure, .failureGone, .continueInApp, .failureRequiringAppLaunch, .inProgress, .ready, .unspecified: break
            }
            return response
        }
    }

    @main
    struct Main {
        static func main() async {
            let handlers: [any IntentHandler] = PluginMain.handlers(doThing: DoThingHandler())
            _ = handlers
            await PluginMain.run(doThing: DoThingHandler())
        }
    }
    """#

@Suite("Generating Swift")
struct SwiftGenerationTests {
    @Test("the base definition: the generated declarations")
    func declarations() throws {
        let source = try valid(baseDefinition).swiftSource()
        let expected = [
            "// Generated by extrun-intentgen from intents.json. Do not edit: edit the definition file.",
            "import ExtrunSDK",
            // PluginMain, with the definition's id and version.
            "enum PluginMain {",
            "    static let id = \"com.example.test\"",
            "    static let version = \"1.2.3\"",
            "    static func handlers(doThing: some DoThingHandling) -> [any IntentHandler] {",
            "        [DoThingIntent.Adapter(doThing)]",
            "    static func run(doThing: some DoThingHandling, activities: [any ActivityHandler] = []) async -> Never {",
            "        await PluginRuntime.run(id: id, version: version, handlers: handlers(doThing: doThing), activities: activities)",
            "    func continueInApp(intent: DoThingIntent, activity: UserActivity, extensionResponse: IntentResponse?, context: IntentContext) async throws -> DoThingResponse",
            // The enum, with titles.
            "enum Size: String, Codable, Sendable, Hashable, CaseIterable {",
            "    case small",
            "    case extraLarge = \"extra_large\"",
            "        case .small: \"small\"",
            "        case .extraLarge: \"Extra Large\"",
            // The custom type.
            "struct Thing: Codable, Sendable, Hashable {",
            "    var identifier: String",
            "    var label: String?",
            "    var count: Int?",
            "    var sizes: [Size]?",
            "    init(identifier: String, label: String? = nil, count: Int? = nil, sizes: [Size]? = nil, title: String? = nil, subtitle: String? = nil, image: String? = nil) {",
            "        DisplayRepresentation(title: title ?? templateTitle ?? identifier, subtitle: subtitle ?? templateSubtitle, image: image ?? templateImage)",
            "        guard let v0 = self.count else { return nil }",
            "        return \"\\(String(v0)) left\"",
            "        return \"things/\\(identifier).png\"",
            // The intent.
            "struct DoThingIntent: Codable, Sendable, Hashable {",
            "    static let intentName = \"DoThing\"",
            "    var thing: Thing?",
            "    var size: Size?",
            "    var fancy: Bool?",
            "    var style: DoThingIntent.Style?",
            "    var when: Date?",
            "    var attachments: [IntentFile]?",
            "    static let defaultSize: Size = Size.small",
            "    static let defaultFancy: Bool = false",
            "    enum Style: String, Codable, Sendable, Hashable, CaseIterable {",
            "    enum ThingUnsupportedReason: String, Sendable, Hashable, CaseIterable {",
            "            case .gone: \"It is gone.\"",
            "    struct ThingResolution: Sendable, Hashable {",
            "            Self(result: .needsValue(prompt: \"Which thing?\"))",
            "        static func unsupported(_ reason: ThingUnsupportedReason) -> Self {",
            "            Self(result: .confirmationRequired(value, prompt: prompt ?? \"Really \\(value.displayRepresentation.title)?\"))",
            "        static func success(_ value: [IntentFile]) -> Self {",
            "        static func disambiguation(_ options: [IntentFile], prompt: String? = nil) -> Self {",
            // The response.
            "struct DoThingResponse: Sendable, Hashable {",
            "        case success, failure, continueInApp, failureRequiringAppLaunch, inProgress, ready, unspecified",
            "        case failureGone",
            "        case doneLater",
            "            case .success, .doneLater: true",
            "    static func success(thing: Thing, message: String, dialog: Dialog? = nil) -> Self {",
            "        Self(code: .success, properties: [\"thing\": _extrunJSON(thing), \"message\": _extrunJSON(message)], dialog: dialog ?? Dialog(full: \"Did \\(thing.displayRepresentation.title): \\(message)\"))",
            "    static func failureGone(thing: Thing, dialog: Dialog? = nil) -> Self {",
            "    static func doneLater(dialog: Dialog? = nil) -> Self {",
            "        Self(code: .doneLater, properties: [:], dialog: dialog)",
            "    static func failure(_ message: String? = nil) -> Self {",
            "    static var ready: Self {",
            // The handler protocol and its defaults.
            "protocol DoThingHandling: Sendable {",
            "    func resolveThing(for intent: DoThingIntent, context: IntentContext) async throws -> DoThingIntent.ThingResolution",
            "    func provideThingOptions(for intent: DoThingIntent, search: String?, context: IntentContext) async throws -> [Thing]",
            "    func confirm(intent: DoThingIntent, context: IntentContext) async throws -> DoThingResponse",
            "    func handle(intent: DoThingIntent, context: IntentContext) async throws -> DoThingResponse",
            "        if let value = intent.thing { return .success(value) }",
            "        return .needsValue",
            "        return .success(DoThingIntent.defaultSize)",
            "        guard intent.fancy == true else { return .notRequired }",
            "        DoThingResponse(code: .ready)",
            // The adapter.
            "    struct Adapter<Handler: DoThingHandling>: IntentHandler {",
            "            case \"thing\":",
            "                return try await handler.resolveThing(for: request.parameters, context: request.context).result",
            "                let sections = try await handler.provideThingOptionSections(for: request.parameters, search: search, context: request.context)",
            "    func provideThingOptionSections(for intent: DoThingIntent, search: String?, context: IntentContext) async throws -> [(title: String?, values: [Thing])] {",
            "        [(title: nil, values: try await provideThingOptions(for: intent, search: search, context: context))]",
            "            try await handler.handle(intent: request.parameters, context: request.context).intentResponse",
        ]
        let lines = Set(source.split(separator: "\n", omittingEmptySubsequences: false).map(String.init))
        for line in expected {
            #expect(lines.contains(line), "missing line: \(line)")
        }
        // No provideOptions requirement for a parameter without dynamic options.
        #expect(!source.contains("provideSizeOptions"))
        #expect(!source.contains("try!"))
        #expect(!source.contains("\t"))
    }

    @Test("the defaults: required asks, a default is used, a required list must not be empty, a parent hides")
    func defaultResolutions() throws {
        let source = try valid(trickyDefinition).swiftSource()
        for line in [
            "        if let value = intent.box, !value.isEmpty { return .success(value) }",
            "        guard intent.`default` == Kind.`in` else { return .notRequired }",
            "        guard intent.`switch` == DefaultIntent.Switch.on else { return .notRequired }",
            "        guard intent.count == 3 else { return .notRequired }",
            "        guard intent.`in` == \"yes\" else { return .notRequired }",
            "    static let defaultIn: String = \"x\\\"y\\\\z\\n\\u{1}\"",
            "    static let defaultDefault: Kind = Kind.`for`",
            "    static let defaultRatio: Double = 2.0",
            "    static let defaultRatios: [Double] = [1.0, 2.5]",
            "    static let defaultDate: Date = Date(timeIntervalSince1970: 1795305600.0)",
            "    static let defaultDates: [Date] = [Date(timeIntervalSince1970: 1795305600.0), Date(timeIntervalSince1970: 1795428000.0)]",
            "    case `for`",
            "    case _2x = \"2x\"",
            "    case aB = \"a-b\"",
            "    case xY = \"x y\"",
            "        case .xY: \"X \\\"and\\\" Y\"",
            "    static func run(`default`: some DefaultHandling, empty: some EmptyHandling, activities: [any ActivityHandler] = []) async -> Never {",
            "        case success, failure, continueInApp, failureRequiringAppLaunch, inProgress, ready, unspecified",
            "        case `in`",
            "            case .success, .`in`: true",
            "    static func failure(kind: Kind, dialog: Dialog? = nil) -> Self {",
            "    static func continueInApp(dialog: Dialog? = nil) -> Self {",
            "            Self(result: .confirmationRequired(value, prompt: prompt ?? \"Use \\(value.map { $0.displayRepresentation.title }.joined(separator: \", \"))?\"))",
        ] {
            #expect(source.contains(line + "\n"), "missing line: \(line)")
        }
    }

    @Test("generation is deterministic")
    func deterministic() throws {
        let file = try valid(baseDefinition)
        #expect(file.swiftSource() == file.swiftSource())
        #expect(try valid(baseDefinition).swiftSource() == file.swiftSource())
    }

    @Test("the generated code compiles (swiftc -typecheck against ExtrunSDK), with handlers written against it",
          .enabled(if: Typecheck.available, "needs swiftc and the built ExtrunSDK module"),
          arguments: ["base", "tricky", "examples"])
    func typechecks(_ which: String) throws {
        let dir = try TempDirectory()
        var files: [URL] = []
        switch which {
        case "base":
            files.append(try dir.write("Generated.swift", try valid(baseDefinition).swiftSource()))
            files.append(try dir.write("Handler.swift", baseAuthorCode))
        case "tricky":
            files.append(try dir.write("Generated.swift", try valid(trickyDefinition).swiftSource()))
        default:
            // Every example's generated code, each as its own module with its handlers.
            for name in ["MakeUppercase", "RenameFiles", "SoupChef", "People"] {
                let source = try DefinitionFile.load(path: StagedPlugins.packageRoot.appendingPathComponent("Examples/\(name)/intents.json").path).swiftSource()
                let generated = try dir.write("\(name)/Generated.swift", source)
                let handler = StagedPlugins.packageRoot.appendingPathComponent("Examples/\(name)/\(name).swift")
                let result = try Typecheck.run([generated, handler], scratch: dir)
                #expect(result.status == 0, "\(name):\n\(result.stderr)")
            }
            return
        }
        let result = try Typecheck.run(files, scratch: dir)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(!result.stderr.contains("warning:"), "\(result.stderr)")
    }
}

/// `swiftc -typecheck` with the package's built modules.
enum Typecheck {
    static var modules: URL? {
        let candidates = [StagedPlugins.packageRoot.appendingPathComponent(".build/debug/Modules")]
        return candidates.first { FileManager.default.fileExists(atPath: $0.appendingPathComponent("ExtrunSDK.swiftmodule").path) }
    }

    static var swiftc: URL? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let directories = path.split(separator: ":").map(String.init) + ["/opt/swift/usr/bin", "/usr/bin"]
        return directories.map { URL(fileURLWithPath: $0).appendingPathComponent("swiftc") }
            .first { FileManager.default.isExecutableFile(atPath: $0.path) }
    }

    static var available: Bool { modules != nil && swiftc != nil }

    /// The module maps of the build's C targets (`<target>.build/module.modulemap`): the SDK
    /// imports NIOConcurrencyHelpers, which needs CNIOAtomics, as SwiftPM passes them.
    static func cModuleMaps(in modules: URL) -> [String] {
        let build = modules.deletingLastPathComponent()
        let names = (try? FileManager.default.contentsOfDirectory(atPath: build.path)) ?? []
        return names.filter { $0.hasSuffix(".build") }.sorted()
            .map { build.appendingPathComponent($0).appendingPathComponent("module.modulemap").path }
            .filter { FileManager.default.fileExists(atPath: $0) }
    }

    /// swiftc leaves a `TemporaryDirectory.XXXXXX` folder in its TMPDIR after `-typecheck`;
    /// its TMPDIR is a folder in `scratch`, so that it goes with the test's folder.
    static func run(_ files: [URL], scratch: TempDirectory) throws -> (status: Int32, stdout: String, stderr: String) {
        guard let swiftc, let modules else { throw Missing(description: "swiftc or the built modules are missing") }
        let maps = cModuleMaps(in: modules).flatMap { ["-Xcc", "-fmodule-map-file=\($0)"] }
        let tmp = try scratch.makeFolder("swiftc-tmp")
        return try ExtrunDefinitionsTests.run(
            swiftc, ["-typecheck", "-swift-version", "6", "-parse-as-library", "-I", modules.path] + maps + files.map(\.path),
            environment: ["TMPDIR": tmp])
    }
}
