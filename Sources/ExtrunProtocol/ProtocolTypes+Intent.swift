import Foundation

// `resolve`, `confirm` and `handle`: their parameters and answers. Each type converts to
// and from `JSONValue` by hand, beside it (JSONValueConvertible.swift says why); its
// `Codable` conformance goes through that same conversion.

/// Parameters of `resolve`: which parameter to resolve, and every parameter's current value.
public struct ResolveParams: Sendable, Hashable {
    public var intent: String
    public var parameter: String
    public var parameters: [String: JSONValue]

    public init(intent: String, parameter: String, parameters: [String: JSONValue]) {
        self.intent = intent
        self.parameter = parameter
        self.parameters = parameters
    }
}

/// Parameters of `confirm` and `handle`: the intent with its resolved parameters.
public struct IntentParams: Sendable, Hashable {
    public var intent: String
    public var parameters: [String: JSONValue]

    public init(intent: String, parameters: [String: JSONValue]) {
        self.intent = intent
        self.parameters = parameters
    }
}

/// The outcome of resolving one parameter, as in SiriKit's resolution results.
public enum ResolutionResult: Sendable, Hashable {
    /// The value to use (the plugin may normalize the one it was given).
    case success(JSONValue)
    /// A value is needed; `prompt` asks for it.
    case needsValue(prompt: String?)
    /// One of several candidates must be chosen.
    case disambiguation(options: [JSONValue], prompt: String?)
    /// The value is plausible but the user must confirm it.
    case confirmationRequired(JSONValue, prompt: String?)
    /// The value cannot be used. `reason` is a short code, `message` the text for the user.
    case unsupported(reason: String?, message: String?)
    /// The parameter is not needed for this intent.
    case notRequired

    /// Its name on the wire (the `result` field): `success`, `needsValue`...
    public var kind: String {
        switch self {
        case .success: "success"
        case .needsValue: "needsValue"
        case .disambiguation: "disambiguation"
        case .confirmationRequired: "confirmationRequired"
        case .unsupported: "unsupported"
        case .notRequired: "notRequired"
        }
    }
}

public struct Dialog: Sendable, Hashable {
    public var full: String?
    public var supporting: String?
    public init(full: String? = nil, supporting: String? = nil) {
        self.full = full
        self.supporting = supporting
    }
}

public struct UserActivity: Sendable, Hashable {
    public var activityType: String
    public var title: String?
    public var userInfo: [String: JSONValue]?
    public init(activityType: String, title: String? = nil, userInfo: [String: JSONValue]? = nil) {
        self.activityType = activityType
        self.title = title
        self.userInfo = userInfo
    }
}

/// The plugin's answer to `confirm` or `handle`.
public struct IntentResponse: Sendable, Hashable {
    public var code: String
    public var properties: [String: JSONValue]
    public var dialog: Dialog?
    public var userActivity: UserActivity?
    /// With `inProgress`: how far along the work is, 0...1.
    public var progress: Double?

    /// Whether, as a confirmation, it lets the intent be handled: `ready` or `success`.
    public var letsHandlingProceed: Bool { code == ResponseCode.ready || code == ResponseCode.success }

    public init(
        code: String, properties: [String: JSONValue] = [:], dialog: Dialog? = nil, userActivity: UserActivity? = nil,
        progress: Double? = nil
    ) {
        self.code = code
        self.properties = properties
        self.dialog = dialog
        self.userActivity = userActivity
        self.progress = progress
    }
}

extension ResolveParams: JSONValueConvertible {
    public init(jsonValue: JSONValue) throws { try self.init(fields: JSONFields(jsonValue)) }
    init(fields: JSONFields) throws {
        self.init(intent: try fields.string("intent"), parameter: try fields.string("parameter"), parameters: try fields.members("parameters"))
    }
    public var jsonValue: JSONValue {
        .object(["intent": .string(intent), "parameter": .string(parameter), "parameters": .object(parameters)])
    }
}

extension ResolveParams: Codable {
    public init(from decoder: any Decoder) throws { try self.init(fields: JSONFields(decoder: decoder)) }
    public func encode(to encoder: any Encoder) throws { try jsonValue.encode(to: encoder) }
}

extension IntentParams: JSONValueConvertible {
    public init(jsonValue: JSONValue) throws { try self.init(fields: JSONFields(jsonValue)) }
    init(fields: JSONFields) throws {
        self.init(intent: try fields.string("intent"), parameters: try fields.members("parameters"))
    }
    public var jsonValue: JSONValue { .object(["intent": .string(intent), "parameters": .object(parameters)]) }
}

extension IntentParams: Codable {
    public init(from decoder: any Decoder) throws { try self.init(fields: JSONFields(decoder: decoder)) }
    public func encode(to encoder: any Encoder) throws { try jsonValue.encode(to: encoder) }
}

