import ExtrunProtocol
import Foundation

/// A JSON value with the position it was read at, so that every problem in a
/// definition file can name its line and column.
public struct JSONNode: Sendable, Hashable {
    public indirect enum Value: Sendable, Hashable {
        case null
        case bool(Bool)
        case int(Int64)
        case double(Double)
        case string(String)
        case array([JSONNode])
        /// Members in the order of the file.
        case object([Member])
    }

    public struct Member: Sendable, Hashable {
        public var key: String
        public var keyLocation: FilePosition
        public var value: JSONNode
    }

    public var value: Value
    public var location: FilePosition

    /// The same value without positions.
    public var json: JSONValue {
        switch value {
        case .null: .null
        case .bool(let b): .bool(b)
        case .int(let i): .int(i)
        case .double(let d): .double(d)
        case .string(let s): .string(s)
        case .array(let items): .array(items.map(\.json))
        case .object(let members): .object(Dictionary(members.map { ($0.key, $0.value.json) }, uniquingKeysWith: { first, _ in first }))
        }
    }

    /// "a string", "an object"...: for messages.
    public var typeName: String {
        switch value {
        case .null: "null"
        case .bool: "a boolean"
        case .int: "an integer"
        case .double: "a number"
        case .string: "a string"
        case .array: "a list"
        case .object: "an object"
        }
    }
}

/// A JSON syntax error with its position.
public struct JSONSyntaxError: Error, Sendable, Hashable, CustomStringConvertible {
    public var location: FilePosition
    public var message: String
    public var description: String { "\(location): \(message)" }
}

/// Definition files read with `JSONParser`'s position-recording mode (`parseLocated`:
/// the protocol's scanner, its grammar and limits, duplicate keys refused), its errors
/// worded for people who write these files.
public enum JSONNodeParser {
    public static func parse(_ data: Data) throws(JSONSyntaxError) -> JSONNode {
        var bytes = Array(data)
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { bytes.removeFirst(3) }
        do {
            return JSONNode(try JSONParser.parseLocated(bytes))
        } catch {
            throw JSONSyntaxError(location: position(of: error.problemOffset, in: bytes), message: message(for: error, in: bytes))
        }
    }

    /// The line and column of `offset` (columns count characters, not bytes).
    static func position(of offset: Int, in bytes: [UInt8]) -> FilePosition {
        var line = 1
        var column = 1
        for byte in bytes.prefix(offset) {
            if byte == 10 {
                line += 1
                column = 1
            } else if byte & 0xC0 != 0x80 {
                column += 1
            }
        }
        return FilePosition(line: line, column: column)
    }

    private static func describe(_ offset: Int, in bytes: [UInt8]) -> String {
        guard offset < bytes.count else { return "end of the file" }
        let byte = bytes[offset]
        if byte >= 0x21 && byte < 0x7F { return "'\(Character(UnicodeScalar(byte)))'" }
        return String(format: "byte 0x%02X", byte)
    }

    private static func message(for error: JSONParseError, in bytes: [UInt8]) -> String {
        let at = error.problemOffset
        let here = describe(at, in: bytes)
        switch error.problem {
        case .textAfterValue: return "unexpected \(here) after the end of the document"
        case .valueMissing: return "unexpected end of the file: a value is missing"
        case .notAValue: return "unexpected \(here): expected a value"
        case .misspelledLiteral:
            let word = at < bytes.count && bytes[at] == UInt8(ascii: "t") ? "true" : at < bytes.count && bytes[at] == UInt8(ascii: "f") ? "false" : "null"
            return "invalid literal (expected '\(word)')"
        case .tooDeep: return "nested too deeply (more than \(JSONParser.maxDepth) levels)"
        case .tooManyValues: return error.reason
        case .objectEnded: return "unexpected end of the file inside an object"
        case .notAKey: return "unexpected \(here): expected a member name in double quotes"
        case .trailingCommaInObject: return "a comma before '}' (trailing commas are not JSON)"
        case .duplicateKey(let key, let first): return "the key '\(key)' appears twice in this object (first at \(position(of: first, in: bytes)))"
        case .colonMissing(let key): return "expected ':' after the member name '\(key)'"
        case .objectUnterminated: return "unexpected end of the file inside an object: '}' is missing"
        case .listUnterminated: return "unexpected end of the file inside a list: ']' is missing"
        case .notCommaOrBrace: return "unexpected \(here): expected ',' or '}'"
        case .notCommaOrBracket: return "unexpected \(here): expected ',' or ']'"
        case .trailingCommaInList: return "a comma before ']' (trailing commas are not JSON)"
        case .stringUnterminated: return "unexpected end of the file inside a string"
        case .controlCharacter:
            return at < bytes.count && bytes[at] == 0x0A ? "a line break inside a string (write \\n)" : "a control character inside a string (escape it)"
        case .invalidUTF8: return "a string that is not valid UTF-8"
        case .unknownEscape:
            let escaped = at + 1 < bytes.count ? bytes[at + 1] : 0
            return "an invalid escape '\\\(Character(UnicodeScalar(escaped)))' in a string"
        case .incompleteUnicodeEscape: return "an incomplete \\u escape"
        case .badUnicodeEscape: return "an invalid \\u escape (expected four hexadecimal digits)"
        case .loneSurrogate: return "a lone surrogate in a \\u escape"
        case .badSurrogatePair: return "an invalid surrogate pair in a \\u escape"
        case .numberIncomplete: return "an incomplete number"
        case .notANumber: return "an invalid number"
        case .leadingZero: return "a number with a leading zero"
        case .fractionDigitsMissing: return "an invalid number: digits must follow '.'"
        case .exponentDigitsMissing: return "an invalid number: digits must follow the exponent"
        case .numberOutOfRange: return error.reason
        }
    }
}

extension JSONNode {
    init(_ located: LocatedJSON) {
        let location = FilePosition(line: located.position.line, column: located.position.column)
        switch located.content {
        case .null: self.init(value: .null, location: location)
        case .bool(let b): self.init(value: .bool(b), location: location)
        case .int(let i): self.init(value: .int(i), location: location)
        case .double(let d): self.init(value: .double(d), location: location)
        case .string(let s): self.init(value: .string(s), location: location)
        case .array(let items): self.init(value: .array(items.map(JSONNode.init)), location: location)
        case .object(let members):
            self.init(
                value: .object(members.map {
                    Member(key: $0.key, keyLocation: FilePosition(line: $0.keyPosition.line, column: $0.keyPosition.column), value: JSONNode($0.value))
                }),
                location: location)
        }
    }
}
