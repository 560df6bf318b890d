import Testing

@testable import ExtrunHost

/// The ring that keeps the last bytes a plugin wrote to stdout or stderr: it grows as
/// bytes arrive, never past its limit, and keeps the newest bytes, oldest first.
@Suite struct OutputCaptureTests {
    func append(_ text: String, to capture: inout OutputCapture) -> [String] {
        Array(text.utf8).withUnsafeBytes { capture.append($0) }
    }

    @Test func theTailIsTheLastBytesBeforeAndAfterTheRingWraps() {
        var capture = OutputCapture(limit: 8)
        #expect(capture.tail.isEmpty)
        _ = append("abc", to: &capture)
        #expect(String(decoding: capture.tail, as: UTF8.self) == "abc")
        _ = append("defgh", to: &capture)
        #expect(String(decoding: capture.tail, as: UTF8.self) == "abcdefgh")
        _ = append("ij", to: &capture)
        #expect(String(decoding: capture.tail, as: UTF8.self) == "cdefghij")
        _ = append("0123456789ABCDEF", to: &capture)  // more than the limit at once
        #expect(String(decoding: capture.tail, as: UTF8.self) == "89ABCDEF")
        _ = append("x", to: &capture)
        #expect(String(decoding: capture.tail, as: UTF8.self) == "9ABCDEFx")
    }

    @Test func linesAreCollectedWhenAskedAndTheLastOnesReadFromTheTail() {
        var capture = OutputCapture(limit: 16)
        capture.collectsLines = true
        #expect(append("one\ntw", to: &capture) == ["one"])
        #expect(append("o\nthree\nfour", to: &capture) == ["two", "three"])
        #expect(capture.flush() == "four")
        #expect(capture.lastLines(2) == ["three", "four"])
        #expect(capture.tail.count == 16)
    }
}
