import ExtrunProtocol
import Foundation
import Testing

private func parse(_ text: String) throws(JSONParseError) -> JSONValue {
    try JSONParser.parse(Array(text.utf8))
}

/// The error for `text`, or nil (recording an issue) when it parses.
private func parseError(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) -> JSONParseError? {
    parseError(bytes: Array(text.utf8), sourceLocation: sourceLocation)
}

private func parseError(bytes: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) -> JSONParseError? {
    do {
        let value = try JSONParser.parse(bytes)
        Issue.record("parsed \(bytes) as \(value), expected an error", sourceLocation: sourceLocation)
        return nil
    } catch {
        return error
    }
}

@Suite("JSONParser and JSONWriter")
struct JSONParserTests {
    @Test("scalars, arrays and objects")
    func values() throws {
        #expect(try parse("null") == .null)
        #expect(try parse(" true ") == .bool(true))
        #expect(try parse("\n\tfalse\r\n") == .bool(false))
        #expect(try parse(#""x""#) == .string("x"))
        #expect(try parse("[]") == .array([]))
        #expect(try parse("{}") == .object([:]))
        #expect(try parse(#" { "a" : [ 1 , { "b" : null } ] , "c" : "" } "#) == ["a": [1, ["b": nil]], "c": ""])
        #expect(try parse(#"[[[[[]]]]]"#) == [[[[[]]]]])
    }

    @Test("integers are .int while they fit an Int64; a fraction or an exponent makes a .double", arguments: [
        ("0", JSONValue.int(0)), ("-0", .int(0)), ("42", .int(42)), ("-7", .int(-7)),
        ("9223372036854775807", .int(Int64.max)), ("-9223372036854775808", .int(Int64.min)),
        ("9223372036854775808", .double(9223372036854775808.0)), ("-9223372036854775809", .double(-9223372036854775809.0)),
        ("1.0", .double(1)), ("-3.0", .double(-3)), ("1e2", .double(100)), ("1E+2", .double(100)), ("2.50", .double(2.5)),
        ("1e-2", .double(0.01)), ("-0.0", .double(-0.0)), ("1e300", .double(1e300)), ("5e-324", .double(.leastNonzeroMagnitude)),
        ("123456789012345678901234567890", .double(123456789012345678901234567890.0)),
    ])
    func numbers(text: String, expected: JSONValue) throws {
        #expect(try parse(text) == expected)
    }

    @Test("malformed numbers", arguments: [
        ("01", "leading zero"), ("-", "end of input"), ("-a", "'-' not followed by a digit"), ("1.", "end of input"),
        ("1.e3", "'.' not followed by a digit"), ("1e", "end of input"), ("1e+", "end of input"), ("[1ex]", "exponent without digits"),
        (".5", "where a value should start"), ("+1", "where a value should start"), ("1e400", "out of range"),
        ("[-1e999]", "out of range"), ("NaN", "where a value should start"), ("Infinity", "where a value should start"),
        ("0x10", "after the JSON value"),
    ])
    func malformedNumbers(text: String, expected: String) {
        let error = parseError(text)
        #expect(error?.reason.contains(expected) == true, "\(text): \(String(describing: error))")
    }

    @Test("escapes, \\u escapes and surrogate pairs")
    func strings() throws {
        #expect(try parse(#""a\"b\\c\/d\be\ff\ng\rh\ti""#) == .string("a\"b\\c/d\u{8}e\u{C}f\ng\rh\ti"))
        #expect(try parse(#""\u00e9\u00E9é""#) == .string("ééé"))
        #expect(try parse(#""\u0000""#) == .string("\u{0}"))
        #expect(try parse(#""\ud83d\ude00 \uD83D\uDE00""#) == .string("😀 😀"))
        #expect(try parse(#""\uFFFF\u20AC""#) == .string("\u{FFFF}€"))
        #expect(try parse(#""plain ascii, then ünïcödé 😀""#) == .string("plain ascii, then ünïcödé 😀"))
        #expect(try parse(#"{"é":"\n"}"#) == ["é": "\n"])
    }

