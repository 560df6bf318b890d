import ExtrunHost
import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Synchronization
import Testing

@testable import ExtrunMCP

#if canImport(Glibc)
import Glibc
#endif

/// The dispatcher without a transport, as `extrun serve`'s `POST /mcp` uses it: the era and
/// HTTP status of each message, the headers checked against the body, legacy sessions,
/// and the sealed request state (its key file, what it is bound to). Nothing here starts
/// a plugin (a refused state runs nothing: the answer comes before `receive` returns).
@Suite struct MCPDispatcherTests {
    /// What an exchange sent.
    final class Outputs: Sendable {
        private let items = Mutex<[MCPOutput]>([])
        func add(_ output: MCPOutput) { items.withLock { $0.append(output) } }
        var all: [MCPOutput] { items.withLock { $0 } }
        var final: MCPReply? {
            for output in all { if case .final(let reply) = output { return reply } }
            return nil
        }
        var interim: [JSONValue] {
            all.compactMap { if case .interim(let message) = $0 { message } else { nil } }
        }
    }

    /// A dispatcher over the staged plugins with a home (and key file) of its own.
    struct Fixture {
        let home: TempDirectory
        let dispatcher: MCPDispatcher
        var keyFile: URL { home.url.appendingPathComponent("mcp-request-state.key") }

        init(lifetime: Double = 300, service: IntentService? = nil, _ adjust: (inout MCPDispatcher.Configuration) -> Void = { _ in }) throws {
            home = try TempDirectory("mcp-dispatch")
            var configuration = MCPDispatcher.Configuration()
            configuration.requestStateLifetimeSeconds = lifetime
            configuration.catalogPollMs = 50
            adjust(&configuration)
            let host = ExtrunHost.Host(paths: HostPaths(home: home.url, pluginSearchPath: [try StagedPlugins.directory()]))
            dispatcher = try MCPDispatcher(host: host, service: service, configuration: configuration)
        }

        func send(_ message: JSONValue, principal: String = "token:alice", headers: [(String, String)]? = nil) -> (MCPExchange, Outputs) {
            let outputs = Outputs()
            let context = MCPRequestContext(principal: principal, headers: headers.map(MCPHeaders.init))
            let exchange = dispatcher.receive(JSONWriter.bytes(message), context: context) { outputs.add($0) }
            return (exchange, outputs)
        }

        /// The headers a 2026-07-28 client sends with `message`.
        static func modernHeaders(_ message: JSONValue, accept: String = "application/json, text/event-stream") -> [(String, String)] {
            var headers = [("MCP-Protocol-Version", "2026-07-28"), ("Accept", accept)]
            if let method = message["method"]?.stringValue { headers.append(("Mcp-Method", method)) }
            if let name = message["params"]?["name"]?.stringValue { headers.append(("Mcp-Name", name)) }
            return headers
        }

        func end() {
            dispatcher.shutDown(reason: "the test ended")
        }
    }

    static func modern(_ id: Int64, _ method: String, _ params: [String: JSONValue] = [:], elicitation: Bool = true) -> JSONValue {
        var params = params
        params["_meta"] = [
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": ["name": "test", "version": "1"],
            "io.modelcontextprotocol/clientCapabilities": elicitation ? ["elicitation": ["form": [:]]] : [:],
        ]
        return ["jsonrpc": "2.0", "id": .int(id), "method": .string(method), "params": .object(params)]
    }

    static func legacy(_ id: Int64, _ method: String, _ params: [String: JSONValue] = [:]) -> JSONValue {
        ["jsonrpc": "2.0", "id": .int(id), "method": .string(method), "params": .object(params)]
    }

    // MARK: - The HTTP surface

