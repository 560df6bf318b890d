import Foundation

/// A plugin's `manifest.json`: who it is, how to start it, what it handles.
/// The fields are documented in docs/plugin-guide.md.
public struct PluginManifest: Codable, Sendable, Hashable {
    /// Reverse-DNS identifier, e.g. `com.example.uppercase`.
    public var id: String
    public var version: String
    /// The owner identity (developer team + app group) whose store the plugin uses.
    public var owner: String
    public var protocolVersion: Int
    /// Path of the executable, relative to the manifest's directory.
    public var executable: String
    /// Extra arguments passed to the executable.
    public var arguments: [String]
    /// Modes the plugin supports (default: both). Without a mode asked for, `extension` is used when supported.
    public var modes: [Mode]
    public var intents: [IntentDefinition]
    /// Limits the plugin asks for, per mode, within the host policy's maxima.
    public var limits: ManifestLimits?
    /// The app's name as people say it in phrases ("Soup Chef").
    public var appName: String?
    /// Custom types its parameters and outputs use.
    public var types: [CustomTypeDefinition]
    /// User activity types the plugin continues in in-app mode (`extrun continue`, and
    /// the activity of a `continueInApp` answer), besides the names of its own intents,
    /// which it may always continue.
    public var activityTypes: [String]
    /// When a run in extension mode is stopped for going over its memory cap, the host
    /// runs the intent again, once, in in-app mode (docs/protocol.md, "Continuing in the app").
    public var retryInAppOnMemoryLimit: Bool

    public init(
        id: String, version: String, owner: String, protocolVersion: Int = ProtocolVersion.current, executable: String,
        arguments: [String] = [], modes: [Mode] = [.extension, .inApp], intents: [IntentDefinition], limits: ManifestLimits? = nil,
        appName: String? = nil, types: [CustomTypeDefinition] = [], activityTypes: [String] = [], retryInAppOnMemoryLimit: Bool = false
    ) {
        self.activityTypes = activityTypes
        self.retryInAppOnMemoryLimit = retryInAppOnMemoryLimit
        self.limits = limits
        self.appName = appName
        self.types = types
        self.id = id
        self.version = version
        self.owner = owner
        self.protocolVersion = protocolVersion
        self.executable = executable
        self.arguments = arguments
        self.modes = modes
        self.intents = intents
    }

    private enum CodingKeys: String, CodingKey {
        case id, version, owner, protocolVersion, executable, arguments, modes, intents, limits, appName, types, activityTypes,
            retryInAppOnMemoryLimit
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(String.self, forKey: .id)
        version = try c.decode(String.self, forKey: .version)
        owner = try c.decode(String.self, forKey: .owner)
        protocolVersion = try c.decode(Int.self, forKey: .protocolVersion)
        executable = try c.decode(String.self, forKey: .executable)
        arguments = try c.decodeIfPresent([String].self, forKey: .arguments) ?? []
        modes = try c.decodeIfPresent([Mode].self, forKey: .modes) ?? [.extension, .inApp]
        intents = try c.decode([IntentDefinition].self, forKey: .intents)
        limits = try c.decodeIfPresent(ManifestLimits.self, forKey: .limits)
        appName = try c.decodeIfPresent(String.self, forKey: .appName)
        types = try c.decodeIfPresent([CustomTypeDefinition].self, forKey: .types) ?? []
        activityTypes = try c.decodeIfPresent([String].self, forKey: .activityTypes) ?? []
        retryInAppOnMemoryLimit = try c.decodeIfPresent(Bool.self, forKey: .retryInAppOnMemoryLimit) ?? false
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        try c.encode(version, forKey: .version)
        try c.encode(owner, forKey: .owner)
        try c.encode(protocolVersion, forKey: .protocolVersion)
        try c.encode(executable, forKey: .executable)
        try c.encode(arguments, forKey: .arguments)
        try c.encode(modes, forKey: .modes)
        try c.encode(intents, forKey: .intents)
        try c.encodeIfPresent(limits, forKey: .limits)
        try c.encodeIfPresent(appName, forKey: .appName)
        try c.encode(types, forKey: .types)
        if !activityTypes.isEmpty { try c.encode(activityTypes, forKey: .activityTypes) }
        if retryInAppOnMemoryLimit { try c.encode(true, forKey: .retryInAppOnMemoryLimit) }
    }

