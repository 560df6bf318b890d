/// A strict JSON parser (RFC 8259) straight from bytes to `JSONValue`.
///
/// It replaces `JSONDecoder` + `JSONValue.init(from:)` on the hot paths (every
/// frame body, intent files, globals documents): the Codable route tries six
/// types in turn with `try?` for every value, building an error for each miss
/// (docs/benchmarks.md). Numbers written as integers (no fraction, no exponent)
/// that fit an `Int64` become `.int`; every other number is a `.double`, so
/// `1.0` stays a double. Duplicate keys: the last one wins (as with `JSONDecoder`).
/// Errors say what is wrong and where: byte offset, line and column (columns
/// count characters, not bytes). `parseLocated` is the same scanner recording the
/// position of every value and key (for files people write); the scanner is
/// specialized for each mode, so `parse` does not count lines.
public enum JSONParser {
    /// The deepest nesting of arrays and objects accepted (`JSONDecoder` allows 512 too).
    public static let maxDepth = 512
    /// The most values (each scalar, array and object counts one) a text may hold unless
    /// the caller says otherwise: what parsing may cost is bounded by it, not by the
    /// text's size (`[[0],[0],...]` costs ~50 bytes of memory per byte of text).
    /// Frames from plugins have a lower limit of their own (policy `host.maxMessageNodes`).
    public static let maxNodes = 16_000_000

    public static func parse(_ bytes: some Collection<UInt8>, maxNodes: Int = JSONParser.maxNodes) throws(JSONParseError) -> JSONValue {
        let result: Result<JSONValue, JSONParseError>? = bytes.withContiguousStorageIfAvailable { buffer in
            parse(buffer: buffer, maxNodes: maxNodes, builder: PlainBuilder())
        }
        if let result { return try result.get() }
        let array = Array(bytes)
        return try array.withUnsafeBufferPointer { buffer in parse(buffer: buffer, maxNodes: maxNodes, builder: PlainBuilder()) }.get()
    }

    /// What to do with a key given twice in one object.
    public enum DuplicateKeys: Sendable, Hashable {
        /// The last one wins (as with `JSONDecoder`, and as `parse` does).
        case lastWins
        /// An error at the second one, naming the first's position.
        case refuse
    }

    /// The position-recording mode (the same scanner as `parse`, so the same grammar, limits
    /// and errors): every value and every key with its offset, line and column, and objects'
    /// members in the text's order, for files people write (definition files, manifests)
    /// whose diagnostics name a line and a column.
    public static func parseLocated(
        _ bytes: some Collection<UInt8>, maxNodes: Int = JSONParser.maxNodes, duplicateKeys: DuplicateKeys = .refuse
    ) throws(JSONParseError) -> LocatedJSON {
        let refuse = duplicateKeys == .refuse
        let result: Result<LocatedJSON, JSONParseError>? = bytes.withContiguousStorageIfAvailable { buffer in
            parse(buffer: buffer, maxNodes: maxNodes, builder: LocatingBuilder(bytes: buffer, refuseDuplicates: refuse))
        }
        if let result { return try result.get() }
        let array = Array(bytes)
        return try array.withUnsafeBufferPointer { buffer in
            parse(buffer: buffer, maxNodes: maxNodes, builder: LocatingBuilder(bytes: buffer, refuseDuplicates: refuse))
        }.get()
    }

    private static func parse<Builder: JSONBuilder>(
        buffer: UnsafeBufferPointer<UInt8>, maxNodes: Int, builder: Builder
    ) -> Result<Builder.Value, JSONParseError> {
        var reader = Reader(bytes: buffer, maxNodes: maxNodes, builder: builder)
        do throws(JSONParseError) {
            reader.skipWhitespace()
            let value = try reader.value(depth: 0)
            reader.skipWhitespace()
            if reader.index < buffer.count {
                throw reader.error("unexpected \(reader.describeByte(at: reader.index)) after the JSON value", at: reader.index, .textAfterValue)
            }
            return .success(value)
        } catch {
            return .failure(error)
        }
    }
}

