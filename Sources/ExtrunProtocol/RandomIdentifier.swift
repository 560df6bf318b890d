/// Random (version 4) UUIDs in lowercase, the form `UUID().uuidString.lowercased()` gives:
/// a run's identifier and a served run's id. Foundation's `UUID()` opened, read and closed
/// /dev/urandom and formatted through `snprintf` for every one, twice per served intent
/// (`strace -k` of a pool's intents); this takes its 16 bytes from the system's generator
/// (`getrandom`, twice) and writes the hex itself. `RandomIdentifierTests` checks the form, the version and variant
/// bits, and that Foundation's `UUID(uuidString:)` reads it back as the same value.
public enum RandomIdentifier {
    public static func uuid() -> String {
        var generator = SystemRandomNumberGenerator()
        var bytes: (UInt64, UInt64) = (generator.next(), generator.next())
        return withUnsafeMutableBytes(of: &bytes) { raw -> String in
            raw[6] = (raw[6] & 0x0F) | 0x40  // version 4
            raw[8] = (raw[8] & 0x3F) | 0x80  // the RFC 4122 variant
            let digits: StaticString = "0123456789abcdef"
            return String(unsafeUninitializedCapacity: 36) { out in
                digits.withUTF8Buffer { hex in
                    var at = 0
                    for index in 0..<16 {
                        if index == 4 || index == 6 || index == 8 || index == 10 {
                            out[at] = UInt8(ascii: "-")
                            at += 1
                        }
                        out[at] = hex[Int(raw[index] >> 4)]
                        out[at + 1] = hex[Int(raw[index] & 0x0F)]
                        at += 2
                    }
                }
                return 36
            }
        }
    }
}
