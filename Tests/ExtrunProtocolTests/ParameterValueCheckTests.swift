import ExtrunProtocol
import Foundation
import Testing

private func check(_ type: ParameterType, _ value: JSONValue, multiple: Bool = false, values: [String]? = nil) -> String? {
    ParameterValueCheck.problem(value, for: ParameterDefinition(name: "p", type: type, multiple: multiple, values: values))
}

private let file: JSONValue = ["filename": "a.txt", "typeIdentifier": "public.plain-text", "data": "aGk="]

@Suite("ParameterValueCheck")
struct ParameterValueCheckTests {
    @Test("values that fit their type", arguments: [
        (ParameterType.string, JSONValue.string("x")),
        (.string, .string("")),
        (.integer, .int(-3)),
        (.integer, .double(3.0)),  // 3.0 is an integer written with a fraction
        (.integer, .double(-8.0e15)),
        (.number, .int(3)),
        (.number, .double(2.5)),
        (.boolean, .bool(false)),
        (.date, .string("2026-11-22")),
        (.date, .string("2026-11-22T10:30:00Z")),
        (.date, .string("2026-11-22T10:30:00.250Z")),
        (.date, .string("2026-11-22T10:30:00+01:00")),
        (.file, file),
        (.file, .object(["filename": "b", "data": ""])),
    ])
    func fits(type: ParameterType, value: JSONValue) {
        #expect(check(type, value) == nil)
    }

    @Test("values that do not fit say what was expected and what came", arguments: [
        (ParameterType.string, JSONValue.int(1), "expected a string, got integer"),
        (.string, .null, "expected a string, got null"),
        (.string, .array(["x"]), "expected a string, got array"),
        (.integer, .double(2.5), "expected an integer, got number"),
        (.integer, .double(1.0e16), "expected an integer, got number"),
        (.integer, .string("3"), "expected an integer, got string"),
        (.integer, .bool(true), "expected an integer, got boolean"),
        (.number, .string("2.5"), "expected a number, got string"),
        (.boolean, .string("true"), "expected a boolean (true or false), got string"),
        (.boolean, .int(1), "expected a boolean (true or false), got integer"),
        (.date, .int(20261122), "expected an ISO 8601 date string, got integer"),
        (.date, .string("22/11/2026"), "'22/11/2026' is not an ISO 8601 date (e.g. 2026-11-22 or 2026-11-22T10:30:00Z)"),
        (.date, .string("tomorrow"), "'tomorrow' is not an ISO 8601 date (e.g. 2026-11-22 or 2026-11-22T10:30:00Z)"),
        (.file, .string("notes.txt"), "expected a file object with 'filename' and 'data'"),
        (.file, .object(["filename": "a.txt"]), "expected a file object with 'filename' and 'data'"),
        (.file, .object(["filename": 1, "data": "aGk="]), "expected a file object with 'filename' and 'data'"),
    ])
    func doesNotFit(type: ParameterType, value: JSONValue, problem: String) {
        #expect(check(type, value) == problem)
    }

    @Test("enum values must be one of the listed strings")
    func enums() {
        let values = ["lowercase", "uppercase"]
        #expect(check(.enum, "lowercase", values: values) == nil)
        #expect(check(.enum, "Lowercase", values: values) == "'Lowercase' is not one of lowercase, uppercase")
        #expect(check(.enum, 1, values: values) == "expected one of lowercase, uppercase, got integer")
        #expect(check(.enum, "x", values: nil) == "'x' is not one of ")
    }

    @Test("a multiple parameter takes a list and checks each item, naming its index")
    func multiple() {
        #expect(check(.integer, [1, 2, 3], multiple: true) == nil)
        #expect(check(.integer, [], multiple: true) == nil)
        #expect(check(.integer, 1, multiple: true) == "expected a list of integer values, got integer")
        #expect(check(.integer, [1, "two", 3.5], multiple: true) == "[1]: expected an integer, got string")
        #expect(check(.file, [file, file, "x.txt"], multiple: true) == "[2]: expected a file object with 'filename' and 'data'")
        #expect(check(.enum, ["a", "c"], multiple: true, values: ["a", "b"]) == "[1]: 'c' is not one of a, b")
        // A single parameter does not take a list.
        #expect(check(.string, ["x"]) == "expected a string, got array")
    }

    @Test("every parameter type is covered above")
    func allTypes() {
        // (custom is covered in ManifestExtrasTests.)
        #expect(Set(ParameterType.allCases.map(\.rawValue)) == ["string", "integer", "number", "boolean", "date", "enum", "file", "custom"])
    }

    @Test("ISODate parses calendar dates and zoned date-times, and formats in UTC")
    func isoDate() throws {
        let day = try #require(ISODate.parse("2026-11-22"))
        #expect(day == Date(timeIntervalSince1970: 1_795_305_600))
        let time = try #require(ISODate.parse("2026-11-22T10:30:00Z"))
        #expect(time.timeIntervalSince(day) == 37_800)
        let fractional = try #require(ISODate.parse("2026-11-22T10:30:00.5Z"))
        #expect(abs(fractional.timeIntervalSince(time) - 0.5) < 0.001)
        #expect(ISODate.parse("2026-11-22T10:30:00+02:00") == time.addingTimeInterval(-7_200))
        #expect(ISODate.format(time) == "2026-11-22T10:30:00Z")
        #expect(ISODate.parse("2026-13-40") == nil)
        #expect(ISODate.parse("") == nil)
    }
}

