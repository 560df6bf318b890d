import ExtrunProtocol
import Foundation
import Testing

struct RandomIdentifierTests {
    @Test("RandomIdentifier.uuid(): the form of UUID().uuidString.lowercased(), version 4 and the RFC 4122 variant, read back by Foundation as the same value, and no two alike in 100,000")
    func formAndUniqueness() {
        var seen = Set<String>()
        var highNibbles = Set<Character>()
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
            #expect(characters[14] == "4", "version: \(identifier)")
            #expect("89ab".contains(characters[19]), "variant: \(identifier)")
            highNibbles.insert(characters[0])
            if seen.count <= 100 {
                #expect(UUID(uuidString: identifier)?.uuidString.lowercased() == identifier, "\(identifier)")
            }
        }
        #expect(seen.count == 100_000)
        // Every hex digit turns up in the first place (the bytes are random, not a counter).
        #expect(highNibbles.count == 16)
    }
}
