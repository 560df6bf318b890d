import Foundation
import Testing

@testable import ExtrunProtocol

/// `JSONValueDecoder` against the reference it replaces: `JSONCoding.decoder()` reading the
/// same value written out by `JSONWriter`. Over every pair of a corpus of values and of
/// types (numbers of each width, dates, data, URLs, decimals, optionals, arrays,
/// dictionaries, nested and hand-written `Decodable`s), both give the same value, or both
/// fail with the same kind of `DecodingError` and the same words (`JSONCoding.describe`).
@Suite struct JSONValueDecoderTests {
    enum Color: String, Codable, Equatable { case red, green }
    enum Level: Int, Codable, Equatable { case low = 1, high = 2 }
    enum Shape: Codable, Equatable {
        case circle(radius: Double)
        case square(Int)
        case none
    }
    struct Inner: Codable, Equatable {
        var name: String
        var count: Int?
    }
    struct Outer: Codable, Equatable {
        var a: Int
        var b: String?
        var c: [Double]?
        var d: Bool?
        var inner: Inner?
        var items: [Inner]?
        var color: Color?
        var when: Date?
        var blob: Data?
        var link: URL?
        var any: JSONValue?
        var map: [String: Int]?
    }
    /// Reads itself through nested and super containers, as hand-written `init(from:)`s do.
    struct HandWritten: Decodable, Equatable {
        var first: Int
        var pair: [String]
        var level: Level
        var rest: Int

        enum Keys: String, CodingKey { case head, tail }
        enum Head: String, CodingKey { case first, level }

