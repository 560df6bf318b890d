/// The version of the wire protocol. A plugin states the version it speaks in
/// its manifest and in its `initialize` result; the host refuses any other.
public enum ProtocolVersion {
    public static let current = 1
}

/// Method names on the wire (see docs/protocol.md).
public enum Method {
    // host → plugin requests
    public static let initialize = "initialize"
    public static let resolve = "resolve"
    public static let confirm = "confirm"
    public static let handle = "handle"
    public static let shutdown = "shutdown"
    /// The possible values of a parameter with `dynamicOptions`.
    public static let options = "options"
    /// In in-app mode: carry on with a user activity (and the interaction an extension handed over).
    public static let `continue` = "continue"
    /// A whole session in one request: resolve each parameter, confirm, handle
    /// (warm reuse, docs/protocol.md §15; only to a plugin that declared `"session": true`).
    public static let session = "session"
    // host → plugin notifications
    public static let cancel = "cancel"
    // plugin → host notifications
    public static let log = "log"
    public static let progress = "progress"
}

/// Channel numbers the plugin speaks the protocol on: it reads the host's
/// messages from fd 3 and writes its own to fd 4. Standard output and
/// standard error are captured as log text, so a stray `print()` cannot
/// corrupt the protocol.
public enum ProtocolChannels {
    public static let hostToPlugin: Int32 = 3
    public static let pluginToHost: Int32 = 4
    /// Set in the plugin's environment to "3,4".
    public static let environmentVariable = "EXTRUN_PROTOCOL_FDS"
}

/// How a plugin runs: as a tightly limited extension, or as the app.
public enum Mode: String, Codable, Sendable, CaseIterable {
    case `extension` = "extension"
    case inApp = "in-app"
}

public struct InitializeParams: Codable, Sendable, Hashable {
    public var protocolVersion: Int
    public var hostVersion: String
    public var mode: Mode
    /// The intent the host is about to send, so a plugin can warm up for it.
    public var intent: String?

    public init(protocolVersion: Int = ProtocolVersion.current, hostVersion: String, mode: Mode, intent: String?) {
        self.protocolVersion = protocolVersion
        self.hostVersion = hostVersion
        self.mode = mode
        self.intent = intent
    }
}

public struct PluginIdentity: Codable, Sendable, Hashable {
    public var id: String
    public var version: String
    public init(id: String, version: String) {
        self.id = id
        self.version = version
    }
}

public struct InitializeResult: Codable, Sendable, Hashable {
    public var protocolVersion: Int
    public var plugin: PluginIdentity
    public var intents: [String]
    /// `true`: after this session the process can run another one (warm reuse,
    /// docs/protocol.md §15). Absent or `false`: one session, then the process ends.
    public var reusable: Bool?
    /// `true`: the plugin answers the `session` request (a whole later session in one
    /// exchange, docs/protocol.md §15). Absent or `false`: sessions step by step only.
    public var session: Bool?

    public init(
        protocolVersion: Int = ProtocolVersion.current, plugin: PluginIdentity, intents: [String], reusable: Bool? = nil, session: Bool? = nil
    ) {
        self.protocolVersion = protocolVersion
        self.plugin = plugin
        self.intents = intents
        self.reusable = reusable
        self.session = session
    }
}

/// Parameters of `resolve`: which parameter to resolve, and every parameter's current value.
public struct ResolveParams: Codable, Sendable, Hashable {
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
public struct IntentParams: Codable, Sendable, Hashable {
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

extension ResolutionResult: Codable {
    private enum CodingKeys: String, CodingKey { case result, value, prompt, options, reason, message }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        let kind = try c.decode(String.self, forKey: .result)
        switch kind {
        case "success":
            self = .success(try c.decodeIfPresent(JSONValue.self, forKey: .value) ?? .null)
        case "needsValue":
            self = .needsValue(prompt: try c.decodeIfPresent(String.self, forKey: .prompt))
        case "disambiguation":
            self = .disambiguation(
                options: try c.decode([JSONValue].self, forKey: .options), prompt: try c.decodeIfPresent(String.self, forKey: .prompt))
        case "confirmationRequired":
            self = .confirmationRequired(
                try c.decodeIfPresent(JSONValue.self, forKey: .value) ?? .null, prompt: try c.decodeIfPresent(String.self, forKey: .prompt))
        case "unsupported":
            self = .unsupported(
                reason: try c.decodeIfPresent(String.self, forKey: .reason), message: try c.decodeIfPresent(String.self, forKey: .message))
        case "notRequired":
            self = .notRequired
        default:
            throw DecodingError.dataCorruptedError(
                forKey: .result, in: c,
                debugDescription: "unknown resolution result '\(kind)' (expected success, needsValue, disambiguation, confirmationRequired, unsupported or notRequired)")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        switch self {
        case .success(let value):
            try c.encode("success", forKey: .result)
            try c.encode(value, forKey: .value)
        case .needsValue(let prompt):
            try c.encode("needsValue", forKey: .result)
            try c.encodeIfPresent(prompt, forKey: .prompt)
        case .disambiguation(let options, let prompt):
            try c.encode("disambiguation", forKey: .result)
            try c.encode(options, forKey: .options)
            try c.encodeIfPresent(prompt, forKey: .prompt)
        case .confirmationRequired(let value, let prompt):
            try c.encode("confirmationRequired", forKey: .result)
            try c.encode(value, forKey: .value)
            try c.encodeIfPresent(prompt, forKey: .prompt)
        case .unsupported(let reason, let message):
            try c.encode("unsupported", forKey: .result)
            try c.encodeIfPresent(reason, forKey: .reason)
            try c.encodeIfPresent(message, forKey: .message)
        case .notRequired:
            try c.encode("notRequired", forKey: .result)
        }
    }
}

/// The response codes every plugin may answer with (SiriKit's), besides the
/// custom codes its manifest declares.
public enum ResponseCode {
    public static let success = "success"
    public static let failure = "failure"
    public static let continueInApp = "continueInApp"
    public static let failureRequiringAppLaunch = "failureRequiringAppLaunch"
    public static let inProgress = "inProgress"
    public static let ready = "ready"
    public static let unspecified = "unspecified"

