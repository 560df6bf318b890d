import ExtrunHost
import ExtrunProtocol
import Foundation
import Testing

/// Runs the real example plugins, built and staged by Scripts/test, through `Host.handle`.
@Suite("Example plugins through the host")
struct ExamplePluginTests {
    let home: TempDirectory
    let host: ExtrunHost.Host

    init() throws {
        home = try TempDirectory("home")
        host = ExtrunHost.Host(paths: HostPaths(home: home.url, pluginSearchPath: [try StagedPlugins.directory()]))
        try StagedPlugins.trust(home: home.url)
    }

    func handle(_ intent: String, _ parameters: [String: JSONValue], options: HandleOptions = HandleOptions()) -> HandleReport {
        host.handle(IntentInvocation(intent: intent, parameters: parameters, source: "test"), options: options)
    }

    @Test("the staged plugin directory holds the example plugins")
    func staged() throws {
        let catalog = host.catalog()
        let ids = Set(catalog.plugins.map(\.manifest.id))
        #expect(ids.isSuperset(of: ["com.example.uppercase", "com.example.renamefiles"]))
        #expect(catalog.problems.isEmpty, "\(catalog.problems)")
    }

    @Test("MakeUppercase: success, with metrics")
    func makeUppercase() throws {
        var invocation = IntentInvocation(intent: "MakeUppercase", parameters: ["text": "hello world, ça va?"], source: "test")
        invocation.id = "run-42"
        let report = host.handle(invocation)
        #expect(report.error == nil, "\(String(describing: report.error))")
        #expect(report.exitCode == 0)
        #expect(report.id == "run-42")
        #expect(report.intent == "MakeUppercase")
        #expect(report.plugin == "com.example.uppercase")
        #expect(report.mode == .extension)
        #expect(report.responseIsSuccess)
        let response = try #require(report.response)
        #expect(response.code == "success")
        #expect(response.properties == ["result": "HELLO WORLD, ÇA VA?"])

        let metrics = try #require(report.metrics)
        #expect(metrics.wallMs > 0)
        let launch = try #require(metrics.launchMs)
        #expect(launch > 0 && launch <= metrics.wallMs)
        #expect(try #require(metrics.cpuMs) >= 0)
        #expect(try #require(metrics.peakMemoryBytes) > 0)
        #expect(try #require(metrics.peakRSSBytes) > 1 << 20)
        #expect(report.limits?.mode == .extension)
        #expect((report.limits?.memoryBytes ?? 0) > 0)

        let json = report.json
        #expect(json["response"]?["properties"]?["result"] == "HELLO WORLD, ÇA VA?")
        #expect(json["metrics"]?["wallMs"]?.doubleValue != nil)
        #expect(json["error"] == nil)
        #expect(report.text.hasPrefix("MakeUppercase by com.example.uppercase (extension): success\n  result: HELLO WORLD, ÇA VA?"))
    }

    @Test("MakeUppercase in in-app mode, from the options or from the intent file")
    func inAppMode() throws {
        let fromOptions = handle("MakeUppercase", ["text": "a"], options: .with { $0.mode = .inApp })
        #expect(fromOptions.mode == .inApp)
        #expect(fromOptions.response?.properties["result"] == "A")
        var invocation = IntentInvocation(intent: "MakeUppercase", parameters: ["text": "b"], source: "test")
        invocation.mode = .inApp
        #expect(host.handle(invocation).mode == .inApp)
        // The options win over the file.
        #expect(host.handle(invocation, options: .with { $0.mode = .extension }).mode == .extension)
    }

    @Test("MakeUppercase without text: parameterUnresolved with the plugin's prompt")
    func needsValue() throws {
        let report = handle("MakeUppercase", [:])
        let error = try #require(report.error)
        #expect(error.kind == .parameterUnresolved)
        #expect(report.exitCode == 3)
        #expect(report.response == nil)
        #expect(error.message == "text: Which text would you like to make uppercase?")
        #expect(error.details["parameter"] == "text")
        #expect(error.details["prompt"] == "Which text would you like to make uppercase?")
        #expect(error.details["resolution"] == ["result": "needsValue", "prompt": "Which text would you like to make uppercase?"])
        #expect(report.plugin == "com.example.uppercase")
        #expect(report.metrics != nil)
    }

    @Test("MakeUppercase with empty text: unsupported, with the plugin's reason")
    func unsupported() throws {
        let report = handle("MakeUppercase", ["text": ""])
        let error = try #require(report.error)
        #expect(error.kind == .parameterUnresolved)
        #expect(error.message == "text: Please enter some text")
        #expect(error.details["reason"] == "empty")
        #expect(error.details["parameter"] == "text")
    }

    @Test("a parameter of the wrong type is refused before the plugin starts")
    func invalidBeforeLaunch() throws {
        let report = handle("MakeUppercase", ["text": 42])
        #expect(report.error?.kind == .invalidIntent)
        #expect(report.error?.details["field"] == "parameters.text")
        #expect(report.plugin == "com.example.uppercase")
        #expect(report.metrics == nil, "the plugin should not have been started")
    }

    @Test("an unknown intent is noHandler")
    func unknownIntent() {
        let report = handle("ExtrunTestNoSuchIntent", [:])
        #expect(report.error?.kind == .noHandler)
        #expect(report.exitCode == 5)
        #expect(report.error?.message.contains("MakeUppercase") == true)
    }

    static let notes = JSONValue.object(["filename": "Meeting Notes.txt", "text": "Agenda: soup"])
    static let orders = JSONValue.object(["filename": "orders.csv", "text": "id,soup\n1,tomato\n"])

