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
        var reader = JSONScanner(bytes: buffer, maxNodes: maxNodes, builder: builder)
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

/// What the scanner builds: `JSONValue`s (`parse`) or `LocatedJSON`s (`parseLocated`).
/// The scanner is specialized for each, so the plain mode pays nothing for positions.
protocol JSONBuilder {
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

struct PlainBuilder: JSONBuilder {
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
