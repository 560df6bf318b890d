import ExtrunProtocol
import Foundation

/// The `PluginManifest` a definition declares.
struct ManifestGenerator {
    let definition: Definition

    func manifest(executable: String) -> PluginManifest {
        let plugin = definition.plugin
        let limits = plugin.limits.flatMap { $0.extension == nil && $0.inApp == nil ? nil : $0 }
        return PluginManifest(
            id: plugin.id, version: plugin.version, owner: plugin.owner, executable: executable, arguments: plugin.arguments,
            modes: plugin.modes, intents: definition.intents.map(intent), limits: limits, appName: plugin.appName,
            types: definition.types.map(type), activityTypes: plugin.activityTypes, retryInAppOnMemoryLimit: plugin.retryInAppOnMemoryLimit)
    }

    func intent(_ intent: IntentSpec) -> IntentDefinition {
        let responses = intent.responses.filter { !ResponseCode.standard.contains($0.code) }.map { response in
            ResponseDefinition(
                code: response.code, success: response.success ?? false, dialog: response.dialog,
                properties: carriedOutputs(code: response.code, in: intent).map(\.name).nilIfEmpty)
        }
        return IntentDefinition(
            name: intent.name, title: intent.title, description: intent.description,
            parameters: intent.parameters.map { parameter($0, in: intent) }, responses: responses,
            runsInBackground: intent.runsInBackground, phrases: intent.phrases.nilIfEmpty, confirmation: intent.confirmation)
    }

    func parameter(_ parameter: ParameterSpec, in intent: IntentSpec) -> ParameterDefinition {
        let type = definition.valueType(of: parameter, in: intent) ?? .string
        var values: [String]?
        var valueTitles: [String: String]?
        var customType: String?
        switch type {
        case .enumeration(let reference):
            let cases = definition.cases(of: reference)
            values = cases.map(\.value)
            var titles: [String: String] = [:]
            for c in cases { if let title = c.title { titles[c.value] = title } }
            valueTitles = titles.isEmpty ? nil : titles
        case .custom(let name):
            customType = name
        default:
            break
        }
        return ParameterDefinition(
            name: parameter.name, type: type.parameterType, title: parameter.title, required: parameter.required,
            multiple: parameter.multiple, default: parameter.default.flatMap { $0.isNull ? nil : $0 }, prompt: parameter.prompt,
            values: values, allowedTypes: parameter.allowedTypes, description: parameter.description, valueTitles: valueTitles,
            customType: customType, dynamicOptions: parameter.dynamicOptions, parent: parameter.parent,
            confirmationPrompt: parameter.confirmationPrompt, unsupportedReasons: parameter.unsupportedReasons.nilIfEmpty)
    }

    func type(_ type: TypeSpec) -> CustomTypeDefinition {
        CustomTypeDefinition(
            name: type.name,
            properties: type.properties.map { property in
                let valueType = definition.valueType(named: property.type) ?? .string
                var customType: String?
                if case .custom(let name) = valueType { customType = name }
                return CustomTypeDefinition.Property(
                    name: property.name, type: valueType.parameterType, multiple: property.multiple ? true : nil, customType: customType)
            },
            display: type.display)
    }
}

extension Array {
    var nilIfEmpty: [Element]? { isEmpty ? nil : self }
}
