import ExtrunProtocol
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `extrun serve`'s `/mcp` (MCP's Streamable HTTP transport) driven by the official Python
/// SDK (2.3.0, Fixtures/mcp_http_client.py) and by curl: the 2026-07-28 era on the Unix
/// socket; OrderSoup's input_required rounds alternating between two services that share
/// only the request-state key file; changed and foreign states refused; the handshake era
/// (initialize, Mcp-Session-Id, in-band elicitation on the call's SSE stream, DELETE); over
/// TCP with bearer JWTs, the access rules, a rate limit and the audit log; a client that
/// goes away mid-call; the transport's refusals. Each test stops its services and checks
/// that no process and no file of its run is left.
@Suite("extrun serve: MCP over HTTP", .serialized)
struct ServeMCPTests {
    // MARK: Helpers

    /// Runs mcp_http_client.py's `scenario` with `spec` (endpoints and the scenario's fields); its report.
    static func client(_ scenario: String, _ spec: JSONValue, sourceLocation: SourceLocation = #_sourceLocation) throws -> JSONValue {
        guard let python = ProcessInfo.processInfo.environment["EXTRUN_TEST_PYTHON"] else {
            Issue.record("EXTRUN_TEST_PYTHON is not set: run the tests with Scripts/test, which makes a venv with the mcp package", sourceLocation: sourceLocation)
            return .null
        }
        let script = StagedPlugins.packageRoot.appendingPathComponent("Tests/ExtrunCLITests/Fixtures/mcp_http_client.py")
        let directory = try TempDirectory("mcp-http-client")
        let out = directory.url.appendingPathComponent("stdout")
        let err = directory.url.appendingPathComponent("stderr")
        _ = FileManager.default.createFile(atPath: out.path, contents: nil)
        _ = FileManager.default.createFile(atPath: err.path, contents: nil)
        let outHandle = try FileHandle(forWritingTo: out)
        let errHandle = try FileHandle(forWritingTo: err)
        defer {
            try? outHandle.close()
            try? errHandle.close()
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: python)
        process.arguments = [script.path, scenario, String(decoding: JSONWriter.bytes(spec), as: UTF8.self)]
        // No bytecode written into the tree (the script imports ExtrunMCPTests' helpers).
        process.environment = ["PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": directory.url.path, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"]
        process.standardOutput = outHandle
        process.standardError = errHandle
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let deadline = Date().addingTimeInterval(120)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
            Issue.record("mcp_http_client.py \(scenario) ran over 120 s", sourceLocation: sourceLocation)
        }
        let stdout = (try? String(contentsOf: out, encoding: .utf8)) ?? ""
        let stderr = (try? String(contentsOf: err, encoding: .utf8)) ?? ""
        #expect(process.terminationStatus == 0, "mcp_http_client.py \(scenario) failed:\n\(stderr)", sourceLocation: sourceLocation)
        guard let line = stdout.split(separator: "\n").last, let report = try? JSONParser.parse(Array(line.utf8)) else {
            Issue.record("mcp_http_client.py \(scenario) printed no report:\n\(stdout)\n\(stderr)", sourceLocation: sourceLocation)
            return .null
        }
        return report
    }

    struct Answer {
        var status: Int
        var headers: [String: String]
        var body: JSONValue?
        var text: String
    }

