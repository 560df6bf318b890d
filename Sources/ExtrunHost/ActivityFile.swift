import ExtrunProtocol
import Foundation

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

public enum ActivityFileParser {
    static let topLevelFields = ["activityType", "title", "userInfo", "interaction"]
    static let interactionFields = ["identifier", "intent", "parameters", "response"]

    /// Reads an activity file; `-` reads standard input.
    public static func read(path: String) throws(HostError) -> ActivityInvocation {
        let input = try JSONInputFile.read(path: path, what: "activity file")
        return try parse(input.data, source: input.source)
    }

    public static func parse(_ data: Data, source: String) throws(HostError) -> ActivityInvocation {
        func fail(_ field: String?, _ message: String) -> HostError { JSONInputFile.failure(source: source, field: field, message) }
        let object = try JSONInputFile.object(
            data, source: source, what: "activity file", example: #"{"activityType": "com.example.people.viewPerson", "userInfo": {...}}"#,
            fields: topLevelFields)
        guard case .string(let type)? = object["activityType"], !type.isEmpty else {
            throw fail("activityType", object["activityType"] == nil ? "missing: name the activity type to continue" : "expected a non-empty string")
        }
        var activity = UserActivity(activityType: type)
        switch object["title"] {
        case nil, .null?: break
        case .string(let title)?: activity.title = title
        case let other?: throw fail("title", "expected a string, got \(other.typeName)")
        }
        switch object["userInfo"] {
        case nil, .null?: break
        case .object(let info)?: activity.userInfo = info
        case let other?: throw fail("userInfo", "expected an object, got \(other.typeName)")
        }
        var invocation = ActivityInvocation(activity: activity, source: source)
        switch object["interaction"] {
        case nil, .null?: break
        case .object(let fields)?:
            for key in fields.keys.sorted() where !interactionFields.contains(key) {
                throw fail("interaction.\(key)", "unknown field (allowed: \(interactionFields.joined(separator: ", ")))")
            }
            guard case .string(let intent)? = fields["intent"], !intent.isEmpty else {
                throw fail("interaction.intent", "expected the name of the intent the activity carries on with")
            }
            var interaction = Interaction(intent: intent, parameters: [:])
            switch fields["identifier"] {
            case nil, .null?: break
            case .string(let id)?: interaction.identifier = id
            case let other?: throw fail("interaction.identifier", "expected a string, got \(other.typeName)")
            }
            switch fields["parameters"] {
            case nil, .null?: break
            case .object(let parameters)?: interaction.parameters = parameters
            case let other?: throw fail("interaction.parameters", "expected an object, got \(other.typeName)")
            }
            if let response = fields["response"], !response.isNull {
                do {
                    interaction.response = try JSONCoding.decode(IntentResponse.self, from: response)
                } catch {
                    throw fail("interaction.response", "not a response ({\"code\": ..., \"properties\": {...}}): \(JSONCoding.describe(error))")
                }
            }
            invocation.interaction = interaction
        case let other?:
            throw fail("interaction", "expected an object, got \(other.typeName)")
        }
        return invocation
    }
}

extension PluginCatalog {
    /// The plugin that continues activities of `type`: the one that declares it in
    /// `activityTypes` (or has an intent of that name), or the error that says why there is none.
    public func continuer(of type: String) throws(HostError) -> DiscoveredPlugin {
        let declaring = plugins.filter { $0.manifest.activityTypes.contains(type) }
        let claimants = declaring.isEmpty ? plugins.filter { $0.manifest.intent(named: type) != nil } : declaring
        if claimants.count > 1 {
            let list = claimants.map { "\($0.manifest.id) (\($0.manifestURL.path))" }.joined(separator: " and ")
            throw HostError(
                .configurationError, "activity type '\(type)' is declared by more than one plugin: \(list); remove one of them from the plugin path",
                details: ["files": .array(claimants.map { .string($0.manifestURL.path) })])
        }
        guard let plugin = claimants.first else {
            let known = plugins.flatMap(\.manifest.activityTypes).sorted()
            throw HostError(
                .noHandler,
                "no plugin continues the activity type '\(type)': no manifest declares it in activityTypes, and no intent has that name"
                    + (known.isEmpty ? "" : " (declared activity types: \(known.joined(separator: ", ")))"),
                details: ["activityType": .string(type)])
        }
        if let problem = plugin.problem {
            throw HostError(.configurationError, "\(plugin.manifestURL.path): \(problem)", details: ["file": .string(plugin.manifestURL.path)])
        }
        return plugin
    }
}
