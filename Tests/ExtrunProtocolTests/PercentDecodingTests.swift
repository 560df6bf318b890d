import ExtrunProtocol
import Foundation
import Testing

/// `extrun serve` decodes its request targets with `PercentDecoding` (no Foundation): it must
/// answer what Foundation's `removingPercentEncoding` answers, on any text.
struct PercentDecodingTests {
    @Test("the same answers as Foundation's removingPercentEncoding on 20,000 random texts, with and without + as a space")
    func agreesWithFoundation() {
        // Escapes whole and cut short, hex digits of both cases, bytes that are and are not
        // UTF-8 (%C3%A9 is é; %C3 alone, %FF and %80 are not), NUL, and text that is not ASCII.
        let pieces = ["%", "%2", "%20", "%2F", "%2f", "%C3", "%A9", "%c3%a9", "%FF", "%80", "%00", "%zz", "%G1", "+", "a", "Z", "9", "é", "/", "?", "=", "&", " ", "%E2%82%AC", "€"]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<20_000 {
            let text = (0..<Int.random(in: 0...8, using: &generator)).map { _ in pieces.randomElement(using: &generator) ?? "" }.joined()
            #expect(PercentDecoding.decoded(Substring(text), plusIsSpace: false) == Self.foundation(text), "\(text)")
            #expect(PercentDecoding.decoded(Substring(text), plusIsSpace: true) == Self.foundation(text.replacingOccurrences(of: "+", with: " ")), "\(text)")
        }
    }

    /// Foundation's answer, except one quirk: it turns %A9 alone (not UTF-8) into U+FFFD where
    /// it refuses %80, %A0 or %BF; the service refuses every byte that is not UTF-8 alike.
    static func foundation(_ text: String) -> String? {
        guard let decoded = text.removingPercentEncoding else { return nil }
        return decoded.contains("\u{FFFD}") ? nil : decoded
    }

    @Test func examples() {
        #expect(PercentDecoding.decoded("%A9", plusIsSpace: false) == nil)
        #expect(PercentDecoding.decoded("Make%20Uppercase", plusIsSpace: false) == "Make Uppercase")
        #expect(PercentDecoding.decoded("a+b%2Bc", plusIsSpace: true) == "a b+c")
        #expect(PercentDecoding.decoded("a+b", plusIsSpace: false) == "a+b")
        #expect(PercentDecoding.decoded("caf%C3%A9", plusIsSpace: false) == "café")
        #expect(PercentDecoding.decoded("%C3", plusIsSpace: false) == nil)
        #expect(PercentDecoding.decoded("100%", plusIsSpace: false) == nil)
        #expect(PercentDecoding.decoded("%4", plusIsSpace: false) == nil)
        #expect(PercentDecoding.decoded("%4g", plusIsSpace: false) == nil)
    }
}
