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
