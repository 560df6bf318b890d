import ExtrunProtocol
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What a balancer in front of a fleet relies on (docs/scaling.md, Scripts/fleet): serve.json
/// `hostName` makes an interactive run's id name its host (`NAME.UUID`), so that the run's
/// answers can be sent to the host running it (docs/serve.md, "Prompts"); and 503 only ever
/// means nothing ran, so that retrying a 503 on another host never runs an intent twice.
@Suite("extrun serve behind a balancer", .serialized)
struct ServeHostNameTests {
    let cli: CLI

    init() throws {
        cli = try CLI()
    }

    /// An interactive MakeUppercase without its text over the Unix socket: the prompt event's
    /// run id, and the answer's status, then the report's result.
    func interactiveRun(_ service: RunningService, directory: TempDirectory) throws -> (run: String, answer: Int, result: JSONValue?) {
        let events = directory.url.appendingPathComponent("events-\(UUID().uuidString)")
        let stream = Process()
        stream.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        stream.arguments = [
            "-sS", "-N", "--max-time", "60", "-o", events.path, "--unix-socket", service.socket, "-X", "POST",
            "http://localhost/v1/handle?interactive=true", "--data-binary", #"{"intent": "MakeUppercase", "parameters": {}}"#,
        ]
        stream.standardOutput = FileHandle.nullDevice
        stream.standardError = FileHandle.nullDevice
        try stream.run()
        defer {
            if stream.isRunning { kill(stream.processIdentifier, SIGKILL) }
            stream.waitUntilExit()
        }
        func lines() -> [JSONValue] {
            ((try? String(contentsOf: events, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { try? JSONParser.parse(Array($0.utf8)) }
        }
        var prompt: JSONValue?
        let deadline = Date().addingTimeInterval(30)
        while prompt == nil, Date() < deadline {
            prompt = lines().first { $0["event"] == "prompt" }
            if prompt == nil { usleep(50_000) }
        }
        let event = try #require(prompt, "no prompt event")
        let run = try #require(event["run"]?.stringValue)
        let body = String(decoding: JSONWriter.bytes(["prompt": event["prompt"] ?? .null, "answer": "named"]), as: UTF8.self)
        let answer = try ProgramRun.program(
            "/usr/bin/curl",
            ["-sS", "--max-time", "30", "-o", "/dev/null", "-w", "%{http_code}", "--unix-socket", service.socket, "-X", "POST",
             "http://localhost/v1/runs/\(run)/answers", "--data-binary", body])
        stream.waitUntilExit()
        let report = lines().first { $0["event"] == "report" }
        return (run, Int(answer.stdout) ?? 0, report?["report"]?["response"]?["properties"]?["result"])
    }

    @Test("With hostName an interactive run's id is NAME.UUID and its answer reaches it; without, a bare UUID")
    func runIDNamesTheHost() throws {
        let directory = try TempDirectory("serve-hostname")
        let named = try RunningService(cli: cli, policy: #"{"hostName": "h7-a"}"#)
        let first = try interactiveRun(named, directory: directory)
        named.stop()
        let parts = first.run.split(separator: ".", omittingEmptySubsequences: false)
        #expect(parts.count == 2 && parts[0] == "h7-a" && parts[1].count == 36, "run id \(first.run)")
        #expect(first.answer == 200, "the answer to \(first.run)")
        #expect(first.result == "NAMED", "the report's result: \(String(describing: first.result))")

        let bare = try RunningService(cli: cli)
        let second = try interactiveRun(bare, directory: directory)
        bare.stop()
        #expect(second.run.count == 36 && !second.run.contains("."), "run id \(second.run)")
        #expect(second.answer == 200 && second.result == "NAMED", "\(second)")
    }

    @Test("A hostName outside [a-z0-9-]{1,32}: configurationError naming hostName, exit 11, nothing left")
    func badHostName() throws {
        for bad in [#""H1""#, #""h.1""#, #""""#, #""\#(String(repeating: "a", count: 33))""#, "7", #""h 1""#] {
            let dir = try TempDirectory("serve-hostname")
            let socket = dir.url.appendingPathComponent("s.sock").path
            let file = try dir.write("serve.json", #"{"hostName": \#(bad)}"#, mode: 0o600)
            let result = try cli.run(["serve", "--socket", socket, "--config", file.path])
            #expect(result.status == 11, "hostName \(bad): \(result)")
            #expect(result.stderr.contains("hostName"), "hostName \(bad): \(result)")
            #expect(!FileManager.default.fileExists(atPath: socket), "hostName \(bad): the socket is left")
        }
    }

    @Test("At SIGTERM: a queued call is refused 503 overloaded with Retry-After (nothing ran), a run cancelled past the grace is 500 without it")
    func shutdownStatuses() throws {
        let directory = try TempDirectory("serve-statuses")
        let service = try RunningService(cli: cli, policy: #"{"shutdownGraceSeconds": 0.5, "maxConcurrent": 1}"#)
        func call(_ name: String) throws -> Process {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
            process.arguments = [
                "-sS", "--max-time", "60", "-o", directory.url.appendingPathComponent("\(name).body").path,
                "-D", directory.url.appendingPathComponent("\(name).head").path, "--unix-socket", service.socket, "-X", "POST",
                "http://localhost/v1/handle", "--data-binary", #"{"intent": "Sleep", "parameters": {"seconds": 30}}"#,
            ]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            return process
        }
        let running = try call("running")
        #expect(try service.waitRunning(1))
        let queued = try call("queued")
        var health: JSONValue?
        for _ in 0..<100 {
            health = try? JSONParser.parse(Array(try service.python("health").stdout.utf8))
            if health?["queued"]?.intValue == 1 { break }
            usleep(50_000)
        }
        #expect(health?["queued"]?.intValue == 1, "\(String(describing: health))")
        service.stop()
        running.waitUntilExit()
        queued.waitUntilExit()
        func answer(_ name: String) -> (status: String, retryAfter: Bool, error: JSONValue?) {
            let head = (try? String(contentsOf: directory.url.appendingPathComponent("\(name).head"), encoding: .utf8)) ?? ""
            let body = (try? Data(contentsOf: directory.url.appendingPathComponent("\(name).body"))) ?? Data()
            let status = head.split(separator: " ").dropFirst().first.map(String.init) ?? ""
            let error = (try? JSONParser.parse(Array(body)))?["report"]?["error"]
            return (status, head.lowercased().contains("\r\nretry-after:"), error)
        }
        let cancelled = answer("running")
        #expect(cancelled.status == "500" && !cancelled.retryAfter, "\(cancelled)")
        #expect(cancelled.error?["kind"] == "cancelled", "\(cancelled)")
        let refused = answer("queued")
        #expect(refused.status == "503" && refused.retryAfter, "\(refused)")
        #expect(refused.error?["kind"] == "overloaded" && refused.error?["reason"] == "shutdown", "\(refused)")
    }
}
