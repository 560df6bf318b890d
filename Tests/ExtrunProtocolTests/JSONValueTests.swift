import ExtrunProtocol
import Foundation
import Testing

private func parse(_ text: String) throws -> JSONValue {
    try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
}

private func encode(_ value: JSONValue) throws -> String {
    String(decoding: try JSONCoding.encoder().encode(value), as: UTF8.self)
}

@Suite("JSONValue")
struct JSONValueTests {
    @Test("integers and floating-point numbers are kept apart", arguments: [
        ("0", JSONValue.int(0)),
        ("42", .int(42)),
        ("-7", .int(-7)),
        ("9223372036854775807", .int(Int64.max)),
        ("-9223372036854775808", .int(Int64.min)),
        ("1.5", .double(1.5)),
        ("-0.25", .double(-0.25)),
        ("1e300", .double(1e300)),
        ("9223372036854775808", .double(9223372036854775808.0)),
    ])
    func numbers(text: String, expected: JSONValue) throws {
        #expect(try parse(text) == expected)
    }

    @Test(
        "a number written with a fraction or an exponent stays a double",
        .disabled("bug: JSONValue.init(from:) tries Int64 before Double, and JSONDecoder decodes 1.0, -3.0 and 1e2 as Int64, so they become .int and re-encode as 1, -3, 100"),
        arguments: ["1.0", "2.50", "-3.0", "1e2"])
    func fractionalNotationStaysDouble(text: String) throws {
        let value = try parse(text)
        #expect(value.intValue == nil, "\(text) decoded as \(value)")
        #expect(value.doubleValue == Double(text))
    }

    @Test("a non-integral number is a double; doubleValue reads both kinds the same")
    func fractionalValues() throws {
        #expect(try parse("2.50") == .double(2.5))
        #expect(try parse("1.0").doubleValue == 1.0)
        #expect(try parse("1e2").doubleValue == 100)
        #expect(try parse("1e-2") == .double(0.01))
    }

    @Test("an integer survives a round trip exactly, a double stays a double")
    func numberRoundTrip() throws {
        let value: JSONValue = ["big": .int(Int64.max), "small": .int(Int64.min), "half": 0.5, "whole": .double(3)]
        let text = try encode(value)
        #expect(text.contains("9223372036854775807"))
        let back = try parse(text)
        #expect(back["big"] == .int(Int64.max))
        #expect(back["small"] == .int(Int64.min))
        #expect(back["half"] == .double(0.5))
        #expect(back["whole"]?.doubleValue == 3)
    }

    @Test("the other scalar types")
    func scalars() throws {
        #expect(try parse("null") == .null)
        #expect(try parse("true") == .bool(true))
        #expect(try parse("false") == .bool(false))
        #expect(try parse(#""héllo \"x\" \u00e9""#) == .string("héllo \"x\" é"))
        #expect(try parse("\"\"") == .string(""))
        // Booleans are not numbers, and numbers are not booleans.
        #expect(try parse("1") != .bool(true))
        #expect(try parse("true") != .int(1))
    }

    @Test("nested arrays and objects")
    func nested() throws {
        let text = #"{"a":[1,2.5,"x",null,true,{"b":{"c":[[],{}]}}],"d":{"e":-1}}"#
        let value = try parse(text)
        let expected: JSONValue = [
            "a": [1, 2.5, "x", nil, true, ["b": ["c": [[], [:]]]]],
            "d": ["e": -1],
        ]
        #expect(value == expected)
        #expect(try parse(try encode(value)) == value)
        #expect(value["a"]?.arrayValue?.count == 6)
        #expect(value["a"]?.arrayValue?[5]["b"]?["c"]?.arrayValue?.count == 2)
        #expect(value["d"]?["e"]?.intValue == -1)
    }

    @Test("encoding sorts keys, so output is stable")
    func sortedKeys() throws {
        #expect(try encode(["b": 1, "a": ["z": 1, "y": 2]]) == #"{"a":{"y":2,"z":1},"b":1}"#)
    }