    /// Whether the plugin continues user activities of this type: one it declares,
    /// or the name of one of its intents.
    public func continues(activityType: String) -> Bool {
        activityTypes.contains(activityType) || intent(named: activityType) != nil
    }

    public func type(named name: String) -> CustomTypeDefinition? {
        types.first { $0.name == name }
    }

    public func intent(named name: String) -> IntentDefinition? {
        intents.first { $0.name == name }
    }

    /// The mode used when the caller does not choose one: `extension` when supported.
    public var defaultMode: Mode {
        modes.contains(.extension) ? .extension : (modes.first ?? .extension)
    }

    /// Checks what JSON decoding cannot: versions, uniqueness, defaults that fit their types.
    /// Returns one line per problem, each naming the field.
    public func problems() -> [String] {
        var problems: [String] = []
        if id.isEmpty || id.contains(where: { $0.isWhitespace || $0 == "/" }) {
            problems.append("id: '\(id)' is not a valid plugin id (use reverse-DNS, e.g. com.example.uppercase)")
        }
        if owner.isEmpty { problems.append("owner: must not be empty") }
        if protocolVersion != ProtocolVersion.current {
            problems.append("protocolVersion: \(protocolVersion) is not supported (this host speaks version \(ProtocolVersion.current))")
        }
        if executable.isEmpty { problems.append("executable: must not be empty") }
        if modes.isEmpty { problems.append("modes: must list at least one of extension, in-app") }
        if intents.isEmpty { problems.append("intents: the plugin declares no intent") }
        if retryInAppOnMemoryLimit && !(modes.contains(.extension) && modes.contains(.inApp)) {
            problems.append("retryInAppOnMemoryLimit: needs both modes in modes (it retries an extension-mode run in in-app mode)")
        }
        var seenActivities = Set<String>()
        for (i, type) in activityTypes.enumerated() {
            if type.isEmpty || type.contains(where: { $0.isWhitespace }) {
                problems.append("activityTypes[\(i)]: '\(type)' is not an activity type (a non-empty name without spaces, e.g. com.example.people.viewPerson)")
            }
            if !seenActivities.insert(type).inserted { problems.append("activityTypes[\(i)]: '\(type)' is declared twice") }
        }
        if !activityTypes.isEmpty && !modes.contains(.inApp) {
            problems.append("activityTypes: activities are continued in in-app mode, which modes does not list")
        }
        var seenTypes = Set<String>()
        for (i, type) in types.enumerated() {
            if type.name.isEmpty { problems.append("types[\(i)].name: must not be empty") }
            if !seenTypes.insert(type.name).inserted { problems.append("types[\(i)].name: type '\(type.name)' is declared twice") }
        }
        var seenIntents = Set<String>()
        for (i, intent) in intents.enumerated() {
            let path = "intents[\(i)]"
            if intent.name.isEmpty { problems.append("\(path).name: must not be empty") }
            if !seenIntents.insert(intent.name).inserted { problems.append("\(path).name: intent '\(intent.name)' is declared twice") }
            problems += intent.problems(path: path)
            for (j, parameter) in intent.parameters.enumerated() where parameter.type == .custom {
                let name = parameter.customType ?? ""
                if !seenTypes.contains(name) {
                    problems.append("\(path).parameters[\(j)].customType: '\(name)' is not one of the manifest's types")
                }
            }
            for (j, output) in intent.outputs.enumerated() where output.type == .custom {
                if let name = output.customType, !name.isEmpty, !seenTypes.contains(name) {
                    problems.append("\(path).outputs[\(j)].customType: '\(name)' is not one of the manifest's types")
                }
            }
            for (j, phrase) in (intent.phrases ?? []).enumerated() {
                // Case-insensitive without a locale (Foundation's localized search loads ICU's locale data).
                if let appName, phrase.lowercased().firstRange(of: appName.lowercased()) == nil {
                    problems.append("\(path).phrases[\(j)]: '\(phrase)' does not contain the app's name '\(appName)'")
                }
                let slots = Phrase.slots(in: phrase)
                if slots.count > 1 { problems.append("\(path).phrases[\(j)]: a phrase may hold at most one parameter") }
                for slot in slots where intent.parameter(named: slot) == nil {
                    problems.append("\(path).phrases[\(j)]: '\(slot)' is not a parameter of \(intent.name)")
                }
            }
        }
        return problems
    }
}