extension ResolutionResult: JSONValueConvertible {
    public init(jsonValue: JSONValue) throws { try self.init(fields: JSONFields(jsonValue)) }
    init(fields: JSONFields) throws {
        let kind = try fields.string("result")
        switch kind {
        case "success": self = .success(fields.optional("value") ?? .null)
        case "needsValue": self = .needsValue(prompt: try fields.optionalString("prompt"))
        case "disambiguation": self = .disambiguation(options: try fields.array("options"), prompt: try fields.optionalString("prompt"))
        case "confirmationRequired": self = .confirmationRequired(fields.optional("value") ?? .null, prompt: try fields.optionalString("prompt"))
        case "unsupported": self = .unsupported(reason: try fields.optionalString("reason"), message: try fields.optionalString("message"))
        case "notRequired": self = .notRequired
        default:
            throw fields.corrupted(
                "result",
                "unknown resolution result '\(kind)' (expected success, needsValue, disambiguation, confirmationRequired, unsupported or notRequired)")
        }
    }
    public var jsonValue: JSONValue {
        var object: [String: JSONValue] = ["result": .string(kind)]
        func put(_ key: String, _ text: String?) { if let text { object[key] = .string(text) } }
        switch self {
        case .success(let value):
            object["value"] = value
        case .needsValue(let prompt):
            put("prompt", prompt)
        case .disambiguation(let options, let prompt):
            object["options"] = .array(options)
            put("prompt", prompt)
        case .confirmationRequired(let value, let prompt):
            object["value"] = value
            put("prompt", prompt)
        case .unsupported(let reason, let message):
            put("reason", reason)
            put("message", message)
        case .notRequired:
            break
        }
        return .object(object)
    }
}

extension ResolutionResult: Codable {
    public init(from decoder: any Decoder) throws { try self.init(fields: JSONFields(decoder: decoder)) }
    public func encode(to encoder: any Encoder) throws { try jsonValue.encode(to: encoder) }
}

extension Dialog: JSONValueConvertible {
    public init(jsonValue: JSONValue) throws { try self.init(fields: JSONFields(jsonValue)) }
    init(fields: JSONFields) throws {
        self.init(full: try fields.optionalString("full"), supporting: try fields.optionalString("supporting"))
    }
    public var jsonValue: JSONValue {
        var object: [String: JSONValue] = [:]
        if let full { object["full"] = .string(full) }
        if let supporting { object["supporting"] = .string(supporting) }
        return .object(object)
    }
}

extension Dialog: Codable {
    public init(from decoder: any Decoder) throws { try self.init(fields: JSONFields(decoder: decoder)) }
    public func encode(to encoder: any Encoder) throws { try jsonValue.encode(to: encoder) }
}

extension UserActivity: JSONValueConvertible {
    public init(jsonValue: JSONValue) throws { try self.init(fields: JSONFields(jsonValue)) }
    init(fields: JSONFields) throws {
        self.init(
            activityType: try fields.string("activityType"), title: try fields.optionalString("title"),
            userInfo: try fields.optionalMembers("userInfo"))
    }
    public var jsonValue: JSONValue {
        var object: [String: JSONValue] = ["activityType": .string(activityType)]
        if let title { object["title"] = .string(title) }
        if let userInfo { object["userInfo"] = .object(userInfo) }
        return .object(object)
    }
}

extension UserActivity: Codable {
    public init(from decoder: any Decoder) throws { try self.init(fields: JSONFields(decoder: decoder)) }
    public func encode(to encoder: any Encoder) throws { try jsonValue.encode(to: encoder) }
}

extension IntentResponse: JSONValueConvertible {
    public init(jsonValue: JSONValue) throws { try self.init(fields: JSONFields(jsonValue)) }
    init(fields: JSONFields) throws {
        self.init(
            code: try fields.string("code"), properties: try fields.optionalMembers("properties") ?? [:],
            dialog: try fields.nested("dialog").map(Dialog.init(fields:)),
            userActivity: try fields.nested("userActivity").map(UserActivity.init(fields:)), progress: try fields.optionalDouble("progress"))
    }
    public var jsonValue: JSONValue {
        var object: [String: JSONValue] = ["code": .string(code), "properties": .object(properties)]
        if let dialog { object["dialog"] = dialog.jsonValue }
        if let userActivity { object["userActivity"] = userActivity.jsonValue }
        if let progress { object["progress"] = .double(progress) }
        return .object(object)
    }
}

extension IntentResponse: Codable {
    public init(from decoder: any Decoder) throws { try self.init(fields: JSONFields(decoder: decoder)) }
    public func encode(to encoder: any Encoder) throws { try jsonValue.encode(to: encoder) }
}
