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
            runsInBackground: intent.runsInBackground, phrases: intent.phrases.nilIfEmpty, confirmation: intent.confirmation,
            outputs: intent.outputs.map(output))
    }

    func output(_ property: PropertySpec) -> OutputDefinition {
        let type = definition.valueType(named: property.type) ?? .string
        let (values, valueTitles, customType) = details(of: type)
        return OutputDefinition(
            name: property.name, type: type.parameterType, title: property.title, description: property.description,
            multiple: property.multiple, values: values, valueTitles: valueTitles, customType: customType)
    }

    func parameter(_ parameter: ParameterSpec, in intent: IntentSpec) -> ParameterDefinition {
        let type = definition.valueType(of: parameter, in: intent) ?? .string
        let (values, valueTitles, customType) = details(of: type)
        return ParameterDefinition(
            name: parameter.name, type: type.parameterType, title: parameter.title, required: parameter.required,
            multiple: parameter.multiple, default: parameter.default.flatMap { $0.isNull ? nil : $0 }, prompt: parameter.prompt,
            values: values, allowedTypes: parameter.allowedTypes, description: parameter.description, valueTitles: valueTitles,
            customType: customType, dynamicOptions: parameter.dynamicOptions, parent: parameter.parent,
            confirmationPrompt: parameter.confirmationPrompt, unsupportedReasons: parameter.unsupportedReasons.nilIfEmpty)
    }

    /// An enum's values and their titles, or a custom type's name, as the manifest carries them.
    func details(of type: ValueType) -> (values: [String]?, valueTitles: [String: String]?, customType: String?) {
        switch type {
        case .enumeration(let reference):
            let cases = definition.cases(of: reference)
            var titles: [String: String] = [:]
            for c in cases { if let title = c.title { titles[c.value] = title } }
            return (cases.map(\.value), titles.isEmpty ? nil : titles, nil)
        case .custom(let name):
            return (nil, nil, name)
        default:
            return (nil, nil, nil)
        }
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