public struct IntentDefinition: Codable, Sendable, Hashable {
    public var name: String
    public var title: String?
    public var description: String?
    public var parameters: [ParameterDefinition]
    /// Custom response codes, besides the standard ones.
    public var responses: [ResponseDefinition]
    /// Whether it may run without bringing the app forward (in extension mode).
    public var runsInBackground: Bool?
    /// What people say to run it, e.g. "Order ${soup} in Soup Chef": the app's name and at most one `${parameter}`.
    public var phrases: [String]?
    /// Asked (yes/no) after `confirm` answers ready, before `handle`, e.g. "Order ${quantity} ${soup}?".
    public var confirmation: String?
    /// The typed output properties its responses may carry (`properties` of a response). Empty:
    /// none declared, and a response's properties are untyped (manifests before typed outputs).
    public var outputs: [OutputDefinition]

    public init(
        name: String, title: String? = nil, description: String? = nil, parameters: [ParameterDefinition] = [],
        responses: [ResponseDefinition] = [], runsInBackground: Bool? = nil, phrases: [String]? = nil, confirmation: String? = nil,
        outputs: [OutputDefinition] = []
    ) {
        self.outputs = outputs
        self.name = name
        self.title = title
        self.description = description
        self.parameters = parameters
        self.responses = responses
        self.runsInBackground = runsInBackground
        self.phrases = phrases
        self.confirmation = confirmation
    }

    private enum CodingKeys: String, CodingKey {
        case name, title, description, parameters, responses, runsInBackground, phrases, confirmation, outputs
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        name = try c.decode(String.self, forKey: .name)
        title = try c.decodeIfPresent(String.self, forKey: .title)
        description = try c.decodeIfPresent(String.self, forKey: .description)
        parameters = try c.decodeIfPresent([ParameterDefinition].self, forKey: .parameters) ?? []
        responses = try c.decodeIfPresent([ResponseDefinition].self, forKey: .responses) ?? []
        runsInBackground = try c.decodeIfPresent(Bool.self, forKey: .runsInBackground)
        phrases = try c.decodeIfPresent([String].self, forKey: .phrases)
        confirmation = try c.decodeIfPresent(String.self, forKey: .confirmation)
        outputs = try c.decodeIfPresent([OutputDefinition].self, forKey: .outputs) ?? []
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(name, forKey: .name)
        try c.encodeIfPresent(title, forKey: .title)
        try c.encodeIfPresent(description, forKey: .description)
        try c.encode(parameters, forKey: .parameters)
        try c.encode(responses, forKey: .responses)
        try c.encodeIfPresent(runsInBackground, forKey: .runsInBackground)
        try c.encodeIfPresent(phrases, forKey: .phrases)
        try c.encodeIfPresent(confirmation, forKey: .confirmation)
        if !outputs.isEmpty { try c.encode(outputs, forKey: .outputs) }
    }

    public func output(named name: String) -> OutputDefinition? {
        outputs.first { $0.name == name }
    }

    public func parameter(named name: String) -> ParameterDefinition? {
        parameters.first { $0.name == name }
    }

    /// Whether `code` is a standard code or one this intent declares.
    public func isKnownResponseCode(_ code: String) -> Bool {
        ResponseCode.standard.contains(code) || responses.contains { $0.code == code }
    }

    /// Whether a response with `code` counts as success (exit status 0).
    public func isSuccessCode(_ code: String) -> Bool {
        code == ResponseCode.success || responses.contains { $0.code == code && $0.success }
    }

