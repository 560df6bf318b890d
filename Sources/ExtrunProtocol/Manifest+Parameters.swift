import Foundation

// A manifest's parameters: their types and definitions, the conditions and reasons
// they declare, and the check of a value against its parameter (Manifest.swift holds
// the manifest, its intents, responses, limits and custom types).

public enum ParameterType: String, Codable, Sendable, CaseIterable {
    case string, integer, number, boolean, date
    case `enum` = "enum"
    case file
    /// A value of one of the manifest's `types`.
    case custom
}

public struct ParameterDefinition: Codable, Sendable, Hashable {
    public var name: String
    public var type: ParameterType
    public var title: String?
    public var required: Bool
    /// Whether the parameter takes a list of values.
    public var multiple: Bool
    public var `default`: JSONValue?
    /// What to ask when the value is missing.
    public var prompt: String?
    /// For `enum`: the allowed values.
    public var values: [String]?
    /// For `file`: allowed type identifiers (e.g. `public.jpeg`); empty or absent means any.
    public var allowedTypes: [String]?
    public var description: String?
    /// For `enum`: display names of the values, e.g. `{"lowercase": "Lowercase"}`.
    public var valueTitles: [String: String]?
    /// For `custom`: the name of the manifest type.
    public var customType: String?
    /// Whether the plugin provides the possible values (the `options` method).
    public var dynamicOptions: Bool
    /// Shown (and resolved) only when another parameter has a given value.
    public var parent: ParentCondition?
    /// Asked when resolution answers `confirmationRequired` without a prompt of its own.
    public var confirmationPrompt: String?
    /// Why a value can be unsupported, each with the message for people.
    public var unsupportedReasons: [UnsupportedReason]?

    public init(
        name: String, type: ParameterType, title: String? = nil, required: Bool = false, multiple: Bool = false,
        default: JSONValue? = nil, prompt: String? = nil, values: [String]? = nil, allowedTypes: [String]? = nil,
        description: String? = nil, valueTitles: [String: String]? = nil, customType: String? = nil, dynamicOptions: Bool = false,
        parent: ParentCondition? = nil, confirmationPrompt: String? = nil, unsupportedReasons: [UnsupportedReason]? = nil
    ) {
        self.description = description
        self.valueTitles = valueTitles
        self.customType = customType
        self.dynamicOptions = dynamicOptions
        self.parent = parent
        self.confirmationPrompt = confirmationPrompt
        self.unsupportedReasons = unsupportedReasons
        self.name = name
        self.type = type
        self.title = title
        self.required = required
        self.multiple = multiple
        self.default = `default`
        self.prompt = prompt
        self.values = values
        self.allowedTypes = allowedTypes
    }

    private enum CodingKeys: String, CodingKey {
        case name, type, title, required, multiple, `default`, prompt, values, allowedTypes
        case description, valueTitles, customType, dynamicOptions, parent, confirmationPrompt, unsupportedReasons
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        name = try c.decode(String.self, forKey: .name)
        type = try c.decode(ParameterType.self, forKey: .type)
        title = try c.decodeIfPresent(String.self, forKey: .title)
        required = try c.decodeIfPresent(Bool.self, forKey: .required) ?? false
        multiple = try c.decodeIfPresent(Bool.self, forKey: .multiple) ?? false
        `default` = try c.decodeIfPresent(JSONValue.self, forKey: .default)
        prompt = try c.decodeIfPresent(String.self, forKey: .prompt)
        values = try c.decodeIfPresent([String].self, forKey: .values)
        allowedTypes = try c.decodeIfPresent([String].self, forKey: .allowedTypes)
        description = try c.decodeIfPresent(String.self, forKey: .description)
        valueTitles = try c.decodeIfPresent([String: String].self, forKey: .valueTitles)
        customType = try c.decodeIfPresent(String.self, forKey: .customType)
        dynamicOptions = try c.decodeIfPresent(Bool.self, forKey: .dynamicOptions) ?? false
        parent = try c.decodeIfPresent(ParentCondition.self, forKey: .parent)
        confirmationPrompt = try c.decodeIfPresent(String.self, forKey: .confirmationPrompt)
        unsupportedReasons = try c.decodeIfPresent([UnsupportedReason].self, forKey: .unsupportedReasons)
    }

