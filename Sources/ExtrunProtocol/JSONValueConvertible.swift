import Foundation

/// A type converted from and to `JSONValue` by hand, without Codable's machinery.
///
/// The protocol's own messages (`initialize`, `resolve`, `confirm`, `handle`,
/// `session` and their answers) cross the pipes several times per intent; going
/// through `JSONEncoder`/`JSONDecoder` cost most of an exchange's CPU (generic
/// metadata, keyed containers, a byte round trip; docs/benchmarks.md, "One
/// serialization per wire type"). So this conversion is each protocol type's only
/// serialization, written beside the type (ProtocolTypes+*.swift); where a type is
/// also `Codable` (for a `Codable` parent such as `Interaction`, or a plugin
/// author's own coder), that conformance goes through the same conversion
/// (`JSONFields(decoder:)`, `jsonValue.encode(to:)`). `JSONCoding.decode` and
/// `JSONCoding.value(of:)` take this way whenever the type offers it.
public protocol JSONValueConvertible: JSONValueDecodable {
    var jsonValue: JSONValue { get }
}

/// A type read from `JSONValue` by hand (`JSONValueConvertible` also writes it).
/// `PluginManifest` is one: read on every `extrun handle`, written only by tools.
public protocol JSONValueDecodable {
    init(jsonValue: JSONValue) throws
}

extension JSONValueDecodable {
    /// Reads JSON bytes: a syntax error says where it is (`JSONCoding.parse(json:)`).
    public init(json data: some Collection<UInt8>) throws {
        try self.init(jsonValue: JSONCoding.parse(json: data))
    }
}

/// A coding key for paths in errors: an object's field or an array's index.
public struct JSONPathKey: CodingKey {
    public var stringValue: String
    public var intValue: Int?
    public init(stringValue: String) { self.stringValue = stringValue }
    public init(intValue: Int) {
        self.stringValue = "Index \(intValue)"
        self.intValue = intValue
    }
}

/// Reads an object's fields as a keyed decoding container would, with its errors
/// (a `DecodingError` with the field's coding path, for `JSONCoding.describe`).
public struct JSONFields {
    public let object: [String: JSONValue]
    public let path: [any CodingKey]

    public init(_ value: JSONValue, path: [any CodingKey] = []) throws {
        guard case .object(let object) = value else {
            throw Self.mismatch([String: Any].self, value, path: path)
        }
        self.object = object
        self.path = path
    }

    static func mismatch(_ type: Any.Type, _ value: JSONValue, path: [any CodingKey]) -> DecodingError {
        if value.isNull {
            return .valueNotFound(type, DecodingError.Context(codingPath: path, debugDescription: "Cannot get value of type \(type) -- found null value instead"))
        }
        return .typeMismatch(type, DecodingError.Context(codingPath: path, debugDescription: "Expected to decode \(type) but found \(value.typeNameWithArticle) instead."))
    }

    private func key(_ name: String) -> [any CodingKey] { path + [JSONPathKey(stringValue: name)] }

    /// The field's value; nil when absent or null.
    public func optional(_ name: String) -> JSONValue? {
        guard let value = object[name], !value.isNull else { return nil }
        return value
    }

    public func required(_ name: String, _ type: Any.Type) throws -> JSONValue {
        guard let value = object[name] else {
            throw DecodingError.keyNotFound(
                JSONPathKey(stringValue: name), DecodingError.Context(codingPath: path, debugDescription: "No value associated with key \(name)."))
        }
        if value.isNull { throw Self.mismatch(type, value, path: key(name)) }
        return value
    }

    public func string(_ name: String) throws -> String {
        let value = try required(name, String.self)
        guard case .string(let text) = value else { throw Self.mismatch(String.self, value, path: key(name)) }
        return text
    }

    public func optionalString(_ name: String) throws -> String? {
        guard let value = optional(name) else { return nil }
        guard case .string(let text) = value else { throw Self.mismatch(String.self, value, path: key(name)) }
        return text
    }

    public func int(_ name: String) throws -> Int {
        let value = try required(name, Int.self)
        guard case .int(let number) = value, let int = Int(exactly: number) else { throw Self.mismatch(Int.self, value, path: key(name)) }
        return int
    }

    public func optionalBool(_ name: String) throws -> Bool? {
        guard let value = optional(name) else { return nil }
        guard case .bool(let flag) = value else { throw Self.mismatch(Bool.self, value, path: key(name)) }
        return flag
    }

    public func optionalDouble(_ name: String) throws -> Double? {
        guard let value = optional(name) else { return nil }
        guard let number = value.doubleValue else { throw Self.mismatch(Double.self, value, path: key(name)) }
        return number
    }

    public func optionalStrings(_ name: String) throws -> [String]? {
        guard optional(name) != nil else { return nil }
        return try strings(name)
    }

    public func optionalInt(_ name: String) throws -> Int? {
        guard optional(name) != nil else { return nil }
        return try int(name)
    }

