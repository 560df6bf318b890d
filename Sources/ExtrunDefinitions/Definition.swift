import ExtrunProtocol
import Foundation

// The model of a definition file (docs/definitions.md). Every element keeps the
// spots (JSON path and position) of its fields, so that validation can say
// where a problem is.

/// A whole definition file: the plugin, its enums and custom types, its intents.
public struct Definition: Sendable, Hashable {
    public var plugin: PluginSpec
    public var enums: [EnumSpec]
    public var types: [TypeSpec]
    public var intents: [IntentSpec]
    public var spot: Spot

    public func enumSpec(named name: String) -> EnumSpec? { enums.first { $0.name == name } }
    public func typeSpec(named name: String) -> TypeSpec? { types.first { $0.name == name } }
}

/// Where an element and its fields are.
public struct Spots: Sendable, Hashable {
    public var element: Spot
    public var fields: [String: Spot] = [:]

    public subscript(_ field: String) -> Spot { fields[field] ?? element.child(field) }
}

public struct PluginSpec: Sendable, Hashable {
    public var id: String
    public var version: String
    public var owner: String
    public var appName: String?
    /// The executable's name; nil: the directory name of the definition file.
    public var executable: String?
    public var arguments: [String]
    public var modes: [Mode]
    public var limits: ManifestLimits?
    /// User activity types continued in in-app mode, besides the intents' names.
    public var activityTypes: [String] = []
    /// Retry an extension-mode run that went over its memory cap in in-app mode.
    public var retryInAppOnMemoryLimit = false
    public var spots: Spots
}

public struct EnumCaseSpec: Sendable, Hashable {
    public var value: String
    public var title: String?
    public var spot: Spot
}

public struct EnumSpec: Sendable, Hashable {
    public var name: String
    public var description: String?
    public var cases: [EnumCaseSpec]
    public var spots: Spots
}

/// A property of a custom type, or an output property of an intent's responses.
public struct PropertySpec: Sendable, Hashable {
    public var name: String
    /// A built-in type name (`string`...), or the name of one of the file's enums or types.
    public var type: String
    public var multiple: Bool
    public var title: String?
    public var description: String?
    public var spots: Spots
}

public struct TypeSpec: Sendable, Hashable {
    public var name: String
    public var description: String?
    public var properties: [PropertySpec]
    public var display: DisplayTemplate?
    public var spots: Spots
}

public struct ParameterSpec: Sendable, Hashable {
    public var name: String
    /// A built-in type name, `enum` with inline `values`, or the name of one of the file's enums or types.
    public var type: String
    public var title: String?
    public var description: String?
    public var required: Bool
    public var multiple: Bool
    public var `default`: JSONValue?
    public var prompt: String?
    public var confirmationPrompt: String?
    /// For `"type": "enum"`: the cases declared in place.
    public var values: [EnumCaseSpec]?
    public var allowedTypes: [String]?
    public var dynamicOptions: Bool
    public var parent: ParentCondition?
    public var unsupportedReasons: [UnsupportedReason]
    public var spots: Spots
}

public struct ResponseSpec: Sendable, Hashable {
    public var code: String
    /// Whether a custom code counts as success; nil when not given.
    public var success: Bool?
    /// A dialog template over the response's properties: "Sorry, ${soup} is out of stock."
    public var dialog: String?
    /// Names of the intent's outputs this response carries; nil when not given.
    public var properties: [String]?
    public var spots: Spots
}

public struct IntentSpec: Sendable, Hashable {
    public var name: String
    public var title: String?
    public var description: String?
    public var runsInBackground: Bool?
    public var confirmation: String?
    public var phrases: [String]
    public var parameters: [ParameterSpec]
    /// The typed output properties its responses may carry.
    public var outputs: [PropertySpec]
    public var responses: [ResponseSpec]
    public var spots: Spots

    public func parameter(named name: String) -> ParameterSpec? { parameters.first { $0.name == name } }
    public func output(named name: String) -> PropertySpec? { outputs.first { $0.name == name } }
    public func response(code: String) -> ResponseSpec? { responses.first { $0.code == code } }
}

/// The built-in type names of parameters and properties.
public enum BuiltinType {
    public static let names: [String] = ["string", "integer", "number", "boolean", "date", "file"]
}
