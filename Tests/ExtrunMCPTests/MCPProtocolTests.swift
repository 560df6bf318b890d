import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `extrun mcp` at the JSON-RPC level, with raw lines on its standard input: what a
/// client gets for bad input, the version negotiation, and a clash between plugins.
@Suite struct MCPProtocolTests {
    /// Runs `extrun mcp` with `lines` then the end of its input; its exit status and the messages it wrote.
    static func serve(_ lines: [String], pluginPath: [URL]? = nil) throws -> (status: Int32, messages: [JSONValue]) {
        let home = try TempDirectory("mcp-raw")
        let process = Process()
        process.executableURL = try ExtrunBinary.url()
        process.arguments = ["mcp"]
        process.environment = [
            "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home.url.path, "EXTRUN_HOME": home.url.path, "TMPDIR": home.url.path,
            "EXTRUN_PLUGIN_PATH": try (pluginPath ?? [StagedPlugins.directory()]).map(\.path).joined(separator: ":"),
        ]
        let input = Pipe()
        let output = home.url.appendingPathComponent("stdout")
        FileManager.default.createFile(atPath: output.path, contents: nil)
        let outHandle = try FileHandle(forWritingTo: output)
        process.standardInput = input
        process.standardOutput = outHandle
        process.standardError = FileHandle.nullDevice
        try process.run()
        input.fileHandleForWriting.write(Data(lines.map { $0 + "\n" }.joined().utf8))
        try input.fileHandleForWriting.close()
        process.waitUntilExit()
        try outHandle.close()
        let text = try String(contentsOf: output, encoding: .utf8)
        let messages = try text.split(separator: "\n").map { try JSONParser.parse(Array($0.utf8)) }
        let left = ((try? FileManager.default.contentsOfDirectory(atPath: home.url.path)) ?? []).filter { $0.hasPrefix("extrun-run") }
        #expect(left.isEmpty, "scratch folders left: \(left)")
        return (process.terminationStatus, messages)
    }

    static func answer(_ id: Int64, in messages: [JSONValue]) -> JSONValue? {
        messages.first { $0["id"] == .int(id) }
    }

    @Test func badInputGetsJSONRPCErrorsAndTheServerGoesOn() throws {
        let (status, messages) = try Self.serve([
            "not json",
            "[1, 2]",
            #"{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}}"#,
            #"{"jsonrpc": "2.0", "method": "notifications/initialized"}"#,
            #"{"jsonrpc": "2.0", "id": 2, "method": "ping"}"#,
            #"{"jsonrpc": "2.0", "id": 3, "method": "tools/list"}"#,
            #"{"jsonrpc": "2.0", "id": 4, "method": "resources/list"}"#,
            #"{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "NoSuchTool", "arguments": {}}}"#,
            #"{"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "MakeUppercase", "arguments": "text"}}"#,
            #"{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {}}"#,
            "",
            #"{"jsonrpc": "2.0", "id": "s", "method": "ping"}"#,
        ])
        #expect(status == 0)
        let errors = messages.filter { $0["id"] == .null }.compactMap { $0["error"]?["code"]?.intValue }
        #expect(errors == [-32700, -32600])
        // An older client: its version, and no outputSchema in the tools (2025-06-18 added it).
        #expect(Self.answer(1, in: messages)?["result"]?["protocolVersion"] == "2025-03-26")
        #expect(Self.answer(2, in: messages)?["result"] == .object([:]))
        let tools = Self.answer(3, in: messages)?["result"]?["tools"]?.arrayValue ?? []
        #expect(!tools.isEmpty)
        #expect(tools.allSatisfy { $0["outputSchema"] == nil && $0["inputSchema"]?["type"] == "object" })
        #expect(Self.answer(4, in: messages)?["error"]?["code"] == -32601)
        #expect(Self.answer(5, in: messages)?["error"]?["code"] == -32602)
        #expect(Self.answer(5, in: messages)?["error"]?["message"]?.stringValue?.contains("MakeUppercase") == true)
        #expect(Self.answer(6, in: messages)?["error"]?["code"] == -32602)
        #expect(Self.answer(7, in: messages)?["error"]?["code"] == -32602)
        #expect(messages.contains { $0["id"] == "s" && $0["result"] == .object([:]) })
    }