    @Test("malformed strings", arguments: [
        (#""\ud83d""#, "not followed by a low surrogate"), (#""\ud83dx""#, "not followed by a low surrogate"),
        (#""\ud83d\u0041""#, "not a low surrogate"), (#""\ude00""#, "lone low surrogate"),
        (#""\u12""#, "four hexadecimal digits"), (#""\u12G4""#, "four hexadecimal digits"),
        (#""\x""#, #"unknown escape '\x'"#), ("\"a\tb\"", "control character"), ("\"a\nb\"", "control character"),
        (#""abc"#, "end of input"), (#""abc\"#, "end of input"), ("'single'", "where a value should start"),
    ])
    func malformedStrings(text: String, expected: String) {
        let error = parseError(text)
        #expect(error?.reason.contains(expected) == true, "\(text): \(String(describing: error))")
    }

    @Test("invalid UTF-8 inside a string is refused, with or without escapes")
    func invalidUTF8() {
        #expect(parseError(bytes: [0x22, 0xC3, 0x28, 0x22])?.reason.contains("not valid UTF-8") == true)
        #expect(parseError(bytes: [0x22, 0x5C, 0x6E, 0xFF, 0x22])?.reason.contains("not valid UTF-8") == true)
        #expect(parseError(bytes: [0x22, 0xED, 0xA0, 0x80, 0x22])?.reason.contains("not valid UTF-8") == true)  // an encoded surrogate
    }

    @Test("structural errors say what was expected", arguments: [
        ("[1, 2,, 3]", "where a value should start"), ("[1, 2,]", "trailing ','"), (#"{"a":1,}"#, "where a key"),
        (#"{"a" 1}"#, "expected ':'"), (#"{"a":1 "b":2}"#, "expected ',' or '}'"), ("[1 2]", "expected ',' or ']'"),
        ("{a:1}", "where a key"), ("[1]]", "after the JSON value"), ("{} {}", "after the JSON value"), ("", "end of input"),
        ("   ", "end of input"), ("[", "end of input"), (#"{"a":"#, "end of input"), ("tru", "end of input"),
        ("nul}", "misspelled literal"), ("True", "where a value should start"), ("falsy", "misspelled literal"),
    ])
    func structuralErrors(text: String, expected: String) {
        let error = parseError(text)
        #expect(error?.reason.contains(expected) == true, "\(text): \(String(describing: error))")
    }

    @Test("errors name the line and the column (characters, not bytes)", arguments: [
        ("{\n  \"a\": 1,\n  \"b\": ?\n}", 3, 8), ("{\"a\": falsy}", 1, 7), ("{\"a\" 1}", 1, 6), ("[1, 2,, 3]", 1, 7),
        ("{\n\"é\": ?}", 2, 6), ("{\n  \"a\": tru\n}", 2, 8), ("[\"😀\", x]", 1, 7),
    ])
    func positions(text: String, line: Int, column: Int) throws {
        let error = try #require(parseError(text))
        #expect(error.line == line && error.column == column, "\(text): \(error)")
        #expect(error.description.hasSuffix("(line \(line), column \(column))"))
    }

    @Test("nesting is limited to 512 levels")
    func depth() throws {
        let deepest = String(repeating: "[", count: 512) + String(repeating: "]", count: 512)
        #expect(throws: Never.self) { try parse(deepest) }
        let tooDeep = String(repeating: "[", count: 513) + String(repeating: "]", count: 513)
        #expect(parseError(tooDeep)?.reason.contains("nested more than 512 deep") == true)
        let objects = String(repeating: #"{"a":"#, count: 600) + "1" + String(repeating: "}", count: 600)
        #expect(parseError(objects)?.reason.contains("nested more than 512 deep") == true)
        // An unterminated deep input fails cleanly too.
        #expect(parseError(String(repeating: "[", count: 100_000)) != nil)
    }

    @Test("duplicate keys: the last one wins, as with JSONDecoder")
    func duplicateKeys() throws {
        #expect(try parse(#"{"a":1,"a":2}"#) == ["a": 2])
    }

    @Test("the writer's output parses back to the same value, doubles staying doubles")
    func writerRoundTrip() throws {
        let value: JSONValue = [
            "int": .int(Int64.min), "max": .int(Int64.max), "whole": .double(3), "half": 0.5, "tiny": .double(.leastNonzeroMagnitude),
            "big": .double(1e300), "neg": .double(-0.25), "text": "quote \" backslash \\ slash / tab \t nl \n cr \r ctl \u{1} é 😀",
            "list": [nil, true, false, [], [:]], "nested": ["z": ["y": [1, 2, 3]]],
        ]
        let bytes = JSONWriter.bytes(value)
        #expect(try JSONParser.parse(bytes) == value)
        // Foundation reads it the same way.
        let foundation = try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any]
        #expect(foundation?["text"] as? String == value["text"]?.stringValue)
        let text = String(decoding: bytes, as: UTF8.self)
        #expect(text.contains(#""whole":3.0"#))
        #expect(text.contains(#"\u0001"#) && text.contains(#"slash / tab \t"#))
    }

    @Test("the writer sorts keys and writes non-finite numbers as null")
    func writerShape() {
        let text = String(decoding: JSONWriter.bytes(["b": 1, "a": [.double(.nan), .double(-.infinity)], "é": true, "Z": nil]), as: UTF8.self)
        #expect(text == #"{"Z":null,"a":[null,null],"b":1,"é":true}"#)
    }

    @Test("random documents survive writer → parser, and parse as Foundation's JSONDecoder reads them")
    func randomRoundTrips() throws {
        var generator = SplitMix(seed: 0x5EED)
        for _ in 0..<300 {
            let value = randomValue(depth: 0, &generator)
            let bytes = JSONWriter.bytes(value)
            #expect(try JSONParser.parse(bytes) == value)
            // Foundation agrees on everything but the int/double split of whole doubles.
            let viaFoundation = try JSONDecoder().decode(JSONValue.self, from: Data(bytes))
            #expect(JSONWriter.bytes(viaFoundation).count > 0)
        }
    }

    @Test("JSONCoding routes through the parser: fromJSON keeps 1.0 a double and locates errors")
    func codingUsesParser() throws {
        #expect(try JSONCoding.decode(JSONValue.self, fromJSON: Data(#"{"x": 1.0}"#.utf8)) == ["x": .double(1)])
        #expect(try JSONCoding.value(of: ["a": 1]) == ["a": 1])
        let error = #expect(throws: DecodingError.self) { try JSONCoding.decode(JSONValue.self, fromJSON: Data("[\n 1,\n ?]".utf8)) }
        let description = error.map { JSONCoding.describe($0) } ?? ""
        #expect(description.hasPrefix("not valid JSON: ") && description.contains("(line 3, column 2)"), "\(description)")
    }

    @Test("parseLocated: every value and key with its offset, line and column; members in the text's order")
    func located() throws {
        let text = "{\"b\": [1, 2.5],\n  \"é🍲\": {\"x\": null},\r\n\t\"a\": \"s\\n\", \"t\": true}"
        let node = try JSONParser.parseLocated(Array(text.utf8))
        #expect(node.position == JSONTextPosition(offset: 0, line: 1, column: 1))
        #expect(node.json == (try parse(text)))
        guard case .object(let members) = node.content else { Issue.record("not an object"); return }
        #expect(members.map(\.key) == ["b", "é🍲", "a", "t"])
        #expect(members.map(\.keyPosition.description) == ["1:2", "2:3", "3:2", "3:14"])
        #expect(members[1].keyPosition.offset == 18)
        #expect(members[1].value.position.description == "2:9", "columns count characters, not bytes")
        guard case .array(let items) = members[0].value.content, case .object(let inner) = members[1].value.content else {
            Issue.record("shapes"); return
        }
        #expect(items.map(\.position.description) == ["1:8", "1:11"])
        #expect(items.map(\.content) == [.int(1), .double(2.5)])
        #expect(inner[0].value.position.description == "2:15" && inner[0].value.content == .null)
        #expect(members[2].value.content == .string("s\n") && members[3].value.position.description == "3:19")
        #expect(try JSONParser.parseLocated(Array(" 7 ".utf8)).position.description == "1:2")
    }

    @Test("parseLocated refuses a key given twice (naming the first), unless told the last wins")
    func locatedDuplicates() throws {
        let text = Array("{\"a\": 1,\n \"b\": {\"a\": 2}, \"a\": 3}".utf8)
        do {
            let node = try JSONParser.parseLocated(text)
            Issue.record("parsed \(node)")
        } catch {
            #expect(error.reason == "the key \"a\" appears twice in this object (first at line 1, column 2)")
            #expect((error.line, error.column, error.offset) == (2, 17, 25))
        }
        let lastWins = try JSONParser.parseLocated(text, duplicateKeys: .lastWins)
        #expect(lastWins.json == ["a": 3, "b": ["a": 2]])
        guard case .object(let members) = lastWins.content else { Issue.record("not an object"); return }
        #expect(members.map(\.key) == ["a", "b", "a"], "both kept, in order")
        #expect(try JSONParser.parse(text) == lastWins.json)
    }

    @Test("parseLocated shares parse's grammar, limits and errors")
    func locatedErrors() {
        for text in ["01", "[1,]", "{\"a\" 1}", "\"\\q\"", "tru", "[1] x", "", String(repeating: "[", count: 600) + String(repeating: "]", count: 600)] {
            var plain: JSONParseError?
            var located: JSONParseError?
            do { _ = try JSONParser.parse(Array(text.utf8)) } catch { plain = error }
            do { _ = try JSONParser.parseLocated(Array(text.utf8)) } catch { located = error }
            #expect(plain != nil && plain == located, "\(text.prefix(20))")
        }
        do {
            _ = try JSONParser.parseLocated(Array("[1, 2, 3]".utf8), maxNodes: 3)
            Issue.record("parsed past maxNodes")
        } catch {
            #expect(error.exceedsNodeLimit)
        }
    }

    @Test("parseLocated reads random documents as parse does")
    func locatedRandom() throws {
        var g = SplitMix(seed: 19)
        for _ in 0..<300 {
            let value = randomValue(depth: 0, &g)
            let text = JSONWriter.prettyBytes(value)
            #expect(try JSONParser.parseLocated(text).json == JSONParser.parse(text))
        }
    }
}

private struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
}

private func randomValue(depth: Int, _ g: inout SplitMix) -> JSONValue {
    let kind = depth > 4 ? g.below(5) : g.below(7)
    switch kind {
    case 0: return .null
    case 1: return .bool(g.below(2) == 0)
    case 2: return .int(Int64(bitPattern: g.next()) >> g.below(64))
    case 3:
        let d = Double(bitPattern: g.next())
        return d.isFinite ? .double(d) : .double(Double(g.below(1000)) / 7)
    case 4:
        let alphabet = Array("aé😀\"\\/\n\t\u{1}z 0".unicodeScalars)
        return .string(String(String.UnicodeScalarView((0..<g.below(12)).map { _ in alphabet[g.below(alphabet.count)] })))
    case 5: return .array((0..<g.below(5)).map { _ in randomValue(depth: depth + 1, &g) })
    default:
        var members: [String: JSONValue] = [:]
        for i in 0..<g.below(5) { members["k\(i)\(g.below(3) == 0 ? "é" : "")"] = randomValue(depth: depth + 1, &g) }
        return .object(members)
    }
}
