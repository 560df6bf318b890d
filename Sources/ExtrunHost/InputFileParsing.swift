import ExtrunProtocol
import Foundation

// The decoders of the caller's input files, apart from reading them: what
// `Scripts/fuzz` builds for its IntentFile and ActivityFile targets (this file
// needs only ExtrunProtocol and HostError/HostLimits). Reading the files, within
// `host.maxIntentFileBytes`, is in IntentFile.swift.

/// An intent to handle, as read from an intent file (or standard input).
///
///     {"intent": "MakeUppercase", "parameters": {"text": "hello world"}, "id": "optional", "mode": "extension"}
public struct IntentInvocation: Sendable, Equatable {
    public var intent: String
    public var id: String?
    /// Groups donations of related intents (a conversation, an order...), so they can be deleted together.
    public var groupIdentifier: String?
    public var mode: Mode?
    /// Parameter values as given in the file (file parameters not yet loaded).
    public var parameters: [String: JSONValue]
    /// Where the intent came from, for error messages: a path or `<stdin>`.
    public var source: String
    /// Relative file paths in parameters are resolved against this directory.
    public var baseDirectory: URL

    public init(
        intent: String, id: String? = nil, groupIdentifier: String? = nil, mode: Mode? = nil, parameters: [String: JSONValue] = [:],
        source: String = "<memory>", baseDirectory: URL = URL(fileURLWithPath: FileManager.default.currentDirectoryPath)
    ) {
        self.intent = intent
        self.id = id
        self.groupIdentifier = groupIdentifier
        self.mode = mode
        self.parameters = parameters
        self.source = source
        self.baseDirectory = baseDirectory
    }
}

/// A user activity to continue, as read from an activity file (`extrun continue`):
///
///     {"activityType": "com.example.people.viewPerson", "title": "Anne Johnson",
///      "userInfo": {"person": "anne"},
///      "interaction": {"intent": "ViewPerson", "parameters": {...}, "response": {...}}}
///
/// `interaction` is optional: the intent (with its resolved parameters and the
/// extension's response) the activity carries on with, as in an escalation.
public struct ActivityInvocation: Sendable, Equatable {
    public var activity: UserActivity
    public var interaction: Interaction?
    /// Where it came from, for error messages: a path or `<stdin>`.
    public var source: String

    public init(activity: UserActivity, interaction: Interaction? = nil, source: String = "<memory>") {
        self.activity = activity
        self.interaction = interaction
        self.source = source
    }
}

/// What intent files and activity files share: a JSON object with known fields,
/// and errors that name the file and the field.
enum JSONInputFile {
    /// Inputs up to this size are read whatever the policy says (its
    /// `host.maxIntentFileBytes` cannot be lower): the policy is read only for a larger one.
    static let alwaysAcceptedBytes = 64 << 10

    /// `invalidIntent`, naming the file and the field.
    static func failure(source: String, field: String?, _ message: String) -> HostError {
        var details: [String: JSONValue] = ["file": .string(source)]
        if let field { details["field"] = .string(field) }
        return HostError(.invalidIntent, "\(source): \(field.map { "\($0): " } ?? "")\(message)", details: details)
    }

    /// An optional string field: absent or null is nil; anything but a string is `invalidIntent` naming `field`.
    static func string(_ value: JSONValue?, source: String, field: String) throws(HostError) -> String? {
        switch value {
        case nil, .null?: return nil
        case .string(let text)?: return text
        case let other?: throw failure(source: source, field: field, "expected a string, got \(other.typeName)")
        }
    }

    /// An optional object field, as `string`.
    static func object(_ value: JSONValue?, source: String, field: String, what: String = "an object") throws(HostError)
        -> [String: JSONValue]?
    {
        switch value {
        case nil, .null?: return nil
        case .object(let fields)?: return fields
        case let other?: throw failure(source: source, field: field, "expected \(what), got \(other.typeName)")
        }
    }

    /// The top-level object, with no field outside `fields`.
    static func object(_ data: Data, source: String, what: String, example: String, fields: [String]) throws(HostError) -> [String: JSONValue] {
        let value: JSONValue
        do {
            value = try JSONParser.parse(data, maxNodes: HostLimits.default.maxMessageNodes)
        } catch {
            throw failure(source: source, field: nil, data.isEmpty ? "the \(what) is empty" : "not valid JSON: \(error)")
        }
        guard case .object(let object) = value else {
            throw failure(source: source, field: nil, "expected a JSON object like \(example), got \(value.typeName)")
        }
        for key in object.keys.sorted() where !fields.contains(key) {
            throw failure(source: source, field: key, "unknown field (allowed: \(fields.joined(separator: ", ")))")
        }
        return object
    }
}

