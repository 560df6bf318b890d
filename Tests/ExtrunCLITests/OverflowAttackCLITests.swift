import ExtrunProtocol
import Foundation
import Testing

/// Numbers too large for a 64-bit integer, given as ops on a bad day might type them
/// (a size in GiB typed as bytes, a timeout in milliseconds typed with a unit): a usage
/// error naming the option, never a crash.
@Suite("Sizes and durations too large to count")
struct OverflowAttackCLITests {
    @Test("owners quota --bytes beyond Int64 is a usage error (64), nothing set", arguments: ["99999999999999999999", "9000000000GiB", "1e99"])
    func quotaBytesOverflow(bytes: String) throws {
        let cli = try CLI()
        let result = try cli.run(["owners", "quota", "TEAM", "--bytes", bytes])
        #expect(result.status == 64, "\(result)")
        #expect(result.stderr.contains("--bytes \(bytes)"), "\(result)")
        let report = try cli.run(["owners", "quota", "TEAM", "--format", "json"]).json()
        #expect(report["quota"]?["bytes"]?["source"] == "default")
    }

    @Test("handle --memory-limit / --timeout beyond Int64 is a usage error (64)", arguments: [
        ["--memory-limit", "99999999999999999999"], ["--timeout", "99999999999999999999m"],
    ])
    func handleLimitsOverflow(option: [String]) throws {
        let cli = try CLI()
        let intent = try cli.home.write("intent.json", #"{"intent": "ShoutText", "parameters": {"text": "hi"}}"#)
        let result = try cli.run(["handle", intent.path] + option)
        #expect(result.status == 64, "\(result)")
        #expect(result.stderr.contains(option[0]), "\(result)")
    }
}
