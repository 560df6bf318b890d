import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `extrun mcp` in MCP 2026-07-28, driven by the official Python SDK (2.x) over stdio
/// (mcp_modern_client.py): server/discover, tools/list with its caching fields, a call,
/// subscriptions/listen, and OrderSoup resolved through input_required rounds that
/// alternate between two `extrun mcp` processes sharing one request-state key file. Every
/// run checks that the servers ended, that no plugin process is left and that TMPDIR is empty.
@Suite(.serialized) struct MCPModernClientTests {
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

        var keyFile: URL { home.url.appendingPathComponent("mcp-request-state.key") }

        func run(_ scenario: String, _ arguments: [String] = [], servers: Int = 1, sourceLocation: SourceLocation = #_sourceLocation) throws -> JSONValue {
            guard let python = ProcessInfo.processInfo.environment["EXTRUN_TEST_PYTHON"] else {
                Issue.record("EXTRUN_TEST_PYTHON is not set: run the tests with Scripts/test, which makes a venv with the mcp package", sourceLocation: sourceLocation)
                return .null
            }
            let script = StagedPlugins.packageRoot.appendingPathComponent("Tests/ExtrunMCPTests/mcp_modern_client.py")
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
            let deadline = Date().addingTimeInterval(120)
            while process.isRunning && Date() < deadline { usleep(20_000) }
            if process.isRunning {
                process.terminate()
                process.waitUntilExit()
                Issue.record("mcp_modern_client.py \(scenario) ran over 120 s", sourceLocation: sourceLocation)
            }
            let stdout = (try? Data(contentsOf: out)) ?? Data()
            let stderr = (try? String(contentsOf: err, encoding: .utf8)) ?? ""
            #expect(process.terminationStatus == 0, "mcp_modern_client.py \(scenario) failed:\n\(stderr)", sourceLocation: sourceLocation)
            guard let line = String(decoding: stdout, as: UTF8.self).split(separator: "\n").last,
                let report = try? JSONParser.parse(Array(line.utf8))
            else {
                Issue.record("mcp_modern_client.py \(scenario) printed no report:\n\(String(decoding: stdout, as: UTF8.self))\n\(stderr)", sourceLocation: sourceLocation)
                return .null
            }
            #expect(report["serversFound"] == .int(Int64(servers)), "the client did not find its servers", sourceLocation: sourceLocation)
            #expect(report["serversGone"] == true, "extrun mcp still runs after its client closed", sourceLocation: sourceLocation)
            #expect(report["left"]?.arrayValue?.isEmpty == true, "processes left: \(report["left"] ?? .null)", sourceLocation: sourceLocation)
            let files = ((try? FileManager.default.contentsOfDirectory(atPath: scratch.url.path)) ?? []).filter { $0.hasPrefix("extrun-") }
            #expect(files.isEmpty, "the session left \(files) in its TMPDIR", sourceLocation: sourceLocation)
            return report
        }
    }

    /// Item `index` of a JSON array, nil past its end.
    static func item(_ value: JSONValue?, _ index: Int) -> JSONValue? {
        guard let items = value?.arrayValue, items.indices.contains(index) else { return nil }
        return items[index]
    }

    @Test func discoverListAndCallWithoutAHandshake() throws {
        let session = try Session()
        let report = try session.run("discover-list-call")
        #expect(report["protocolVersion"] == "2026-07-28")
        let discover = report["discover"]
        #expect(discover?["supportedVersions"]?.arrayValue?.compactMap(\.stringValue) == ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"])
        #expect(discover?["capabilities"]?["tools"]?["listChanged"] == true)
        #expect(discover?["_meta"]?["io.modelcontextprotocol/serverInfo"]?["name"] == "extrun")
        #expect(discover?["resultType"] == "complete")
        let list = report["list"]
        #expect(list?["ttlMs"] == 10000)
        #expect(list?["cacheScope"] == "private")
        let tools = list?["tools"]?.arrayValue ?? []
        #expect(tools.contains { $0["name"] == "MakeUppercase" })
        // The client declared elicitation: the person is asked, so no tool takes `_confirmed`.
        let soup = tools.first { $0["name"] == "OrderSoup" }
        #expect(soup?["inputSchema"]?["properties"]?["_confirmed"] == nil, "\(soup ?? .null)")
        #expect(soup?["outputSchema"] != nil)
        #expect(report["result"]?["isError"] == false, "\(report["result"] ?? .null)")
        #expect(report["result"]?["structuredContent"]?["result"] == "HELLO, 2026")
        #expect(report["inBand"] == 0, "the modern era sends no in-band elicitation")
        // The request-state key was made on the first start, private to its owner.
        var info = stat()
        #expect(stat(session.keyFile.path, &info) == 0)
        #expect(info.st_mode & 0o777 == 0o600)
        #expect(info.st_size == 32)
    }

    @Test func orderSoupIsResolvedInRoundsThatAlternateBetweenTwoServers() throws {
        let session = try Session()
        let report = try session.run("rounds", ["first,yes"], servers: 2)
        #expect(report["servers"] == 2)
        let rounds = report["rounds"]?.arrayValue ?? []
        try #require(rounds.count == 2, "\(report)")
        // Round 1, on the first server: which soup, the app's options with their identifiers and titles.
        #expect(rounds[0]["server"] == 0)
        #expect(rounds[0]["method"] == "elicitation/create")
        #expect(rounds[0]["mode"] == "form")
        #expect(rounds[0]["message"] == "Which soup would you like?")
        let options = rounds[0]["requestedSchema"]?["properties"]?["soup"]?["oneOf"]?.arrayValue ?? []
        #expect(options.first?["const"] == "clam_chowder")
        #expect(options.first?["title"]?.stringValue?.hasPrefix("Clam Chowder") == true)
        // Round 2, on the other: the intent's confirmation, nothing handled yet.
        #expect(rounds[1]["server"] == 1)
        #expect(rounds[1]["message"] == "Order 1 Clam Chowder?")
        #expect(rounds[1]["requestedSchema"]?["properties"]?["confirm"]?["type"] == "boolean")
        // The final retry, on the first server again, resumes from the state alone and handles.
        let end = report["end"]
        #expect(end?["server"] == 0)
        #expect(end?["final"]?["isError"] == false, "\(end ?? .null)")
        #expect(end?["final"]?["structuredContent"]?["soup"]?["identifier"] == "clam_chowder")
        #expect(end?["final"]?["structuredContent"]?["quantity"] == 1)
        #expect(report["inBand"] == 0)
    }

    @Test func everySiriKitStepIsARound() throws {
        // "soup" names two soups (disambiguation); 20 is too many (unsupported, the plugin's
        // reason, asked again); then the confirmation.
        let arguments = #"{"soup": {"identifier": "soup", "title": "soup"}, "quantity": 20}"#
        let report = try Session().run("rounds", ["first,int:2,yes", arguments], servers: 2)
        let rounds = report["rounds"]?.arrayValue ?? []
        try #require(rounds.count == 3, "\(report)")
        #expect(rounds[0]["message"] == "Which one would you like?")
        let candidates = rounds[0]["requestedSchema"]?["properties"]?["soup"]?["oneOf"]?.arrayValue ?? []
        #expect(candidates.compactMap { $0["const"]?.stringValue } == ["tomato_soup", "chicken_noodle_soup"])
        #expect(candidates.compactMap { $0["title"]?.stringValue } == ["Tomato Soup", "Chicken Noodle Soup"])
        #expect(rounds[1]["message"] == "You can order at most 10 at a time.\nHow many would you like?")
        #expect(rounds[1]["requestedSchema"]?["properties"]?["quantity"]?["type"] == "integer")
        #expect(rounds[2]["message"] == "Order 2 Tomato Soup?")
        #expect(rounds.map { $0["server"]?.intValue } == [0, 1, 0])
        let final = report["end"]?["final"]
        #expect(final?["isError"] == false, "\(report["end"] ?? .null)")
        #expect(final?["structuredContent"]?["quantity"] == 2)
        #expect(final?["structuredContent"]?["soup"]?["identifier"] == "tomato_soup")
    }

    @Test func aResolutionThatAsksToConfirmItsValueIsARound() throws {
        let report = try Session().run("rounds", ["yes,yes", #"{"soup": {"identifier": "tomato", "title": "tomato"}}"#], servers: 2)
        let rounds = report["rounds"]?.arrayValue ?? []
        #expect(rounds.compactMap { $0["message"]?.stringValue } == ["Did you mean Tomato Soup?", "Order 1 Tomato Soup?"], "\(report)")
        #expect(report["end"]?["final"]?["structuredContent"]?["soup"]?["identifier"] == "tomato_soup", "\(report["end"] ?? .null)")
    }

    @Test func decliningTheConfirmationHandlesNothing() throws {
        let report = try Session().run("rounds", ["first,no"], servers: 2)
        let final = report["end"]?["final"]
        #expect(final?["isError"] == true)
        #expect(final?["structuredContent"]?["error"]?["kind"] == "confirmationDeclined", "\(final ?? .null)")
        #expect(final?["structuredContent"]?["response"] == nil)
    }

    @Test func anAnswerOfAnotherTypeIsAskedAgainSayingWhy() throws {
        let report = try Session().run("rounds", ["first,text:yes,yes"], servers: 2)
        let rounds = report["rounds"]?.arrayValue ?? []
        try #require(rounds.count == 3, "\(report)")
        #expect(rounds[1]["key"] == rounds[2]["key"], "the same question, asked again")
        #expect(rounds[2]["message"] == "The answer \"yes\" is not a boolean (true or false).\nOrder 1 Clam Chowder?")
        #expect(report["end"]?["final"]?["isError"] == false, "\(report["end"] ?? .null)")
    }

    @Test func aChangedForeignOrExpiredStateIsRefusedAndRunsNothing() throws {
        let report = try Session().run("refusals", ["1"], servers: 2)
        // Sealed means encrypted too: the state shows nothing of the call.
        #expect(report["stateShowsNoSoup"] == true)
        let refused = report["refused"]
        for (name, words) in [
            ("tampered", "does not open with this server's key"), ("garbage", "not one this server made"),
            ("otherTool", "issued for the tool OrderSoup"), ("otherArguments", "issued for other arguments"),
        ] {
            #expect(Self.item(refused?[name], 0) == "error", "\(name): \(refused?[name] ?? .null)")
            #expect(Self.item(refused?[name], 1) == -32602, "\(name)")
            #expect(Self.item(refused?[name], 2)?.stringValue?.contains(words) == true, "\(name): \(refused?[name] ?? .null)")
        }
        #expect(report["bRanNothing"] == true, "a refused state started a plugin")
        #expect(Self.item(report["expired"], 1) == -32602)
        #expect(Self.item(report["expired"], 2)?.stringValue?.contains("expired") == true, "\(report["expired"] ?? .null)")
        #expect(report["bRanNothingWhenExpired"] == true)
    }

    @Test func anUnsupportedVersionIsRefusedWithTheSupportedOnes() throws {
        let report = try Session().run("unsupported-version")
        #expect(report["error"]?["code"] == -32022)
        #expect(report["error"]?["data"]?["requested"] == "2099-01-01")
        #expect(report["error"]?["data"]?["supported"]?.arrayValue?.contains("2026-07-28") == true)
        #expect(report["error"]?["data"]?["supported"]?.arrayValue?.contains("2025-11-25") == true)
    }

    @Test func withoutElicitationTheModernResultSaysWhatIsMissing() throws {
        let report = try Session().run("no-elicitation")
        #expect(report["orderSoupProperties"]?.arrayValue?.contains("_confirmed") == true)
        #expect(report["first"]?["structuredContent"]?["error"]?["kind"] == "parameterUnresolved")
        #expect((report["first"]?["structuredContent"]?["error"]?["options"]?.arrayValue ?? []).count == 3)
        #expect(report["confirmed"]?["isError"] == false, "\(report["confirmed"] ?? .null)")
    }

    @Test func aModernCallsProgressReachesTheClient() throws {
        let report = try Session().run("progress")
        #expect(report["result"]?["isError"] == false, "\(report["result"] ?? .null)")
        let progress = (report["progress"]?.arrayValue ?? []).compactMap { $0["progress"]?.doubleValue }
        #expect(progress.count == 10, "\(report["progress"] ?? .null)")
        #expect(progress == progress.sorted() && progress.last == 1)
    }

    @Test func cancellingAModernCallEndsItsProcessAndTheServerGoesOn() throws {
        let report = try Session().run("cancel", ["1"])
        #expect(report["processesRightAfterCancel"]?.intValue ?? 0 > 0, "the Sleep was not running when cancelled")
        #expect((report["goneWithinMs"]?.intValue ?? 99_999) < 3000, "\(report)")
        #expect(report["afterCancel"]?["structuredContent"]?["result"] == "STILL HERE")
    }

    @Test func aSubscriptionHearsOfAPluginInstalled() throws {
        let extra = try TempDirectory("mcp-plugins")
        let outside = try TempDirectory("mcp-prepared")
        let prepared = try outside.directory("Added")
        try Data(
            #"{"id": "com.example.mcp-added", "version": "1.0.0", "owner": "EXAMPLETEAM", "protocolVersion": 1, "executable": "plugin", "intents": [{"name": "AddedWhileServing", "title": "Added while serving"}]}"#
                .utf8
        ).write(to: prepared.appendingPathComponent("manifest.json"))
        try Data("#!/bin/sh\nexit 1\n".utf8).write(to: prepared.appendingPathComponent("plugin"))
        chmod(prepared.appendingPathComponent("plugin").path, 0o755)
        let report = try Session(extraPluginDirectories: [extra.url]).run("listen", [extra.url.path, prepared.path])
        #expect(report["honored"]?["toolsListChanged"] == true)
        #expect(report["events"] == ["ToolsListChanged"], "\(report)")
        #expect((report["notifiedWithinMs"]?.intValue ?? 99_999) < 5000)
        #expect(report["added"] == ["AddedWhileServing"])
    }
}
