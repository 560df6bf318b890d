import ExtrunHost
import ExtrunProtocol
import Foundation
import Testing

@Suite("Errors, exit codes and reports")
struct HostErrorTests {
    @Test("each error kind has its documented exit status")
    func exitCodes() {
        let expected: [ErrorKind: Int32] = [
            .parameterUnresolved: 3, .invalidIntent: 4, .noHandler: 5, .pluginCrashed: 6, .protocolError: 7, .timeout: 8,
            .memoryLimitExceeded: 9, .sandboxViolation: 10, .configurationError: 11, .pluginError: 12, .diskLimitExceeded: 14, .signatureInvalid: 19, .cancelled: 20, .internalError: 70,
        ]
        for (kind, code) in expected {
            #expect(kind.exitCode == code, "\(kind)")
        }
        // Every kind (including any added later) has a status of its own, apart from 0, 1 and 64.
        let codes = ErrorKind.allCases.map(\.exitCode)
        #expect(Set(codes).count == codes.count, "two kinds share an exit status: \(codes)")
        #expect(Set(codes).isDisjoint(with: [0, 1, 64]))
        #expect(ExitStatus.success == 0 && ExitStatus.unsuccessfulResponse == 1 && ExitStatus.usage == 64)
    }

    @Test("an error's JSON merges its details with kind and message")
    func errorJSON() {
        let error = HostError(.invalidIntent, "bad", details: ["field": "parameters.x", "kind": "ignored"])
        #expect(error.json == ["kind": "invalidIntent", "message": "bad", "field": "parameters.x"])
        #expect(error.description == "invalidIntent: bad")
    }

    @Test("a report's exit code: 0 for success, 1 for another response, the error's status, 70 for nothing")
    func reportExitCode() {
        var report = HandleReport(intent: "A")
        #expect(report.exitCode == 70)
        report.response = IntentResponse(code: "failure")
        #expect(report.exitCode == 1)
        report.responseIsSuccess = true
        #expect(report.exitCode == 0)
        report.error = HostError(.timeout, "late")
        #expect(report.exitCode == 8)
    }

    @Test("a report's text summary")
    func reportText() {
        var report = HandleReport(intent: "Order")
        report.plugin = "com.example.soup"
        report.mode = .inApp
        report.response = IntentResponse(
            code: "success", properties: ["soup": "pea", "count": 2, "receipt": ["filename": "r.txt", "typeIdentifier": "public.plain-text", "data": "aGVsbG8="]],
            dialog: Dialog(full: "Ordered.", supporting: "Pea soup"))
        #expect(report.text == """
            Order by com.example.soup (in-app): success
              Ordered.
              Pea soup
              count: 2
              receipt: file r.txt (public.plain-text, 5 bytes)
              soup: pea
            """)
        var failed = HandleReport(intent: nil)
        failed.error = HostError(.invalidIntent, "x.json: broken")
        #expect(failed.text == "extrun: error invalidIntent\n  x.json: broken")
    }

    @Test("sizes for --memory-limit", arguments: [
        ("4096", Int64(4096)), ("64MiB", 64 << 20), ("64 MiB", 64 << 20), ("1GiB", 1 << 30), ("512KiB", 512 << 10), ("100MB", 100_000_000),
        ("1.5MiB", 1_572_864), ("2g", 2 << 30),
    ])
    func byteCounts(text: String, bytes: Int64) {
        #expect(ByteCount.parse(text) == bytes)
    }

    @Test("sizes that are not sizes", arguments: ["", "lots", "-5MiB", "1TiB", "MiB", "1e3"])
    func notByteCounts(text: String) {
        #expect(ByteCount.parse(text) == nil)
    }

    @Test("durations for --timeout")
    func durations() {
        #expect(DurationText.parseMilliseconds("2500") == nil)  // no unit: refused, not 2500 ms nor seconds
        #expect(DurationText.parseMilliseconds("500ms") == 500)
        #expect(DurationText.parseMilliseconds("1.5s") == 1_500)
        #expect(DurationText.parseMilliseconds("2m") == 120_000)
        #expect(DurationText.parseMilliseconds("soon") == nil)
        #expect(DurationText.parseMilliseconds("1h") == nil)
        #expect(DurationText.parseMilliseconds("-1s") == nil)
    }

    @Test("byte counts are formatted for people")
    func formatBytes() {
        #expect(ByteCount.format(30 << 20) == "30 MiB")
        #expect(ByteCount.format(1 << 30) == "1 GiB")
        #expect(ByteCount.format(1_572_864) == "1.5 MiB")
        #expect(ByteCount.format(2048) == "2 KiB")
        #expect(ByteCount.format(10) == "10 bytes")
    }
}