    @Test("JSONWriter orders keys by their UTF-8 bytes (a prefix first; é after z, as bytes; not String's order), in all three writers")
    func keysInByteOrder() {
        let pieces = ["a", "b", "z", "A", "é", "e\u{301}", "€", "😀", "_", "0", ""]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<300 {
            var members: [String: JSONValue] = [:]
            for n in 0..<Int.random(in: 0...12, using: &generator) {
                let key = (0..<Int.random(in: 0...4, using: &generator)).map { _ in pieces.randomElement(using: &generator) ?? "" }.joined()
                members[key] = .int(Int64(n))
            }
            let expected = members.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
            let value = JSONValue.object(members)
            guard case .object(let compact)? = try? JSONParser.parse(JSONWriter.bytes(value)) else {
                Issue.record("not an object")
                return
            }
            #expect(compact == members)
            func keys(_ bytes: [UInt8]) -> [String] {
                // Where each key is, as bytes ("key" then a colon, or a space and a colon when pretty;
                // the values are integers): Foundation's range(of:) would match é and e + U+0301 alike.
                func offset(_ key: String) -> Int {
                    for colon in [Array("\"\(key)\":".utf8), Array("\"\(key)\" :".utf8)] where colon.count <= bytes.count {
                        for start in 0...(bytes.count - colon.count) where bytes[start..<(start + colon.count)].elementsEqual(colon) { return start }
                    }
                    return bytes.count
                }
                return expected.map { ($0, offset($0)) }.sorted { $0.1 < $1.1 }.map(\.0)
            }
            #expect(keys(JSONWriter.bytes(value)) == expected)
            #expect(JSONWriter.objectBytes(members.map { (key: $0.key, value: $0.value) }) == JSONWriter.bytes(value))
            #expect(keys(JSONWriter.prettyBytes(value)) == expected)
            var streamed: [UInt8] = []
            JSONWriter.stream(value, chunkBytes: 16) { streamed += $0 }
            #expect(streamed == JSONWriter.bytes(value))
        }
    }

    @Test("accessors answer only for their own type (doubleValue also takes integers)")
    func accessors() {
        let string: JSONValue = "s"
        #expect(string.stringValue == "s")
        #expect(string.intValue == nil)
        #expect(JSONValue.int(3).doubleValue == 3.0)
        #expect(JSONValue.double(3).intValue == nil)
        #expect(JSONValue.bool(true).boolValue == true)
        #expect(JSONValue.int(1).boolValue == nil)
        #expect(JSONValue.null.isNull)
        #expect(!JSONValue.string("").isNull)
        #expect(JSONValue.array([1]).objectValue == nil)
        #expect(JSONValue.object(["k": 1])["k"] == 1)
        #expect(JSONValue.array([1])["k"] == nil)
    }

    @Test("type names for messages", arguments: [
        (JSONValue.null, "null"), (.bool(true), "boolean"), (.int(1), "integer"), (.double(1.5), "number"),
        (.string("s"), "string"), (.array([]), "array"), (.object([:]), "object"),
    ])
    func typeNames(value: JSONValue, name: String) {
        #expect(value.typeName == name)
    }

    @Test("JSONCoding.value(of:) and decode(_:from:) convert between Codable types and JSONValue")
    func codableBridge() throws {
        struct Sample: Codable, Equatable {
            var name: String
            var count: Int
            var ratio: Double
            var tags: [String]
            var date: Date
            var blob: Data
        }
        let sample = Sample(
            name: "n", count: 3, ratio: 0.25, tags: ["a"], date: Date(timeIntervalSince1970: 1_795_000_000), blob: Data([1, 2, 3]))
        let value = try JSONCoding.value(of: sample)
        #expect(value["count"] == .int(3))
        #expect(value["ratio"] == .double(0.25))
        #expect(value["blob"] == "AQID")
        #expect(value["date"]?.stringValue == ISODate.format(sample.date))
        #expect(try JSONCoding.decode(Sample.self, from: value) == sample)
    }
}