/// Where a value or a key starts in a JSON text.
public struct JSONTextPosition: Sendable, Hashable, CustomStringConvertible {
    /// Zero-based byte offset.
    public var offset: Int
    /// One-based line and column (columns count characters, not bytes).
    public var line: Int
    public var column: Int

    public init(offset: Int, line: Int, column: Int) {
        self.offset = offset
        self.line = line
        self.column = column
    }

    /// "3:8".
    public var description: String { "\(line):\(column)" }
}

/// A JSON value with the position of every value and key in it (`JSONParser.parseLocated`).
public struct LocatedJSON: Sendable, Hashable {
    public indirect enum Content: Sendable, Hashable {
        case null
        case bool(Bool)
        case int(Int64)
        case double(Double)
        case string(String)
        case array([LocatedJSON])
        /// Members in the order of the text.
        case object([Member])
    }

    public struct Member: Sendable, Hashable {
        public var key: String
        public var keyPosition: JSONTextPosition
        public var value: LocatedJSON

        public init(key: String, keyPosition: JSONTextPosition, value: LocatedJSON) {
            self.key = key
            self.keyPosition = keyPosition
            self.value = value
        }
    }

    public var content: Content
    public var position: JSONTextPosition

    public init(content: Content, position: JSONTextPosition) {
        self.content = content
        self.position = position
    }

    /// The same value without positions (of a key given twice, the last wins).
    public var json: JSONValue {
        switch content {
        case .null: .null
        case .bool(let b): .bool(b)
        case .int(let i): .int(i)
        case .double(let d): .double(d)
        case .string(let s): .string(s)
        case .array(let items): .array(items.map(\.json))
        case .object(let members): .object(Dictionary(members.map { ($0.key, $0.value.json) }, uniquingKeysWith: { _, last in last }))
        }
    }
}

/// What the scanner builds: `JSONValue`s (`parse`) or `LocatedJSON`s (`parseLocated`).
/// The scanner is specialized for each, so the plain mode pays nothing for positions.
private protocol JSONBuilder {
    associatedtype Value
    associatedtype Object
    associatedtype List
    mutating func null(at offset: Int) -> Value
    mutating func bool(_ value: Bool, at offset: Int) -> Value
    mutating func int(_ value: Int64, at offset: Int) -> Value
    mutating func double(_ value: Double, at offset: Int) -> Value
    mutating func string(_ value: String, at offset: Int) -> Value
    mutating func beginObject(at offset: Int) -> Object
    /// A key at `offset`, before its value is read: the offset of the same key earlier in
    /// `object` when the builder refuses duplicates, else nil.
    mutating func key(_ key: String, at offset: Int, in object: inout Object) -> Int?
    mutating func add(_ key: String, _ value: Value, to object: inout Object)
    mutating func end(_ object: Object) -> Value
    mutating func beginList(at offset: Int) -> List
    mutating func append(_ value: Value, to list: inout List)
    mutating func end(_ list: List) -> Value
}

private struct PlainBuilder: JSONBuilder {
    @inline(__always) func null(at offset: Int) -> JSONValue { .null }
    @inline(__always) func bool(_ value: Bool, at offset: Int) -> JSONValue { .bool(value) }
    @inline(__always) func int(_ value: Int64, at offset: Int) -> JSONValue { .int(value) }
    @inline(__always) func double(_ value: Double, at offset: Int) -> JSONValue { .double(value) }
    @inline(__always) func string(_ value: String, at offset: Int) -> JSONValue { .string(value) }
    @inline(__always) func beginObject(at offset: Int) -> [String: JSONValue] { [:] }
    @inline(__always) func key(_ key: String, at offset: Int, in object: inout [String: JSONValue]) -> Int? { nil }
    @inline(__always) func add(_ key: String, _ value: JSONValue, to object: inout [String: JSONValue]) { object[key] = value }
    @inline(__always) func end(_ object: [String: JSONValue]) -> JSONValue { .object(object) }
    @inline(__always) func beginList(at offset: Int) -> [JSONValue] { [] }
    @inline(__always) func append(_ value: JSONValue, to list: inout [JSONValue]) { list.append(value) }
    @inline(__always) func end(_ list: [JSONValue]) -> JSONValue { .array(list) }
}

