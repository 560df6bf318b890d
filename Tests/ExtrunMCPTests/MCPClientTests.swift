import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `extrun mcp` driven by the official Python MCP SDK (2.x, in Scripts/test's venv) over
/// stdio: the tools against the manifests, calls, elicitation, the fallback without it,
/// cancellation, progress, a limit, list_changed. Every run checks that the server
/// ended, that no plugin process is left and that its TMPDIR (the scratch folders) is empty.
@Suite(.serialized) struct MCPClientTests {
    /// One `extrun mcp` session run by mcp_client.py, with a home and a TMPDIR of its own.
    struct Session {
        let home: TempDirectory
        let scratch: TempDirectory
        var pluginPath: [URL]

        init(extraPluginDirectories: [URL] = []) throws {
            home = try TempDirectory("mcp-home")
            scratch = try TempDirectory("mcp-tmp")
            pluginPath = extraPluginDirectories + [try StagedPlugins.directory()]
            try StagedPlugins.trust(home: home.url)
        }

        func run(_ scenario: String, _ arguments: [String] = [], sourceLocation: SourceLocation = #_sourceLocation) throws -> JSONValue {
            guard let python = ProcessInfo.processInfo.environment["EXTRUN_TEST_PYTHON"] else {
                Issue.record("EXTRUN_TEST_PYTHON is not set: run the tests with Scripts/test, which makes a venv with the mcp package", sourceLocation: sourceLocation)
                return .null
            }
            let script = StagedPlugins.packageRoot.appendingPathComponent("Tests/ExtrunMCPTests/mcp_client.py")
            let process = Process()
            process.executableURL = URL(fileURLWithPath: python)
            process.arguments = [script.path, try ExtrunBinary.url().path, scenario] + arguments
            process.environment = [
                "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home.url.path, "EXTRUN_HOME": home.url.path,
                "EXTRUN_PLUGIN_PATH": pluginPath.map(\.path).joined(separator: ":"), "TMPDIR": scratch.url.path,
                "LANG": "C.UTF-8",
            ]
            process.currentDirectoryURL = StagedPlugins.packageRoot
            let out = home.url.appendingPathComponent("client-stdout")
            let err = home.url.appendingPathComponent("client-stderr")
            _ = FileManager.default.createFile(atPath: out.path, contents: nil)
            _ = FileManager.default.createFile(atPath: err.path, contents: nil)
            let outHandle = try FileHandle(forWritingTo: out)
            let errHandle = try FileHandle(forWritingTo: err)
            defer {
                try? outHandle.close()
                try? errHandle.close()
            }
            process.standardOutput = outHandle
            process.standardError = errHandle
            process.standardInput = FileHandle.nullDevice
            try process.run()
            // A hung client is a failure, not a hung suite.
            let deadline = Date().addingTimeInterval(120)
            while process.isRunning && Date() < deadline { usleep(20_000) }
            if process.isRunning {
                process.terminate()
                process.waitUntilExit()
                Issue.record("mcp_client.py \(scenario) ran over 120 s", sourceLocation: sourceLocation)
            }
            let stdout = (try? Data(contentsOf: out)) ?? Data()
            let stderr = (try? String(contentsOf: err, encoding: .utf8)) ?? ""
            #expect(process.terminationStatus == 0, "mcp_client.py \(scenario) failed:\n\(stderr)", sourceLocation: sourceLocation)
            guard let line = String(decoding: stdout, as: UTF8.self).split(separator: "\n").last,
                let report = try? JSONParser.parse(Array(line.utf8))
            else {
                Issue.record("mcp_client.py \(scenario) printed no report:\n\(String(decoding: stdout, as: UTF8.self))\n\(stderr)", sourceLocation: sourceLocation)
                return .null
            }
            expectNothingLeft(report, sourceLocation: sourceLocation)
            return report
        }

        /// The server ended, no process it started is alive, no scratch folder is left.
        func expectNothingLeft(_ report: JSONValue, sourceLocation: SourceLocation) {
            #expect(report["serverFound"] == true, "the client did not find the server's process", sourceLocation: sourceLocation)
            #expect(report["serverGone"] == true, "extrun mcp still runs after its client closed", sourceLocation: sourceLocation)
            #expect(report["left"]?.arrayValue?.isEmpty == true, "processes left: \(report["left"] ?? .null)", sourceLocation: sourceLocation)
            let files = ((try? FileManager.default.contentsOfDirectory(atPath: scratch.url.path)) ?? []).filter { $0.hasPrefix("extrun-") }
            #expect(files.isEmpty, "the session left \(files) in its TMPDIR", sourceLocation: sourceLocation)
        }
    }

    static func manifests() throws -> [PluginManifest] {
        let folder = try StagedPlugins.directory()
        return try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted().compactMap { name in
            let file = folder.appendingPathComponent(name).appendingPathComponent("manifest.json")
            guard let data = FileManager.default.contents(atPath: file.path) else { return nil }
            return try PluginManifest(jsonValue: try JSONParser.parse(data))
        }
    }

    @Test func theToolsAreTheIntentsWithTheirSchemas() throws {
        let session = try Session()
        let report = try session.run("list")
        #expect(report["protocolVersion"] == "2025-11-25")
        #expect(report["capabilities"]?["tools"]?["listChanged"] == true)
        let tools = report["tools"]?.arrayValue ?? []
        var byName: [String: JSONValue] = [:]
        for tool in tools { if let name = tool["name"]?.stringValue { byName[name] = tool } }
        let manifests = try Self.manifests()
        #expect(!manifests.isEmpty)
        for manifest in manifests {
            for intent in manifest.intents {
                guard let tool = byName[intent.name] else {
                    Issue.record("no tool for \(intent.name) of \(manifest.id)")
                    continue
                }
                let properties = tool["inputSchema"]?["properties"]?.objectValue ?? [:]
                var expected = Set(intent.parameters.map(\.name))
                // This client cannot answer elicitations: an intent that may ask for a confirmation takes `_confirmed`.
                if intent.confirmation != nil || intent.parameters.contains(where: { $0.confirmationPrompt != nil }) { expected.insert("_confirmed") }
                #expect(Set(properties.keys) == expected, "\(intent.name)")
                let required = Set((tool["inputSchema"]?["required"]?.arrayValue ?? []).compactMap(\.stringValue))
                #expect(required == Set(intent.parameters.filter { $0.required && $0.default == nil && $0.parent == nil }.map(\.name)), "\(intent.name)")
                for parameter in intent.parameters {
                    let schema = properties[parameter.name]
                    let single = parameter.multiple ? schema?["items"] : schema
                    if parameter.multiple { #expect(schema?["type"] == "array", "\(intent.name).\(parameter.name)") }
                    let type: String =
                        switch parameter.type {
                        case .string, .date, .file, .enum: "string"
                        case .integer: "integer"
                        case .number: "number"
                        case .boolean: "boolean"
                        case .custom: "object"
                        }
                    #expect(single?["type"]?.stringValue == type, "\(intent.name).\(parameter.name)")
                    if parameter.type == .enum {
                        let listed = single?["enum"]?.arrayValue?.compactMap(\.stringValue) ?? single?["oneOf"]?.arrayValue?.compactMap { $0["const"]?.stringValue } ?? []
                        #expect(listed == parameter.values ?? [], "\(intent.name).\(parameter.name)")
                        for (value, title) in parameter.valueTitles ?? [:] {
                            #expect(single?["oneOf"]?.arrayValue?.contains { $0["const"] == .string(value) && $0["title"] == .string(title) } == true)
                        }
                    }
                    if let value = parameter.default { #expect(schema?["default"] == value, "\(intent.name).\(parameter.name)") }
                    if let title = parameter.title { #expect(schema?["title"] == .string(title)) }
                }
                let outputs = tool["outputSchema"]?["properties"]?.objectValue
                #expect(Set((outputs ?? [:]).keys) == Set(intent.outputs.map(\.name)), "\(intent.name) outputs")
                if let description = intent.description { #expect(tool["description"]?.stringValue?.contains(description) == true) }
            }
        }
        // The typed outputs of a definition file reach the schema: OrderSoup's soup is a Soup, its toppings a list of Topping.
        let soup = byName["OrderSoup"]?["outputSchema"]?["properties"]
        #expect(soup?["total"]?["type"] == "number")
        #expect(soup?["soup"]?["properties"]?["price"]?["type"] == "number")
        #expect(soup?["toppings"]?["items"]?["oneOf"]?.arrayValue?.count == 3)
    }

    @Test func makeUppercaseAnswersWithStructuredContentAndItsDialog() throws {
        let report = try Session().run("uppercase")
        let result = report["result"]
        #expect(result?["isError"] == false, "\(result ?? .null)")
        #expect(result?["structuredContent"]?["result"] == "HELLO, MCP")
        #expect(result?["text"]?.arrayValue?.isEmpty == false)
        #expect(report["again"]?["structuredContent"]?["result"] == "WARM")
    }

    @Test func goingOverTheExtensionMemoryCapIsAnErrorResultWithItsNumbers() throws {
        let report = try Session().run("memory", ["400"])
        let result = report["result"]
        #expect(result?["isError"] == true, "\(result ?? .null)")
        let error = result?["structuredContent"]?["error"]
        #expect(error?["kind"] == "memoryLimitExceeded", "\(result ?? .null)")
        #expect((error?["limitBytes"]?.intValue ?? 0) > 0)
        #expect(error?["mode"] == "extension")
        #expect(result?["text"]?.arrayValue?.first?.stringValue?.hasPrefix("memoryLimitExceeded") == true)
    }

    // MARK: - Resolution as elicitation

    @Test func orderSoupWithoutASoupAsksWithTheAppsOptionsThenTheConfirmation() throws {
        let report = try Session().run("elicit-choose")
        let asked = report["asked"]?.arrayValue ?? []
        #expect(asked.count == 2, "\(asked)")
        // The soup: one property, an enum of the options the app offered, with their titles.
        let soup = asked.first?["requestedSchema"]?["properties"]?["soup"]
        let options = soup?["oneOf"]?.arrayValue ?? []
        #expect(!options.isEmpty, "\(asked)")
        #expect(options.allSatisfy { $0["const"]?.stringValue != nil && $0["title"]?.stringValue != nil })
        #expect(asked.first?["message"] == "Which soup would you like?")
        // Then the intent's confirmation, a boolean.
        #expect(asked.last?["requestedSchema"]?["properties"]?["confirm"]?["type"] == "boolean")
        #expect(asked.last?["message"]?.stringValue?.hasPrefix("Order 1 ") == true)
        let result = report["result"]
        #expect(result?["isError"] == false, "\(result ?? .null)")
        #expect(result?["structuredContent"]?["soup"]?["identifier"] == options.first?["const"])
    }

    @Test func decliningTheElicitationLeavesTheParameterUnresolved() throws {
        let report = try Session().run("elicit-decline")
        let result = report["result"]
        #expect(result?["isError"] == true)
        #expect(result?["structuredContent"]?["error"]?["kind"] == "parameterUnresolved", "\(result ?? .null)")
        #expect(result?["structuredContent"]?["error"]?["parameter"] == "soup")
        #expect(report["asked"]?.arrayValue?.count == 1)
    }

    @Test func answeringNoToTheConfirmationDeclinesTheIntent() throws {
        let report = try Session().run("elicit-confirm-no")
        let result = report["result"]
        #expect(result?["isError"] == true)
        #expect(result?["structuredContent"]?["error"]?["kind"] == "confirmationDeclined", "\(result ?? .null)")
        #expect(report["asked"]?.arrayValue?.count == 2)
    }

    @Test func anAnswerOfAnotherTypeThanAskedIsRefusedNotCoerced() throws {
        // The confirmation asks for a boolean; the client answers the text "yes".
        let report = try Session().run("elicit-mistyped")
        let result = report["result"]
        #expect(result?["isError"] == true, "\(result ?? .null)")
        let error = result?["structuredContent"]?["error"]
        #expect(error?["kind"] == "parameterUnresolved", "\(result ?? .null)")
        #expect(error?["expected"]?.stringValue?.hasPrefix("a boolean") == true, "\(error ?? .null)")
        #expect(error?["answer"] == "yes")
        #expect(error?["message"]?.stringValue?.contains("nothing is coerced") == true)
        #expect(report["asked"]?.arrayValue?.count == 2)
    }

    @Test func withoutElicitationTheResultSaysWhatIsMissingAndTheModelCallsAgain() throws {
        let report = try Session().run("no-elicitation")
        let first = report["first"]
        #expect(first?["isError"] == true)
        let error = first?["structuredContent"]?["error"]
        #expect(error?["kind"] == "parameterUnresolved", "\(first ?? .null)")
        #expect(error?["prompt"] == "Which soup would you like?")
        #expect((error?["options"]?.arrayValue?.count ?? 0) > 0, "\(first ?? .null)")
        #expect(first?["text"]?.arrayValue?.first?.stringValue?.contains("Which soup would you like?") == true)
        // With a soup but not confirmed: the question to put to the user, and how to confirm.
        let unconfirmed = report["unconfirmed"]
        #expect(unconfirmed?["structuredContent"]?["error"]?["kind"] == "confirmationDeclined", "\(unconfirmed ?? .null)")
        #expect(unconfirmed?["text"]?.arrayValue?.first?.stringValue?.contains("_confirmed") == true)
        let confirmed = report["confirmed"]
        #expect(confirmed?["isError"] == false, "\(confirmed ?? .null)")
        #expect(confirmed?["structuredContent"]?["quantity"] == 1)
        // A value the app asks to confirm (SoupChef found one soup for "tomato"): the value and the question, then `_confirmed`.
        let partial = report["partial"]?["structuredContent"]?["error"]
        #expect(partial?["kind"] == "parameterUnresolved", "\(report["partial"] ?? .null)")
        #expect(partial?["value"]?["identifier"] == "tomato_soup")
        #expect(report["partial"]?["text"]?.arrayValue?.first?.stringValue?.contains("_confirmed") == true)
        #expect(report["partialConfirmed"]?["structuredContent"]?["soup"]?["identifier"] == "tomato_soup", "\(report["partialConfirmed"] ?? .null)")
    }

    // MARK: - Cancellation and progress

    @Test func cancellingACallWhileTheUserIsAskedEndsItsProcess() throws {
        let report = try Session().run("elicit-cancel")
        #expect(report["asked"] == 1)
        #expect(report["processesRightAfterCancel"]?.intValue ?? 0 > 0, "the SoupChef plugin was not running while the user was asked")
        #expect(report["goneWithinMs"]?.intValue != nil, "the plugin still runs after the cancel")
        #expect(report["afterCancel"]?["structuredContent"]?["result"] == "NEXT", "\(report["afterCancel"] ?? .null)")
    }

    @Test func cancellingALongSleepEndsItsProcessAndTheServerGoesOn() throws {
        let report = try Session().run("cancel", ["1.5"])
        #expect((report["cancelledAfterMs"]?.intValue ?? 0) < 5000)
        #expect(report["processesRightAfterCancel"]?.intValue ?? 0 > 0, "the Sleep plugin was not running when the call was cancelled")
        // The grace is 500 ms; allow for a loaded machine.
        #expect(report["goneWithinMs"]?.intValue != nil, "still running after the cancel: \(report["leftAfterCancel"] ?? .null)")
        #expect(report["afterCancel"]?["structuredContent"]?["result"] == "STILL HERE")
    }

    @Test func aPluginsProgressReachesTheClient() throws {
        let report = try Session().run("progress")
        #expect(report["result"]?["isError"] == false, "\(report["result"] ?? .null)")
        #expect(report["result"]?["structuredContent"]?["sleptSeconds"]?.doubleValue == 1)
        let progress = (report["progress"]?.arrayValue ?? []).compactMap { $0["progress"]?.doubleValue }
        #expect(progress.count == 10, "\(report["progress"] ?? .null)")
        #expect(progress == progress.sorted() && progress.last == 1)
        #expect(report["progress"]?.arrayValue?.first?["message"] == "10% of 1.0 seconds")
    }

    // MARK: - list_changed

    @Test func installingAndRemovingAPluginChangesTheToolsAndNotifies() throws {
        let extra = try TempDirectory("mcp-plugins")
        let outside = try TempDirectory("mcp-prepared")
        // A plugin folder made outside the plugin path, then moved in: the install is one rename.
        let prepared = try outside.directory("Added")
        let manifest = """
            {"id": "com.example.mcp-added", "version": "1.0.0", "owner": "EXAMPLETEAM", "protocolVersion": 1,
             "executable": "plugin", "intents": [{"name": "AddedWhileServing", "title": "Added while serving"}]}
            """
        try Data(manifest.utf8).write(to: prepared.appendingPathComponent("manifest.json"))
        try Data("#!/bin/sh\nexit 1\n".utf8).write(to: prepared.appendingPathComponent("plugin"))
        chmod(prepared.appendingPathComponent("plugin").path, 0o755)
        let session = try Session(extraPluginDirectories: [extra.url])
        let report = try session.run("list-changed", [extra.url.path, prepared.path])
        #expect(report["added"] == ["AddedWhileServing"], "\(report)")
        #expect((report["notifiedWithinMs"]?.intValue ?? 99_999) < 10_000)
        #expect(report["notices"]?.arrayValue?.contains("notifications/tools/list_changed") == true)
        #expect(report["removedNotified"] == true)
        #expect(report["afterRemoval"] == ["AddedWhileServing"])
    }
}

extension MCPClientTests {
    @Test func twoPluginsClaimingOneIntentShowInTheToolAndItsCall() throws {
        let extra = try TempDirectory("mcp-clash")
        let plugin = try extra.directory("Other")
        let manifest = """
            {"id": "com.example.other-uppercase", "version": "1.0.0", "owner": "EXAMPLETEAM", "protocolVersion": 1,
             "executable": "plugin", "intents": [{"name": "MakeUppercase", "parameters": [{"name": "text", "type": "string"}]}]}
            """
        try Data(manifest.utf8).write(to: plugin.appendingPathComponent("manifest.json"))
        try Data("#!/bin/sh\nexit 1\n".utf8).write(to: plugin.appendingPathComponent("plugin"))
        chmod(plugin.appendingPathComponent("plugin").path, 0o755)
        let report = try Session(extraPluginDirectories: [extra.url]).run("call", ["MakeUppercase", #"{"text": "x"}"#])
        let tools = report["tools"]?.arrayValue ?? []
        #expect(tools.filter { $0["name"] == "MakeUppercase" }.count == 1)
        let description = tools.first { $0["name"] == "MakeUppercase" }?["description"]?.stringValue ?? ""
        #expect(description.hasPrefix("UNAVAILABLE:") && description.contains("com.example.other-uppercase") && description.contains("com.example.uppercase"))
        let error = report["result"]?["structuredContent"]?["error"]
        #expect(error?["kind"] == "configurationError", "\(report["result"] ?? .null)")
        #expect(error?["message"]?.stringValue?.contains("claimed by more than one plugin") == true)
    }
}
