import Foundation

/// Time-ordered (version 7, RFC 9562) UUIDs in lowercase, the form
/// `UUID().uuidString.lowercased()` gives: a run's identifier, a served run's id, and so
/// the identifier a run's donation is stored under. The first 48 bits are the Unix time in
/// milliseconds, the other 74 (beside the version and variant) are random: identifiers made
/// later sort after earlier ones, and a store's indexes on them grow at their end instead
/// of at a random page, so that a batch of donations writes a few pages instead of one
/// per index per donation (docs/benchmarks.md, "The donation's own cost").
///
/// Foundation's `UUID()` opened, read and closed /dev/urandom and formatted through
/// `snprintf` for every one, twice per served intent (`strace -k` of a pool's intents);
/// this takes its random bytes from the system's generator (`getrandom`) and writes the
/// hex itself. `RandomIdentifierTests` checks the form, the version and variant bits, the
/// time, the order, and that Foundation's `UUID(uuidString:)` reads it back as the same value.
public enum RandomIdentifier {
    public static func uuid() -> String {
        uuid(milliseconds: UInt64(max(0, (Date().timeIntervalSince1970 * 1000).rounded(.down))))
    }

    /// A version 7 UUID for the given Unix time in milliseconds (the low 48 bits of it).
    public static func uuid(milliseconds: UInt64) -> String {
        var generator = SystemRandomNumberGenerator()
        var bytes: (UInt64, UInt64) = (generator.next(), generator.next())
        return withUnsafeMutableBytes(of: &bytes) { raw -> String in
            for index in 0..<6 { raw[index] = UInt8(truncatingIfNeeded: milliseconds >> (8 * (5 - index))) }
            raw[6] = (raw[6] & 0x0F) | 0x70  // version 7
            raw[8] = (raw[8] & 0x3F) | 0x80  // the RFC 9562 variant
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