private struct LocatingBuilder: JSONBuilder {
    struct Object {
        var position: JSONTextPosition
        var members: [LocatedJSON.Member] = []
        var seen: [String: JSONTextPosition] = [:]
        var pendingKey = JSONTextPosition(offset: 0, line: 1, column: 1)
    }
    struct List {
        var position: JSONTextPosition
        var items: [LocatedJSON] = []
    }

    let bytes: UnsafeBufferPointer<UInt8>
    let refuseDuplicates: Bool
    // Values are met in the text's order: lines and columns are counted once, forward.
    var cursor = 0
    var line = 1
    var column = 1

    init(bytes: UnsafeBufferPointer<UInt8>, refuseDuplicates: Bool) {
        self.bytes = bytes
        self.refuseDuplicates = refuseDuplicates
    }

    mutating func position(_ offset: Int) -> JSONTextPosition {
        while cursor < offset {
            let byte = bytes[cursor]
            if byte == 10 {
                line += 1
                column = 1
            } else if byte & 0xC0 != 0x80 {
                column += 1
            }
            cursor += 1
        }
        return JSONTextPosition(offset: offset, line: line, column: column)
    }

    mutating func null(at offset: Int) -> LocatedJSON { LocatedJSON(content: .null, position: position(offset)) }
    mutating func bool(_ value: Bool, at offset: Int) -> LocatedJSON { LocatedJSON(content: .bool(value), position: position(offset)) }
    mutating func int(_ value: Int64, at offset: Int) -> LocatedJSON { LocatedJSON(content: .int(value), position: position(offset)) }
    mutating func double(_ value: Double, at offset: Int) -> LocatedJSON { LocatedJSON(content: .double(value), position: position(offset)) }
    mutating func string(_ value: String, at offset: Int) -> LocatedJSON { LocatedJSON(content: .string(value), position: position(offset)) }
    mutating func beginObject(at offset: Int) -> Object { Object(position: position(offset)) }
    mutating func key(_ key: String, at offset: Int, in object: inout Object) -> Int? {
        let here = position(offset)
        if refuseDuplicates {
            if let first = object.seen[key] { return first.offset }
            object.seen[key] = here
        }
        object.pendingKey = here
        return nil
    }
    mutating func add(_ key: String, _ value: LocatedJSON, to object: inout Object) {
        object.members.append(LocatedJSON.Member(key: key, keyPosition: object.pendingKey, value: value))
    }
    mutating func end(_ object: Object) -> LocatedJSON { LocatedJSON(content: .object(object.members), position: object.position) }
    mutating func beginList(at offset: Int) -> List { List(position: position(offset)) }
    mutating func append(_ value: LocatedJSON, to list: inout List) { list.items.append(value) }
    mutating func end(_ list: List) -> LocatedJSON { LocatedJSON(content: .array(list.items), position: list.position) }
}

/// What is wrong with a JSON text, and where.
public struct JSONParseError: Error, Sendable, Hashable, CustomStringConvertible {
    /// What is wrong ("unexpected character '?'", "unexpected end of input ...").
    public var reason: String
    /// Zero-based byte offset of the problem.
    public var offset: Int
    /// One-based line and column (characters, not bytes) of the problem.
    public var line: Int
    public var column: Int
    /// The text holds more values than the parser was allowed to build (`maxNodes`).
    public var exceedsNodeLimit = false
    /// What is wrong, for callers that word it their own way (definition files).
    public var problem: Problem
    /// Where the construct the problem is about starts, when that is not `offset`: the
    /// opening quote of an unterminated string, the first `\u` of a pair, the start of a
    /// number without digits after '.', the closing ']' after a trailing comma, and
    /// the end of the text when it ends where something else was expected.
    public var problemOffset: Int

