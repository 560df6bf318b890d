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

/// A strict JSON parser (RFC 8259) that keeps positions and refuses duplicate keys.
public struct JSONNodeParser {
    private let bytes: [UInt8]
    private var index = 0
    private var line = 1
    private var column = 1
    private var depth = 0
    private static let maxDepth = 256

    public static func parse(_ data: Data) throws(JSONSyntaxError) -> JSONNode {
        var parser = JSONNodeParser(bytes: Array(data))
        return try parser.document()
    }

    private init(bytes: [UInt8]) { self.bytes = bytes }

    private var here: FilePosition { FilePosition(line: line, column: column) }

    private func fail(_ message: String, at location: FilePosition? = nil) -> JSONSyntaxError {
        JSONSyntaxError(location: location ?? here, message: message)
    }

    private mutating func document() throws(JSONSyntaxError) -> JSONNode {
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) { index = 3 }
        skipWhitespace()
        let node = try value()
        skipWhitespace()
        if index < bytes.count { throw fail("unexpected \(describe(bytes[index])) after the end of the document") }
        return node
    }

    private mutating func advance() {
        let byte = bytes[index]
        index += 1
        if byte == UInt8(ascii: "\n") {
            line += 1
            column = 1
        } else if byte & 0xC0 != 0x80 {
            column += 1
        }
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: advance()
            default: return
            }
        }
    }

    private func describe(_ byte: UInt8) -> String {
        if byte >= 0x21 && byte < 0x7F { return "'\(Character(UnicodeScalar(byte)))'" }
        return String(format: "byte 0x%02X", byte)
    }

    private mutating func value() throws(JSONSyntaxError) -> JSONNode {
        guard index < bytes.count else { throw fail("unexpected end of the file: a value is missing") }
        let start = here
        switch bytes[index] {
        case UInt8(ascii: "{"): return JSONNode(value: try object(), location: start)
        case UInt8(ascii: "["): return JSONNode(value: try array(), location: start)
        case UInt8(ascii: "\""): return JSONNode(value: .string(try string()), location: start)
        case UInt8(ascii: "t"): try literal("true"); return JSONNode(value: .bool(true), location: start)
        case UInt8(ascii: "f"): try literal("false"); return JSONNode(value: .bool(false), location: start)
        case UInt8(ascii: "n"): try literal("null"); return JSONNode(value: .null, location: start)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return JSONNode(value: try number(), location: start)
        default: throw fail("unexpected \(describe(bytes[index])): expected a value")
        }
    }

    private mutating func literal(_ word: String) throws(JSONSyntaxError) {
        let start = here
        for expected in word.utf8 {
            guard index < bytes.count, bytes[index] == expected else { throw fail("invalid literal (expected '\(word)')", at: start) }
            advance()
        }
    }

    private mutating func enter() throws(JSONSyntaxError) {
        depth += 1
        if depth > Self.maxDepth { throw fail("nested too deeply (more than \(Self.maxDepth) levels)") }
    }

    private mutating func object() throws(JSONSyntaxError) -> JSONNode.Value {
        try enter()
        defer { depth -= 1 }
        advance()  // {
        var members: [JSONNode.Member] = []
        var seen: [String: FilePosition] = [:]
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            advance()
            return .object(members)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count else { throw fail("unexpected end of the file inside an object") }
            guard bytes[index] == UInt8(ascii: "\"") else {
                throw fail("unexpected \(describe(bytes[index])): expected a member name in double quotes")
            }
            let keyLocation = here
            let key = try string()
            if let first = seen[key] {
                throw fail("the key '\(key)' appears twice in this object (first at \(first))", at: keyLocation)
            }
            seen[key] = keyLocation
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw fail("expected ':' after the member name '\(key)'") }
            advance()
            skipWhitespace()
            let node = try value()
            members.append(JSONNode.Member(key: key, keyLocation: keyLocation, value: node))
            skipWhitespace()
            guard index < bytes.count else { throw fail("unexpected end of the file inside an object: '}' is missing") }
            if bytes[index] == UInt8(ascii: ",") {
                advance()
                skipWhitespace()
                if index < bytes.count, bytes[index] == UInt8(ascii: "}") { throw fail("a comma before '}' (trailing commas are not JSON)") }
                continue
            }
            if bytes[index] == UInt8(ascii: "}") {
                advance()
                return .object(members)
            }
            throw fail("unexpected \(describe(bytes[index])): expected ',' or '}'")
        }
    }

    private mutating func array() throws(JSONSyntaxError) -> JSONNode.Value {
        try enter()
        defer { depth -= 1 }
        advance()  // [
        var items: [JSONNode] = []
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            advance()
            return .array(items)
        }
        while true {
            skipWhitespace()
            items.append(try value())
            skipWhitespace()
            guard index < bytes.count else { throw fail("unexpected end of the file inside a list: ']' is missing") }
            if bytes[index] == UInt8(ascii: ",") {
                advance()
                skipWhitespace()
                if index < bytes.count, bytes[index] == UInt8(ascii: "]") { throw fail("a comma before ']' (trailing commas are not JSON)") }
                continue
            }
            if bytes[index] == UInt8(ascii: "]") {
                advance()
                return .array(items)
            }
            throw fail("unexpected \(describe(bytes[index])): expected ',' or ']'")
        }
    }

    private mutating func string() throws(JSONSyntaxError) -> String {
        let start = here
        advance()  // "
        var scalars = String.UnicodeScalarView()
        var raw: [UInt8] = []
        func flush() throws(JSONSyntaxError) {
            guard !raw.isEmpty else { return }
            guard let text = String(validating: raw, as: UTF8.self) else { throw JSONSyntaxError(location: start, message: "a string that is not valid UTF-8") }
            scalars.append(contentsOf: text.unicodeScalars)
            raw.removeAll()
        }
        while true {
            guard index < bytes.count else { throw fail("unexpected end of the file inside a string", at: start) }
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                advance()
                try flush()
                return String(scalars)
            case UInt8(ascii: "\\"):
                try flush()
                let escapeLocation = here
                advance()
                guard index < bytes.count else { throw fail("unexpected end of the file inside a string", at: start) }
                let escaped = bytes[index]
                advance()
                switch escaped {
                case UInt8(ascii: "\""): scalars.append("\"")
                case UInt8(ascii: "\\"): scalars.append("\\")
                case UInt8(ascii: "/"): scalars.append("/")
                case UInt8(ascii: "b"): scalars.append("\u{08}")
                case UInt8(ascii: "f"): scalars.append("\u{0C}")
                case UInt8(ascii: "n"): scalars.append("\n")
                case UInt8(ascii: "r"): scalars.append("\r")
                case UInt8(ascii: "t"): scalars.append("\t")
                case UInt8(ascii: "u"):
                    let first = try hex4(escapeLocation)
                    if (0xD800...0xDBFF).contains(first) {
                        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                            throw fail("a lone surrogate in a \\u escape", at: escapeLocation)
                        }
                        advance()
                        advance()
                        let second = try hex4(escapeLocation)
                        guard (0xDC00...0xDFFF).contains(second),
                            let scalar = UnicodeScalar(0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00))
                        else { throw fail("an invalid surrogate pair in a \\u escape", at: escapeLocation) }
                        scalars.append(scalar)
                    } else {
                        guard let scalar = UnicodeScalar(first) else { throw fail("a lone surrogate in a \\u escape", at: escapeLocation) }
                        scalars.append(scalar)
                    }
                default:
                    throw fail("an invalid escape '\\\(Character(UnicodeScalar(escaped)))' in a string", at: escapeLocation)
                }
            case 0x00..<0x20:
                throw fail(byte == 0x0A ? "a line break inside a string (write \\n)" : "a control character inside a string (escape it)")
            default:
                raw.append(byte)
                advance()
            }
        }
    }

    private mutating func hex4(_ location: FilePosition) throws(JSONSyntaxError) -> UInt32 {
        var result: UInt32 = 0
        for _ in 0..<4 {
            guard index < bytes.count else { throw fail("an incomplete \\u escape", at: location) }
            let byte = bytes[index]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw fail("an invalid \\u escape (expected four hexadecimal digits)", at: location)
            }
            result = result * 16 + digit
            advance()
        }
        return result
    }

    private mutating func number() throws(JSONSyntaxError) -> JSONNode.Value {
        let start = here
        let first = index
        var isInteger = true
        func digits() -> Int {
            var count = 0
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
                advance()
                count += 1
            }
            return count
        }
        if bytes[index] == UInt8(ascii: "-") { advance() }
        guard index < bytes.count else { throw fail("an incomplete number", at: start) }
        if bytes[index] == UInt8(ascii: "0") {
            advance()
            if index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) {
                throw fail("a number with a leading zero", at: start)
            }
        } else if digits() == 0 {
            throw fail("an invalid number", at: start)
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            advance()
            if digits() == 0 { throw fail("an invalid number: digits must follow '.'", at: start) }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            advance()
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { advance() }
            if digits() == 0 { throw fail("an invalid number: digits must follow the exponent", at: start) }
        }
        let text = String(decoding: bytes[first..<index], as: UTF8.self)
        if isInteger, let int = Int64(text) { return .int(int) }
        guard let double = Double(text), double.isFinite else { throw fail("the number \(text) is out of range", at: start) }
        return .double(double)
    }
}