    /// One request with curl (`-sS`, 30 s at most unless `arguments` says otherwise): status, headers (lowercased names), body.
    static func curl(_ arguments: [String], directory: TempDirectory) throws -> Answer {
        let headerFile = directory.url.appendingPathComponent("headers-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: headerFile) }
        let result = try ProgramRun.program("/usr/bin/curl", ["-sS", "-D", headerFile.path, "-w", "\n%{http_code}"] + arguments)
        var lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        let status = Int(lines.popLast() ?? "") ?? 0
        let text = lines.joined(separator: "\n")
        var headers: [String: String] = [:]
        for line in ((try? String(contentsOf: headerFile, encoding: .utf8)) ?? "").split(separator: "\r\n") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return Answer(status: status, headers: headers, body: try? JSONParser.parse(Array(text.utf8)), text: text + result.stderr)
    }

    /// curl arguments for a 2026-07-28 POST to the service's socket, with the headers the era asks for.
    static func modernPost(_ service: RunningService, method: String, name: String?, params: JSONValue, headerMethod: String? = nil) -> [String] {
        var params = params.objectValue ?? [:]
        params["_meta"] = ["io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": [:]]
        let body: JSONValue = ["jsonrpc": "2.0", "id": 7, "method": .string(method), "params": .object(params)]
        var arguments = [
            "--unix-socket", service.socket, "-X", "POST", "http://localhost/mcp", "-H", "content-type: application/json",
            "-H", "accept: application/json, text/event-stream", "-H", "MCP-Protocol-Version: 2026-07-28", "-H", "Mcp-Method: \(headerMethod ?? method)",
        ]
        if let name { arguments += ["-H", "Mcp-Name: \(name)"] }
        return arguments + ["--data-binary", String(decoding: JSONWriter.bytes(body), as: UTF8.self)]
    }

    static func endpoint(_ service: RunningService) -> JSONValue { ["socket": .string(service.socket)] }

    /// The audit log's lines (serve.json `"audit": {"path": "audit.jsonl"}`, beside the service's serve.json).
    static func audit(_ service: RunningService) throws -> [JSONValue] {
        let data = FileManager.default.contents(atPath: service.directory.url.appendingPathComponent("audit.jsonl").path) ?? Data()
        return try data.split(separator: 0x0A).map { try JSONParser.parse(Array($0)) }
    }

    /// The HTTP exchanges the client logged for JSON-RPC method `rpc`.
    static func exchanges(_ report: JSONValue, rpc: String) -> [JSONValue] {
        (report["http"]?.arrayValue ?? []).filter { $0["rpc"] == .string(rpc) }
    }

    static func item(_ value: JSONValue?, _ index: Int) -> JSONValue? {
        guard let items = value?.arrayValue, items.indices.contains(index) else { return nil }
        return items[index]
    }

    /// Two services with homes, sockets and TMPDIRs of their own, sharing only the request-state key file.
    static func pair() throws -> (RunningService, RunningService, TempDirectory) {
        let shared = try TempDirectory("mcp-key")
        let key = shared.url.appendingPathComponent("request-state.key").path
        let policy = #"{"mcp": {"requestStateKeyFile": "\#(key)", "requestStateLifetimeSeconds": 120}, "audit": {"path": "audit.jsonl"}}"#
        let first = try RunningService(cli: try CLI(), policy: policy)
        let second = try RunningService(cli: try CLI(), policy: policy)
        return (first, second, shared)
    }

    // MARK: The 2026-07-28 era

    @Test("2026-07-28 over the Unix socket with the SDK: server/discover, tools/list with ttlMs and cacheScope, MakeUppercase; JSON answers, no session")
    func modernDiscoverListCall() throws {
        let service = try RunningService(cli: try CLI())
        defer { service.stop() }
        let report = try Self.client("calls", ["endpoints": [Self.endpoint(service)], "calls": [["MakeUppercase", ["text": "hello, http"]]]])
        #expect(report["protocolVersion"] == "2026-07-28", "\(report)")
        let discover = report["discover"]
        #expect(discover?["supportedVersions"]?.arrayValue?.compactMap(\.stringValue) == ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"])
        #expect(discover?["_meta"]?["io.modelcontextprotocol/serverInfo"]?["name"] == "extrun")
        #expect(report["list"]?["ttlMs"] == 10000 && report["list"]?["cacheScope"] == "private", "\(report["list"] ?? .null)")
        let names = report["list"]?["names"]?.arrayValue ?? []
        #expect(names.contains("MakeUppercase") && names.contains("OrderSoup") && names.contains("Sleep"), "\(names)")
        let call = Self.item(report["calls"], 0)
        #expect(call?["result"]?["isError"] == false && call?["result"]?["structuredContent"]?["result"] == "HELLO, HTTP", "\(call ?? .null)")
        #expect(report["inBand"] == 0)
        // Every exchange a POST answered 200 with JSON; no Mcp-Session-Id in this era.
        let http = report["http"]?.arrayValue ?? []
        #expect(!http.isEmpty && http.allSatisfy { $0["method"] == "POST" && $0["status"] == 200 && $0["contentType"] == "application/json" }, "\(http)")
        #expect(http.allSatisfy { $0["mcp-session-id"] == nil }, "\(http)")
        // The default request-state key, made at the service's start in its home: 32 bytes, 0600.
        var info = stat()
        #expect(stat(service.cli.home.url.appendingPathComponent("mcp-request-state.key").path, &info) == 0)
        #expect(info.st_mode & 0o777 == 0o600 && info.st_size == 32)
    }

    @Test("OrderSoup's input_required rounds alternate between two extrun serve processes sharing only the key file, and end in the order; nothing is handled before the confirmation's answer")
    func roundsAcrossTwoServices() throws {
        let (first, second, shared) = try Self.pair()
        let report = try Self.client("rounds", ["endpoints": [Self.endpoint(first), Self.endpoint(second)], "plan": "first,yes"])
        first.stop()
        second.stop()
        let rounds = report["rounds"]?.arrayValue ?? []
        try #require(rounds.count == 2, "\(report)")
        #expect(rounds[0]["server"] == 0 && rounds[0]["message"] == "Which soup would you like?", "\(rounds[0])")
        #expect(rounds[1]["server"] == 1 && rounds[1]["message"] == "Order 1 Clam Chowder?", "\(rounds[1])")
        let end = report["end"]
        #expect(end?["server"] == 0 && end?["final"]?["isError"] == false, "\(end ?? .null)")
        #expect(end?["final"]?["structuredContent"]?["soup"]?["identifier"] == "clam_chowder" && end?["final"]?["structuredContent"]?["quantity"] == 1)
        // Each service's audit log: the rounds before the confirmation's answer asked and ran
        // nothing to its end (inputRequired, no run id); only the last retry handled.
        let a = try Self.audit(first)
        let b = try Self.audit(second)
        #expect(a.map { $0["outcome"]?.stringValue } == ["inputRequired", "success"], "\(a)")
        #expect(b.map { $0["outcome"]?.stringValue } == ["inputRequired"], "\(b)")
        #expect((a + b).allSatisfy { $0["transport"] == "mcp" && $0["call"] == "tools/call" && $0["intent"] == "OrderSoup" })
        #expect(a.first?["run"] == nil && b.first?["run"] == nil && a.last?["run"]?.stringValue?.isEmpty == false)
        // The shared key was made once (0600), and neither home has one of its own.
        var info = stat()
        #expect(stat(shared.url.appendingPathComponent("request-state.key").path, &info) == 0 && info.st_mode & 0o777 == 0o600 && info.st_size == 32)
        for service in [first, second] {
            #expect(!FileManager.default.fileExists(atPath: service.cli.home.url.appendingPathComponent("mcp-request-state.key").path))
        }
    }

    @Test("A changed state, another tool's and other arguments' are refused by the second service (-32602) and run nothing there; the genuine state continues")
    func refusedStates() throws {
        let (first, second, _) = try Self.pair()
        let report = try Self.client(
            "refusals",
            [
                "endpoints": [Self.endpoint(first), Self.endpoint(second)],
                "pids": [.int(Int64(first.process.processIdentifier)), .int(Int64(second.process.processIdentifier))],
            ])
        first.stop()
        second.stop()
        let refused = report["refused"]
        for (name, words) in [
            ("tampered", "does not open with this server's key"), ("otherTool", "issued for the tool OrderSoup"), ("otherArguments", "issued for other arguments"),
        ] {
            #expect(Self.item(refused?[name], 0) == "error" && Self.item(refused?[name], 1) == -32602, "\(name): \(refused?[name] ?? .null)")
            #expect(Self.item(refused?[name], 2)?.stringValue?.contains(words) == true, "\(name): \(refused?[name] ?? .null)")
        }
        #expect(report["secondRanNothing"] == true, "a refused state started a plugin on the second service")
        #expect(report["genuine"] == "input", "\(report)")
        let b = try Self.audit(second)
        #expect(b.prefix(3).allSatisfy { $0["error"] == "invalidRequestState" && $0["outcome"] == "error" && $0["run"] == nil }, "\(b)")
        #expect(b.count == 4 && b.last?["outcome"] == "inputRequired", "\(b)")
    }

    @Test("subscriptions/listen over HTTP: the POST's SSE answer stays open and tells of a plugin moved onto the plugin path (ToolsListChanged); the listing then has its tool")
    func subscriptionOverHTTP() throws {
        let extra = try TempDirectory("mcp-plugins")
        let outside = try TempDirectory("mcp-prepared")
        let prepared = try outside.directory("Added")
        try Data(
            #"{"id": "com.example.mcp-added", "version": "1.0.0", "owner": "EXAMPLETEAM", "protocolVersion": 1, "executable": "plugin", "intents": [{"name": "AddedWhileServing", "title": "Added while serving"}]}"#
                .utf8
        ).write(to: prepared.appendingPathComponent("manifest.json"))
        try Data("#!/bin/sh\nexit 1\n".utf8).write(to: prepared.appendingPathComponent("plugin"))
        chmod(prepared.appendingPathComponent("plugin").path, 0o755)
        let service = try RunningService(cli: try CLI(extraPluginDirectories: [extra.url]))
        defer { service.stop() }
        let report = try Self.client("listen", ["endpoints": [Self.endpoint(service)], "folder": .string(extra.url.path), "plugin": .string(prepared.path)])
        #expect(report["honored"]?["toolsListChanged"] == true, "\(report)")
        #expect(report["events"] == ["ToolsListChanged"], "\(report)")
        #expect((report["notifiedWithinMs"]?.intValue ?? 99_999) < 5000, "\(report)")
        #expect(report["added"] == ["AddedWhileServing"], "\(report)")
        #expect(Self.exchanges(report, rpc: "subscriptions/listen").first?["contentType"] == "text/event-stream", "\(report["http"] ?? .null)")
    }

    @Test("A state presented after serve.json's requestStateLifetimeSeconds is refused (-32602, expired) and starts nothing")
    func expiredState() throws {
        let service = try RunningService(cli: try CLI(), policy: #"{"mcp": {"requestStateLifetimeSeconds": 1}}"#)
        defer { service.stop() }
        let report = try Self.client(
            "expired", ["endpoints": [Self.endpoint(service)], "wait": 2.5, "pid": .int(Int64(service.process.processIdentifier))])
        #expect(Self.item(report["late"], 0) == "error" && Self.item(report["late"], 1) == -32602, "\(report["late"] ?? .null)")
        #expect(Self.item(report["late"], 2)?.stringValue?.contains("expired") == true, "\(report["late"] ?? .null)")
        #expect(report["processesBefore"] == 0 && report["processesAfter"] == 0, "\(report)")
    }

    // MARK: The handshake era

    @Test("2025-11-25 over HTTP with the SDK: initialize makes an Mcp-Session-Id, list and calls carry it, OrderSoup's questions come in band on the call's SSE stream and the SDK's callback answers them (202 each), DELETE ends the session")
    func handshakeSession() throws {
        let service = try RunningService(cli: try CLI())
        defer { service.stop() }
        let report = try Self.client("handshake", ["endpoints": [Self.endpoint(service)]])
        #expect(report["protocolVersion"] == "2025-11-25", "\(report)")
        let session = report["session"]?.stringValue ?? ""
        #expect(session.count >= 16, "\(report["http"] ?? .null)")
        let listedNames: [JSONValue] = report["list"]?["names"]?.arrayValue ?? []
        #expect(listedNames.contains("OrderSoup"))
        #expect(report["upper"]?["structuredContent"]?["result"] == "OVER HTTP", "\(report["upper"] ?? .null)")
        let soup = report["soup"]
        #expect(soup?["isError"] == false && soup?["structuredContent"]?["soup"]?["identifier"] == "clam_chowder", "\(soup ?? .null)")
        #expect((report["asked"]?.arrayValue ?? []).compactMap { $0["message"]?.stringValue } == ["Which soup would you like?", "Order 1 Clam Chowder?"])

        let http = report["http"]?.arrayValue ?? []
        // Every request after initialize sent the session.
        #expect(http.dropFirst().allSatisfy { $0["sentSession"] == .string(session) }, "\(http)")
        // The calls: MakeUppercase answered with JSON, OrderSoup on an SSE stream (its questions were events of it).
        let calls = Self.exchanges(report, rpc: "tools/call")
        #expect(calls.map { $0["contentType"]?.stringValue } == ["application/json", "text/event-stream"], "\(calls)")
        // The two answers to the questions, each a POST of its own, taken with 202.
        let answers = http.filter { $0["method"] == "POST" && $0["rpc"] == .null }
        #expect(answers.count == 2 && answers.allSatisfy { $0["status"] == 202 }, "\(http)")
        // The SDK's GET for a stream: 405 with Allow (none is offered); DELETE at the end: 200.
        #expect(http.contains { $0["method"] == "GET" && $0["status"] == 405 && $0["allow"] == "POST, DELETE" }, "\(http)")
        #expect(http.last?["method"] == "DELETE" && http.last?["status"] == 200, "\(http)")
        // After DELETE the session is unknown: 404, -32001.
        #expect(report["afterDelete"]?["status"] == 404 && report["afterDelete"]?["body"]?["error"]?["code"] == -32001, "\(report["afterDelete"] ?? .null)")
    }

    // MARK: Over TCP: authentication, access, rates, audit

    @Test("Over TCP with bearer JWTs: a modern call works; a tool the access rules deny is not listed and refused 403 (-32003); a rate-limited principal gets 429 with Retry-After; the audit log has a line per call, no argument value; no token: 401 with the challenge")
    func overTCPWithAuthorization() throws {
        let directory = try TempDirectory("serve-mcp-auth")
        let issuer = ServeTestIssuer(name: ServeAuthTests.issuerName)
        let jwks = try directory.write("jwks.json", issuer.jwks)
        let token = try directory.write("token", "s3cret-token-\(UUID().uuidString)", mode: 0o600)
        let port = try ServeListenerTests.freePort()
        let policy = """
            {"authentication": {"resource": "\(ServeAuthTests.resource)", "issuers": [{"issuer": "\(ServeAuthTests.issuerName)", "jwksFile": "\(jwks.path)"}], "scopesSupported": ["intents"]},
             "access": [{"principals": ["jwt:\(ServeAuthTests.issuerName)#*"], "intents": ["MakeUppercase", "OrderSoup"]},
                        {"principals": ["jwt:\(ServeAuthTests.issuerName)#*"], "scopes": ["sleep"], "intents": ["Sleep"]}],
             "rateLimits": {"principals": {"jwt:\(ServeAuthTests.issuerName)#bot": {"perSecond": 0.1, "burst": 2}}},
             "audit": {"path": "audit.jsonl"}}
            """
        let service = try RunningService(cli: try CLI(), policy: policy, arguments: ["--listen", "127.0.0.1:\(port)", "--token-file", token.path])
        let url = JSONValue.string("http://127.0.0.1:\(port)/mcp")
        let secret = "argument-value-\(UUID().uuidString.prefix(8))"

        // alice: MakeUppercase runs; Sleep is not listed, and called anyway it is refused.
        let alice = try Self.client(
            "calls",
            [
                "endpoints": [["url": url, "bearer": .string(try issuer.token(subject: "alice"))]],
                "calls": [["MakeUppercase", ["text": .string(secret)]], ["Sleep", ["seconds": 0]]],
            ])
        let names = alice["list"]?["names"]?.arrayValue ?? []
        #expect(names.contains("MakeUppercase") && names.contains("OrderSoup") && !names.contains("Sleep") && !names.contains("AllocateMemory"), "\(names)")
        #expect(Self.item(alice["calls"], 0)?["result"]?["structuredContent"]?["result"] == .string(secret.uppercased()), "\(alice["calls"] ?? .null)")
        let denied = Self.item(alice["calls"], 1)?["error"]
        #expect(denied?["code"] == -32003 && denied?["data"]?["kind"] == "notPermitted" && denied?["data"]?["reason"] == "access", "\(denied ?? .null)")
        #expect(denied?["data"]?["tool"] == "Sleep" && denied?["data"]?["principal"] == .string("jwt:\(ServeAuthTests.issuerName)#alice"), "\(denied ?? .null)")
        let aliceCalls = Self.exchanges(alice, rpc: "tools/call")
        #expect(aliceCalls.map { $0["status"]?.intValue } == [200, 403], "\(aliceCalls)")
        // The scope that would allow it, as a step-up challenge.
        #expect(aliceCalls.last?["www-authenticate"]?.stringValue?.contains(#"error="insufficient_scope", scope="sleep""#) == true, "\(aliceCalls)")

        // bot: two calls in its burst, the third refused 429 with Retry-After (0.1 a second: 10 s).
        let bot = try Self.client(
            "calls",
            [
                "endpoints": [["url": url, "bearer": .string(try issuer.token(subject: "bot"))]],
                "calls": [["MakeUppercase", ["text": .string(secret)]], ["MakeUppercase", ["text": "b"]], ["MakeUppercase", ["text": "c"]]],
            ])
        #expect(Self.item(bot["calls"], 1)?["result"]?["isError"] == false, "\(bot["calls"] ?? .null)")
        let limited = Self.item(bot["calls"], 2)?["error"]
        #expect(limited?["code"] == -32003 && limited?["data"]?["kind"] == "overloaded" && limited?["data"]?["reason"] == "rateLimit", "\(limited ?? .null)")
        let botCalls = Self.exchanges(bot, rpc: "tools/call")
        #expect(botCalls.map { $0["status"]?.intValue } == [200, 200, 429], "\(botCalls)")
        #expect((9...10).contains(Int(botCalls.last?["retry-after"]?.stringValue ?? "") ?? 0), "\(botCalls)")

        // A subject with '#' in it is the issuer's subject all the same (its access rule jwt:ISSUER#* holds, as on /v1).
        let hashed = try Self.client(
            "calls", ["endpoints": [["url": url, "bearer": .string(try issuer.token(subject: "svc#1"))]], "calls": [["MakeUppercase", ["text": "x"]]]])
        #expect(Self.item(hashed["calls"], 0)?["result"]?["structuredContent"]?["result"] == "X", "\(hashed["calls"] ?? .null)")
        let hashedNames: [JSONValue] = hashed["list"]?["names"]?.arrayValue ?? []
        #expect(hashedNames.contains("MakeUppercase"), "\(hashed["list"] ?? .null)")

        // What alice got is hers: mallory is refused her requestState (-32602) and her handshake session (404).
        let principals = try Self.client(
            "principals",
            [
                "endpoints": [
                    ["url": url, "bearer": .string(try issuer.token(subject: "alice"))], ["url": url, "bearer": .string(try issuer.token(subject: "mallory"))],
                ]
            ])
        #expect(Self.item(principals["stolenState"], 1) == -32602, "\(principals["stolenState"] ?? .null)")
        #expect(Self.item(principals["stolenState"], 2)?.stringValue?.contains("issued to another principal") == true, "\(principals["stolenState"] ?? .null)")
        #expect(principals["ownerContinues"] == "input", "\(principals)")
        #expect(principals["sessionMade"] == true && principals["ownerWithSession"] == 200, "\(principals)")
        #expect(principals["otherWithSession"]?["status"] == 404 && principals["otherWithSession"]?["body"]?["error"]?["code"] == -32001, "\(principals)")
        #expect(principals["otherDelete"]?["status"] == 404 && principals["ownerDelete"]?["status"] == 200, "\(principals)")

        // No credentials: 401 with the challenge naming the metadata, before the body is read.
        let anonymous = try Self.curl(
            ["--max-time", "30", "-X", "POST", url.stringValue ?? "", "-H", "content-type: application/json", "--data-binary", #"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#],
            directory: directory)
        #expect(anonymous.status == 401 && anonymous.headers["www-authenticate"]?.hasPrefix("Bearer resource_metadata=") == true, "\(anonymous.text)")
        service.stop()

        // The audit log: one line per tools/call, refused or run; never an argument's value.
        let text = String(decoding: FileManager.default.contents(atPath: service.directory.url.appendingPathComponent("audit.jsonl").path) ?? Data(), as: UTF8.self)
        #expect(!text.contains(secret), "the audit log holds an argument value")
        #expect(!service.logText.contains(secret), "the service's log holds an argument value")
        let lines = try Self.audit(service).filter { $0["transport"] == "mcp" }
        // alice 2 + bot 3 + svc#1 1 + the principals' exchange 3 (alice's round, mallory's refused state, alice's round again).
        #expect(lines.count == 9 && lines.allSatisfy { $0["call"] == "tools/call" && $0["durationMs"]?.doubleValue != nil }, "\(lines)")
        let alicePrincipal = JSONValue.string("jwt:\(ServeAuthTests.issuerName)#alice")
        let botPrincipal = JSONValue.string("jwt:\(ServeAuthTests.issuerName)#bot")
        #expect(lines.contains { $0["principal"] == alicePrincipal && $0["intent"] == "MakeUppercase" && $0["outcome"] == "success" && $0["run"] != nil }, "\(lines)")
        #expect(
            lines.contains {
                $0["principal"] == alicePrincipal && $0["intent"] == "Sleep" && $0["outcome"] == "refused" && $0["reason"] == "access" && $0["status"] == 403
            }, "\(lines)")
        #expect(lines.filter { $0["principal"] == botPrincipal && $0["outcome"] == "success" }.count == 2, "\(lines)")
        #expect(lines.contains { $0["principal"] == botPrincipal && $0["outcome"] == "refused" && $0["reason"] == "rateLimit" && $0["status"] == 429 }, "\(lines)")
    }

    // MARK: A client that goes away

    @Test("A client that abandons a 30 s Sleep (the SDK closes the call's HTTP response) leaves no plugin process and no scratch folder; the service goes on serving")
    func abandonedCallWithTheSDK() throws {
        let service = try RunningService(cli: try CLI())
        defer { service.stop() }
        let report = try Self.client(
            "disconnect", ["endpoints": [Self.endpoint(service)], "pid": .int(Int64(service.process.processIdentifier)), "tmp": .string(service.tmp.path)])
        #expect(report["processesWhenAbandoned"]?.intValue ?? 0 > 0, "the Sleep was not running when abandoned: \(report)")
        #expect((report["goneWithinMs"]?.intValue ?? 99_999) < 5000, "\(report)")
        #expect(report["scratchGone"] == true, "\(report["scratchLeft"] ?? .null)")
        #expect(report["after"]?["structuredContent"]?["result"] == "STILL SERVING", "\(report)")
    }

    @Test("A handshake client that cancels a 30 s Sleep (the SDK POSTs notifications/cancelled in its session) leaves no plugin process and no scratch folder; the session goes on")
    func cancelledInAHandshakeSession() throws {
        let service = try RunningService(cli: try CLI())
        defer { service.stop() }
        let report = try Self.client(
            "disconnect",
            ["endpoints": [Self.endpoint(service)], "pid": .int(Int64(service.process.processIdentifier)), "tmp": .string(service.tmp.path), "modern": false])
        #expect(report["protocolVersion"] == "2025-11-25")
        #expect(Self.exchanges(report, rpc: "notifications/cancelled").first?["status"] == 202, "\(report["http"] ?? .null)")
        #expect(report["processesWhenAbandoned"]?.intValue ?? 0 > 0, "the Sleep was not running when cancelled: \(report)")
        #expect((report["goneWithinMs"]?.intValue ?? 99_999) < 5000, "\(report)")
        #expect(report["scratchGone"] == true, "\(report["scratchLeft"] ?? .null)")
        #expect(report["after"]?["structuredContent"]?["result"] == "STILL SERVING", "\(report)")
    }

    @Test("A call's progress comes as SSE events of its answer, in both eras: ten growing steps to 1")
    func progressOnTheCallsStream() throws {
        let service = try RunningService(cli: try CLI())
        defer { service.stop() }
        for modern in [true, false] {
            let report = try Self.client("progress", ["endpoints": [Self.endpoint(service)], "modern": .bool(modern)])
            #expect(report["protocolVersion"] == (modern ? "2026-07-28" : "2025-11-25"))
            #expect(report["result"]?["structuredContent"]?["sleptSeconds"] == 1.0, "\(report["result"] ?? .null)")
            let progress = (report["progress"]?.arrayValue ?? []).compactMap { $0["progress"]?.doubleValue }
            #expect(progress.count == 10 && progress == progress.sorted() && progress.last == 1, "modern \(modern): \(report["progress"] ?? .null)")
            #expect(Self.exchanges(report, rpc: "tools/call").first?["contentType"] == "text/event-stream", "\(report["http"] ?? .null)")
        }
    }

    @Test("A connection closed mid-call by curl (--max-time) cancels the run: no process, no scratch folder; the next call is answered")
    func connectionClosedMidCall() throws {
        let service = try RunningService(cli: try CLI(), policy: #"{"audit": {"path": "audit.jsonl"}}"#)
        defer { service.stop() }
        let directory = try TempDirectory("serve-mcp-curl")
        let sleep = try Self.curl(
            ["--max-time", "1.5"] + Self.modernPost(service, method: "tools/call", name: "Sleep", params: ["name": "Sleep", "arguments": ["seconds": 30]]),
            directory: directory)
        #expect(sleep.status == 0 || sleep.status == 200, "\(sleep.text)")
        #expect(sleep.text.contains("Operation timed out"), "curl was not cut off: \(sleep.text)")
        let left = ServeProcesses.waitGone(service.descendants, seconds: 5)
        #expect(left.isEmpty, "processes left after the caller went away: \(left)")
        var scratch: [String] = []
        let deadline = Date().addingTimeInterval(5)
        repeat {
            scratch = (try? FileManager.default.contentsOfDirectory(atPath: service.tmp.path)) ?? []
            if !scratch.isEmpty { usleep(50_000) }
        } while !scratch.isEmpty && Date() < deadline
        #expect(scratch.isEmpty, "scratch left: \(scratch)")
        let upper = try Self.curl(
            ["--max-time", "30"] + Self.modernPost(service, method: "tools/call", name: "MakeUppercase", params: ["name": "MakeUppercase", "arguments": ["text": "on"]]),
            directory: directory)
        #expect(upper.status == 200 && upper.body?["result"]?["structuredContent"]?["result"] == "ON", "\(upper.text)")
        // The abandoned call is audited as cancelled.
        let lines = try Self.audit(service)
        #expect(lines.contains { $0["intent"] == "Sleep" && $0["error"] == "cancelled" }, "\(lines)")
    }

    // MARK: The transport's refusals

    @Test("GET /mcp is 405 with Allow; an Mcp-Method header that disagrees with the body is 400 (-32020); a body that is not JSON 415; POST to the metadata 405; with mcp off, 404")
    func transportRefusals() throws {
        let service = try RunningService(cli: try CLI())
        let directory = try TempDirectory("serve-mcp-curl")
        let get = try Self.curl(["--max-time", "30", "--unix-socket", service.socket, "http://localhost/mcp"], directory: directory)
        #expect(get.status == 405 && get.headers["allow"] == "POST, DELETE", "\(get.headers) \(get.text)")
        let mismatch = try Self.curl(
            ["--max-time", "30"] + Self.modernPost(service, method: "tools/call", name: "MakeUppercase", params: ["name": "MakeUppercase", "arguments": ["text": "x"]], headerMethod: "tools/list"),
            directory: directory)
        #expect(mismatch.status == 400 && mismatch.body?["error"]?["code"] == -32020, "\(mismatch.text)")
        #expect(mismatch.body?["error"]?["message"]?.stringValue?.contains("Header mismatch") == true, "\(mismatch.text)")
        let text = try Self.curl(
            ["--max-time", "30", "--unix-socket", service.socket, "-X", "POST", "http://localhost/mcp", "-H", "content-type: text/plain", "--data-binary", "hello"],
            directory: directory)
        #expect(text.status == 415, "\(text.text)")
        // The protected resource metadata takes GET only: another method is 405 with Allow (it was 404, no such endpoint).
        let metadata = try Self.curl(
            ["--max-time", "30", "--unix-socket", service.socket, "-X", "POST", "http://localhost/.well-known/oauth-protected-resource"], directory: directory)
        #expect(metadata.status == 405 && metadata.headers["allow"] == "GET", "\(metadata.headers) \(metadata.text)")
        // A notification is taken with 202 and no body: no content type is named for it.
        let notification: JSONValue = [
            "jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": ["requestId": 99, "_meta": ["io.modelcontextprotocol/protocolVersion": "2026-07-28"]],
        ]
        let taken = try Self.curl(
            [
                "--max-time", "30", "--unix-socket", service.socket, "-X", "POST", "http://localhost/mcp", "-H", "content-type: application/json",
                "-H", "accept: application/json, text/event-stream", "-H", "MCP-Protocol-Version: 2026-07-28", "-H", "Mcp-Method: notifications/cancelled",
                "--data-binary", String(decoding: JSONWriter.bytes(notification), as: UTF8.self),
            ], directory: directory)
        #expect(taken.status == 202 && taken.headers["content-type"] == nil && taken.headers["content-length"] == "0", "\(taken.headers) \(taken.text)")
        // Nothing ran for any of them.
        #expect(service.descendants.isEmpty)
        service.stop()

        let off = try RunningService(cli: try CLI(), policy: #"{"mcp": {"enabled": false}}"#)
        defer { off.stop() }
        let notFound = try Self.curl(
            ["--max-time", "30"] + Self.modernPost(off, method: "tools/list", name: nil, params: [:]), directory: directory)
        #expect(notFound.status == 404 && notFound.body?["error"]?["kind"] == "notFound", "\(notFound.text)")
    }
}
