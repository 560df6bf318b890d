import Foundation

// The notifications: `log` and `progress` (plugin → host), `cancel` (host → plugin).
// Each converts to and from `JSONValue` by hand, beside it; its `Codable` conformance
// goes through that same conversion.

/// Parameters of the `log` notification a plugin may send.
public struct LogParams: Sendable, Hashable {
    public var level: String
    public var message: String
    public init(level: String, message: String) {
        self.level = level
        self.message = message
    }
}

/// Parameters of the `progress` notification.
public struct ProgressParams: Sendable, Hashable {
    public var fraction: Double?
    public var message: String?
    public init(fraction: Double? = nil, message: String? = nil) {
        self.fraction = fraction
        self.message = message
    }
}

/// Parameters of the `cancel` notification.
public struct CancelParams: Sendable, Hashable {
    public var reason: String
    public init(reason: String) { self.reason = reason }
}

extension LogParams: JSONValueConvertible {
    public init(jsonValue: JSONValue) throws { try self.init(fields: JSONFields(jsonValue)) }
    init(fields: JSONFields) throws {
        self.init(level: try fields.string("level"), message: try fields.string("message"))
    }
    public var jsonValue: JSONValue { .object(["level": .string(level), "message": .string(message)]) }
}

extension LogParams: Codable {
    public init(from decoder: any Decoder) throws { try self.init(fields: JSONFields(decoder: decoder)) }
    public func encode(to encoder: any Encoder) throws { try jsonValue.encode(to: encoder) }
}

extension ProgressParams: JSONValueConvertible {
    public init(jsonValue: JSONValue) throws { try self.init(fields: JSONFields(jsonValue)) }
    init(fields: JSONFields) throws {
        self.init(fraction: try fields.optionalDouble("fraction"), message: try fields.optionalString("message"))
    }
    public var jsonValue: JSONValue {
        var object: [String: JSONValue] = [:]
        if let fraction { object["fraction"] = .double(fraction) }
        if let message { object["message"] = .string(message) }
        return .object(object)
    }
}

extension ProgressParams: Codable {
    public init(from decoder: any Decoder) throws { try self.init(fields: JSONFields(decoder: decoder)) }
    public func encode(to encoder: any Encoder) throws { try jsonValue.encode(to: encoder) }
}

extension CancelParams: JSONValueConvertible {
    public init(jsonValue: JSONValue) throws { try self.init(fields: JSONFields(jsonValue)) }
    init(fields: JSONFields) throws { self.init(reason: try fields.string("reason")) }
    public var jsonValue: JSONValue { .object(["reason": .string(reason)]) }
}

extension CancelParams: Codable {
    public init(from decoder: any Decoder) throws { try self.init(fields: JSONFields(decoder: decoder)) }
    public func encode(to encoder: any Encoder) throws { try jsonValue.encode(to: encoder) }
}