    func problems(path: String) -> [String] {
        var problems: [String] = []
        var seen = Set<String>()
        for (i, parameter) in parameters.enumerated() {
            let p = "\(path).parameters[\(i)]"
            if parameter.name.isEmpty { problems.append("\(p).name: must not be empty") }
            if !seen.insert(parameter.name).inserted { problems.append("\(p).name: parameter '\(parameter.name)' is declared twice") }
            problems += parameter.problems(path: p)
            if let parent = parameter.parent {
                if let parentDefinition = parameters.first(where: { $0.name == parent.parameter }) {
                    if parentDefinition.name == parameter.name {
                        problems.append("\(p).parent.parameter: a parameter cannot be its own parent")
                    } else if let problem = ParameterValueCheck.problem(parent.value, for: parentDefinition) {
                        problems.append("\(p).parent.value: \(problem)")
                    }
                } else {
                    problems.append("\(p).parent.parameter: '\(parent.parameter)' is not a parameter of \(name)")
                }
            }
        }
        var codes = Set<String>()
        for (i, response) in responses.enumerated() {
            let r = "\(path).responses[\(i)].code"
            if ResponseCode.standard.contains(response.code) {
                problems.append("\(r): '\(response.code)' is a standard code; custom codes need their own names")
            } else if response.code.isEmpty {
                problems.append("\(r): must not be empty")
            }
            if !codes.insert(response.code).inserted { problems.append("\(r): '\(response.code)' is declared twice") }
        }
        var outputNames = Set<String>()
        for (i, output) in outputs.enumerated() {
            let o = "\(path).outputs[\(i)]"
            if output.name.isEmpty { problems.append("\(o).name: must not be empty") }
            if !outputNames.insert(output.name).inserted { problems.append("\(o).name: output '\(output.name)' is declared twice") }
            if output.type == .enum && (output.values ?? []).isEmpty { problems.append("\(o).values: an enum output must list its values") }
            if output.type != .enum && output.values != nil { problems.append("\(o).values: only enum outputs take values") }
            if output.type == .custom && (output.customType ?? "").isEmpty { problems.append("\(o).customType: a custom output must name its type") }
        }
        if !outputs.isEmpty {
            for (i, response) in responses.enumerated() {
                for name in response.properties ?? [] where output(named: name) == nil {
                    problems.append("\(path).responses[\(i)].properties: '\(name)' is not one of the intent's outputs")
                }
            }
        }
        return problems
    }
}

/// One typed output property of an intent: what a response's `properties` may carry under `name`.
/// The same types as parameters; `custom` names one of the manifest's `types`.
public struct OutputDefinition: Codable, Sendable, Hashable {
    public var name: String
    public var type: ParameterType
    public var title: String?
    public var description: String?
    public var multiple: Bool
    /// For `enum`: the allowed values, and their display names.
    public var values: [String]?
    public var valueTitles: [String: String]?
    /// For `custom`: the name of the manifest type.
    public var customType: String?

    public init(
        name: String, type: ParameterType, title: String? = nil, description: String? = nil, multiple: Bool = false,
        values: [String]? = nil, valueTitles: [String: String]? = nil, customType: String? = nil
    ) {
        self.name = name
        self.type = type
        self.title = title
        self.description = description
        self.multiple = multiple
        self.values = values
        self.valueTitles = valueTitles
        self.customType = customType
    }

    private enum CodingKeys: String, CodingKey { case name, type, title, description, multiple, values, valueTitles, customType }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        name = try c.decode(String.self, forKey: .name)
        type = try c.decode(ParameterType.self, forKey: .type)
        title = try c.decodeIfPresent(String.self, forKey: .title)
        description = try c.decodeIfPresent(String.self, forKey: .description)
        multiple = try c.decodeIfPresent(Bool.self, forKey: .multiple) ?? false
        values = try c.decodeIfPresent([String].self, forKey: .values)
        valueTitles = try c.decodeIfPresent([String: String].self, forKey: .valueTitles)
        customType = try c.decodeIfPresent(String.self, forKey: .customType)
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(name, forKey: .name)
        try c.encode(type, forKey: .type)
        try c.encodeIfPresent(title, forKey: .title)
        try c.encodeIfPresent(description, forKey: .description)
        if multiple { try c.encode(true, forKey: .multiple) }
        try c.encodeIfPresent(values, forKey: .values)
        try c.encodeIfPresent(valueTitles, forKey: .valueTitles)
        try c.encodeIfPresent(customType, forKey: .customType)
    }
}

public struct ResponseDefinition: Codable, Sendable, Hashable {
    public var code: String
    /// Whether this custom code counts as success.
    public var success: Bool
    /// A dialog template, e.g. "Sorry, ${soup} is sold out."
    public var dialog: String?
    /// The output properties this response carries.
    public var properties: [String]?

