import ExtrunProtocol

/// What `extrun describe` shows of an intent, from its plugin's manifest (no plugin
/// starts): the plugin, its version, owner, modes and app name, the intent's definition
/// and the custom types its parameters and outputs use. The same JSON is what
/// `describe --format json` prints and what `extrun serve` answers to
/// `GET /v1/intents/NAME` (docs/serve.md), so that `extrun describe --server` prints
/// exactly what the local command prints. It names no folder: where the plugin lies is
/// the host's business (a service's callers are not told its plugin path).
public struct IntentDescription: Sendable, Equatable {
    public var plugin: String
    public var version: String
    public var owner: String
    public var modes: [Mode]
    public var appName: String?
    public var definition: IntentDefinition
    /// The custom types the intent's parameters and outputs use, in the manifest's order.
    public var types: [CustomTypeDefinition]

    public init(plugin: DiscoveredPlugin, definition: IntentDefinition) {
        let manifest = plugin.manifest
        self.plugin = manifest.id
        version = manifest.version
        owner = manifest.owner
        modes = manifest.modes
        appName = manifest.appName
        self.definition = definition
        let used = Set(definition.parameters.compactMap(\.customType) + definition.outputs.compactMap(\.customType))
        types = manifest.types.filter { used.contains($0.name) }
    }

    /// `{"plugin", "version", "owner", "modes", "appName"?, "intent", "types"?}`.
    public var json: JSONValue {
        var object: [String: JSONValue] = [
            "plugin": .string(plugin), "version": .string(version), "owner": .string(owner),
            "modes": .array(modes.map { .string($0.rawValue) }),
            "intent": (try? JSONCoding.value(of: definition)) ?? .null,
        ]
        if let appName { object["appName"] = .string(appName) }
        if !types.isEmpty { object["types"] = (try? JSONCoding.value(of: types)) ?? .null }
        return .object(object)
    }

    /// Reads `json` back (what a service answered); `what` names its source in the error.
    public init(json: JSONValue, what: String) throws(HostError) {
        func field(_ name: String) throws(HostError) -> String {
            guard let value = json[name]?.stringValue else {
                throw HostError(.internalError, "\(what): the description has no \(name)", details: ["field": .string(name)])
            }
            return value
        }
        plugin = try field("plugin")
        version = try field("version")
        owner = try field("owner")
        modes = (json["modes"]?.arrayValue ?? []).compactMap { $0.stringValue.flatMap(Mode.init(rawValue:)) }
        appName = json["appName"]?.stringValue
        do {
            definition = try JSONCoding.decode(IntentDefinition.self, from: json["intent"] ?? .null)
            types = try json["types"].map { try JSONCoding.decode([CustomTypeDefinition].self, from: $0) } ?? []
        } catch {
            throw HostError(.internalError, "\(what): the description's intent cannot be read: \(JSONCoding.describe(error))")
        }
    }
}