    /// What is wrong with a JSON text.
    public enum Problem: Sendable, Hashable {
        case textAfterValue, valueMissing, notAValue, misspelledLiteral, tooDeep, tooManyValues
        /// The text ended where a key should be.
        case objectEnded
        case notAKey, trailingCommaInObject
        case duplicateKey(String, firstOffset: Int)
        /// No ':' (or the end of the text) after a key.
        case colonMissing(key: String)
        /// The text ended after a member (or an item), before ',' or the closing bracket.
        case objectUnterminated, listUnterminated
        case notCommaOrBrace, notCommaOrBracket, trailingCommaInList
        case stringUnterminated, controlCharacter, invalidUTF8, unknownEscape
        case incompleteUnicodeEscape, badUnicodeEscape, loneSurrogate, badSurrogatePair
        /// A '-' at the end of the text; a '-' not followed by a digit.
        case numberIncomplete, notANumber
        case leadingZero, fractionDigitsMissing, exponentDigitsMissing, numberOutOfRange
    }

    /// "unexpected character '?' (line 3, column 8)".
    public var description: String { "\(reason) (line \(line), column \(column))" }
}

private struct Reader<Builder: JSONBuilder> {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0
    let maxNodes: Int
    var nodes = 0
    var builder: Builder

    init(bytes: UnsafeBufferPointer<UInt8>, maxNodes: Int, builder: Builder) {
        self.bytes = bytes
        self.maxNodes = maxNodes
        self.builder = builder
    }

    // MARK: Errors

    /// `problem` says what is wrong for callers with wording of their own; `problemAt` is where
    /// its construct is when that is not `offset` (see `JSONParseError.problemOffset`).
    func error(_ reason: String, at offset: Int, _ problem: JSONParseError.Problem, problemAt: Int? = nil) -> JSONParseError {
        var line = 1
        var column = 1
        var i = 0
        let end = min(offset, bytes.count)
        while i < end {
            let byte = bytes[i]
            if byte == 10 {
                line += 1
                column = 1
            } else if byte & 0xC0 != 0x80 {
                column += 1
            }
            i += 1
        }
        return JSONParseError(reason: reason, offset: offset, line: line, column: column, problem: problem, problemOffset: problemAt ?? offset)
    }

    /// The input ended in the middle of a value: point at its last non-blank character.
    /// (`problemAt`: where the construct the input ended in starts; by default the end of the input.)
    func endOfInput(_ problem: JSONParseError.Problem, at problemAt: Int? = nil) -> JSONParseError {
        var end = bytes.count
        while end > 0, isJSONWhitespace(bytes[end - 1]) { end -= 1 }
        return error("unexpected end of input (truncated, or an unterminated string)", at: max(0, end - 1), problem, problemAt: problemAt ?? bytes.count)
    }

    func describeByte(at offset: Int) -> String {
        let byte = bytes[offset]
        if byte >= 0x20 && byte < 0x7F { return "character '\(Character(Unicode.Scalar(byte)))'" }
        if byte >= 0x80, let text = characterText(at: offset) { return "character '\(text)'" }
        return "byte 0x\(String(byte, radix: 16, uppercase: true))"
    }

    private func characterText(at offset: Int) -> String? {
        var end = offset + 1
        while end < bytes.count, end - offset < 4, bytes[end] & 0xC0 == 0x80 { end += 1 }
        return String(validating: UnsafeBufferPointer(rebasing: bytes[offset..<end]), as: UTF8.self)
    }


    mutating func skipWhitespace() {
        while index < bytes.count, isJSONWhitespace(bytes[index]) { index += 1 }
    }

    // MARK: Values

