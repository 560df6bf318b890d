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
