import ExtrunProtocol
import Foundation
import Testing

/// `extrun handle FILE` (no option) skips ArgumentParser (Sources/extrun/HandleFastPath.swift);
/// it must answer exactly as the parsed command does.
@Suite("extrun handle fast path")
struct FastPathTests {
    let cli: CLI

    init() throws { cli = try CLI() }

    /// The output without the parts that differ from run to run (metrics, the generated id).
    func comparable(_ result: CLIResult) throws -> JSONValue {
        guard case .object(var fields) = try JSONParser.parse(Array(result.stdout.utf8)) else { return .null }
        fields["metrics"] = nil
        fields["id"] = fields["id"] == nil ? nil : "generated"
        if case .array(let steps)? = fields["steps"] {
            fields["steps"] = .array(steps.map { step in
                guard case .object(var step) = step else { return step }
                step["metrics"] = nil
                return .object(step)
            })
        }
        return .object(fields)
    }

    @Test("the same output and exit status as the parsed command", arguments: [
        "Examples/intents/make-uppercase.json",  // success
        "Examples/intents/order-soup.json",  // needs a confirmation: exit 13 without a terminal
        "/nonexistent/intent.json",  // unreadable file: invalidIntent, exit 4
    ])
    func sameAsParsed(file: String) throws {
        let fast = try cli.run(["handle", file])
        let parsed = try cli.run(["handle", file, "--format", "json"])
        #expect(fast.status == parsed.status, "\(fast)\n\(parsed)")
        #expect(try comparable(fast) == comparable(parsed), "\(fast)\n\(parsed)")
    }

    @Test("standard input (-) works on the fast path; options and --help go to the parser")
    func stdinAndOptions() throws {
        let fromStdin = try cli.run(["handle", "-"], stdin: #"{"intent": "MakeUppercase", "parameters": {"text": "piped"}}"#)
        #expect(fromStdin.status == 0, "\(fromStdin)")
        #expect(try JSONParser.parse(Array(fromStdin.stdout.utf8))["response"]?["properties"]?["result"] == "PIPED")
        let help = try cli.run(["handle", "--help"])
        #expect(help.status == 0 && help.stdout.contains("USAGE: extrun handle"), "\(help)")
        let text = try cli.run(["handle", "Examples/intents/make-uppercase.json", "--format", "text"])
        #expect(text.stdout.hasPrefix("MakeUppercase by com.example.uppercase (extension): success"), "\(text)")
        let missing = try cli.run(["handle"])
        #expect(missing.status == 64, "\(missing)")
    }
}
