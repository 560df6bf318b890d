import ExtrunProtocol
import Foundation
import Testing

struct RandomIdentifierTests {
    @Test("RandomIdentifier.uuid(): the form of UUID().uuidString.lowercased(), version 7 and the RFC 9562 variant, read back by Foundation as the same value, and no two alike in 100,000")
    func formAndUniqueness() {
        var seen = Set<String>()
        var randomNibbles = Set<Character>()
        for _ in 0..<100_000 {
            let identifier = RandomIdentifier.uuid()
            seen.insert(identifier)
            let characters = Array(identifier)
            #expect(characters.count == 36)
            guard characters.count == 36 else { return }
            for (index, character) in characters.enumerated() {
                if [8, 13, 18, 23].contains(index) {
                    #expect(character == "-", "\(identifier)")
                } else {
                    #expect("0123456789abcdef".contains(character), "\(identifier)")
                }
            }
            #expect(characters[14] == "7", "version: \(identifier)")
            #expect("89ab".contains(characters[19]), "variant: \(identifier)")
            randomNibbles.insert(characters[24])
            if seen.count <= 100 {
                #expect(UUID(uuidString: identifier)?.uuidString.lowercased() == identifier, "\(identifier)")
            }
        }
        #expect(seen.count == 100_000)
        // Every hex digit turns up in the random part (random bits, not a counter).
        #expect(randomNibbles.count == 16)
    }

    @Test("RandomIdentifier.uuid(): the first 48 bits are the Unix time in milliseconds, so identifiers of later milliseconds sort after earlier ones")
    func timeOrdered() throws {
        let before = UInt64((Date().timeIntervalSince1970 * 1000).rounded(.down))
        let identifier = RandomIdentifier.uuid()
        let after = UInt64((Date().timeIntervalSince1970 * 1000).rounded(.down))
        let hex = identifier.replacingOccurrences(of: "-", with: "")
        let stamp = try #require(UInt64(String(hex.prefix(12)), radix: 16))
        #expect(stamp >= before && stamp <= after, "\(identifier): \(stamp) not in \(before)...\(after)")
        // Fixed times: the order of the times, whatever the random bits.
        let times: [UInt64] = [0, 1, 255, 256, 1_000_000, 1_764_000_000_000, 1_764_000_000_001, (1 << 48) - 1]
        let made = times.map { RandomIdentifier.uuid(milliseconds: $0) }
        #expect(made == made.sorted())
        let first = made[0]
        #expect(first.hasPrefix("00000000-0000-7"))
        let last = try #require(made.last)
        #expect(last.hasPrefix("ffffffff-ffff-7"))
    }
}
