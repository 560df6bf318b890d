import ExtrunHost
import ExtrunProtocol
import Foundation

/// The MCP tools of the installed intents: one tool per intent, named after it,
/// with its `inputSchema` from the parameters and its `outputSchema` from the typed
/// outputs (docs/mcp.md, "Mapping").
struct ToolCatalog: Sendable {
    struct Tool: Sendable {
        var name: String
        var intent: String
        var plugin: DiscoveredPlugin
        var definition: IntentDefinition
        /// Set when more than one plugin claims the intent: the host runs none of them.
        var conflict: String?
        var json: JSONValue
    }

    /// The input property a client without elicitation sets after the person confirmed (as `--yes`).
    static let confirmedArgument = "_confirmed"

    var tools: [Tool]
    /// The tools as `tools/list` answers them, for the change check.
    var listing: JSONValue

    func tool(named name: String) -> Tool? {
        tools.first { $0.name == name }
    }

    /// - Parameters: `structured`: the client's protocol version has `outputSchema` (2025-06-18 and later);
    ///   `confirmArgument`: offer `_confirmed` (a client that cannot answer elicitations).
    init(catalog: PluginCatalog, structured: Bool, confirmArgument: Bool) {
        var claimants: [String: [DiscoveredPlugin]] = [:]
        var order: [String] = []
        for plugin in catalog.plugins where plugin.problem == nil {
            for intent in plugin.manifest.intents {
                if claimants[intent.name] == nil { order.append(intent.name) }
                claimants[intent.name, default: []].append(plugin)
            }
        }
        var tools: [Tool] = []
        for intent in order {
            guard let plugins = claimants[intent], let plugin = plugins.first, let definition = plugin.manifest.intent(named: intent) else { continue }
            let name = Self.stableToolName(intent)
            let conflict =
                plugins.count > 1
                ? "claimed by \(plugins.count) plugins (\(plugins.map { "\($0.manifest.id) in \($0.directory.path)" }.joined(separator: ", "))): calls fail until only one of them is on the plugin path"
                : nil
            var json: [String: JSONValue] = [
                "name": .string(name),
                "description": .string(Self.description(of: definition, plugin: plugin, conflict: conflict)),
                "inputSchema": Self.inputSchema(of: definition, manifest: plugin.manifest, confirmArgument: confirmArgument),
            ]
            if let title = definition.title { json["title"] = .string(title) }
            if structured, let output = Self.outputSchema(of: definition, manifest: plugin.manifest) { json["outputSchema"] = output }
            tools.append(Tool(name: name, intent: intent, plugin: plugin, definition: definition, conflict: conflict, json: .object(json)))
        }
        self.tools = tools
        listing = .array(tools.map(\.json))
    }

    /// MCP tool names are 1-128 of `A-Z a-z 0-9 _ - .`; anything else becomes `_`.
    static func toolName(_ intent: String) -> String {
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")
        let mapped = String(intent.map { allowed.contains($0) ? $0 : "_" }.prefix(120))
        return mapped.isEmpty ? "_" : mapped
    }

    /// An intent's tool name: its own name when that is a valid tool name; otherwise
    /// (`Pay Bob`, a name over 120 characters) the mapped name and 8 hex digits of a hash
    /// (FNV-1a) of the exact name, `Pay_Bob_1a2b3c4d`. So an intent keeps its tool name
    /// whatever else is installed and in whatever order plugins are found, and `Pay Bob`
    /// never takes the name of an intent called `Pay_Bob`.
    static func stableToolName(_ intent: String) -> String {
        let mapped = toolName(intent)
        return mapped == intent ? mapped : qualifiedToolName(intent)
    }

    static func qualifiedToolName(_ intent: String) -> String {
        var hash: UInt32 = 0x811c_9dc5
        for byte in intent.utf8 {
            hash ^= UInt32(byte)
            hash = hash &* 0x0100_0193
        }
        let hex = String(hash, radix: 16)
        return "\(String(toolName(intent).prefix(119)))_\(String(repeating: "0", count: 8 - hex.count))\(hex)"
    }

    static func description(of intent: IntentDefinition, plugin: DiscoveredPlugin, conflict: String?) -> String {
        var parts: [String] = []
        if let conflict { parts.append("UNAVAILABLE: \(intent.name) is \(conflict).") }
        let head = [intent.title, intent.description].compactMap { $0 }.joined(separator: ": ")
        parts.append(head.isEmpty ? intent.name : head)
        let app = plugin.manifest.appName.map { "\($0) (\(plugin.manifest.id))" } ?? plugin.manifest.id
        parts.append("From \(app), run in extrun's sandbox.")
        if let confirmation = intent.confirmation {
            parts.append("Asks the user to confirm first (\"\(confirmation)\").")
        }
        return parts.joined(separator: " ")
    }

    // MARK: - Schemas

