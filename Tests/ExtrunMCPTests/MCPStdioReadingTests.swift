import ExtrunHost
import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

@testable import ExtrunMCP

#if canImport(Glibc)
import Glibc
#endif

/// `extrun mcp`'s stdio reading (`ReadRelay`), in process on pipes: a warm call runs on
/// the thread that read it, and that thread reads on afterwards.
@Suite struct MCPStdioReadingTests {
    /// A client that writes its next call the moment it has read an answer keeps the
    /// reading on one thread: the call's watch on the input ends before its answer is
    /// written. (It used to end after, so such a client's next line found it armed, and
    /// the reading passed to another thread at almost every call: two wake-ups more.)
    @Test func aClientThatCallsAgainAtOnceKeepsTheReadingOnOneThread() throws {
        let home = try TempDirectory("mcp-reading")
        // Trusted: the plugin runs from its private copy under this home (docs/store.md), which names its processes.
        let host = try StagedPlugins.host(home: home.url)
        var toServer: [Int32] = [-1, -1]
        var fromServer: [Int32] = [-1, -1]
        #expect(pipe(&toServer) == 0 && pipe(&fromServer) == 0)
        let server = try MCPServer(host: host, output: fromServer[1])
        let input = toServer[0]
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            server.run(input: input)
            done.signal()
        }
        thread.start()

        var pending: [UInt8] = []
        func send(_ line: String) {
            let bytes = Array((line + "\n").utf8)
            _ = bytes.withUnsafeBytes { write(toServer[1], $0.baseAddress, $0.count) }
        }
        func receive() throws -> JSONValue {
            var chunk = [UInt8](repeating: 0, count: 4096)
            while true {
                if let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    let line = Array(pending[..<newline])
                    pending.removeFirst(newline + 1)
                    return try JSONParser.parse(line)
                }
                let count = chunk.withUnsafeMutableBytes { read(fromServer[0], $0.baseAddress, $0.count) }
                guard count > 0 else { throw MessageError("the server's output ended") }
                pending.append(contentsOf: chunk[..<count])
            }
        }

        send(#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#)
        #expect(try receive()["result"]?["protocolVersion"] == "2025-06-18")
        send(#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        for id in 1...40 {
            send(#"{"jsonrpc":"2.0","id":\#(id),"method":"tools/call","params":{"name":"MakeUppercase","arguments":{"text":"n\#(id)"}}}"#)
            let answer = try receive()
            #expect(answer["id"] == .int(Int64(id)))
            #expect(answer["result"]?["structuredContent"]?["result"] == .string("N\(id)"), "\(answer)")
        }
        #expect(server.relay.turn == 0, "the reading passed to another thread \(server.relay.turn) times in 40 calls")
        #expect(!Self.processes(mentioning: home.url.path).isEmpty, "no warm plugin of this server was found")

        close(toServer[1])
        #expect(done.wait(timeout: .now() + 30) == .success)
        close(toServer[0])
        close(fromServer[0])
        close(fromServer[1])
        #expect(Self.processes(mentioning: home.url.path).isEmpty, "plugin processes left")
    }

    /// Live processes whose command line mentions `text` (this test's home: no other test's).
    static func processes(mentioning text: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap { entry -> String? in
            guard Int32(entry) != nil, let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")"), stat[stat.index(close, offsetBy: 2)...].first != "Z",
                let command = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline")
            else { return nil }
            let line = String(decoding: command.map { $0 == 0 ? 0x20 : $0 }, as: UTF8.self)
            return line.contains(text) ? "\(entry): \(line)" : nil
        }
    }
}