    public static let standard: [String] = [success, failure, continueInApp, failureRequiringAppLaunch, inProgress, ready, unspecified]
}

public struct Dialog: Codable, Sendable, Hashable {
    public var full: String?
    public var supporting: String?
    public init(full: String? = nil, supporting: String? = nil) {
        self.full = full
        self.supporting = supporting
    }
}

public struct UserActivity: Codable, Sendable, Hashable {
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
public struct IntentResponse: Codable, Sendable, Hashable {
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

    private enum CodingKeys: String, CodingKey { case code, properties, dialog, userActivity, progress }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        code = try c.decode(String.self, forKey: .code)
        properties = try c.decodeIfPresent([String: JSONValue].self, forKey: .properties) ?? [:]
        dialog = try c.decodeIfPresent(Dialog.self, forKey: .dialog)
        userActivity = try c.decodeIfPresent(UserActivity.self, forKey: .userActivity)
        progress = try c.decodeIfPresent(Double.self, forKey: .progress)
    }
}

/// An intent together with the response it got: what an extension hands over
/// to the app when it answers `continueInApp`, and what a donation records.
public struct Interaction: Codable, Sendable, Hashable {
    /// The interaction's identifier (the intent file's `id`, or one the host made up).
    public var identifier: String?
    public var intent: String
    /// The intent's parameters, as far as they were resolved.
    public var parameters: [String: JSONValue]
    /// The response the intent got (the extension's answer, when handed over).
    public var response: IntentResponse?

    public init(identifier: String? = nil, intent: String, parameters: [String: JSONValue], response: IntentResponse? = nil) {
        self.identifier = identifier
        self.intent = intent
        self.parameters = parameters
        self.response = response
    }
}

/// Parameters of `continue`: the user activity to carry on with and, when an
/// extension handed it over, the interaction it came from.
public struct ContinueParams: Codable, Sendable, Hashable {
    public var activity: UserActivity
    public var interaction: Interaction?

    public init(activity: UserActivity, interaction: Interaction? = nil) {
        self.activity = activity
        self.interaction = interaction
    }
}

/// Parameters of the `log` notification a plugin may send.
public struct LogParams: Codable, Sendable, Hashable {
    public var level: String
    public var message: String
    public init(level: String, message: String) {
        self.level = level
        self.message = message
    }
}

/// Parameters of the `progress` notification.
public struct ProgressParams: Codable, Sendable, Hashable {
    public var fraction: Double?
    public var message: String?
    public init(fraction: Double? = nil, message: String? = nil) {
        self.fraction = fraction
        self.message = message
    }
}

/// Parameters of the `cancel` notification.
public struct CancelParams: Codable, Sendable, Hashable {
    public var reason: String
    public init(reason: String) { self.reason = reason }
}

/// Parameters of `options`: which parameter, the other parameters' current
/// values, and what the person typed to narrow the list.
public struct OptionsParams: Codable, Sendable, Hashable {
    public var intent: String
    public var parameter: String
    public var parameters: [String: JSONValue]
    public var search: String?

    public init(intent: String, parameter: String, parameters: [String: JSONValue], search: String? = nil) {
        self.intent = intent
        self.parameter = parameter
        self.parameters = parameters
        self.search = search
    }
}

/// How a value is shown to people: a title, and optionally a subtitle and an
/// image (an image name, a URL, or a `data:` URL).
public struct DisplayRepresentation: Codable, Sendable, Hashable {
    public var title: String
    public var subtitle: String?
    public var image: String?

    public init(title: String, subtitle: String? = nil, image: String? = nil) {
        self.title = title
        self.subtitle = subtitle
        self.image = image
    }
}

/// One possible value: an identifier, how it is shown, and the value itself.
public struct OptionItem: Codable, Sendable, Hashable {
    public var identifier: String
    public var title: String
    public var subtitle: String?
    public var image: String?
    /// The parameter value this option stands for.
    public var value: JSONValue

    public init(identifier: String, title: String, subtitle: String? = nil, image: String? = nil, value: JSONValue) {
        self.identifier = identifier
        self.title = title
        self.subtitle = subtitle
        self.image = image
        self.value = value
    }
}

public struct OptionsSection: Codable, Sendable, Hashable {
    public var title: String?
    public var items: [OptionItem]
    public init(title: String? = nil, items: [OptionItem]) {
        self.title = title
        self.items = items
    }
}

/// The result of `options`: the possible values, in sections.
public struct OptionsResult: Codable, Sendable, Hashable {
    public var sections: [OptionsSection]
    public init(sections: [OptionsSection]) { self.sections = sections }
    public init(items: [OptionItem]) { self.sections = [OptionsSection(items: items)] }

    public var allItems: [OptionItem] { sections.flatMap(\.items) }
}

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

    public init(intent: String, parameters: [String: JSONValue], resolve: [SessionParameter], handle: Bool) {
        self.intent = intent
        self.parameters = parameters
        self.resolve = resolve
        self.handle = handle
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