    mutating func value(depth: Int) throws(JSONParseError) -> Builder.Value {
        guard index < bytes.count else { throw endOfInput(.valueMissing) }
        nodes += 1
        if nodes > maxNodes {
            var failure = error("more than \(maxNodes) values (the limit on values in one text)", at: index, .tooManyValues)
            failure.exceedsNodeLimit = true
            throw failure
        }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try object(depth: depth + 1)
        case UInt8(ascii: "["): return try array(depth: depth + 1)
        case UInt8(ascii: "\""):
            let start = index
            return builder.string(try string(), at: start)
        case UInt8(ascii: "t"):
            let start = index
            try literal("true")
            return builder.bool(true, at: start)
        case UInt8(ascii: "f"):
            let start = index
            try literal("false")
            return builder.bool(false, at: start)
        case UInt8(ascii: "n"):
            let start = index
            try literal("null")
            return builder.null(at: start)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw error("unexpected \(describeByte(at: index)) where a value should start", at: index, .notAValue)
        }
    }

    mutating func literal(_ word: StaticString) throws(JSONParseError) {
        let start = index
        var offset = 0
        while offset < word.utf8CodeUnitCount {
            guard index < bytes.count else { throw endOfInput(.misspelledLiteral, at: start) }
            guard bytes[index] == word.utf8Start[offset] else {
                throw error("misspelled literal: expected '\(word)' (true, false and null are lowercase)", at: start, .misspelledLiteral)
            }
            index += 1
            offset += 1
        }
    }

    mutating func object(depth: Int) throws(JSONParseError) -> Builder.Value {
        if depth > JSONParser.maxDepth {
            throw error("arrays and objects nested more than \(JSONParser.maxDepth) deep", at: index, .tooDeep)
        }
        var members = builder.beginObject(at: index)
        index += 1  // {
        skipWhitespace()
        guard index < bytes.count else { throw endOfInput(.objectEnded) }
        if bytes[index] == UInt8(ascii: "}") {
            index += 1
            return builder.end(members)
        }
        while true {
            guard index < bytes.count else { throw endOfInput(.objectEnded) }
            guard bytes[index] == UInt8(ascii: "\"") else {
                throw error("unexpected \(describeByte(at: index)) where a key (a string in double quotes) should be", at: index, bytes[index] == UInt8(ascii: "}") ? .trailingCommaInObject : .notAKey)
            }
            let keyStart = index
            let key = try string()
            if let first = builder.key(key, at: keyStart, in: &members) {
                let earlier = error("", at: first, .notAValue)
                throw error("the key \"\(key)\" appears twice in this object (first at line \(earlier.line), column \(earlier.column))", at: keyStart, .duplicateKey(key, firstOffset: first))
            }
            skipWhitespace()
            guard index < bytes.count else { throw endOfInput(.colonMissing(key: key)) }
            guard bytes[index] == UInt8(ascii: ":") else {
                throw error("unexpected \(describeByte(at: index)) after the key \"\(key)\" (expected ':')", at: index, .colonMissing(key: key))
            }
            index += 1
            skipWhitespace()
            let member = try value(depth: depth)
            builder.add(key, member, to: &members)
            skipWhitespace()
            guard index < bytes.count else { throw endOfInput(.objectUnterminated) }
            switch bytes[index] {
            case UInt8(ascii: ","):
                index += 1
                skipWhitespace()
            case UInt8(ascii: "}"):
                index += 1
                return builder.end(members)
            default:
                throw error("unexpected \(describeByte(at: index)) in an object (expected ',' or '}')", at: index, .notCommaOrBrace)
            }
        }
    }

    mutating func array(depth: Int) throws(JSONParseError) -> Builder.Value {
        if depth > JSONParser.maxDepth {
            throw error("arrays and objects nested more than \(JSONParser.maxDepth) deep", at: index, .tooDeep)
        }
        var items = builder.beginList(at: index)
        index += 1  // [
        skipWhitespace()
        guard index < bytes.count else { throw endOfInput(.valueMissing) }
        if bytes[index] == UInt8(ascii: "]") {
            index += 1
            return builder.end(items)
        }
        while true {
            let item = try value(depth: depth)
            builder.append(item, to: &items)
            skipWhitespace()
            guard index < bytes.count else { throw endOfInput(.listUnterminated) }
            switch bytes[index] {
            case UInt8(ascii: ","):
                index += 1
                skipWhitespace()
                if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                    throw error("a trailing ',' before ']'", at: index - 1, .trailingCommaInList, problemAt: index)
                }
            case UInt8(ascii: "]"):
                index += 1
                return builder.end(items)
            default:
                throw error("unexpected \(describeByte(at: index)) in an array (expected ',' or ']')", at: index, .notCommaOrBracket)
            }
        }
    }

    // MARK: Strings

    mutating func string() throws(JSONParseError) -> String {
        let open = index
        index += 1  // "
        let start = index
        // Fast path: no escapes.
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let text = try decodeUTF8(start..<index)
                index += 1
                return text
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw error("a control character (byte 0x\(String(byte, radix: 16, uppercase: true))) in a string: write it as an escape such as \\n", at: index, .controlCharacter) }
            index += 1
        }
        guard index < bytes.count else { throw endOfInput(.stringUnterminated, at: open) }
        // Slow path: escapes. Each run of raw bytes is checked to be UTF-8 when an escape or
        // the closing quote ends it (what escapes write is), so the first problem is reported.
        var scratch: [UInt8] = Array(UnsafeBufferPointer(rebasing: bytes[start..<index]))
        var run = start
        while true {
            guard index < bytes.count else { throw endOfInput(.stringUnterminated, at: open) }
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                try validateUTF8(run..<index, open: open)
                index += 1
                return String(decoding: scratch, as: UTF8.self)
            case UInt8(ascii: "\\"):
                try validateUTF8(run..<index, open: open)
                let escape = index
                index += 1
                guard index < bytes.count else { throw endOfInput(.stringUnterminated, at: open) }
                switch bytes[index] {
                case UInt8(ascii: "\""): scratch.append(0x22)
                case UInt8(ascii: "\\"): scratch.append(0x5C)
                case UInt8(ascii: "/"): scratch.append(0x2F)
                case UInt8(ascii: "b"): scratch.append(0x08)
                case UInt8(ascii: "f"): scratch.append(0x0C)
                case UInt8(ascii: "n"): scratch.append(0x0A)
                case UInt8(ascii: "r"): scratch.append(0x0D)
                case UInt8(ascii: "t"): scratch.append(0x09)
                case UInt8(ascii: "u"):
                    index += 1
                    var scalar = try hex4(escapeAt: escape, first: escape)
                    if scalar >= 0xD800 && scalar < 0xDC00 {
                        // A high surrogate must be followed by \u and a low surrogate.
                        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                            throw error("a \\u escape of a high surrogate (\\u\(String(scalar, radix: 16, uppercase: true))) not followed by a low surrogate", at: escape, .loneSurrogate)
                        }
                        index += 2
                        let low = try hex4(escapeAt: index - 2, first: escape)
                        guard low >= 0xDC00 && low < 0xE000 else {
                            throw error("a \\u escape of a high surrogate (\\u\(String(scalar, radix: 16, uppercase: true))) followed by \\u\(String(low, radix: 16, uppercase: true)), which is not a low surrogate", at: escape, .badSurrogatePair)
                        }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if scalar >= 0xDC00 && scalar < 0xE000 {
                        throw error("a \\u escape of a lone low surrogate (\\u\(String(scalar, radix: 16, uppercase: true)))", at: escape, .loneSurrogate)
                    }
                    guard let unicode = Unicode.Scalar(scalar) else {
                        throw error("a \\u escape that is not a Unicode scalar", at: escape, .loneSurrogate)
                    }
                    scratch.append(contentsOf: String(Character(unicode)).utf8)
                    run = index
                    continue
                default:
                    throw error("an unknown escape '\\\(describeEscape(bytes[index]))' in a string (known: \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)", at: escape, .unknownEscape)
                }
                index += 1
                run = index
            default:
                if byte < 0x20 { throw error("a control character (byte 0x\(String(byte, radix: 16, uppercase: true))) in a string: write it as an escape such as \\n", at: index, .controlCharacter) }
                scratch.append(byte)
                index += 1
            }
        }
    }

    private func describeEscape(_ byte: UInt8) -> String {
        byte >= 0x20 && byte < 0x7F ? String(Character(Unicode.Scalar(byte))) : "0x\(String(byte, radix: 16, uppercase: true))"
    }

    /// Four hex digits at `index` (after `\u`).
    private mutating func hex4(escapeAt escape: Int, first: Int) throws(JSONParseError) -> UInt32 {
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard index < bytes.count else { throw endOfInput(.incompleteUnicodeEscape, at: first) }
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw error("a \\u escape needs four hexadecimal digits", at: escape, .badUnicodeEscape, problemAt: first)
            }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }

    private func validateUTF8(_ range: Range<Int>, open: Int) throws(JSONParseError) {
        let slice = UnsafeBufferPointer(rebasing: bytes[range])
        for byte in slice where byte >= 0x80 {
            guard String(validating: slice, as: UTF8.self) != nil else {
                throw error("a string that is not valid UTF-8", at: open, .invalidUTF8)
            }
            return
        }
    }

    private func decodeUTF8(_ range: Range<Int>) throws(JSONParseError) -> String {
        let slice = UnsafeBufferPointer(rebasing: bytes[range])
        // ASCII is always valid; otherwise validate.
        var ascii = true
        for byte in slice where byte >= 0x80 {
            ascii = false
            break
        }
        if ascii { return String(decoding: slice, as: UTF8.self) }
        guard let text = String(validating: slice, as: UTF8.self) else {
            throw error("a string that is not valid UTF-8", at: range.lowerBound - 1, .invalidUTF8)
        }
        return text
    }

    // MARK: Numbers

    mutating func number() throws(JSONParseError) -> Builder.Value {
        let start = index
        var integral = true
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count else { throw endOfInput(.numberIncomplete, at: start) }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            if index < bytes.count, isDigit(bytes[index]) {
                throw error("a number with a leading zero", at: start, .leadingZero)
            }
        } else if isDigit(bytes[index]) {
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        } else {
            throw error("a '-' not followed by a digit", at: start, .notANumber)
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            integral = false
            index += 1
            guard index < bytes.count else { throw endOfInput(.fractionDigitsMissing, at: start) }
            guard isDigit(bytes[index]) else { throw error("a '.' not followed by a digit in a number", at: index, .fractionDigitsMissing, problemAt: start) }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            integral = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count else { throw endOfInput(.exponentDigitsMissing, at: start) }
            guard isDigit(bytes[index]) else { throw error("an exponent without digits in a number", at: index, .exponentDigitsMissing, problemAt: start) }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        let text = UnsafeBufferPointer(rebasing: bytes[start..<index])
        if integral, let value = jsonInt64(text) { return builder.int(value, at: start) }
        let string = String(decoding: text, as: UTF8.self)
        guard let value = Double(string), value.isFinite else {
            throw error("the number \(string) is out of range", at: start, .numberOutOfRange)
        }
        return builder.double(value, at: start)
    }

    private func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

}

@inline(__always) private func isJSONWhitespace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 }

/// An integer's digits (with an optional '-') as an Int64, or nil when it does not fit.
private func jsonInt64(_ text: UnsafeBufferPointer<UInt8>) -> Int64? {
    var i = 0
    let negative = text[0] == UInt8(ascii: "-")
    if negative { i = 1 }
    var value: Int64 = 0
    while i < text.count {
        let digit = Int64(text[i] &- UInt8(ascii: "0"))
        let (times10, overflow1) = value.multipliedReportingOverflow(by: 10)
        // Accumulate negatively so that Int64.min fits.
        let (next, overflow2) = times10.subtractingReportingOverflow(digit)
        if overflow1 || overflow2 { return nil }
        value = next
        i += 1
    }
    if negative { return value }
    return value == Int64.min ? nil : -value
}
