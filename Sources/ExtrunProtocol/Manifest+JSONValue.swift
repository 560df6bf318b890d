/// Reading a manifest without Codable: every `extrun handle` decodes the manifest
/// of the plugin it starts, and in a fresh process JSONDecoder's first use of each
/// type costs more than the rest of the catalog lookup (docs/benchmarks.md). The
/// fields, defaults and errors (coding paths included) are those of the Codable
/// conformances in Manifest.swift, which stay for writing and for other decoders;
/// ManifestDecodingTests holds the two ways to each other.
extension PluginManifest: JSONValueDecodable {
    public init(jsonValue: JSONValue) throws {
        let f = try JSONFields(jsonValue)
        self.init(
            id: try f.string("id"), version: try f.string("version"), owner: try f.string("owner"), protocolVersion: try f.int("protocolVersion"),
            executable: try f.string("executable"), arguments: try f.optionalStrings("arguments") ?? [],
            modes: try f.optionalRawValues("modes", Mode.self) ?? [.extension, .inApp],
            intents: try f.objects("intents", IntentDefinition.init(fields:)), limits: try f.nested("limits").map(ManifestLimits.init(fields:)),
            appName: try f.optionalString("appName"), types: try f.optionalObjects("types", CustomTypeDefinition.init(fields:)) ?? [],
            activityTypes: try f.optionalStrings("activityTypes") ?? [], retryInAppOnMemoryLimit: try f.optionalBool("retryInAppOnMemoryLimit") ?? false)
    }
}

extension IntentDefinition {
    init(fields f: JSONFields) throws {
        self.init(
            name: try f.string("name"), title: try f.optionalString("title"), description: try f.optionalString("description"),
            parameters: try f.optionalObjects("parameters", ParameterDefinition.init(fields:)) ?? [],
            responses: try f.optionalObjects("responses", ResponseDefinition.init(fields:)) ?? [],
            runsInBackground: try f.optionalBool("runsInBackground"), phrases: try f.optionalStrings("phrases"),
            confirmation: try f.optionalString("confirmation"),
            outputs: try f.optionalObjects("outputs", OutputDefinition.init(fields:)) ?? [])
    }
}

extension OutputDefinition {
    init(fields f: JSONFields) throws {
        self.init(
            name: try f.string("name"), type: try f.rawValue("type", ParameterType.self), title: try f.optionalString("title"),
            description: try f.optionalString("description"), multiple: try f.optionalBool("multiple") ?? false,
            values: try f.optionalStrings("values"), valueTitles: try f.optionalStringMap("valueTitles"),
            customType: try f.optionalString("customType"))
    }
}

extension ParameterDefinition {
    init(fields f: JSONFields) throws {
        self.init(
            name: try f.string("name"), type: try f.rawValue("type", ParameterType.self), title: try f.optionalString("title"),
            required: try f.optionalBool("required") ?? false, multiple: try f.optionalBool("multiple") ?? false, default: f.optional("default"),
            prompt: try f.optionalString("prompt"), values: try f.optionalStrings("values"), allowedTypes: try f.optionalStrings("allowedTypes"),
            description: try f.optionalString("description"), valueTitles: try f.optionalStringMap("valueTitles"),
            customType: try f.optionalString("customType"), dynamicOptions: try f.optionalBool("dynamicOptions") ?? false,
            parent: try f.nested("parent").map(ParentCondition.init(fields:)), confirmationPrompt: try f.optionalString("confirmationPrompt"),
            unsupportedReasons: try f.optionalObjects("unsupportedReasons", UnsupportedReason.init(fields:)))
    }
}

extension ResponseDefinition {
    init(fields f: JSONFields) throws {
        self.init(
            code: try f.string("code"), success: try f.optionalBool("success") ?? false, dialog: try f.optionalString("dialog"),
            properties: try f.optionalStrings("properties"))
    }
}

extension ManifestLimits {
    init(fields f: JSONFields) throws {
        func request(_ name: String) throws -> Request? {
            try f.nested(name).map { r in Request(memoryBytes: try r.optionalInt64("memoryBytes"), deadlineMs: try r.optionalInt("deadlineMs")) }
        }
        self.init(extension: try request("extension"), inApp: try request("in-app"))
    }
}

extension UnsupportedReason {
    init(fields f: JSONFields) throws {
        self.init(code: try f.string("code"), message: try f.string("message"))
    }
}

extension CustomTypeDefinition {
    init(fields f: JSONFields) throws {
        self.init(
            name: try f.string("name"),
            properties: try f.objects("properties") { p in
                Property(
                    name: try p.string("name"), type: try p.rawValue("type", ParameterType.self), multiple: try p.optionalBool("multiple"),
                    customType: try p.optionalString("customType"))
            },
            display: try f.nested("display").map { d in
                DisplayTemplate(title: try d.string("title"), subtitle: try d.optionalString("subtitle"), image: try d.optionalString("image"))
            })
    }
}