    static func inputSchema(of intent: IntentDefinition, manifest: PluginManifest, confirmArgument: Bool) -> JSONValue {
        var properties: [String: JSONValue] = [:]
        var required: [JSONValue] = []
        for parameter in intent.parameters {
            var schema = valueSchema(
                type: parameter.type, multiple: parameter.multiple, values: parameter.values, valueTitles: parameter.valueTitles,
                customType: parameter.customType, manifest: manifest)
            schema["title"] = parameter.title.map(JSONValue.string)
            var notes: [String] = []
            if let description = parameter.description { notes.append(description) }
            if parameter.type == .file {
                let types = (parameter.allowedTypes ?? []).joined(separator: ", ")
                notes.append("A path to a file on the machine running extrun" + (types.isEmpty ? "." : " (of type \(types))."))
            }
            if parameter.type == .date { notes.append("An ISO 8601 date, e.g. 2026-11-22 or 2026-11-22T10:30:00Z.") }
            if parameter.dynamicOptions { notes.append("The app offers the possible values: leave it out to have the user choose among them.") }
            if let parent = parameter.parent {
                notes.append("Applies only when \(parent.parameter) is \(String(decoding: JSONWriter.bytes(parent.value), as: UTF8.self)).")
            }
            if !notes.isEmpty { schema["description"] = .string(notes.joined(separator: " ")) }
            if let value = parameter.default, !value.isNull { schema["default"] = value }
            properties[parameter.name] = .object(schema)
            if parameter.required && parameter.default == nil && parameter.parent == nil { required.append(.string(parameter.name)) }
        }
        if confirmArgument && needsConfirmation(intent) && properties[confirmedArgument] == nil {
            properties[confirmedArgument] = [
                "type": "boolean",
                "description":
                    "Set to true only once the user has confirmed this action (the call otherwise ends asking for confirmation, with the question to put to the user).",
            ]
        }
        var schema: [String: JSONValue] = ["type": "object", "properties": .object(properties)]
        if !required.isEmpty { schema["required"] = .array(required) }
        return .object(schema)
    }

    /// Whether a run may stop to ask for a confirmation: the intent has a confirmation question,
    /// or a parameter a resolution may ask to confirm.
    static func needsConfirmation(_ intent: IntentDefinition) -> Bool {
        intent.confirmation != nil || intent.parameters.contains { $0.confirmationPrompt != nil }
    }

    static func outputSchema(of intent: IntentDefinition, manifest: PluginManifest) -> JSONValue? {
        guard !intent.outputs.isEmpty else { return nil }
        var properties: [String: JSONValue] = [:]
        for output in intent.outputs {
            var schema = valueSchema(
                type: output.type, multiple: output.multiple, values: output.values, valueTitles: output.valueTitles,
                customType: output.customType, manifest: manifest)
            schema["title"] = output.title.map(JSONValue.string)
            schema["description"] = output.description.map(JSONValue.string)
            properties[output.name] = .object(schema)
        }
        // No `required`: each response code carries the outputs it declares (a subset).
        return ["type": "object", "properties": .object(properties)]
    }

    /// The JSON Schema of one value (a parameter's or an output's), as the wire carries it.
    static func valueSchema(
        type: ParameterType, multiple: Bool, values: [String]?, valueTitles: [String: String]?, customType: String?,
        manifest: PluginManifest, depth: Int = 0
    ) -> [String: JSONValue] {
        var single: [String: JSONValue]
        switch type {
        case .string, .date, .file: single = ["type": "string"]
        case .integer: single = ["type": "integer"]
        case .number: single = ["type": "number"]
        case .boolean: single = ["type": "boolean"]
        case .enum:
            let values = values ?? []
            if values.isEmpty {
                single = ["type": "string"]
            } else if let valueTitles, !valueTitles.isEmpty {
                single = [
                    "type": "string",
                    "oneOf": .array(values.map { ["const": .string($0), "title": .string(valueTitles[$0] ?? $0)] }),
                ]
            } else {
                single = ["type": "string", "enum": .array(values.map(JSONValue.string))]
            }
        case .custom:
            var properties: [String: JSONValue] = [
                "identifier": ["type": "string"], "title": ["type": "string"], "subtitle": ["type": "string"],
            ]
            // A type's properties, typed (custom types nest; a cycle stops at an untyped object).
            if depth < 4, let definition = customType.flatMap(manifest.type(named:)) {
                for property in definition.properties {
                    properties[property.name] = .object(
                        valueSchema(
                            type: property.type, multiple: property.multiple ?? false, values: nil, valueTitles: nil,
                            customType: property.customType, manifest: manifest, depth: depth + 1))
                }
            }
            single = ["type": "object", "properties": .object(properties), "required": ["identifier"]]
            if let customType { single["description"] = .string("A \(customType), by its identifier.") }
        }
        return multiple ? ["type": "array", "items": .object(single)] : single
    }
}