    public init(code: String, success: Bool = false, dialog: String? = nil, properties: [String]? = nil) {
        self.code = code
        self.success = success
        self.dialog = dialog
        self.properties = properties
    }

    private enum CodingKeys: String, CodingKey { case code, success, dialog, properties }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        code = try c.decode(String.self, forKey: .code)
        success = try c.decodeIfPresent(Bool.self, forKey: .success) ?? false
        dialog = try c.decodeIfPresent(String.self, forKey: .dialog)
        properties = try c.decodeIfPresent([String].self, forKey: .properties)
    }
}

/// What a manifest may ask of the host's limits, per mode:
/// `"limits": {"extension": {"memoryBytes": 62914560, "deadlineMs": 20000}}`.
public struct ManifestLimits: Codable, Sendable, Hashable {
    public struct Request: Codable, Sendable, Hashable {
        public var memoryBytes: Int64?
        public var deadlineMs: Int?
        public init(memoryBytes: Int64? = nil, deadlineMs: Int? = nil) {
            self.memoryBytes = memoryBytes
            self.deadlineMs = deadlineMs
        }
    }
    public var `extension`: Request?
    public var inApp: Request?

    public init(extension: Request? = nil, inApp: Request? = nil) {
        self.extension = `extension`
        self.inApp = inApp
    }

    private enum CodingKeys: String, CodingKey {
        case `extension` = "extension"
        case inApp = "in-app"
    }
}

/// A custom type: its properties, and how a value is shown (templates over its properties).
///
/// A value on the wire is an object with a string `identifier`, optional
/// `title`, `subtitle`, `image` (its display), and the declared properties.
public struct CustomTypeDefinition: Codable, Sendable, Hashable {
    public struct Property: Codable, Sendable, Hashable {
        public var name: String
        public var type: ParameterType
        public var multiple: Bool?
        public var customType: String?
        public init(name: String, type: ParameterType, multiple: Bool? = nil, customType: String? = nil) {
            self.name = name
            self.type = type
            self.multiple = multiple
            self.customType = customType
        }
    }

    public var name: String
    public var properties: [Property]
    /// Templates such as "${name}" over the properties.
    public var display: DisplayTemplate?

    public init(name: String, properties: [Property] = [], display: DisplayTemplate? = nil) {
        self.name = name
        self.properties = properties
        self.display = display
    }
}

public struct DisplayTemplate: Codable, Sendable, Hashable {
    public var title: String
    public var subtitle: String?
    public var image: String?
    public init(title: String, subtitle: String? = nil, image: String? = nil) {
        self.title = title
        self.subtitle = subtitle
        self.image = image
    }
}

/// Phrase templates: "Order ${soup} in Soup Chef".
public enum Phrase {
    /// The parameter names in `${...}` slots.
    public static func slots(in template: String) -> [String] {
        var names: [String] = []
        var rest = template[...]
        while let open = rest.firstRange(of: "${") {
            guard let close = rest[open.upperBound...].firstIndex(of: "}") else { break }
            names.append(String(rest[open.upperBound..<close]))
            rest = rest[rest.index(after: close)...]
        }
        return names
    }

    /// Fills `${name}` slots from `values` (strings as they are, custom values by their title),
    /// in one pass: a value is never itself filled in.
    public static func fill(_ template: String, with values: [String: JSONValue]) -> String {
        var result = ""
        var rest = template[...]
        while let open = rest.firstRange(of: "${"), let close = rest[open.upperBound...].firstIndex(of: "}") {
            result += rest[..<open.lowerBound]
            let name = String(rest[open.upperBound..<close])
            result += text(for: values[name], name: name)
            rest = rest[rest.index(after: close)...]
        }
        return result + rest
    }

    static func text(for value: JSONValue?, name: String) -> String {
        switch value {
        case .string(let s)?: s
        case .object(let fields)?: fields["title"]?.stringValue ?? fields["identifier"]?.stringValue ?? name
        case .int(let i)?: String(i)
        case .double(let d)?: String(d)
        case .bool(let b)?: b ? "yes" : "no"
        case .array(let items)?: items.map { text(for: $0, name: name) }.joined(separator: ", ")
        default: name
        }
    }
}