@Suite("JSONCoding errors")
struct JSONCodingTests {
    @Test("a syntax error names its line and column", arguments: [
        ("{\n  \"a\": 1,\n  \"b\": ?\n}", 3, 8),
        ("{\"a\": falsy}", 1, 7),  // the misspelled literal's first character
        ("{\"a\" 1}", 1, 6),
        ("[1, 2,, 3]", 1, 7),
        ("{\n\"é\": ?}", 2, 6),  // columns count characters, not bytes
    ])
    func syntaxErrorPosition(text: String, line: Int, column: Int) throws {
        let description = try #require(JSONCoding.syntaxError(in: Data(text.utf8)))
        #expect(description.contains("(line \(line), column \(column))"), "\(description)")
    }

    @Test(
        "an unterminated string or a truncated file names the line and column where the input ends",
        arguments: [("{\n  \"a\": \"x}", 2, 10), ("{\n  \"a\": true\n\n", 2, 11), ("{\n  \"a\": nu", 2, 9)])
    func syntaxErrorAtEnd(text: String, line: Int, column: Int) throws {
        let description = try #require(JSONCoding.syntaxError(in: Data(text.utf8)))
        #expect(description.contains("(line \(line), column \(column))"), "\(description)")
        #expect(description.contains("unexpected end of input"), "\(description)")
    }

    @Test(
        "a misspelled literal before the end of the file is located where it is")
    func misspelledLiteralPosition() throws {
        let description = try #require(JSONCoding.syntaxError(in: Data("{\n  \"a\": tru\n}".utf8)))
        #expect(description.contains("(line 2, column 8)"), "\(description)")
        #expect(description.contains("misspelled literal"), "\(description)")
        let closed = try #require(JSONCoding.syntaxError(in: Data("{\n  \"a\": nul}".utf8)))
        #expect(closed.contains("(line 2, column 8)") && closed.contains("misspelled literal"), "\(closed)")
    }

    @Test("valid JSON has no syntax error, fragments included")
    func validJSON() {
        #expect(JSONCoding.syntaxError(in: Data(#"{"a":[1,2,{"b":null}]}"#.utf8)) == nil)
        #expect(JSONCoding.syntaxError(in: Data("42".utf8)) == nil)
        #expect(JSONCoding.syntaxError(in: Data("\"s\"".utf8)) == nil)
    }

    @Test("truncated and empty input are syntax errors too")
    func truncated() {
        #expect(JSONCoding.syntaxError(in: Data(#"{"a": [1, 2"#.utf8)) != nil)
        #expect(JSONCoding.syntaxError(in: Data()) != nil)
    }

    @Test("decode(fromJSON:) reports a syntax error with its position")
    func decodeSyntaxError() throws {
        let error = #expect(throws: DecodingError.self) {
            try JSONCoding.decode(JSONValue.self, fromJSON: Data("{\n  \"intent\": \"A\",\n  \"parameters\": {,}\n}".utf8))
        }
        let description = error.map { JSONCoding.describe($0) } ?? ""
        #expect(description.hasPrefix("not valid JSON: "), "\(description)")
        #expect(description.contains("(line 3, column"), "\(description)")
    }

    @Test("describe() names the path of a type mismatch and of a null")
    func describePaths() throws {
        struct Inner: Decodable { var count: Int }
        struct Outer: Decodable { var items: [Inner] }
        let mismatch = #expect(throws: DecodingError.self) {
            try JSONCoding.decode(Outer.self, fromJSON: Data(#"{"items":[{"count":1},{"count":"2"}]}"#.utf8))
        }
        #expect(mismatch.map { JSONCoding.describe($0) }?.hasPrefix("items[1].count: expected an integer") == true)
        let null = #expect(throws: DecodingError.self) {
            try JSONCoding.decode(Outer.self, fromJSON: Data(#"{"items":[{"count":null}]}"#.utf8))
        }
        #expect(null.map { JSONCoding.describe($0) } == "items[0].count: expected an integer, found null")
        #expect(JSONCoding.describe(CocoaError(.fileNoSuchFile)).isEmpty == false)
    }

    @Test("dates decode from calendar dates and date-times, and not from other text")
    func dates() throws {
        struct D: Decodable { var at: Date }
        let day = try JSONCoding.decode(D.self, fromJSON: Data(#"{"at":"2026-11-22"}"#.utf8))
        #expect(day.at == ISODate.parse("2026-11-22"))
        let error = #expect(throws: DecodingError.self) { try JSONCoding.decode(D.self, fromJSON: Data(#"{"at":"soon"}"#.utf8)) }
        #expect(error.map { JSONCoding.describe($0) }?.contains("'soon' is not an ISO 8601 date") == true)
    }
}
