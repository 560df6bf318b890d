import Foundation

/// Decodes a `Decodable` type straight from a `JSONValue`, with the results and errors that
/// `JSONCoding.decoder()` gives for the same value written as JSON (`JSONWriter.bytes`):
/// the same numbers accepted and refused, ISO 8601 dates, base64 data, URLs from strings,
/// and the same `DecodingError`s, paths and descriptions (a test holds the two side by side
/// over a corpus of values and types: `JSONValueDecoderTests`).
///
/// Hand-written for speed: a plugin's intent parameters arrive as a `JSONValue`, and writing
/// them out to bytes for `JSONDecoder` to parse again cost ~13 µs of CPU per warm intent of
/// MakeUppercase (docs/benchmarks.md, "One serialization per wire type").
enum JSONValueDecoder {
    static func decode<T: Decodable>(_ type: T.Type, from value: JSONValue) throws -> T {
        try Node(value: value, codingPath: []).decode(type)
    }
}

/// One value being decoded, and where it is.
private struct Node: Decoder, SingleValueDecodingContainer {
    let value: JSONValue
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    // MARK: Decoder

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let members) = value else {
            _ = try present([String: Any].self)
            throw mismatch([String: Any].self)
        }
        return KeyedDecodingContainer(KeyedNode<Key>(members: members, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let items) = value else {
            _ = try present([Any].self)
            throw mismatch([Any].self)
        }
        return UnkeyedNode(items: items, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { self }

    // MARK: SingleValueDecodingContainer

    func decodeNil() -> Bool { isNull }

    func decode(_ type: Bool.Type) throws -> Bool {
        // A null where a Bool is expected is a type mismatch for JSONDecoder, not a missing value.
        guard case .bool(let flag) = value else { throw mismatch(type) }
        return flag
    }

    func decode(_ type: String.Type) throws -> String {
        guard case .string(let text) = try present(type) else { throw mismatch(type) }
        return text
    }

    func decode(_ type: Double.Type) throws -> Double {
        switch try present(type) {
        case .int(let number): return Double(number)
        case .double(let number): return number
        default: throw mismatch(type)
        }
    }

    func decode(_ type: Float.Type) throws -> Float {
        switch try present(type) {
        case .int(let whole): return Float(whole)
        case .double(let number):
            // JSONDecoder refuses a number beyond Float's range (as not valid JSON, at the top).
            guard number.magnitude <= Double(Float.greatestFiniteMagnitude) else { throw Self.notValidJSON }
            // From the digits as written, as JSONDecoder reads them (rounding the double again could differ).
            return Float(text) ?? Float(number)
        default: throw mismatch(type)
        }
    }

    func decode(_ type: Int.Type) throws -> Int { try integer(type) }
    func decode(_ type: Int8.Type) throws -> Int8 { try integer(type) }
    func decode(_ type: Int16.Type) throws -> Int16 { try integer(type) }
    func decode(_ type: Int32.Type) throws -> Int32 { try integer(type) }
    func decode(_ type: Int64.Type) throws -> Int64 { try integer(type) }
    func decode(_ type: UInt.Type) throws -> UInt { try integer(type) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try integer(type) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try integer(type) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try integer(type) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try integer(type) }

    func decode<T: Decodable>(_ type: T.Type) throws -> T {
        // The types JSONDecoder decodes its own way, as JSONCoding.decoder() configures it.
        if type == Date.self {
            return try fromText(type, { "'\($0)' is not an ISO 8601 date (e.g. 2026-11-22 or 2026-11-22T10:30:00Z)" }) { ISODate.parse($0) as? T }
        }
        if type == Data.self {
            return try fromText(type, { _ in "Encountered Data is not valid Base64." }) { Data(base64Encoded: $0) as? T }
        }
        if type == URL.self {
            return try fromText(type, { _ in "Invalid URL string." }) { URL(string: $0) as? T }
        }
        if type == Decimal.self {
            switch try present(type) {
            case .int, .double:
                // From the number as written, as JSONDecoder reads it.
                guard let decimal = Decimal(string: text) as? T else { throw Self.notValidJSON }
                return decimal
            default:
                throw DecodingError.typeMismatch(type, DecodingError.Context(codingPath: codingPath, debugDescription: ""))
            }
        }
        return try T(from: self)
    }

    // MARK: Helpers

    /// A `type` JSONDecoder reads from a string: `make`'s, or `dataCorrupted` with `failure`'s words.
    func fromText<T>(_ type: Any.Type, _ failure: (String) -> String, _ make: (String) -> T?) throws -> T {
        _ = try present(type)
        let text = try decode(String.self)
        guard let made = make(text) else {
            throw DecodingError.dataCorrupted(DecodingError.Context(codingPath: codingPath, debugDescription: failure(text)))
        }
        return made
    }

    /// The value as JSONWriter writes it.
    var text: String { String(decoding: JSONWriter.bytes(value), as: UTF8.self) }

    /// Whether the value is written as `null` (JSONWriter writes a number that is not finite so).
    var isNull: Bool {
        switch value {
        case .null: true
        case .double(let number): !number.isFinite
        default: false
        }
    }

    /// The value, or `valueNotFound` for a null where a `type` is expected.
    func present(_ type: Any.Type) throws -> JSONValue {
        if isNull {
            throw DecodingError.valueNotFound(
                type, DecodingError.Context(codingPath: codingPath, debugDescription: "Cannot get value of type \(type) -- found null value instead"))
        }
        return value
    }

    func integer<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
        switch try present(type) {
        case .int(let number):
            guard let exact = T(exactly: number) else { throw Self.notValidJSON }
            return exact
        case .double(let number):
            // A whole number written with a fraction or an exponent (1.0, 1e2) is taken, as JSONDecoder takes it.
            // Beyond 2^53 JSONDecoder reads the digits as written (1.8446744071854776e+19 is
            // 18446744071854776000, not the double's 18446744071854776320): so does this.
            if number.magnitude < 0x1p53 {
                guard let exact = T(exactly: number) else { throw Self.notValidJSON }
                return exact
            }
            guard let decimal = Decimal(string: text), let exact = T(decimal.description) else { throw Self.notValidJSON }
            return exact
        default:
            throw mismatch(type)
        }
    }

    /// What JSONDecoder says of a number it cannot represent: not valid JSON, at the top.
    static var notValidJSON: DecodingError {
        DecodingError.dataCorrupted(DecodingError.Context(codingPath: [], debugDescription: "The given data was not valid JSON."))
    }

    func mismatch(_ type: Any.Type) -> DecodingError {
        let kind =
            switch value {
            case .null: "null"
            case .bool: "bool"
            case .int, .double: "number"
            case .string: "a string"
            case .array: "an array"
            case .object: "a dictionary"
            }
        let found = isNull ? "null" : kind
        return DecodingError.typeMismatch(
            type, DecodingError.Context(codingPath: codingPath, debugDescription: "Expected to decode \(type) but found \(found) instead."))
    }
}

