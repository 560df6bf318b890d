import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Synchronization
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
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
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

    /// `extrun mcp` with a home that trusts the staged plugins and a scratch folder of its own:
    /// its input a pipe the test keeps open, its output a file.
    final class LiveServer {
        let home: TempDirectory
        let scratch: TempDirectory
        let process = Process()
        let input = Pipe()
        let output: URL
        let outHandle: FileHandle

        /// `before`: done to the input pipe before the server starts.
        init(_ label: String, before: (Pipe) -> Void = { _ in }) throws {
            home = try TempDirectory(label)
            scratch = try TempDirectory(label + "-tmp")
            try StagedPlugins.trust(home: home.url)
            process.executableURL = try ExtrunBinary.url()
            process.arguments = ["mcp"]
            process.environment = [
                "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home.url.path, "EXTRUN_HOME": home.url.path, "TMPDIR": scratch.url.path,
                "EXTRUN_PLUGIN_PATH": try StagedPlugins.directory().path,
            ]
            output = home.url.appendingPathComponent("stdout")
            _ = FileManager.default.createFile(atPath: output.path, contents: nil)
            outHandle = try FileHandle(forWritingTo: output)
            process.standardInput = input
            process.standardOutput = outHandle
            process.standardError = FileHandle.nullDevice
            before(input)
            try process.run()
        }

        /// The handshake, then call 2: a Sleep of `seconds`.
        func initializeAndSleep(seconds: Int) {
            send(#"""
                {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}}}
                {"jsonrpc": "2.0", "method": "notifications/initialized"}
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "Sleep", "arguments": {"seconds": \#(seconds)}}}

                """#)
        }

        func send(_ text: String) {
            input.fileHandleForWriting.write(Data(text.utf8))
        }

        /// The messages written so far.
        var messages: [JSONValue] {
            let text = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
            return text.split(separator: "\n").compactMap { try? JSONParser.parse(Array($0.utf8)) }
        }

        /// The Sleep plugin's processes (its supervisor and itself), once both run (at most 20 s).
        func sleepPlugin() -> [Int32] {
            var running: [Int32] = []
            for _ in 0..<1000 where running.count < 2 {
                usleep(20_000)
                running = MCPProtocolTests.descendants(of: process.processIdentifier)
            }
            return running
        }

        /// Waits up to `seconds` for the server's exit; killed, and recorded as an issue, past that.
        func waitForExit(seconds: Double, _ what: String) {
            let deadline = Date().addingTimeInterval(seconds)
            while process.isRunning && Date() < deadline { usleep(20_000) }
            if process.isRunning {
                Issue.record("extrun mcp still runs \(Int(seconds)) s after \(what)")
                kill(process.processIdentifier, SIGKILL)
            }
            process.waitUntilExit()
        }

        /// The answer to request `id`, once written (waits up to `seconds`).
        func answer(_ id: Int64, within seconds: Double) -> JSONValue? {
            let asked = Date()
            while MCPProtocolTests.answer(id, in: messages) == nil && Date().timeIntervalSince(asked) < seconds { usleep(10_000) }
            return MCPProtocolTests.answer(id, in: messages)
        }

        /// Ends the server's input and waits for its exit (at most 30 s); its status.
        func endInput() throws -> Int32 {
            try input.fileHandleForWriting.close()
            waitForExit(seconds: 30, "its input ended")
            try outHandle.close()
            return process.terminationStatus
        }

        var scratchLeft: [String] {
            ((try? FileManager.default.contentsOfDirectory(atPath: scratch.url.path)) ?? []).filter { $0.hasPrefix("extrun-") }
        }
    }

    /// Those of `pids` still running (not zombies).
    static func alive(_ pids: [Int32]) -> [Int32] {
        pids.filter { pid in
            (try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)).map { !$0.contains(") Z ") } ?? false
        }
    }

    @Test(arguments: [SIGTERM, SIGINT])
    func aSignalEndsTheCallsInFlightAndTheirScratchFolders(signal: Int32) throws {
        let server = try LiveServer("mcp-signal")
        server.send(#"""
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}}}
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "Sleep", "arguments": {"seconds": 30}}}

            """#)
        let running = server.sleepPlugin()
        #expect(running.count >= 2, "the Sleep plugin did not start")
        kill(server.process.processIdentifier, signal)
        // The grace is 500 ms; a server still running after 30 s is a failure, not a hung suite.
        server.waitForExit(seconds: 30, "signal \(signal)")
        let process = server.process
        #expect(process.terminationReason == .exit && process.terminationStatus == 128 + signal, "status \(process.terminationStatus)")
        #expect(Self.alive(running).isEmpty, "processes left: \(Self.alive(running))")
        #expect(server.scratchLeft.isEmpty, "scratch folders left: \(server.scratchLeft)")
        try? server.input.fileHandleForWriting.close()
        try server.outHandle.close()
        // The call in flight was answered before the server ended: an error result saying it was cancelled.
        let messages = server.messages
        let call = Self.answer(2, in: messages)
        #expect(call?["result"]?["isError"] == true, "no answer to the call in flight: \(messages)")
        #expect(call?["result"]?["structuredContent"]?["error"]?["kind"] == "cancelled")
    }

    @Test func inputThatArrivesWhileACallRunsIsReadAtOnce() throws {
        // The call runs on the thread that read it, which keeps the reading unless input
        // arrives meanwhile (MCPServer's InputWatch): a ping and a cancellation sent while a
        // 30 s Sleep runs are read at once, not when the call ends (at its 10 s deadline).
        let server = try LiveServer("mcp-midcall")
        server.initializeAndSleep(seconds: 30)
        let running = server.sleepPlugin()
        #expect(running.count >= 2, "the Sleep plugin did not start")
        server.send(#"{"jsonrpc": "2.0", "id": 3, "method": "ping"}"# + "\n")
        #expect(server.answer(3, within: 4)?["result"] != nil, "the ping sent during the call was not answered within 4 s: \(server.messages)")
        server.send(#"{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2, "reason": "test"}}"# + "\n")
        let cancelled = Date()
        while !Self.alive(running).isEmpty && Date().timeIntervalSince(cancelled) < 6 { usleep(20_000) }
        #expect(Self.alive(running).isEmpty, "the cancelled call's processes still run 6 s after the cancellation: \(Self.alive(running))")
        #expect(try server.endInput() == 0)
        // A call the client cancelled gets no answer.
        #expect(Self.answer(2, in: server.messages) == nil, "\(server.messages)")
        #expect(server.scratchLeft.isEmpty, "scratch folders left: \(server.scratchLeft)")
    }

    @Test func aCallThatEndsLeavesTheWatchToTheCallHoldingTheReadingNow() throws {
        // A (Sleep 2 s) holds the reading; B (Sleep 30 s) arrives, so the reading passes to
        // another thread, which runs B holding it in turn. A's end must not take B's watch:
        // a ping sent after A ended, while B runs, is read at once, not at B's 10 s deadline.
        let server = try LiveServer("mcp-overlap")
        server.initializeAndSleep(seconds: 2)
        #expect(server.sleepPlugin().count >= 2, "the first Sleep did not start")
        server.send(#"{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "Sleep", "arguments": {"seconds": 30}}}"# + "\n")
        #expect(server.answer(2, within: 8)?["result"] != nil, "the 2 s Sleep was not answered: \(server.messages)")
        server.send(#"{"jsonrpc": "2.0", "id": 4, "method": "ping"}"# + "\n")
        #expect(server.answer(4, within: 4)?["result"] != nil, "the ping sent while the second call ran was not answered within 4 s")
        server.send(#"{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3, "reason": "test"}}"# + "\n")
        #expect(try server.endInput() == 0)
        #expect(Self.answer(3, in: server.messages) == nil, "the cancelled call was answered: \(server.messages)")
        #expect(server.scratchLeft.isEmpty, "scratch folders left: \(server.scratchLeft)")
    }

    @Test func aNonBlockingInputIsWaitedFor() throws {
        // A client may hand over its end of the pipe non-blocking (the flag belongs to the pipe,
        // shared with the server): a read that finds nothing yet waits for input, where it
        // used to be taken as the end of input (the server left at once).
        let server = try LiveServer("mcp-nonblocking", before: { input in
            let fd = input.fileHandleForReading.fileDescriptor
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        })
        usleep(300_000)
        #expect(server.process.isRunning, "extrun mcp left before its input ended")
        server.send(#"{"jsonrpc": "2.0", "id": 1, "method": "ping"}"# + "\n")
        #expect(server.answer(1, within: 10)?["result"] != nil, "\(server.messages)")
        #expect(try server.endInput() == 0)
    }

    @Test func callsAreAnsweredWhenTheInputIsARegularFile() throws {
        // epoll cannot watch a regular file: each call passes the reading on before it runs.
        let home = try TempDirectory("mcp-file")
        try StagedPlugins.trust(home: home.url)
        let requests = home.url.appendingPathComponent("requests.jsonl")
        try Data((#"""
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}}}
            {"jsonrpc": "2.0", "method": "notifications/initialized"}
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "MakeUppercase", "arguments": {"text": "from a file"}}}
            {"jsonrpc": "2.0", "id": 3, "method": "ping"}

            """#).utf8).write(to: requests)
        let process = Process()
        process.executableURL = try ExtrunBinary.url()
        process.arguments = ["mcp"]
        process.environment = [
            "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home.url.path, "EXTRUN_HOME": home.url.path, "TMPDIR": home.url.path,
            "EXTRUN_PLUGIN_PATH": try StagedPlugins.directory().path,
        ]
        let output = home.url.appendingPathComponent("stdout")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        let outHandle = try FileHandle(forWritingTo: output)
        process.standardInput = try FileHandle(forReadingFrom: requests)
        process.standardOutput = outHandle
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        try outHandle.close()
        #expect(process.terminationStatus == 0)
        let messages = try String(contentsOf: output, encoding: .utf8).split(separator: "\n").map { try JSONParser.parse(Array($0.utf8)) }
        // The input ends right after the call is read: it is answered (done or cancelled), and so is the ping.
        #expect(Self.answer(2, in: messages)?["result"] != nil, "\(messages)")
        #expect(Self.answer(3, in: messages)?["result"] != nil, "\(messages)")
    }

    @Test func everyRequestReadIsAnsweredWhenTheInputEnds() throws {
        // The obvious first try by hand: a few lines piped in. The call still running when the
        // input ends is cancelled, and answered with an error result before the server exits.
        let (status, messages) = try Self.serve([
            #"{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "by-hand", "version": "1"}}}"#,
            #"{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}"#,
            #"{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "Sleep", "arguments": {"seconds": 30}}}"#,
        ])
        #expect(status == 0)
        #expect(Self.answer(1, in: messages)?["result"]?["protocolVersion"] == "2025-11-25")
        #expect(Self.answer(2, in: messages)?["result"]?["tools"]?.arrayValue?.isEmpty == false)
        let call = Self.answer(3, in: messages)?["result"]
        #expect(call?["isError"] == true, "no answer to the call: \(messages)")
        #expect(call?["structuredContent"]?["error"]?["kind"] == "cancelled")
    }

    @Test func onlyJSONRPC2WithStringOrIntegerIdsIsServed() throws {
        let (_, messages) = try Self.serve([
            #"{"id": 1, "method": "ping"}"#,
            #"{"jsonrpc": "1.0", "id": 2, "method": "ping"}"#,
            #"{"jsonrpc": "2.0", "id": 3.5, "method": "ping"}"#,
            #"{"jsonrpc": "2.0", "id": true, "method": "ping"}"#,
            #"{"jsonrpc": "2.0", "id": null, "method": "ping"}"#,
            #"{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}"#,
            #"{"jsonrpc": "2.0", "id": 7, "method": "ping"}"#,
        ])
        #expect(Self.answer(1, in: messages)?["error"]?["code"] == -32600)
        #expect(Self.answer(1, in: messages)?["error"]?["message"]?.stringValue?.contains("2.0") == true)
        #expect(Self.answer(2, in: messages)?["error"]?["code"] == -32600)
        // A float, a boolean, null or an object is no id: the error goes to id null.
        let refused = messages.filter { $0["id"] == .null }.compactMap { $0["error"]?["message"]?.stringValue }
        #expect(refused.count == 4, "\(messages)")
        #expect(refused.allSatisfy { $0.contains("string or an integer") })
        #expect(!messages.contains { $0["id"] == .double(3.5) || $0["result"] != nil && $0["id"] != .int(7) })
        #expect(Self.answer(7, in: messages)?["result"] == .object([:]))
    }

    @Test func toolNamesStayWithTheirIntentsWhateverElseIsInstalled() throws {
        // "Pay Bob" maps to the characters of "Pay_Bob": it must never take that intent's name,
        // whichever plugin is found first, and must keep its own name when the other goes.
        let extra = try TempDirectory("mcp-names")
        func plugin(_ folder: String, id: String, intent: String) throws -> URL {
            let directory = try extra.directory("\(folder)/plugin")
            let manifest = """
                {"id": "\(id)", "version": "1.0.0", "owner": "EXAMPLETEAM", "protocolVersion": 1,
                 "executable": "plugin", "intents": [{"name": "\(intent)", "parameters": []}]}
                """
            try Data(manifest.utf8).write(to: directory.appendingPathComponent("manifest.json"))
            try Data("#!/bin/sh\nexit 1\n".utf8).write(to: directory.appendingPathComponent("plugin"))
            chmod(directory.appendingPathComponent("plugin").path, 0o755)
            // The folder on the plugin path that holds this one plugin.
            return directory.deletingLastPathComponent()
        }
        let spaced = try plugin("a-spaced", id: "com.example.spaced", intent: "Pay Bob")
        let plain = try plugin("b-plain", id: "com.example.plain", intent: "Pay_Bob")
        let list = [
            #"{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}}}"#,
            #"{"jsonrpc": "2.0", "id": 2, "method": "tools/list"}"#,
        ]
        func names(_ path: [URL]) throws -> [String: String] {
            let tools = Self.answer(2, in: try Self.serve(list, pluginPath: path).messages)?["result"]?["tools"]?.arrayValue ?? []
            var byIntent: [String: String] = [:]
            for tool in tools {
                guard let name = tool["name"]?.stringValue, let description = tool["description"]?.stringValue else { continue }
                byIntent[description.contains("com.example.spaced") ? "Pay Bob" : "Pay_Bob"] = name
            }
            return byIntent
        }
        let both = try names([spaced, plain])
        let reversed = try names([plain, spaced])
        let alone = try names([spaced])
        #expect(both["Pay_Bob"] == "Pay_Bob", "\(both)")
        let spacedName = try #require(both["Pay Bob"])
        #expect(spacedName.hasPrefix("Pay_Bob_") && spacedName.count == "Pay_Bob_".count + 8, "\(both)")
        #expect(reversed == both)
        #expect(alone["Pay Bob"] == spacedName)
    }

    @Test func aClientThatStopsReadingStallsNeitherTheServerNorADeadline() throws {
        // The client writes 3,000 pings and a long call, and reads nothing: the answers
        // overflow the pipe. The server must still read the call, start it, and end it at
        // its deadline (1 s here), not when the client reads again.
        let home = try TempDirectory("mcp-noread")
        let scratch = try TempDirectory("mcp-noread-tmp")
        try StagedPlugins.trust(home: home.url)
        let process = Process()
        process.executableURL = try ExtrunBinary.url()
        process.arguments = ["mcp", "--timeout", "1s"]
        process.environment = [
            "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home.url.path, "EXTRUN_HOME": home.url.path, "TMPDIR": scratch.url.path,
            "EXTRUN_PLUGIN_PATH": try StagedPlugins.directory().path,
        ]
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        var lines = [#"{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}}}"#]
        for n in 0..<3000 { lines.append(#"{"jsonrpc": "2.0", "id": "ping-\#(n)", "method": "ping"}"#) }
        lines.append(#"{"jsonrpc": "2.0", "id": "sleep", "method": "tools/call", "params": {"name": "Sleep", "arguments": {"seconds": 30}}}"#)
        input.fileHandleForWriting.write(Data(lines.map { $0 + "\n" }.joined().utf8))
        var running: [Int32] = []
        for _ in 0..<1000 where running.count < 2 {
            usleep(20_000)
            running = Self.descendants(of: process.processIdentifier)
        }
        #expect(running.count >= 2, "the call was never started: the server stopped reading its input")
        // The deadline (1 s) and the cancel grace end the plugin while nobody reads.
        var left = running
        for _ in 0..<1000 where !left.isEmpty {
            usleep(20_000)
            left = Self.descendants(of: process.processIdentifier)
        }
        #expect(left.isEmpty, "the plugin outlived its deadline while the client did not read: \(left)")
        #expect(process.isRunning)
        // Now the client reads: every answer is there, the call's a timeout.
        let collected = Mutex(Data())
        let reader = Thread {
            let data = output.fileHandleForReading.readDataToEndOfFile()
            collected.withLock { $0 = data }
        }
        reader.start()
        try input.fileHandleForWriting.close()
        let deadline = Date().addingTimeInterval(30)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        for _ in 0..<500 where collected.withLock({ $0.isEmpty }) { usleep(20_000) }
        let text = String(decoding: collected.withLock { $0 }, as: UTF8.self)
        let messages = text.split(separator: "\n").compactMap { try? JSONParser.parse(Array($0.utf8)) }
        #expect(messages.filter { $0["id"]?.stringValue?.hasPrefix("ping-") == true }.count == 3000)
        let call = messages.first { $0["id"] == "sleep" }
        #expect(call?["result"]?["isError"] == true)
        #expect(call?["result"]?["structuredContent"]?["error"]?["kind"] == "timeout", "\(String(describing: call))")
        let files = ((try? FileManager.default.contentsOfDirectory(atPath: scratch.url.path)) ?? []).filter { $0.hasPrefix("extrun-") }
        #expect(files.isEmpty, "scratch folders left: \(files)")
    }
}
