import ExtrunProtocol
import Foundation
import Testing

/// `extrun batch`: several intents in one call, with warm plugin reuse.
@Suite("extrun batch")
struct BatchTests {
    let cli: CLI
    let dir: TempDirectory

    init() throws {
        cli = try CLI()
        dir = try TempDirectory("batch")
    }

    func intent(_ name: String, _ json: String) throws -> String {
        try dir.write(name, json).path
    }

    func lines(_ result: CLIResult) throws -> [JSONValue] {
        try result.stdout.split(separator: "\n").map { line in try JSONParser.parse(Array(line.utf8)) }
    }

    @Test("one JSON line per intent, in order; one plugin process for all; the first failure's exit status")
    func jsonLines() throws {
        let a = try intent("a.json", #"{"id": "first", "intent": "MakeUppercase", "parameters": {"text": "one"}}"#)
        let b = try intent("b.json", #"{"id": "second", "intent": "MakeUppercase", "parameters": {"text": "two"}}"#)
        let bad = try intent("bad.json", #"{"intent": "MakeUppercase", "parameters": {"text": 5}}"#)
        let result = try cli.run(["batch", "--verbose", a, b, bad, "Examples/intents/make-uppercase.json", "/nonexistent/intent.json"])
        #expect(result.status == 4, "\(result)")  // invalidIntent, the first failure
        let reports = try lines(result)
        #expect(reports.count == 5, "\(result)")
        guard reports.count == 5 else { return }
        #expect(reports[0]["id"] == "first" && reports[0]["response"]?["properties"]?["result"] == "ONE")
        #expect(reports[1]["id"] == "second" && reports[1]["response"]?["properties"]?["result"] == "TWO")
        #expect(reports[2]["error"]?["kind"] == "invalidIntent")
        #expect(reports[3]["response"]?["properties"]?["result"] == "HELLO WORLD")
        #expect(reports[4]["error"]?["kind"] == "invalidIntent")
        // A warm session's handshake takes no launch.
        #expect(result.stderr.contains("batch: 5 intents, 1 plugin processes started, 2 reused"), "\(result.stderr)")
        #expect(result.stderr.contains("session 3 in extension mode"), "\(result.stderr)")
    }

    @Test("--jobs 3: the intents run at once in up to 3 warm processes; the reports come in the files' order")
    func jobs() throws {
        var files: [String] = []
        for i in 0..<24 {
            files.append(try intent("j\(i).json", #"{"id": "n\#(i)", "intent": "MakeUppercase", "parameters": {"text": "text \#(i)"}}"#))
        }
        let bad = try intent("bad.json", #"{"id": "bad", "intent": "NoSuchIntent", "parameters": {}}"#)
        let result = try cli.run(["batch", "--jobs", "3", "--verbose"] + files[0..<12] + [bad] + files[12...])
        #expect(result.status == 5, "\(result)")  // noHandler, the one failure
        let reports = try lines(result)
        #expect(reports.count == 25, "\(result)")
        guard reports.count == 25 else { return }
        for (index, report) in reports.enumerated() {
            let i = index < 12 ? index : index - 1
            if index == 12 {
                #expect(report["id"] == "bad" && report["error"]?["kind"] == "noHandler")
            } else {
                #expect(report["id"] == .string("n\(i)"), "report \(index) is \(report)")
                #expect(report["response"]?["properties"]?["result"] == .string("TEXT \(i)"))
            }
        }
        // At most one process per job; the rest were warm sessions.
        let summary = try #require(result.stderr.split(separator: "\n").first { $0.contains("batch: 25 intents") }, "\(result.stderr)")
        let started = Int(summary.components(separatedBy: "intents, ").last?.components(separatedBy: " plugin").first ?? "") ?? 0
        #expect((1...3).contains(started), "\(summary)")
        #expect(summary.hasSuffix("\(24 - started) reused"), "\(summary)")

        let stopped = try cli.run(["batch", "--jobs", "2", "--stop-on-failure"] + files[0..<3] + [bad] + files[3..<6])
        #expect(stopped.status == 5, "\(stopped)")
        #expect(try lines(stopped).count == 4, "\(stopped)")
        #expect(try cli.run(["batch", "--jobs", "0", files[0]]).status == 64)
    }

    @Test("--stop-on-failure stops after the first intent that does not succeed")
    func stopOnFailure() throws {
        let bad = try intent("bad.json", #"{"intent": "NoSuchIntent", "parameters": {}}"#)
        let result = try cli.run(["batch", "--stop-on-failure", "Examples/intents/make-uppercase.json", bad, "Examples/intents/make-uppercase.json"])
        #expect(result.status == 5, "\(result)")  // noHandler
        #expect(try lines(result).count == 2)
    }

    @Test("--format text: the summaries, separated by a blank line; all success is exit 0")
    func text() throws {
        let result = try cli.run(["batch", "--format", "text", "Examples/intents/make-uppercase.json", "Examples/intents/make-uppercase.json"])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.components(separatedBy: "MakeUppercase by com.example.uppercase (extension): success").count == 3, "\(result)")
        #expect(result.stdout.contains("\n\nMakeUppercase"))
    }

    @Test("--timeout and --memory-limit apply to every intent, as for handle")
    func limits() throws {
        let result = try cli.run([
            "batch", "--timeout", "700ms", "--memory-limit", "40MiB", "Examples/intents/make-uppercase.json", "Examples/intents/sleep-30s.json",
        ])
        #expect(result.status == 8, "\(result)")
        let reports = try lines(result)
        #expect(reports.count == 2, "\(result)")
        guard reports.count == 2 else { return }
        #expect(reports[0]["limits"]?["deadlineMs"] == 700 && reports[0]["limits"]?["memoryBytes"] == .int(40 << 20))
        #expect(reports[1]["error"]?["kind"] == "timeout" && reports[1]["error"]?["deadlineMs"] == 700, "\(reports[1])")
    }

    @Test("a bad command line: no file, or standard input twice; exit 64")
    func badCommandLine() throws {
        #expect(try cli.run(["batch"]).status == 64)
        let twice = try cli.run(["batch", "-", "-"])
        #expect(twice.status == 64)
        #expect(twice.stderr.contains("standard input (-) can be read once only"), "\(twice)")
    }
}