    @Test func aModernRequestIsServedOnItsOwnWithItsHTTPStatus() throws {
        let fixture = try Fixture()
        defer { fixture.end() }
        let discover = Self.modern(1, "server/discover")
        let (exchange, outputs) = fixture.send(discover, headers: Fixture.modernHeaders(discover))
        #expect(exchange.era == .modern(version: "2026-07-28"))
        #expect(exchange.isRequest)
        #expect(outputs.final?.status == 200)
        #expect(outputs.final?.message?["result"]?["supportedVersions"]?.arrayValue?.first == "2026-07-28")
        #expect(outputs.final?.headers.isEmpty == true, "no session in the modern era")

        let unknown = Self.modern(2, "resources/list")
        let (_, notServed) = fixture.send(unknown, headers: Fixture.modernHeaders(unknown))
        #expect(notServed.final?.status == 404)
        #expect(notServed.final?.message?["error"]?["code"] == -32601)

        let version: JSONValue = [
            "jsonrpc": "2.0", "id": 3, "method": "tools/list",
            "params": ["_meta": ["io.modelcontextprotocol/protocolVersion": "2031-01-01", "io.modelcontextprotocol/clientCapabilities": [:]]],
        ]
        let (_, unsupported) = fixture.send(version, headers: [("MCP-Protocol-Version", "2031-01-01"), ("Mcp-Method", "tools/list")])
        #expect(unsupported.final?.status == 400)
        #expect(unsupported.final?.message?["error"]?["code"] == -32022)
        #expect(unsupported.final?.message?["error"]?["data"]?["supported"]?.arrayValue?.count == 5)
    }