    @Test("RenameFiles: lowercase, appended, with a literal date format")
    func renameAppendLowercase() throws {
        let report = handle(
            "RenameFiles",
            ["files": [Self.notes, Self.orders], "dateFormat": "'Draft'", "changeCase": true, "newCase": "lowercase", "position": "append"])
        #expect(report.error == nil, "\(String(describing: report.error))")
        #expect(report.exitCode == 0)
        let response = try #require(report.response)
        let files = try #require(response.properties["files"]?.arrayValue)
        #expect(files.map { $0["filename"] } == ["meeting notes draft.txt", "orders draft.csv"])
        // The contents and types travel unchanged.
        #expect(files[0]["data"] == .string(Data("Agenda: soup".utf8).base64EncodedString()))
        #expect(files[1]["typeIdentifier"] == "public.comma-separated-values-text")
        #expect(response.dialog == Dialog(full: "Renamed 2 files.", supporting: "meeting notes draft.txt, orders draft.csv"))
    }

    @Test("RenameFiles: uppercase, prepended (the default position); the extension keeps its case")
    func renamePrependUppercase() throws {
        let report = handle("RenameFiles", ["files": Self.notes, "dateFormat": "'v2'", "changeCase": true, "newCase": "uppercase"])
        let files = try #require(report.response?.properties["files"]?.arrayValue)
        #expect(files.map { $0["filename"] } == ["V2 MEETING NOTES.txt"])
        #expect(report.response?.dialog?.full == "Renamed 1 file.")
    }

    @Test("RenameFiles: without changeCase, newCase is not required and the case is kept")
    func renameKeepsCase() throws {
        let report = handle("RenameFiles", ["files": [Self.orders], "dateFormat": "'x'", "newCase": "uppercase"])
        #expect(report.response?.properties["files"]?.arrayValue?.map { $0["filename"] } == ["x orders.csv"])
    }

    @Test("RenameFiles: the default date format is yyyy-MM-dd")
    func renameDefaultDate() throws {
        let report = handle("RenameFiles", ["files": [Self.orders]])
        let name = try #require(report.response?.properties["files"]?.arrayValue?.first?["filename"]?.stringValue)
        #expect(name.range(of: #"^\d{4}-\d{2}-\d{2} orders\.csv$"#, options: .regularExpression) != nil, "\(name)")
    }

    @Test("RenameFiles: files from disk, relative to the intent file")
    func renameFilesFromDisk() throws {
        let intents = StagedPlugins.packageRoot.appendingPathComponent("Examples/intents", isDirectory: true)
        let invocation = IntentInvocation(
            intent: "RenameFiles", parameters: ["files": [["path": "files/Meeting Notes.txt"], ["path": "files/orders.csv"]], "dateFormat": "'d'"],
            source: "test", baseDirectory: intents)
        let report = host.handle(invocation)
        #expect(report.response?.properties["files"]?.arrayValue?.map { $0["filename"] } == ["d Meeting Notes.txt", "d orders.csv"])
        let original = try Data(contentsOf: intents.appendingPathComponent("files/orders.csv"))
        #expect(report.response?.properties["files"]?.arrayValue?.last?["data"] == .string(original.base64EncodedString()))
    }

    @Test("RenameFiles: changeCase without newCase asks for it")
    func renameNeedsCase() throws {
        let report = handle("RenameFiles", ["files": [Self.orders], "changeCase": true])
        #expect(report.error?.kind == .parameterUnresolved)
        #expect(report.error?.details["parameter"] == "newCase")
        #expect(report.error?.message == "newCase: Which case should the names be in?")
    }

    @Test("RenameFiles: no files, or an empty list, asks for files")
    func renameNeedsFiles() throws {
        for parameters: [String: JSONValue] in [[:], ["files": []]] {
            let report = handle("RenameFiles", parameters)
            #expect(report.error?.kind == .parameterUnresolved)
            #expect(report.error?.details["parameter"] == "files")
            #expect(report.error?.message == "files: Which files would you like to rename?")
        }
    }

    @Test("RenameFiles: a blank date format is unsupported")
    func renameBlankFormat() throws {
        let report = handle("RenameFiles", ["files": [Self.orders], "dateFormat": "   "])
        #expect(report.error?.kind == .parameterUnresolved)
        #expect(report.error?.details["parameter"] == "dateFormat")
        #expect(report.error?.details["reason"] == "empty")
    }

    @Test("RenameFiles: an enum value outside the manifest's list is refused before launch")
    func renameBadEnum() throws {
        let report = handle("RenameFiles", ["files": [Self.orders], "position": "middle"])
        #expect(report.error?.kind == .invalidIntent)
        #expect(report.error?.details["field"] == "parameters.position")
        #expect(report.error?.message == "test: parameters.position: 'middle' is not one of prepend, append")
    }

    @Test("verbose logging reports the handshake")
    func verboseLog() throws {
        let log = LogLines()
        let report = handle("MakeUppercase", ["text": "x"], options: .with { $0.log = log.sink })
        #expect(report.exitCode == 0)
        #expect(log.all.contains { $0.hasPrefix("[extrun] com.example.uppercase started in extension mode") }, "\(log.all)")
    }

    @Test("several runs at once do not interfere")
    func concurrentRuns() async throws {
        let host = self.host
        let results = await withTaskGroup(of: (Int, String?).self) { group in
            for i in 0..<8 {
                group.addTask {
                    let report = host.handle(IntentInvocation(intent: "MakeUppercase", parameters: ["text": .string("run \(i)")], source: "t"))
                    return (i, report.response?.properties["result"]?.stringValue)
                }
            }
            var all: [Int: String?] = [:]
            for await (i, result) in group { all[i] = result }
            return all
        }
        for i in 0..<8 { #expect(results[i] == "RUN \(i)") }
    }
}