        init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: Keys.self)
            let head = try container.nestedContainer(keyedBy: Head.self, forKey: .head)
            first = try head.decode(Int.self, forKey: .first)
            level = try head.decode(Level.self, forKey: .level)
            var tail = try container.nestedUnkeyedContainer(forKey: .tail)
            pair = [try tail.decode(String.self), try tail.decode(String.self)]
            rest = try tail.isAtEnd ? 0 : tail.decodeNil() ? -1 : tail.decode(Int.self)
            _ = try container.superDecoder(forKey: .tail).unkeyedContainer()
        }
    }

    static let values: [JSONValue] = {
        var values: [JSONValue] = [
            .null, .bool(true), .bool(false),
            .int(0), .int(-1), .int(1), .int(2), .int(127), .int(128), .int(255), .int(256), .int(300), .int(-129), .int(65_536),
            .int(Int64(Int32.max) + 1), .int(Int64.max), .int(Int64.min),
            .double(1.0), .double(1.5), .double(-0.0), .double(2.0), .double(1e20), .double(3.5e38), .double(3.5e39), .double(-1e300),
            .double(0.1), .double(Double.nan), .double(Double.infinity), .double(1.8446744071854776e19), .double(-9.2e18), .double(9.007199254740994e15),
            .double(1e-45), .double(16_777_217), .double(0.30000000000000004),
            .string(""), .string("x"), .string("1"), .string("red"), .string("blue"), .string("2026-11-22"), .string("2026-11-22T10:30:00Z"),
            .string("2026-13-40"), .string("aGVsbG8="), .string("!!"), .string("http://x/y?q=1"), .string("a b"), .string("1.25"),
            .array([]), .array([.int(1)]), .array([.int(1), .null]), .array([.int(1), .string("x")]), .array([.string("a"), .string("b")]),
            .array([.string("a"), .string("b"), .int(3)]), .array([.string("a"), .string("b"), .null]), .array([.double(1.5), .int(2)]),
            .object([:]), .object(["x": .int(1)]), .object(["x": .string("1")]), .object(["1": .string("a")]), .object(["z": .string("a")]),
            .object(["name": .string("n")]), .object(["name": .string("n"), "count": .int(3)]), .object(["name": .int(1)]),
            .object(["radius": .double(2)]), .object(["circle": .object(["radius": .double(2)])]), .object(["square": .object(["_0": .int(3)])]),
            .object(["none": .object([:])]), .object(["circle": .object([:])]), .object(["square": .object(["_0": .string("x")])]),
            .object(["head": .object(["first": .int(1), "level": .int(2)]), "tail": .array([.string("a"), .string("b")])]),
            .object(["head": .object(["first": .int(1), "level": .int(3)]), "tail": .array([.string("a"), .string("b"), .int(5)])]),
            .object(["head": .object(["first": .int(1), "level": .int(1)]), "tail": .array([.string("a")])]),
            .object(["head": .object(["first": .int(1), "level": .int(1)]), "tail": .array([.string("a"), .string("b"), .null])]),
            .object(["head": .array([]), "tail": .array([])]),
        ]
        // Outer, whole and with each member wrong in turn.
        let good: [String: JSONValue] = [
            "a": .int(1), "b": .string("x"), "c": .array([.int(1), .double(2.5)]), "d": .bool(true),
            "inner": .object(["name": .string("n"), "count": .int(2)]), "items": .array([.object(["name": .string("m")])]),
            "color": .string("green"), "when": .string("2026-11-22T10:30:00Z"), "blob": .string("aGVsbG8="), "link": .string("http://x/"),
            "any": .object(["k": .array([.int(1), .double(1.5), .string("s"), .null, .bool(false)])]), "map": .object(["q": .int(7)]),
        ]
        values.append(.object(good))
        let wrong: [String: [JSONValue]] = [
            "a": [.null, .string("1"), .double(1.5), .int(Int64.max), .double(1e30)], "b": [.int(2), .null], "c": [.object([:]), .array([.string("x")])],
            "d": [.int(1)], "inner": [.array([]), .object([:]), .object(["name": .null])], "items": [.array([.int(1)]), .array([.object(["count": .int(1)])])],
            "color": [.string("blue"), .int(1)], "when": [.string("yesterday"), .int(5)], "blob": [.string("!!"), .int(1)],
            "link": [.string(""), .bool(true)], "map": [.object(["q": .string("7")]), .array([])],
        ]
        for (key, replacements) in wrong.sorted(by: { $0.key < $1.key }) {
            var missing = good
            missing[key] = nil
            values.append(.object(missing))
            for replacement in replacements {
                var changed = good
                changed[key] = replacement
                values.append(.object(changed))
            }
        }
        return values
    }()

    /// Decodes `value` as `T` both ways; nil when they agree, else what differs.
    /// `anyMember`: for a dictionary, JSONDecoder reports the first bad member in its own hash
    /// order (a process's seed decides it), so with several members only both failing is
    /// required; with one, the errors are the same. JSONValueDecoder names the first bad
    /// member in JSONWriter's order.
    static func difference<T: Decodable & Equatable>(_ type: T.Type, _ value: JSONValue, anyMember: Bool = false) -> String? {
        let fast = Result { try JSONValueDecoder.decode(type, from: value) }
        let reference = Result { try JSONCoding.decoder().decode(type, from: Data(JSONWriter.bytes(value))) }
        switch (fast, reference) {
        case (.success(let a), .success(let b)):
            return a == b ? nil : "\(T.self) from \(value): \(a) against \(b)"
        case (.failure(let a), .failure(let b)):
            if anyMember, case .object(let members) = value, members.count > 1 { return nil }
            let (x, y) = (JSONCoding.describe(a), JSONCoding.describe(b))
            return x == y && kind(a) == kind(b) ? nil : "\(T.self) from \(value): \(kind(a)) '\(x)' against \(kind(b)) '\(y)'"
        case (.success(let a), .failure(let b)):
            return "\(T.self) from \(value): \(a) against the error '\(JSONCoding.describe(b))'"
        case (.failure(let a), .success(let b)):
            return "\(T.self) from \(value): the error '\(JSONCoding.describe(a))' against \(b)"
        }
    }

    static func kind(_ error: any Error) -> String {
        guard let error = error as? DecodingError else { return "\(type(of: error))" }
        switch error {
        case .typeMismatch: return "typeMismatch"
        case .valueNotFound: return "valueNotFound"
        case .keyNotFound: return "keyNotFound"
        case .dataCorrupted: return "dataCorrupted"
        @unknown default: return "unknown"
        }
    }

    static let checks: [(String, @Sendable (JSONValue) -> String?)] = [
        ("Bool", { difference(Bool.self, $0) }), ("String", { difference(String.self, $0) }),
        ("Int", { difference(Int.self, $0) }), ("Int8", { difference(Int8.self, $0) }), ("Int16", { difference(Int16.self, $0) }),
        ("Int32", { difference(Int32.self, $0) }), ("Int64", { difference(Int64.self, $0) }), ("UInt", { difference(UInt.self, $0) }),
        ("UInt8", { difference(UInt8.self, $0) }), ("UInt16", { difference(UInt16.self, $0) }), ("UInt32", { difference(UInt32.self, $0) }),
        ("UInt64", { difference(UInt64.self, $0) }), ("Double", { difference(Double.self, $0) }), ("Float", { difference(Float.self, $0) }),
        ("Date", { difference(Date.self, $0) }), ("Data", { difference(Data.self, $0) }), ("URL", { difference(URL.self, $0) }),
        ("Decimal", { difference(Decimal.self, $0) }), ("Int?", { difference(Int?.self, $0) }), ("[Int]", { difference([Int].self, $0) }),
        ("[Int?]", { difference([Int?].self, $0) }), ("[String]", { difference([String].self, $0) }),
        ("[String: Int]", { difference([String: Int].self, $0, anyMember: true) }), ("[String: String]", { difference([String: String].self, $0, anyMember: true) }),
        ("[Int: String]", { difference([Int: String].self, $0, anyMember: true) }), ("Set<String>", { difference(Set<String>.self, $0) }),
        ("Color", { difference(Color.self, $0) }), ("Level", { difference(Level.self, $0) }), ("Shape", { difference(Shape.self, $0) }),
        ("Inner", { difference(Inner.self, $0) }), ("Outer", { difference(Outer.self, $0) }), ("HandWritten", { difference(HandWritten.self, $0) }),
        ("JSONValue", { difference(JSONValue.self, $0) }), ("[JSONValue]", { difference([JSONValue].self, $0) }),
    ]

    @Test("decoding straight from a JSONValue gives what JSONDecoder gives for the value written out: the same values, errors and words")
    func sameAsJSONDecoder() {
        var differences: [String] = []
        var compared = 0
        for (_, check) in Self.checks {
            for value in Self.values {
                compared += 1
                if let difference = check(value) { differences.append(difference) }
            }
        }
        // The first difference of each type.
        var shown: [String: String] = [:]
        for difference in differences {
            let type = String(difference.prefix { $0 != " " })
            if shown[type] == nil { shown[type] = difference }
        }
        #expect(differences.isEmpty, "\(differences.count) of \(compared) differ:\n\(shown.values.sorted().joined(separator: "\n"))")
        #expect(compared > 3_000)
    }

    @Test("JSONCoding.decode takes the straight path: a field's error names its path as before")
    func codingDecodeUsesIt() throws {
        let value: JSONValue = .object(["a": .int(1), "inner": .object(["name": .int(5)])])
        #expect(throws: DecodingError.self) { try JSONCoding.decode(Outer.self, from: value) }
        do {
            _ = try JSONCoding.decode(Outer.self, from: value)
        } catch {
            #expect(JSONCoding.describe(error) == "inner.name: expected a string; Expected to decode String but found number instead.")
        }
        let decoded = try JSONCoding.decode(Outer.self, from: .object(["a": .int(3), "when": .string("2026-11-22")]))
        #expect(decoded.a == 3 && decoded.when == ISODate.parse("2026-11-22"))
    }
}