    @Test func aLineOverTheLimitIsSkippedWithAParseError() throws {
        let huge = #"{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": ""# + String(repeating: "a", count: 9 << 20) + #""}}"#
        let (status, messages) = try Self.serve([huge, #"{"jsonrpc": "2.0", "id": 2, "method": "ping"}"#])
        #expect(status == 0)
        #expect(messages.count == 2)
        #expect(messages.first?["error"]?["code"] == -32700)
        #expect(messages.first?["error"]?["message"]?.stringValue?.contains("8388608 bytes") == true)
        #expect(Self.answer(1, in: messages) == nil)
        #expect(Self.answer(2, in: messages)?["result"] == .object([:]))
    }

    @Test func anUnknownVersionIsAnsweredWithTheNewest() throws {
        let (_, messages) = try Self.serve([
            #"{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "1999-01-01", "capabilities": {}}}"#
        ])
        #expect(Self.answer(1, in: messages)?["result"]?["protocolVersion"] == "2025-11-25")
        #expect(Self.answer(1, in: messages)?["result"]?["capabilities"]?["tools"]?["listChanged"] == true)
    }

    /// The live descendants of `pid` (from /proc's parent links; zombies aside).
    static func descendants(of pid: Int32) -> [Int32] {
        var children: [Int32: [Int32]] = [:]
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let child = Int32(entry), let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { continue }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            guard fields.count > 1, fields[0] != "Z", let parent = Int32(fields[1]) else { continue }
            children[parent, default: []].append(child)
        }
        var found: [Int32] = []
        var todo = [pid]
        while let next = todo.popLast() {
            for child in children[next] ?? [] {
                found.append(child)
                todo.append(child)
            }
        }
        return found
    }

    @Test(arguments: [SIGTERM, SIGINT])
    func aSignalEndsTheCallsInFlightAndTheirScratchFolders(signal: Int32) throws {
        let home = try TempDirectory("mcp-signal")
        let scratch = try TempDirectory("mcp-signal-tmp")
        try StagedPlugins.trust(home: home.url)
        let process = Process()
        process.executableURL = try ExtrunBinary.url()
        process.arguments = ["mcp"]
        process.environment = [
            "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home.url.path, "EXTRUN_HOME": home.url.path, "TMPDIR": scratch.url.path,
            "EXTRUN_PLUGIN_PATH": try StagedPlugins.directory().path,
        ]
        let input = Pipe()
        process.standardInput = input
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        input.fileHandleForWriting.write(Data((#"""
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}}}
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "Sleep", "arguments": {"seconds": 30}}}

            """#).utf8))
        // Until the Sleep plugin runs (its supervisor and itself), for at most 20 s.
        var running: [Int32] = []
        for _ in 0..<1000 where running.count < 2 {
            usleep(20_000)
            running = Self.descendants(of: process.processIdentifier)
        }
        #expect(running.count >= 2, "the Sleep plugin did not start")
        kill(process.processIdentifier, signal)
        // The grace is 500 ms; a server still running after 30 s is a failure, not a hung suite.
        let deadline = Date().addingTimeInterval(30)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        if process.isRunning {
            Issue.record("extrun mcp still runs 30 s after signal \(signal)")
            kill(process.processIdentifier, SIGKILL)
        }
        process.waitUntilExit()
        #expect(process.terminationReason == .exit && process.terminationStatus == 128 + signal, "status \(process.terminationStatus)")
        let left = running.filter { pid in
            (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)).map { !$0.contains(") Z ") } ?? false
        }
        #expect(left.isEmpty, "processes left: \(left)")
        let files = ((try? FileManager.default.contentsOfDirectory(atPath: scratch.url.path)) ?? []).filter { $0.hasPrefix("extrun-") }
        #expect(files.isEmpty, "scratch folders left: \(files)")
        try? input.fileHandleForWriting.close()
    }
}