    /// Whether the parameter applies, given the other parameters' values (its parent condition).
    public func isShown(given values: [String: JSONValue]) -> Bool {
        guard let parent else { return true }
        return values[parent.parameter] == parent.value
    }

    func problems(path: String) -> [String] {
        var problems: [String] = []
        if type == .enum && (values ?? []).isEmpty {
            problems.append("\(path).values: an enum parameter must list its values")
        }
        if type != .enum && values != nil {
            problems.append("\(path).values: only enum parameters take values")
        }
        if type == .custom && (customType ?? "").isEmpty {
            problems.append("\(path).customType: a custom parameter must name its type")
        }
        for key in (valueTitles ?? [:]).keys.sorted() where !(values ?? []).contains(key) {
            problems.append("\(path).valueTitles: '\(key)' is not one of the values")
        }
        var reasons = Set<String>()
        for (i, reason) in (unsupportedReasons ?? []).enumerated() where !reasons.insert(reason.code).inserted {
            problems.append("\(path).unsupportedReasons[\(i)].code: '\(reason.code)' is declared twice")
        }
        if let value = `default`, !value.isNull {
            if type == .file || type == .custom {
                problems.append("\(path).default: a \(type.rawValue) parameter cannot have a default")
            } else if let problem = ParameterValueCheck.problem(value, for: self) {
                problems.append("\(path).default: \(problem)")
            }
        }
        return problems
    }
}

/// Type checks for parameter values as they travel on the wire
/// (after the host has turned file paths into file objects).
public enum ParameterValueCheck {
    /// Returns nil when `value` fits the parameter, or what is wrong with it.
    public static func problem(_ value: JSONValue, for parameter: ParameterDefinition) -> String? {
        if parameter.multiple {
            guard case .array(let items) = value else { return "expected a list of \(parameter.type.rawValue) values, got \(value.typeName)" }
            for (i, item) in items.enumerated() {
                if let problem = singleProblem(item, for: parameter) { return "[\(i)]: \(problem)" }
            }
            return nil
        }
        return singleProblem(value, for: parameter)
    }

    static func singleProblem(_ value: JSONValue, for parameter: ParameterDefinition) -> String? {
        switch parameter.type {
        case .string:
            if case .string = value { return nil }
            return "expected a string, got \(value.typeName)"
        case .integer:
            if case .int = value { return nil }
            if case .double(let d) = value, d.rounded() == d, abs(d) < 9.0e15 { return nil }
            return "expected an integer, got \(value.typeName)"
        case .number:
            if case .int = value { return nil }
            if case .double = value { return nil }
            return "expected a number, got \(value.typeName)"
        case .boolean:
            if case .bool = value { return nil }
            return "expected a boolean (true or false), got \(value.typeName)"
        case .date:
            guard case .string(let text) = value else { return "expected an ISO 8601 date string, got \(value.typeName)" }
            if ISODate.parse(text) == nil { return "'\(text)' is not an ISO 8601 date (e.g. 2026-11-22 or 2026-11-22T10:30:00Z)" }
            return nil
        case .enum:
            let allowed = parameter.values ?? []
            guard case .string(let text) = value else {
                return "expected one of \(allowed.joined(separator: ", ")), got \(value.typeName)"
            }
            if !allowed.contains(text) { return "'\(text)' is not one of \(allowed.joined(separator: ", "))" }
            return nil
        case .file:
            guard case .object(let fields) = value, fields["filename"]?.stringValue != nil, fields["data"]?.stringValue != nil else {
                return "expected a file object with 'filename' and 'data'"
            }
            return nil
        case .custom:
            guard case .object(let fields) = value, fields["identifier"]?.stringValue != nil else {
                return "expected a \(parameter.customType ?? "custom") object with a string 'identifier'"
            }
            return nil
        }
    }
}

/// `"parent": {"parameter": "changeCase", "value": true}`: the parameter applies only then.
public struct ParentCondition: Codable, Sendable, Hashable {
    public var parameter: String
    public var value: JSONValue
    public init(parameter: String, value: JSONValue) {
        self.parameter = parameter
        self.value = value
    }
}

/// `{"code": "empty", "message": "Please enter some text"}`.
public struct UnsupportedReason: Codable, Sendable, Hashable {
    public var code: String
    public var message: String
    public init(code: String, message: String) {
        self.code = code
        self.message = message
    }
}