    @Test func headersThatDisagreeWithTheBodyAreRefused() throws {
        let fixture = try Fixture()
        defer { fixture.end() }
        let call = Self.modern(1, "tools/call", ["name": "MakeUppercase", "arguments": ["text": "x"]])
        let cases: [(String, [(String, String)])] = [
            ("Mcp-Method", [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/list"), ("Mcp-Name", "MakeUppercase")]),
            ("Mcp-Name", [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "SetGlobalVariable")]),
            ("MCP-Protocol-Version", [("MCP-Protocol-Version", "2025-11-25"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "MakeUppercase")]),
            ("missing", [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call")]),
        ]
        for (name, headers) in cases {
            let (exchange, outputs) = fixture.send(call, headers: headers)
            #expect(outputs.final?.status == 400, "\(name)")
            #expect(outputs.final?.message?["error"]?["code"] == -32020, "\(name)")
            #expect(outputs.final?.message?["error"]?["message"]?.stringValue?.hasPrefix("Header mismatch") == true, "\(name)")
            #expect(!exchange.isRequest)
        }
        #expect(fixture.dispatcher.service.running == 0, "a refused request ran")
        // Mcp-Name in its base64 form, decoded before the comparison: accepted (and answered: no such tool).
        let other = Self.modern(2, "tools/call", ["name": "Nö Tool", "arguments": [:]])
        let encoded = "=?base64?" + Data("Nö Tool".utf8).base64EncodedString() + "?="
        let (_, outputs) = fixture.send(
            other, headers: [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", encoded), ("Accept", "application/json")])
        #expect(outputs.final?.status == 200)
        #expect(outputs.final?.message?["error"]?["code"] == -32602)
        #expect(outputs.final?.message?["error"]?["message"]?.stringValue?.hasPrefix("Unknown tool: Nö Tool") == true)
    }

    @Test func legacySessionsLiveFromInitializeToDeleteAndBelongToTheirPrincipal() throws {
        let fixture = try Fixture()
        defer { fixture.end() }
        let accept = ("Accept", "application/json, text/event-stream")
        let initialize = Self.legacy(
            1, "initialize", ["protocolVersion": "2025-06-18", "capabilities": ["elicitation": [:]], "clientInfo": ["name": "old", "version": "1"]])
        let (made, outputs) = fixture.send(initialize, headers: [accept])
        #expect(outputs.final?.status == 200)
        #expect(outputs.final?.message?["result"]?["protocolVersion"] == "2025-06-18")
        let session = outputs.final?.headers.first { $0.0 == "Mcp-Session-Id" }?.1
        let id = try #require(session)
        #expect(made.era == .legacy(session: id))
        #expect(fixture.dispatcher.sessionCount == 1)

        let list = Self.legacy(2, "tools/list")
        let (listed, tools) = fixture.send(list, headers: [accept, ("Mcp-Session-Id", id)])
        #expect(listed.era == .legacy(session: id))
        #expect(tools.final?.status == 200)
        // It can be asked (elicitation, and a stream for the question): no `_confirmed`.
        let soup = tools.final?.message?["result"]?["tools"]?.arrayValue?.first { $0["name"] == "OrderSoup" }
        #expect(soup?["inputSchema"]?["properties"]?["_confirmed"] == nil)
        #expect(soup?["outputSchema"] != nil)

        // Without a stream the question could not reach the client: `_confirmed` instead.
        let (_, noStream) = fixture.send(list, headers: [("Accept", "application/json"), ("Mcp-Session-Id", id)])
        let plain = noStream.final?.message?["result"]?["tools"]?.arrayValue?.first { $0["name"] == "OrderSoup" }
        #expect(plain?["inputSchema"]?["properties"]?["_confirmed"] != nil)

        let (_, noSession) = fixture.send(list, headers: [accept])
        #expect(noSession.final?.status == 400)
        let (_, unknown) = fixture.send(list, headers: [accept, ("Mcp-Session-Id", "feedface")])
        #expect(unknown.final?.status == 404)
        let (_, foreign) = fixture.send(list, principal: "token:mallory", headers: [accept, ("Mcp-Session-Id", id)])
        #expect(foreign.final?.status == 404, "another principal's session")

        let notification: JSONValue = ["jsonrpc": "2.0", "method": "notifications/initialized"]
        let (notified, accepted) = fixture.send(notification, headers: [accept, ("Mcp-Session-Id", id)])
        #expect(!notified.isRequest)
        #expect(accepted.final?.status == 202)
        #expect(accepted.final?.message == nil)

        let context = MCPRequestContext(principal: "token:mallory", headers: MCPHeaders([]))
        #expect(fixture.dispatcher.endSession(id, context: context).status == 404)
        let owner = MCPRequestContext(principal: "token:alice", headers: MCPHeaders([]))
        #expect(fixture.dispatcher.endSession(id, context: owner).status == 200)
        #expect(fixture.dispatcher.endSession(id, context: owner).status == 404)
        #expect(fixture.dispatcher.sessionCount == 0)
        let (_, ended) = fixture.send(list, headers: [accept, ("Mcp-Session-Id", id)])
        #expect(ended.final?.status == 404)
    }

    @Test func badMessagesAre400AndNotRequests() throws {
        let fixture = try Fixture()
        defer { fixture.end() }
        let outputs = Outputs()
        let exchange = fixture.dispatcher.receive(Array("{not json".utf8), context: MCPRequestContext(principal: "token:alice", headers: MCPHeaders([]))) {
            outputs.add($0)
        }
        #expect(exchange.era == .unknown)
        #expect(outputs.final?.status == 400)
        #expect(outputs.final?.message?["error"]?["code"] == -32700)
    }

    /// Waits until `outputs` has `count` interim messages (or a final one); true when it has.
    static func wait(for outputs: Outputs, interim count: Int, seconds: Double = 30) -> Bool {
        let end = Date().addingTimeInterval(seconds)
        while Date() < end {
            if outputs.interim.count >= count || outputs.final != nil { return outputs.interim.count >= count }
            usleep(10_000)
        }
        return false
    }

    /// The plugin processes this test process started that are still alive (by their executable's folder).
    static func livePluginProcesses(named name: String) -> [Int32] {
        let me = getpid()
        return ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap { entry -> Int32? in
            guard let pid = Int32(entry), let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return nil }
            let fields = stat[stat.index(close, offsetBy: 2)...].split(separator: " ")
            guard fields.count > 1, fields[0] != "Z", Int32(fields[1]) == me,
                let command = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline"), String(decoding: command, as: UTF8.self).contains(name)
            else { return nil }
            return pid
        }
    }

    @Test func aLegacySessionOverHTTPAsksInBandOnTheCallsStream() throws {
        let fixture = try Fixture()
        let accept = ("Accept", "application/json, text/event-stream")
        let initialize = Self.legacy(
            1, "initialize", ["protocolVersion": "2025-11-25", "capabilities": ["elicitation": ["form": [:]]], "clientInfo": ["name": "old", "version": "1"]])
        let (_, made) = fixture.send(initialize, headers: [accept])
        let session = try #require(made.final?.headers.first { $0.0 == "Mcp-Session-Id" }?.1)
        let headers = [accept, ("Mcp-Session-Id", session)]

        let call = Self.legacy(2, "tools/call", ["name": "OrderSoup", "arguments": ["quantity": 1]])
        let (exchange, outputs) = fixture.send(call, headers: headers)
        #expect(exchange.era == .legacy(session: session))
        // The question comes on the call's own stream; the client's answer is a POST of its own (202).
        try #require(Self.wait(for: outputs, interim: 1), "no elicitation: \(outputs.all)")
        let soup = outputs.interim[0]
        #expect(soup["method"] == "elicitation/create")
        #expect(soup["params"]?["message"] == "Which soup would you like?")
        let (answered, accepted) = fixture.send(
            ["jsonrpc": "2.0", "id": soup["id"] ?? .null, "result": ["action": "accept", "content": ["soup": "clam_chowder"]]], headers: headers)
        #expect(!answered.isRequest)
        #expect(accepted.final?.status == 202)
        try #require(Self.wait(for: outputs, interim: 2), "no confirmation: \(outputs.all)")
        let confirm = outputs.interim[1]
        #expect(confirm["params"]?["message"] == "Order 1 Clam Chowder?")
        _ = fixture.send(["jsonrpc": "2.0", "id": confirm["id"] ?? .null, "result": ["action": "accept", "content": ["confirm": true]]], headers: headers)
        let end = Date().addingTimeInterval(30)
        while outputs.final == nil && Date() < end { usleep(10_000) }
        #expect(outputs.final?.status == 200)
        #expect(outputs.final?.message?["result"]?["structuredContent"]?["soup"]?["identifier"] == "clam_chowder", "\(outputs.final?.message ?? .null)")

        // A client that goes away while it is asked: nothing more is sent, the run is cancelled.
        let again = Self.legacy(3, "tools/call", ["name": "OrderSoup", "arguments": ["quantity": 1]])
        let (gone, goneOutputs) = fixture.send(again, headers: headers)
        try #require(Self.wait(for: goneOutputs, interim: 1))
        gone.clientGone()
        let settle = Date().addingTimeInterval(10)
        while fixture.dispatcher.service.running > 0 && Date() < settle { usleep(10_000) }
        #expect(fixture.dispatcher.service.running == 0, "the run went on after its client went away")
        #expect(goneOutputs.final == nil)
        #expect(goneOutputs.interim.count == 1)
        fixture.end()
        #expect(Self.livePluginProcesses(named: "SoupChef").isEmpty, "SoupChef processes left")
    }

    // MARK: - A front end's policy and audit

    @Test func theFrontEndsPolicyRefusesCallsAndHidesToolsAndHearsOfEveryCall() throws {
        let records = Mutex<[MCPCallRecord]>([])
        let fixture = try Fixture { configuration in
            configuration.authorizeTool = { access in
                guard access.tool == "OrderSoup" else { return nil }
                return MCPToolRefusal(
                    code: -32003, message: "\(access.principal) may not call \(access.tool) (\(access.plugin))", data: ["retryAfterSeconds": 7],
                    status: 429, headers: [("Retry-After", "7")])
            }
            configuration.showsTool = { access in access.intent != "AllocateMemory" && access.scopes.contains("tools") }
            configuration.callFinished = { record in records.withLock { $0.append(record) } }
        }
        defer { fixture.end() }
        let list = Self.modern(1, "tools/list")
        let outputs = Outputs()
        let context = MCPRequestContext(principal: "token:alice", scopes: ["tools"], headers: MCPHeaders(Fixture.modernHeaders(list)))
        _ = fixture.dispatcher.receive(JSONWriter.bytes(list), context: context) { outputs.add($0) }
        let names = outputs.final?.message?["result"]?["tools"]?.arrayValue?.compactMap { $0["name"]?.stringValue } ?? []
        #expect(names.contains("MakeUppercase") && names.contains("OrderSoup"))
        #expect(!names.contains("AllocateMemory"))
        // Without the scope, nothing is shown.
        let (_, bare) = fixture.send(list, headers: Fixture.modernHeaders(list))
        #expect(bare.final?.message?["result"]?["tools"]?.arrayValue == [])

        let call = Self.modern(2, "tools/call", ["name": "OrderSoup", "arguments": ["quantity": 1], "requestState": "xr1.forged"])
        let (_, refused) = fixture.send(call, headers: Fixture.modernHeaders(call))
        #expect(refused.final?.status == 429)
        #expect(refused.final?.headers.first { $0.0 == "Retry-After" }?.1 == "7")
        #expect(refused.final?.message?["error"]?["code"] == -32003)
        #expect(refused.final?.message?["error"]?["data"]?["retryAfterSeconds"] == 7)
        #expect(fixture.dispatcher.service.running == 0)

        let forged = Self.modern(3, "tools/call", ["name": "MakeUppercase", "arguments": ["text": "x"], "requestState": "xr1.forged"])
        let (_, invalid) = fixture.send(forged, headers: Fixture.modernHeaders(forged))
        #expect(invalid.final?.message?["error"]?["code"] == -32602)
        let seen = records.withLock { $0 }
        #expect(seen.map(\.tool) == ["OrderSoup", "MakeUppercase"])
        #expect(seen.map(\.errorKind) == ["refused", "invalidRequestState"])
        #expect(seen.first?.plugin == "com.example.soupchef", "\(seen.first.map { "\($0)" } ?? "none")")
        #expect(seen.allSatisfy { $0.principal == "token:alice" && $0.era == .modern(version: "2026-07-28") && !$0.inputRequired })
    }

    @Test func aGivenServiceIsNotEndedWithTheDispatcher() throws {
        let service = IntentService(admission: Admission.Limits(maxConcurrent: 2, maxQueued: 0), warm: PluginPool.WarmLimits(maxIdle: 1))
        defer { service.shutDown(grace: 0, reason: "the test ended") }
        let fixture = try Fixture(service: service)
        #expect(fixture.dispatcher.service === service)
        fixture.end()
        let accepted = service.submit(uid: getuid(), refused: { _ in }) {}
        #expect((try? accepted.get()) != nil, "the dispatcher's end closed a service it was given")
        service.waitForRuns(seconds: 5)
    }

    // MARK: - The sealed state

    static let arguments: JSONValue = ["quantity": 1]

    func state(principal: String = "token:alice", tool: String = "OrderSoup", arguments: JSONValue = Self.arguments, expiresIn: Int64 = 60_000)
        -> RequestState
    {
        RequestState(
            principal: principal, tool: tool, argumentsDigest: RequestState.digest(of: arguments), expiresMs: MCPDispatcher.nowMs() + expiresIn,
            answers: [RequestState.Answer(fingerprint: "f1", value: "clam_chowder")], pending: "f2")
    }

    @Test func aStateOpensOnlyForWhatItIsBoundTo() throws {
        let key = RequestStateKey(bytes: Array(repeating: 7, count: 32))
        let sealed = state().seal(with: key)
        #expect(sealed.hasPrefix(RequestState.prefix))
        let now = MCPDispatcher.nowMs()
        func open(
            _ text: String, key other: RequestStateKey? = nil, principal: String = "token:alice", tool: String = "OrderSoup", arguments: JSONValue? = nil,
            at: Int64? = nil
        ) -> Result<RequestState, RequestState.Refusal> {
            RequestState.open(
                text, with: other ?? key, principal: principal, tool: tool, argumentsDigest: RequestState.digest(of: arguments ?? Self.arguments),
                nowMs: at ?? now)
        }
        #expect((try? open(sealed).get()) == state().withExpiry(of: open(sealed)))
        #expect(open(sealed, principal: "token:bob") == .failure(.otherPrincipal))
        #expect(open(sealed, tool: "MakeUppercase") == .failure(.otherTool("OrderSoup")))
        #expect(open(sealed, arguments: ["quantity": 2]) == .failure(.otherArguments))
        #expect(open(sealed, at: now + 120_000) == .failure(.expired(secondsAgo: 60)))
        #expect(open(sealed, key: RequestStateKey(bytes: Array(repeating: 8, count: 32))) == .failure(.tampered))
        // Any byte changed: the tag fails.
        var bytes = Array(sealed.utf8)
        let middle = RequestState.prefix.count + 20
        bytes[middle] = bytes[middle] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        #expect(open(String(decoding: bytes, as: UTF8.self)) == .failure(.tampered))
        #expect(open("xr1.") == .failure(.malformed))
        #expect(open("eyJhbGciOiJub25lIn0.e30.") == .failure(.malformed))
        // Two seals of one state differ (a random nonce each), and both open.
        let again = state().seal(with: key)
        #expect(again != sealed)
        #expect((try? open(again).get()) != nil)
        // Encrypted, not only signed: the principal does not show.
        #expect(!sealed.contains("alice"))
    }

    @Test func aForeignOrForgedStateIsRefusedBeforeAnythingRuns() throws {
        let fixture = try Fixture()
        defer { fixture.end() }
        let key = try RequestStateKey.load(from: fixture.keyFile)
        let cases: [(String, String, String)] = [
            ("token:bob", state().seal(with: key), "issued to another principal"),
            ("token:alice", state(tool: "MakeUppercase").seal(with: key), "issued for the tool MakeUppercase"),
            ("token:alice", state(arguments: ["quantity": 3]).seal(with: key), "issued for other arguments"),
            ("token:alice", state(expiresIn: -5000).seal(with: key), "expired"),
            ("token:alice", state().seal(with: RequestStateKey(bytes: Array(repeating: 1, count: 32))), "does not open with this server's key"),
        ]
        for (principal, sealed, words) in cases {
            let call = Self.modern(
                1, "tools/call",
                ["name": "OrderSoup", "arguments": Self.arguments, "requestState": .string(sealed), "inputResponses": ["question-2": ["action": "accept", "content": ["confirm": true]]]])
            let (_, outputs) = fixture.send(call, principal: principal, headers: Fixture.modernHeaders(call))
            let error = outputs.final?.message?["error"]
            #expect(error?["code"] == -32602, "\(words): \(outputs.final?.message ?? .null)")
            #expect(error?["message"]?.stringValue?.contains(words) == true, "\(error ?? .null)")
            #expect(outputs.interim.isEmpty)
        }
        #expect(fixture.dispatcher.service.running == 0, "a refused state ran")
    }

    // MARK: - The key file

    @Test func theKeyFileIsMadePrivateAndRefusedWhenOthersMayReadIt() throws {
        let folder = try TempDirectory("mcp-key")
        let file = folder.url.appendingPathComponent("sub/state.key")
        let made = try RequestStateKey.load(from: file)
        var info = stat()
        #expect(stat(file.path, &info) == 0)
        #expect(info.st_mode & 0o777 == 0o600)
        #expect(info.st_size == 32)
        // Read again (another process sharing the file): the same key opens the first one's state.
        let again = try RequestStateKey.load(from: file)
        let sealed = state().seal(with: made)
        #expect(
            (try? RequestState.open(
                sealed, with: again, principal: "token:alice", tool: "OrderSoup", argumentsDigest: RequestState.digest(of: Self.arguments),
                nowMs: MCPDispatcher.nowMs()
            ).get()) != nil)
        // No temporary file is left beside it.
        #expect(try FileManager.default.contentsOfDirectory(atPath: file.deletingLastPathComponent().path) == ["state.key"])

        chmod(file.path, 0o640)
        #expect(throws: RequestStateKey.Refused.self) { try RequestStateKey.load(from: file) }
        do {
            _ = try RequestStateKey.load(from: file)
        } catch {
            #expect(error.description.contains("mode 640"), "\(error)")
        }
        let short = folder.url.appendingPathComponent("short.key")
        try Data(repeating: 1, count: 16).write(to: short)
        chmod(short.path, 0o600)
        do {
            _ = try RequestStateKey.load(from: short)
            Issue.record("a 16-byte key was taken")
        } catch {
            #expect(error.description.contains("16 bytes"), "\(error)")
        }
    }

    @Test func manyStartsAtOnceMakeOneKey() throws {
        let folder = try TempDirectory("mcp-key-race")
        let file = folder.url.appendingPathComponent("state.key")
        let keys = Mutex<[[UInt8]]>([])
        DispatchQueue.concurrentPerform(iterations: 8) { _ in
            if let key = try? RequestStateKey.load(from: file) {
                let bytes = key.bytes
                keys.withLock { $0.append(bytes) }
            }
        }
        let all = keys.withLock { $0 }
        #expect(all.count == 8)
        #expect(Set(all).count == 1)
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path) == ["state.key"])
    }
}

extension RequestState {
    /// This state with the expiry of `opened` (for comparing a state with its opened copy).
    fileprivate func withExpiry(of opened: Result<RequestState, Refusal>) -> RequestState {
        var copy = self
        if case .success(let state) = opened { copy.expiresMs = state.expiresMs }
        return copy
    }
}