/// A coding key made for an array's index or a superclass.
private struct IndexKey: CodingKey {
    let stringValue: String
    let intValue: Int?

    init(index: Int) {
        stringValue = "Index \(index)"
        intValue = index
    }

    private init(name: String) {
        stringValue = name
        intValue = nil
    }

    init?(stringValue: String) { self.init(name: stringValue) }

    init?(intValue: Int) { self.init(index: intValue) }

    static let superKey = IndexKey(name: "super")
}

private struct KeyedNode<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let members: [String: JSONValue]
    let codingPath: [any CodingKey]

    /// In the order JSONWriter writes them, which is the order JSONDecoder reads them in (a
    /// dictionary's first bad member is the one its error names).
    var allKeys: [Key] { JSONWriter.sortedMembers(members).compactMap { Key(stringValue: $0.key) } }

    func contains(_ key: Key) -> Bool { members[key.stringValue] != nil }

    func node(_ key: any CodingKey) throws -> Node {
        guard let value = members[key.stringValue] else {
            throw DecodingError.keyNotFound(
                key, DecodingError.Context(codingPath: codingPath, debugDescription: "No value associated with key \(key) (\"\(key.stringValue)\")."))
        }
        return Node(value: value, codingPath: codingPath + [key])
    }

    func decodeNil(forKey key: Key) throws -> Bool { try node(key).isNull }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try node(key).decode(type) }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try node(key).decode(type) }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try node(key).decode(type) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try node(key).decode(type) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try node(key).decode(type) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try node(key).decode(type) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try node(key).decode(type) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try node(key).decode(type) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try node(key).decode(type) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try node(key).decode(type) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try node(key).decode(type) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try node(key).decode(type) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try node(key).decode(type) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try node(key).decode(type) }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try node(key).decode(type) }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try node(key).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try node(key).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        Node(value: members["super"] ?? .null, codingPath: codingPath + [IndexKey.superKey])
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        Node(value: members[key.stringValue] ?? .null, codingPath: codingPath + [key])
    }
}

private struct UnkeyedNode: UnkeyedDecodingContainer {
    let items: [JSONValue]
    let codingPath: [any CodingKey]
    private(set) var currentIndex = 0

    init(items: [JSONValue], codingPath: [any CodingKey]) {
        self.items = items
        self.codingPath = codingPath
    }

    var count: Int? { items.count }
    var isAtEnd: Bool { currentIndex >= items.count }

    /// The next item (not consumed), or `valueNotFound` at the end.
    func next(_ type: Any.Type) throws -> Node {
        let key = IndexKey(index: currentIndex)
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(type, DecodingError.Context(codingPath: codingPath + [key], debugDescription: "Unkeyed container is at end."))
        }
        return Node(value: items[currentIndex], codingPath: codingPath + [key])
    }

    /// Reads the next item (`expected`: what an end is reported as missing) and moves past it.
    mutating func take<T>(_ expected: Any.Type, _ read: (Node) throws -> T) throws -> T {
        let value = try read(next(expected))
        currentIndex += 1
        return value
    }

    mutating func decodeNil() throws -> Bool {
        guard try next(Never.self).isNull else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool { try take(type) { try $0.decode(type) } }
    mutating func decode(_ type: String.Type) throws -> String { try take(type) { try $0.decode(type) } }
    mutating func decode(_ type: Double.Type) throws -> Double { try take(type) { try $0.decode(type) } }
    mutating func decode(_ type: Float.Type) throws -> Float { try take(type) { try $0.decode(type) } }
    mutating func decode(_ type: Int.Type) throws -> Int { try take(type) { try $0.decode(type) } }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try take(type) { try $0.decode(type) } }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try take(type) { try $0.decode(type) } }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try take(type) { try $0.decode(type) } }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try take(type) { try $0.decode(type) } }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try take(type) { try $0.decode(type) } }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try take(type) { try $0.decode(type) } }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try take(type) { try $0.decode(type) } }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try take(type) { try $0.decode(type) } }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try take(type) { try $0.decode(type) } }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try take(type) { try $0.decode(type) } }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try take([String: Any].self) { try $0.container(keyedBy: type) }
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try take([Any].self) { try $0.unkeyedContainer() }
    }

    mutating func superDecoder() throws -> any Decoder {
        try take(Node.self) { $0 }
    }
}
