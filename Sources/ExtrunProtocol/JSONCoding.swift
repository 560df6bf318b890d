import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The one place that configures JSON coders, so that host, SDK and tests
/// agree on dates (ISO 8601), data (base64) and key order.
public enum JSONCoding {
    public static func encoder(pretty: Bool = false) -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = pretty ? [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes] : [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        encoder.dataEncodingStrategy = .base64
        return encoder
    }

    public static func decoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = ISODate.parse(text) else {
                throw DecodingError.dataCorruptedError(
                    in: container, debugDescription: "'\(text)' is not an ISO 8601 date (e.g. 2026-11-22 or 2026-11-22T10:30:00Z)")
            }
            return date
        }
        decoder.dataDecodingStrategy = .base64
        return decoder
    }

    /// Re-types a JSON value as a `Decodable` type.
    public static func decode<T: Decodable>(_ type: T.Type, from value: JSONValue) throws -> T {
        if let same = value as? T { return same }
        // The protocol's own types convert by hand (JSONValueConvertible), with the same errors.
        if let convertible = T.self as? any JSONValueDecodable.Type, let typed = try convertible.init(jsonValue: value) as? T {
            return typed
        }
        // Straight from the value, as JSONDecoder would read it written out (JSONValueDecoder).
        return try JSONValueDecoder.decode(type, from: value)
    }

    /// Turns an `Encodable` value into a JSON value.
    public static func value(of encodable: some Encodable) throws -> JSONValue {
        if let value = encodable as? JSONValue { return value }
        if let convertible = encodable as? any JSONValueConvertible { return convertible.jsonValue }
        // The commonest values (a resolved text, a count) need no encoder.
        switch encodable {
        case let text as String: return .string(text)
        case let number as Int: return .int(Int64(number))
        case let number as Int64: return .int(number)
        case let flag as Bool: return .bool(flag)
        default: break
        }
        let data = try sharedEncoder.encode(encodable)
        // JSONParser, not JSONDecoder + JSONValue.init(from:): no try? chain per value.
        return try JSONParser.parse(data)
    }

    /// Encodes `encodable` as compact JSON bytes (sorted keys, as `encoder()` does).
    public static func bytes(of encodable: some Encodable) throws -> [UInt8] {
        if let value = encodable as? JSONValue { return JSONWriter.bytes(value) }
        return Array(try sharedEncoder.encode(encodable))
    }

    // JSONEncoder and JSONDecoder are Sendable: their configuration is never changed
    // after this point, so one of each serves every thread.
    private static let sharedEncoder = encoder()

    /// A readable reason for a `DecodingError` or a JSON syntax error:
    /// the path of the field and what was wrong with it.
    public static func describe(_ error: any Error) -> String {
        guard let error = error as? DecodingError else {
            return String(describing: error)
        }
        func path(_ codingPath: [any CodingKey]) -> String {
            let text = codingPath.map { key in key.intValue.map { "[\($0)]" } ?? ".\(key.stringValue)" }.joined()
            return text.hasPrefix(".") ? String(text.dropFirst()) : text
        }
        switch error {
        case .typeMismatch(let type, let context):
            return "\(path(context.codingPath)): expected \(typeDescription(type)); \(context.debugDescription)"
        case .valueNotFound(let type, let context):
            return "\(path(context.codingPath)): expected \(typeDescription(type)), found null"
        case .keyNotFound(let key, let context):
            let prefix = path(context.codingPath)
            return "\(prefix.isEmpty ? "" : prefix + ": ")missing required field '\(key.stringValue)'"
        case .dataCorrupted(let context):
            let underlying = context.underlyingError.map { ": \(syntaxDescription($0))" } ?? ""
            let where_ = path(context.codingPath)
            return "\(where_.isEmpty ? "" : where_ + ": ")\(context.debugDescription)\(underlying)"
        @unknown default:
            return String(describing: error)
        }
    }

    /// Decodes `type` from JSON bytes; a syntax error says where it is (line and column).
    public static func decode<T: Decodable>(_ type: T.Type, fromJSON data: Data) throws -> T {
        if type == JSONValue.self, let value = try parse(json: data) as? T { return value }
        if let readable = T.self as? any JSONValueDecodable.Type, let typed = try readable.init(json: data) as? T { return typed }
        do {
            return try decoder().decode(type, from: data)
        } catch DecodingError.dataCorrupted(let context) where context.codingPath.isEmpty {
            if let syntax = syntaxError(in: data) {
                throw DecodingError.dataCorrupted(
                    DecodingError.Context(codingPath: [], debugDescription: "not valid JSON: \(syntax)"))
            }
            throw DecodingError.dataCorrupted(context)
        }
    }

    /// JSON bytes as a `JSONValue`; a syntax error is a `DecodingError` that says where
    /// it is ("not valid JSON: ... line 3, column 8"), as `decode(_:fromJSON:)` reports it.
    public static func parse(json data: some Collection<UInt8>) throws -> JSONValue {
        do throws(JSONParseError) {
            return try JSONParser.parse(data)
        } catch {
            throw DecodingError.dataCorrupted(DecodingError.Context(codingPath: [], debugDescription: "not valid JSON: \(error)"))
        }
    }

    /// What is wrong with malformed JSON, with its line and column, or nil if it parses.
    public static func syntaxError(in data: Data) -> String? {
        do {
            _ = try JSONParser.parse(data)
            return nil
        } catch {
            return error.description
        }
    }

    private static func typeDescription(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Int.Type, is Int64.Type: "an integer"
        case is Double.Type: "a number"
        case is Bool.Type: "a boolean"
        default: "\(type)"
        }
    }

    private static func syntaxDescription(_ error: any Error) -> String {
        let nsError = error as NSError
        if let detail = nsError.userInfo[NSDebugDescriptionErrorKey] as? String { return detail }
        return String(describing: error)
    }
}