public enum IntentFileParser {
    public static func parse(_ data: Data, source: String, baseDirectory: URL) throws(HostError) -> IntentInvocation {
        func fail(_ field: String?, _ message: String) -> HostError { JSONInputFile.failure(source: source, field: field, message) }
        let object = try JSONInputFile.object(
            data, source: source, what: "intent file", example: #"{"intent": "MakeUppercase", "parameters": {...}}"#,
            fields: ["intent", "parameters", "id", "groupIdentifier", "mode"])
        guard let intentValue = object["intent"] else { throw fail("intent", "missing: name the intent to handle") }
        guard case .string(let intent) = intentValue, !intent.isEmpty else {
            throw fail("intent", "expected a non-empty string, got \(intentValue.typeName)")
        }
        var invocation = IntentInvocation(intent: intent, source: source, baseDirectory: baseDirectory)
        invocation.id = try JSONInputFile.string(object["id"], source: source, field: "id")
        switch object["groupIdentifier"] {
        case nil, .null?: break
        case .string(let group)? where !group.isEmpty: invocation.groupIdentifier = group
        case let other?: throw fail("groupIdentifier", "expected a non-empty string, got \(other.typeName)")
        }
        switch object["mode"] {
        case nil, .null?: break
        case .string(let text)?:
            guard let mode = Mode(rawValue: text) else { throw fail("mode", "'\(text)' is not a mode (extension or in-app)") }
            invocation.mode = mode
        case let other?: throw fail("mode", "expected \"extension\" or \"in-app\", got \(other.typeName)")
        }
        invocation.parameters =
            try JSONInputFile.object(object["parameters"], source: source, field: "parameters", what: "an object of parameter values") ?? [:]
        return invocation
    }
}

public enum ActivityFileParser {
    static let topLevelFields = ["activityType", "title", "userInfo", "interaction"]
    static let interactionFields = ["identifier", "intent", "parameters", "response"]

    public static func parse(_ data: Data, source: String) throws(HostError) -> ActivityInvocation {
        func fail(_ field: String?, _ message: String) -> HostError { JSONInputFile.failure(source: source, field: field, message) }
        let object = try JSONInputFile.object(
            data, source: source, what: "activity file", example: #"{"activityType": "com.example.people.viewPerson", "userInfo": {...}}"#,
            fields: topLevelFields)
        guard case .string(let type)? = object["activityType"], !type.isEmpty else {
            throw fail("activityType", object["activityType"] == nil ? "missing: name the activity type to continue" : "expected a non-empty string")
        }
        let activity = UserActivity(
            activityType: type, title: try JSONInputFile.string(object["title"], source: source, field: "title"),
            userInfo: try JSONInputFile.object(object["userInfo"], source: source, field: "userInfo"))
        var invocation = ActivityInvocation(activity: activity, source: source)
        if let fields = try JSONInputFile.object(object["interaction"], source: source, field: "interaction") {
            for key in fields.keys.sorted() where !interactionFields.contains(key) {
                throw fail("interaction.\(key)", "unknown field (allowed: \(interactionFields.joined(separator: ", ")))")
            }
            guard case .string(let intent)? = fields["intent"], !intent.isEmpty else {
                throw fail("interaction.intent", "expected the name of the intent the activity carries on with")
            }
            var interaction = Interaction(intent: intent, parameters: [:])
            interaction.identifier = try JSONInputFile.string(fields["identifier"], source: source, field: "interaction.identifier")
            interaction.parameters = try JSONInputFile.object(fields["parameters"], source: source, field: "interaction.parameters") ?? [:]
            if let response = fields["response"], !response.isNull {
                do {
                    interaction.response = try JSONCoding.decode(IntentResponse.self, from: response)
                } catch {
                    throw fail("interaction.response", "not a response ({\"code\": ..., \"properties\": {...}}): \(JSONCoding.describe(error))")
                }
            }
            invocation.interaction = interaction
        }
        return invocation
    }
}
