import ExtrunHost
import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

@testable import ExtrunMCP

#if canImport(Glibc)
import Glibc
#endif

/// `extrun mcp` at the JSON-RPC level in the modern era, with a request-state key the
/// test holds (`--request-state-key`): states it seals itself, for what a client cannot
/// make (another principal on stdio, answers recorded for other questions), and the key
/// file refused.
@Suite struct MCPModernProtocolTests {
    /// One `extrun mcp` on pipes, asked one line at a time.
    final class Server {
        let home: TempDirectory
        let scratch: TempDirectory
        let process = Process()
        let input = Pipe()
        let output: URL

        init(home: TempDirectory, arguments: [String]) throws {
            self.home = home
            scratch = try TempDirectory("mcp-raw-tmp")
            process.executableURL = try ExtrunBinary.url()
            process.arguments = ["mcp"] + arguments
            process.environment = [
                "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home.url.path, "EXTRUN_HOME": home.url.path, "TMPDIR": scratch.url.path,
                "EXTRUN_PLUGIN_PATH": try StagedPlugins.directory().path,
            ]
            output = home.url.appendingPathComponent("stdout")
            _ = FileManager.default.createFile(atPath: output.path, contents: nil)
            process.standardInput = input
            process.standardOutput = try FileHandle(forWritingTo: output)
            process.standardError = FileHandle.nullDevice
            try process.run()
        }

        func send(_ message: JSONValue) {
            input.fileHandleForWriting.write(Data(JSONWriter.bytes(message) + [UInt8(ascii: "\n")]))
        }

        /// The answer to request `id`, waited for at most `seconds`.
        func answer(_ id: JSONValue, seconds: Double = 30) -> JSONValue? {
            let end = Date().addingTimeInterval(seconds)
            while Date() < end {
                let text = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
                for line in text.split(separator: "\n") {
                    if let message = try? JSONParser.parse(Array(line.utf8)), message["id"] == id, message["method"] == nil { return message }
                }
                usleep(20_000)
            }
            return nil
        }

        /// Ends the input; the exit status, and the processes the server had started that are still alive.
        func close() throws -> (status: Int32, left: [Int32]) {
            let started = Self.descendants(of: process.processIdentifier)
            try input.fileHandleForWriting.close()
            process.waitUntilExit()
            usleep(100_000)
            let left = started.filter { kill($0, 0) == 0 && !Self.isZombie($0) }
            let files = ((try? FileManager.default.contentsOfDirectory(atPath: scratch.url.path)) ?? []).filter { $0.hasPrefix("extrun-") }
            #expect(files.isEmpty, "scratch folders left: \(files)")
            return (process.terminationStatus, left)
        }

        static func descendants(of root: Int32) -> [Int32] {
            var parents: [Int32: [Int32]] = [:]
            for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
                guard let pid = Int32(entry), let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                    let close = stat.lastIndex(of: ")")
                else { continue }
                let fields = stat[stat.index(close, offsetBy: 2)...].split(separator: " ")
                if fields.count > 1, let parent = Int32(fields[1]) { parents[parent, default: []].append(pid) }
            }
            var found: [Int32] = []
            var todo = [root]
            while let next = todo.popLast() {
                for child in parents[next] ?? [] {
                    found.append(child)
                    todo.append(child)
                }
            }
            return found
        }

        static func isZombie(_ pid: Int32) -> Bool {
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let close = stat.lastIndex(of: ")") else { return true }
            return stat[stat.index(close, offsetBy: 2)...].hasPrefix("Z")
        }
    }

    static func call(_ id: Int64, _ tool: String, _ arguments: JSONValue, state: String) -> JSONValue {
        [
            "jsonrpc": "2.0", "id": .int(id), "method": "tools/call",
            "params": [
                "name": .string(tool), "arguments": arguments, "requestState": .string(state),
                "inputResponses": ["question-2": ["action": "accept", "content": ["confirm": true]]],
                "_meta": [
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": ["elicitation": ["form": [:]]],
                ],
            ],
        ]
    }

    @Test func answersRecordedForOtherQuestionsOrAnotherPrincipalAreRefused() throws {
        let home = try TempDirectory("mcp-raw")
        let bytes = (0..<32).map { UInt8($0 * 7 & 0xff) }
        let keyFile = home.url.appendingPathComponent("shared.key")
        try Data(bytes).write(to: keyFile)
        chmod(keyFile.path, 0o600)
        let key = RequestStateKey(bytes: bytes)
        let arguments: JSONValue = ["quantity": 1]
        func state(_ principal: String) -> String {
            RequestState(
                principal: principal, tool: "OrderSoup", argumentsDigest: RequestState.digest(of: arguments), expiresMs: MCPDispatcher.nowMs() + 60_000,
                answers: [RequestState.Answer(fingerprint: "an answer to another question", value: "clam_chowder")], pending: "the confirmation"
            ).seal(with: key)
        }
        let server = try Server(home: home, arguments: ["--request-state-key", keyFile.path])
        // Another principal's state (stdio's principal is the uid): refused, nothing runs.
        server.send(Self.call(1, "OrderSoup", arguments, state: state("uid:\(getuid() &+ 1)")))
        let foreign = server.answer(1)
        #expect(foreign?["error"]?["code"] == -32602, "\(foreign ?? .null)")
        #expect(foreign?["error"]?["message"]?.stringValue?.contains("another principal") == true)
        #expect(Server.descendants(of: server.process.processIdentifier).isEmpty, "a refused state started a plugin")
        // This principal's, sealed with the shared key: it opens, and the run goes as far as the
        // first question, whose recorded answer was given to another one: refused, nothing handled.
        server.send(Self.call(2, "OrderSoup", arguments, state: state("uid:\(getuid())")))
        let stale = server.answer(2)
        #expect(stale?["error"]?["code"] == -32602, "\(stale ?? .null)")
        #expect(stale?["error"]?["message"]?.stringValue?.contains("its answer 1 was given to another question") == true, "\(stale ?? .null)")
        let (status, left) = try server.close()
        #expect(status == 0)
        #expect(left.isEmpty, "processes left: \(left)")
        // The key file the test made is kept as it was.
        #expect(FileManager.default.contents(atPath: keyFile.path) == Data(bytes))
    }

    @Test func aKeyFileOthersMayReadStopsTheServerWithAClearError() throws {
        let home = try TempDirectory("mcp-raw-key")
        let keyFile = home.url.appendingPathComponent("open.key")
        try Data(repeating: 3, count: 32).write(to: keyFile)
        chmod(keyFile.path, 0o644)
        let process = Process()
        process.executableURL = try ExtrunBinary.url()
        process.arguments = ["mcp", "--request-state-key", keyFile.path]
        process.environment = ["PATH": "/usr/bin:/bin", "HOME": home.url.path, "EXTRUN_HOME": home.url.path, "TMPDIR": home.url.path]
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let said = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 78)
        #expect(said.contains("has mode 644: others may read it"), "\(said)")
        #expect(said.contains("chmod 600"), "\(said)")
    }
}
