import Foundation

// `session`: a whole later session of a warm process in one request (docs/protocol.md §15),
// with each type's conversion to and from `JSONValue` beside it (not Codable).

/// Parameters of `session`: a whole later session of a warm process in one
/// request (docs/protocol.md §15). The plugin does what the host would do step by
/// step: it resolves the parameters of `resolve` in order, stopping at the first
/// result the host has to act on; then it confirms and, when `handle` is true and
/// the confirmation answered `ready` or `success`, it handles.
public struct SessionParams: Sendable, Hashable {
    public var intent: String
    /// The intent's parameter values as given, before any resolution.
    public var parameters: [String: JSONValue]
    /// The parameters to resolve, in the manifest's order.
    public var resolve: [SessionParameter]
    /// Whether to handle after a confirmation of `ready` or `success` (false when a
    /// person must confirm the intent first: the host then sends `handle` itself).
    public var handle: Bool
    /// How long the plugin may keep reading its channel without sleeping after it has
    /// answered, in microseconds, for the host's next request (0: sleep at once; nil: the
    /// plugin's own choice). A hint, which a plugin may ignore (docs/protocol.md §15.1).
    public var pollAfterUs: Int?

    public init(intent: String, parameters: [String: JSONValue], resolve: [SessionParameter], handle: Bool, pollAfterUs: Int? = nil) {
        self.intent = intent
        self.parameters = parameters
        self.resolve = resolve
        self.handle = handle
        self.pollAfterUs = pollAfterUs
    }
}

/// One parameter of a `session`: its name, whether it must have a value, and the
/// condition under which it is resolved at all (the manifest's `parent`).
public struct SessionParameter: Sendable, Hashable {
    public var parameter: String
    public var required: Bool
    public var parent: ParentCondition?

    public init(parameter: String, required: Bool = false, parent: ParentCondition? = nil) {
        self.parameter = parameter
        self.required = required
        self.parent = parent
    }

    /// Whether the parameter is resolved, given the values so far (as `ParameterDefinition.isShown`).
    public func isShown(given values: [String: JSONValue]) -> Bool {
        guard let parent else { return true }
        return values[parent.parameter] == parent.value
    }

    /// Whether, after `result` was applied to `values`, the session goes on without
    /// the host: the result is `success` or `notRequired`, and a required parameter has a value.
    public func goesOn(after result: ResolutionResult, values: [String: JSONValue]) -> Bool {
        switch result {
        case .success, .notRequired: return !(required && values[parameter] == nil)
        default: return false
        }
    }

    /// `values` with `result` applied: a success's value set (null removes it); any other result leaves them.
    public static func apply(_ result: ResolutionResult, to parameter: String, values: inout [String: JSONValue]) {
        if case .success(let value) = result {
            // Not `value.isNull ? nil : value`: JSONValue is ExpressibleByNilLiteral, so that nil would be `.null`.
            if value.isNull {
                values.removeValue(forKey: parameter)
            } else {
                values[parameter] = value
            }
        }
    }
}

/// One resolution in a `session` answer.
public struct SessionResolution: Sendable, Hashable {
    public var parameter: String
    public var result: ResolutionResult
    public init(parameter: String, result: ResolutionResult) {
        self.parameter = parameter
        self.result = result
    }
}

/// The answer to `session`: each step's answer, as far as the session went.
public struct SessionResult: Sendable, Hashable {
    public var resolutions: [SessionResolution]
    public var confirm: IntentResponse?
    public var handle: IntentResponse?

    public init(resolutions: [SessionResolution] = [], confirm: IntentResponse? = nil, handle: IntentResponse? = nil) {
        self.resolutions = resolutions
        self.confirm = confirm
        self.handle = handle
    }
}

extension SessionParameter: JSONValueConvertible {
    public init(jsonValue: JSONValue) throws { try self.init(fields: JSONFields(jsonValue)) }
    init(fields: JSONFields) throws {
        self.init(
            parameter: try fields.string("parameter"), required: try fields.optionalBool("required") ?? false,
            parent: try fields.nested("parent").map(ParentCondition.init(fields:)))
    }
    public var jsonValue: JSONValue {
        var object: [String: JSONValue] = ["parameter": .string(parameter)]
        if required { object["required"] = .bool(true) }
        if let parent { object["parent"] = parent.jsonValue }
        return .object(object)
    }
}

extension SessionParams: JSONValueConvertible {
    public init(jsonValue: JSONValue) throws { try self.init(fields: JSONFields(jsonValue)) }
    init(fields: JSONFields) throws {
        let resolve = try fields.objects("resolve", SessionParameter.init(fields:))
        let handle = try fields.optionalBool("handle")
        guard let handle else { throw DecodingError.keyNotFound(JSONPathKey(stringValue: "handle"), DecodingError.Context(codingPath: [], debugDescription: "")) }
        self.init(
            intent: try fields.string("intent"), parameters: try fields.members("parameters"), resolve: resolve, handle: handle,
            pollAfterUs: try fields.optionalInt("pollAfterUs"))
    }
    public var jsonValue: JSONValue {
        var object: [String: JSONValue] = [
            "intent": .string(intent), "parameters": .object(parameters), "resolve": .array(resolve.map(\.jsonValue)), "handle": .bool(handle),
        ]
        if let pollAfterUs { object["pollAfterUs"] = .int(Int64(pollAfterUs)) }
        return .object(object)
    }
}

extension SessionResult: JSONValueConvertible {
    public init(jsonValue: JSONValue) throws { try self.init(fields: JSONFields(jsonValue)) }
    init(fields: JSONFields) throws {
        let resolutions = try fields.objects("resolutions") { item in
            SessionResolution(parameter: try item.string("parameter"), result: try ResolutionResult(fields: item.requiredNested("result")))
        }
        self.init(
            resolutions: resolutions, confirm: try fields.nested("confirm").map(IntentResponse.init(fields:)),
            handle: try fields.nested("handle").map(IntentResponse.init(fields:)))
    }
    public var jsonValue: JSONValue {
        var object: [String: JSONValue] = [
            "resolutions": .array(resolutions.map { .object(["parameter": .string($0.parameter), "result": $0.result.jsonValue]) })
        ]
        if let confirm { object["confirm"] = confirm.jsonValue }
        if let handle { object["handle"] = handle.jsonValue }
        return .object(object)
    }
}

// `ParentCondition` is the manifest's (Manifest.swift, Codable there); the session sends it too.
extension ParentCondition: JSONValueConvertible {
    public init(jsonValue: JSONValue) throws { try self.init(fields: JSONFields(jsonValue)) }
    init(fields: JSONFields) throws {
        self.init(parameter: try fields.string("parameter"), value: fields.object["value"] ?? .null)
    }
    public var jsonValue: JSONValue { .object(["parameter": .string(parameter), "value": value]) }
}