    public func optionalInt64(_ name: String) throws -> Int64? {
        guard let value = optional(name) else { return nil }
        guard case .int(let number) = value else { throw Self.mismatch(Int64.self, value, path: key(name)) }
        return number
    }

    /// Each element of an array of objects, read by `read` with the element's path.
    public func objects<T>(_ name: String, _ read: (JSONFields) throws -> T) throws -> [T] {
        try array(name).enumerated().map { index, item in try read(JSONFields(item, path: key(name) + [JSONPathKey(intValue: index)])) }
    }

    public func optionalObjects<T>(_ name: String, _ read: (JSONFields) throws -> T) throws -> [T]? {
        guard optional(name) != nil else { return nil }
        return try objects(name, read)
    }

    /// A string that must be one of an enum's raw values, with Codable's error otherwise.
    public func rawValue<T: RawRepresentable<String>>(_ name: String, _ type: T.Type) throws -> T {
        let text = try string(name)
        guard let value = T(rawValue: text) else {
            throw corrupted(name, "Cannot initialize \(T.self) from invalid String value \(text)")
        }
        return value
    }

    /// An array of strings that must be an enum's raw values.
    public func optionalRawValues<T: RawRepresentable<String>>(_ name: String, _ type: T.Type) throws -> [T]? {
        guard let texts = try optionalStrings(name) else { return nil }
        return try texts.enumerated().map { index, text in
            guard let value = T(rawValue: text) else {
                throw DecodingError.dataCorrupted(
                    DecodingError.Context(
                        codingPath: key(name) + [JSONPathKey(intValue: index)], debugDescription: "Cannot initialize \(T.self) from invalid String value \(text)"))
            }
            return value
        }
    }

    public func optionalStringMap(_ name: String) throws -> [String: String]? {
        guard let members = try optionalMembers(name) else { return nil }
        var result: [String: String] = [:]
        for (member, value) in members {
            guard case .string(let text) = value else {
                throw Self.mismatch(String.self, value, path: key(name) + [JSONPathKey(stringValue: member)])
            }
            result[member] = text
        }
        return result
    }

    public func strings(_ name: String) throws -> [String] {
        let value = try required(name, [Any].self)
        guard case .array(let items) = value else { throw Self.mismatch([Any].self, value, path: key(name)) }
        var result: [String] = []
        result.reserveCapacity(items.count)
        for (index, item) in items.enumerated() {
            guard case .string(let text) = item else {
                throw Self.mismatch(String.self, item, path: key(name) + [JSONPathKey(intValue: index)])
            }
            result.append(text)
        }
        return result
    }

    public func array(_ name: String) throws -> [JSONValue] {
        let value = try required(name, [Any].self)
        guard case .array(let items) = value else { throw Self.mismatch([Any].self, value, path: key(name)) }
        return items
    }

    public func members(_ name: String) throws -> [String: JSONValue] {
        let value = try required(name, [String: Any].self)
        guard case .object(let members) = value else { throw Self.mismatch([String: Any].self, value, path: key(name)) }
        return members
    }

    public func optionalMembers(_ name: String) throws -> [String: JSONValue]? {
        guard let value = optional(name) else { return nil }
        guard case .object(let members) = value else { throw Self.mismatch([String: Any].self, value, path: key(name)) }
        return members
    }

    /// A nested object's fields, for a nested type's own reading.
    public func nested(_ name: String) throws -> JSONFields? {
        guard let value = optional(name) else { return nil }
        return try JSONFields(value, path: key(name))
    }

    public func requiredNested(_ name: String) throws -> JSONFields {
        try JSONFields(try required(name, [String: Any].self), path: key(name))
    }

    public func corrupted(_ name: String, _ description: String) -> DecodingError {
        .dataCorrupted(DecodingError.Context(codingPath: key(name), debugDescription: description))
    }

    /// Bytes written as base64 (as `JSONDecoder`'s `.base64` strategy reads them).
    public func base64(_ name: String) throws -> Data {
        let text = try string(name)
        guard let data = Data(base64Encoded: text) else { throw corrupted(name, "Encountered Data is not valid Base64.") }
        return data
    }

    /// A date written as ISO 8601 (as `JSONCoding.decoder()` reads it).
    public func date(_ name: String) throws -> Date {
        let text = try string(name)
        guard let date = ISODate.parse(text) else {
            throw corrupted(name, "'\(text)' is not an ISO 8601 date (e.g. 2026-11-22 or 2026-11-22T10:30:00Z)")
        }
        return date
    }
}

extension JSONFields {
    /// The fields of the value a `Decoder` holds, at its coding path: how a protocol
    /// type's `Codable` conformance reads through its hand-written conversion, so that
    /// each type has one serialization (a `Codable` parent, such as `Interaction`, or a
    /// plugin author's own coder, reaches the same code and the same errors).
    public init(decoder: any Decoder) throws {
        try self.init(JSONValue(from: decoder), path: decoder.codingPath)
    }
}
