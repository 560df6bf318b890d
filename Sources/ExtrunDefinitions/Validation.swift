import ExtrunProtocol
import Foundation

/// The checks beyond the shape of the file: references, defaults, names,
/// templates. Each problem names the path of the field at fault.
struct Validator {
    let definition: Definition
    var sink: DiagnosticSink

    init(definition: Definition, file: String) {
        self.definition = definition
        self.sink = DiagnosticSink(file: file)
    }

    mutating func run() -> [Diagnostic] {
        checkPlugin()
        checkEnums()
        checkTypes()
        checkIntents()
        return sink.diagnostics
    }

    // MARK: Plugin

    mutating func checkPlugin() {
        let plugin = definition.plugin
        if plugin.id.isEmpty || plugin.id.contains(where: { $0.isWhitespace || $0 == "/" }) {
            sink.error(plugin.spots["id"], "'\(plugin.id)' is not a valid plugin id (use reverse-DNS, e.g. com.example.soupchef)")
        }
        if plugin.version.isEmpty { sink.error(plugin.spots["version"], "must not be empty") }
        if plugin.owner.isEmpty { sink.error(plugin.spots["owner"], "must not be empty") }
        if plugin.appName?.trimmingCharacters(in: .whitespaces).isEmpty == true { sink.error(plugin.spots["appName"], "must not be empty") }
        if plugin.executable?.isEmpty == true { sink.error(plugin.spots["executable"], "must not be empty") }
        if plugin.modes.isEmpty { sink.error(plugin.spots["modes"], "must list at least one of extension, in-app") }
        if Set(plugin.modes).count != plugin.modes.count { sink.error(plugin.spots["modes"], "lists a mode twice") }
    }

    // MARK: Enums and types

    /// Names of enums and types: identifiers, unique, neither built-in nor taken by Swift or the SDK.
    mutating func checkTypeName(_ name: String, _ spot: Spot, seen: inout [String: String]) {
        if !SwiftNames.isIdentifier(name) {
            sink.error(spot, "'\(name)' is not a valid type name (letters, digits and _, not starting with a digit)")
        } else if BuiltinType.names.contains(name) || name == "enum" || name == "custom" {
            sink.error(spot, "'\(name)' is a built-in type name; choose another name")
        } else if SwiftNames.reservedTypes.contains(name) || SwiftNames.keywords.contains(name) {
            sink.error(spot, "'\(name)' is already a Swift or ExtrunSDK name; choose another name")
        }
        if let kind = seen[name] {
            sink.error(spot, "'\(name)' is declared twice (already \(kind))")
        }
        seen[name] = seen[name] ?? (spot.path.hasPrefix("enums") ? "an enum" : "a type")
    }

    mutating func checkCases(_ cases: [EnumCaseSpec], _ spot: Spot, owner: String) {
        if cases.isEmpty { sink.error(spot, "\(owner) must list at least one case") }
        var values = Set<String>()
        var swiftNames: [String: String] = [:]
        for c in cases {
            if c.value.isEmpty {
                sink.error(c.spot, "a case value must not be empty")
                continue
            }
            if !values.insert(c.value).inserted { sink.error(c.spot, "the case '\(c.value)' is listed twice") }
            guard let swiftName = SwiftNames.caseName(c.value) else {
                sink.error(c.spot, "'\(c.value)' has no letters or digits to make a Swift case name of")
                continue
            }
            if ["title", "allCases", "rawValue", "init", "self", "Type"].contains(swiftName) {
                sink.error(c.spot, "'\(c.value)' would be the Swift case '\(swiftName)', which the generated enum already uses")
            } else if let other = swiftNames[swiftName], other != c.value {
                sink.error(c.spot, "'\(c.value)' and '\(other)' would both be the Swift case '\(swiftName)'")
            }
            swiftNames[swiftName] = c.value
            if c.title?.isEmpty == true { sink.error(c.spot, "a case title must not be empty") }
        }
    }

    mutating func checkEnums() {
        var seen: [String: String] = [:]
        for e in definition.enums {
            checkTypeName(e.name, e.spots["name"], seen: &seen)
            checkCases(e.cases, e.spots["cases"], owner: "an enum")
        }
        for t in definition.types { checkTypeName(t.name, t.spots["name"], seen: &seen) }
    }

    /// A property of a type or an output: its name and its type.
    mutating func checkProperty(_ property: PropertySpec, reserved: Set<String>, what: String, seen: inout Set<String>) {
        let spot = property.spots["name"]
        if !SwiftNames.isIdentifier(property.name) {
            sink.error(spot, "'\(property.name)' is not a valid \(what) name (letters, digits and _, not starting with a digit)")
        } else if reserved.contains(property.name) || SwiftNames.unusableMembers.contains(property.name) {
            sink.error(spot, "'\(property.name)' cannot be the name of \(what == "output" ? "an" : "a") \(what): the generated code uses it")
        }
        if !seen.insert(property.name).inserted { sink.error(spot, "the \(what) '\(property.name)' is declared twice") }
        if property.type == "enum" || property.type == "custom" {
            sink.error(property.spots["type"], "name the enum or type itself (declare it in '\(property.type == "enum" ? "enums" : "types")')")
        } else if definition.valueType(named: property.type) == nil {
            sink.error(property.spots["type"], unknownType(property.type))
        }
    }

    func unknownType(_ name: String) -> String {
        let known = BuiltinType.names + definition.enums.map(\.name) + definition.types.map(\.name)
        let hint = closest(to: name, in: known).map { "; did you mean '\($0)'?" } ?? " (use \(known.joined(separator: ", ")))"
        return "'\(name)' is not a type\(hint)"
    }

    mutating func checkTypes() {
        for type in definition.types {
            var seen = Set<String>()
            for property in type.properties {
                checkProperty(property, reserved: ["identifier", "title", "subtitle", "image", "displayRepresentation"], what: "property", seen: &seen)
            }
            if let display = type.display {
                let names = Set(type.properties.map(\.name)).union(["identifier"])
                for (key, template) in [("title", display.title), ("subtitle", display.subtitle), ("image", display.image)] {
                    guard let template else { continue }
                    let spot = type.spots["display.\(key)"]
                    if key == "title" && template.isEmpty { sink.error(spot, "must not be empty") }
                    for slot in Template.slots(template) where !names.contains(slot) {
                        sink.error(spot, "'${\(slot)}' is not a property of \(type.name) (its properties: \(names.sorted().joined(separator: ", ")))")
                    }
                }
            }
        }
        // A type that holds itself (not through a list) would be infinitely large.
        for type in definition.types {
            if let cycle = cycle(from: type.name, path: [type.name]), cycle.first == type.name {
                sink.error(type.spots["properties"], "\(cycle.joined(separator: " → ")): a type cannot contain itself; make the property 'multiple' (a list)")
            }
        }
    }

    func cycle(from name: String, path: [String]) -> [String]? {
        guard let type = definition.typeSpec(named: name) else { return nil }
        for property in type.properties where !property.multiple {
            guard case .custom(let next)? = definition.valueType(named: property.type) else { continue }
            if next == path.first { return path + [next] }
            if path.contains(next) { continue }
            if let found = cycle(from: next, path: path + [next]) { return found }
        }
        return nil
    }

    // MARK: Intents

    mutating func checkIntents() {
        if definition.intents.isEmpty { sink.error(definition.spot.child("intents"), "the plugin declares no intent") }
        var names = Set<String>()
        var generated: [String: String] = [:]
        for type in definition.types { generated[type.name] = "the type \(type.name)" }
        for e in definition.enums { generated[e.name] = "the enum \(e.name)" }
        for intent in definition.intents {
            let spot = intent.spots["name"]
            if !SwiftNames.isIdentifier(intent.name) {
                sink.error(spot, "'\(intent.name)' is not a valid intent name (letters, digits and _, not starting with a digit)")
            }
            if !names.insert(intent.name).inserted { sink.error(spot, "the intent '\(intent.name)' is declared twice") }
            for suffix in ["Intent", "Response", "Handling"] {
                let typeName = intent.name + suffix
                if let other = generated[typeName] {
                    sink.error(spot, "the generated \(typeName) would clash with \(other)")
                }
                generated[typeName] = "\(typeName) of the intent \(intent.name)"
            }
            checkIntent(intent)
        }
    }

    mutating func checkIntent(_ intent: IntentSpec) {
        var names = Set<String>()
        var upperNames: [String: String] = [:]
        for (index, parameter) in intent.parameters.enumerated() {
            let spot = parameter.spots["name"]
            if !SwiftNames.isIdentifier(parameter.name) {
                sink.error(spot, "'\(parameter.name)' is not a valid parameter name (letters, digits and _, not starting with a digit)")
            } else if SwiftNames.unusableMembers.contains(parameter.name) {
                sink.error(spot, "'\(parameter.name)' cannot be a parameter name")
            }
            if !names.insert(parameter.name).inserted {
                sink.error(spot, "the parameter '\(parameter.name)' is declared twice")
            } else if let other = upperNames[SwiftNames.upperFirst(parameter.name)] {
                sink.error(spot, "'\(parameter.name)' and '\(other)' would both generate resolve\(SwiftNames.upperFirst(parameter.name))")
            }
            upperNames[SwiftNames.upperFirst(parameter.name)] = parameter.name
            checkParameter(parameter, at: index, in: intent)
        }
        // Types nested in <Intent>Intent: Adapter, and per parameter <Name>Resolution, <Name>UnsupportedReason, an in-place enum <Name>.
        var nested: [String: String] = ["Adapter": "the generated Adapter"]
        for parameter in intent.parameters where SwiftNames.isIdentifier(parameter.name) {
            let upper = SwiftNames.upperFirst(parameter.name)
            var names = ["\(upper)Resolution": "the resolution of '\(parameter.name)'"]
            if !parameter.unsupportedReasons.isEmpty { names["\(upper)UnsupportedReason"] = "the unsupported reasons of '\(parameter.name)'" }
            if parameter.type == "enum" && parameter.values != nil { names[upper] = "the enum of '\(parameter.name)'" }
            for (name, what) in names.sorted(by: { $0.key < $1.key }) {
                if let other = nested[name] {
                    sink.error(parameter.spots["name"], "\(what) would be \(intent.name)Intent.\(name), like \(other); rename the parameter")
                }
                nested[name] = what
            }
        }

        // Templates over the parameters.
        if let confirmation = intent.confirmation {
            if confirmation.trimmingCharacters(in: .whitespaces).isEmpty { sink.error(intent.spots["confirmation"], "must not be empty") }
            for slot in Template.slots(confirmation) where intent.parameter(named: slot) == nil {
                sink.error(intent.spots["confirmation"], "'${\(slot)}' is not a parameter of \(intent.name)")
            }
        }
        for (i, phrase) in intent.phrases.enumerated() {
            let spot = intent.spots["phrases[\(i)]"]
            let slots = Template.slots(phrase)
            if phrase.trimmingCharacters(in: .whitespaces).isEmpty { sink.error(spot, "a phrase must not be empty") }
            if slots.count > 1 {
                sink.error(spot, "'\(phrase)' holds \(slots.count) parameters (\(slots.map { "${\($0)}" }.joined(separator: ", "))); a phrase may hold at most one")
            }
            for slot in slots where intent.parameter(named: slot) == nil {
                sink.error(spot, "'${\(slot)}' is not a parameter of \(intent.name)")
            }
            if let appName = definition.plugin.appName {
                if !phrase.localizedCaseInsensitiveContains(appName) {
                    sink.error(spot, "'\(phrase)' does not contain the app's name '\(appName)'")
                }
            } else {
                sink.error(spot, "phrases need the app's name: set plugin.appName and use it in each phrase")
            }
        }

        // Outputs and responses.
        var outputNames = Set<String>()
        for output in intent.outputs {
            checkProperty(output, reserved: ["dialog"], what: "output", seen: &outputNames)
        }
        var codes = Set<String>()
        for response in intent.responses {
            checkResponse(response, in: intent, codes: &codes)
        }
    }

    mutating func checkParameter(_ parameter: ParameterSpec, at index: Int, in intent: IntentSpec) {
        let typeSpot = parameter.spots["type"]
        let type = definition.valueType(of: parameter, in: intent)
        if parameter.type == "enum" {
            if let values = parameter.values {
                checkCases(values, parameter.spots["values"], owner: "an enum parameter")
            } else {
                sink.error(typeSpot, "an enum parameter lists its cases in 'values', or names one of the file's enums as its type")
            }
        } else {
            if parameter.values != nil {
                sink.error(parameter.spots["values"], "only enum parameters take values (\"type\": \"enum\")")
            }
            if parameter.type == "custom" {
                sink.error(typeSpot, "name the custom type itself as the type (one of the file's types)")
            } else if type == nil {
                sink.error(typeSpot, unknownType(parameter.type))
            }
        }
        if parameter.allowedTypes != nil && type != .file {
            sink.error(parameter.spots["allowedTypes"], "only file parameters take allowedTypes")
        }
        if let allowed = parameter.allowedTypes {
            for (i, identifier) in allowed.enumerated() where identifier.isEmpty || identifier.contains(where: \.isWhitespace) {
                sink.error(parameter.spots["allowedTypes[\(i)]"], "'\(identifier)' is not a type identifier (e.g. public.jpeg)")
            }
        }
        if let prompt = parameter.prompt, prompt.trimmingCharacters(in: .whitespaces).isEmpty {
            sink.error(parameter.spots["prompt"], "must not be empty")
        }
        if let prompt = parameter.confirmationPrompt {
            for slot in Template.slots(prompt) where slot != parameter.name {
                sink.error(parameter.spots["confirmationPrompt"], "'${\(slot)}' is not this parameter (a confirmation prompt may only hold ${\(parameter.name)})")
            }
        }

        // The default: a valid value of the type.
        if let value = parameter.default, !value.isNull, let type {
            let spot = parameter.spots["default"]
            switch type {
            case .file, .custom:
                sink.error(spot, "a \(type == .file ? "file" : "custom-type") parameter cannot have a default")
            default:
                let manifestParameter = manifestParameter(parameter, type: type)
                if let problem = ParameterValueCheck.problem(value, for: manifestParameter) {
                    if !parameter.multiple, case .enumeration(let reference) = type, case .string(let text) = value {
                        sink.error(spot, "'\(text)' is not one of the cases of \(describe(reference)) (\(definition.cases(of: reference).map(\.value).joined(separator: ", ")))")
                    } else {
                        sink.error(spot, "not a valid value: \(problem)")
                    }
                }
            }
        }

        if parameter.dynamicOptions, let type {
            switch type {
            case .string, .integer, .number, .custom: break
            default:
                sink.error(parameter.spots["dynamicOptions"],
                           "dynamic options are for string, integer, number and custom-type parameters, not \(describe(type))\(type == .boolean || type.isEnum ? " (its values are known already)" : "")")
            }
        }

        if let parent = parameter.parent {
            let spot = parameter.spots["parent.parameter"]
            if parent.parameter == parameter.name {
                sink.error(spot, "a parameter cannot be its own parent")
            } else if let parentIndex = intent.parameters.firstIndex(where: { $0.name == parent.parameter }) {
                let parentSpec = intent.parameters[parentIndex]
                if parentIndex > index {
                    sink.error(spot, "'\(parent.parameter)' comes after '\(parameter.name)'; a parent must be declared (and is resolved) before the parameters it shows")
                }
                if let parentType = definition.valueType(of: parentSpec, in: intent) {
                    switch parentType {
                    case .boolean, .string, .integer, .enumeration:
                        if parentSpec.multiple {
                            sink.error(spot, "'\(parent.parameter)' takes a list; a parent must take a single value")
                        } else if let problem = ParameterValueCheck.problem(parent.value, for: manifestParameter(parentSpec, type: parentType)) {
                            sink.error(parameter.spots["parent.value"], "not a value of '\(parent.parameter)': \(problem)")
                        }
                    default:
                        sink.error(spot, "'\(parent.parameter)' is \(describe(parentType)) parameter; a parent must be a boolean, string, integer or enum")
                    }
                }
            } else {
                let hint = closest(to: parent.parameter, in: intent.parameters.map(\.name)).map { "; did you mean '\($0)'?" } ?? ""
                sink.error(spot, "'\(parent.parameter)' is not a parameter of \(intent.name)\(hint)")
            }
        }

        var codes = Set<String>()
        for (i, reason) in parameter.unsupportedReasons.enumerated() {
            let spot = parameter.spots["unsupportedReasons[\(i)].code"]
            if !SwiftNames.isIdentifier(reason.code) {
                sink.error(spot, "'\(reason.code)' is not a valid reason code (letters, digits and _, not starting with a digit)")
            } else if ["message", "init", "rawValue", "allCases", "self"].contains(reason.code) {
                sink.error(spot, "'\(reason.code)' cannot be a reason code: the generated code uses it")
            }
            if !codes.insert(reason.code).inserted { sink.error(spot, "the reason '\(reason.code)' is declared twice") }
            if reason.message.trimmingCharacters(in: .whitespaces).isEmpty {
                sink.error(parameter.spots["unsupportedReasons[\(i)].message"], "must not be empty")
            }
        }
    }

    mutating func checkResponse(_ response: ResponseSpec, in intent: IntentSpec, codes: inout Set<String>) {
        let spot = response.spots["code"]
        let isStandard = ResponseCode.standard.contains(response.code)
        if response.code.isEmpty {
            sink.error(spot, "must not be empty")
        } else if !SwiftNames.isIdentifier(response.code) {
            sink.error(spot, "'\(response.code)' is not a valid code (letters, digits and _, not starting with a digit)")
        } else if ["init", "code", "properties", "dialog", "userActivity", "progress", "intentResponse", "with", "self", "Code"].contains(response.code) {
            sink.error(spot, "'\(response.code)' cannot be a response code: the generated code uses the name")
        }
        if !codes.insert(response.code).inserted { sink.error(spot, "the response '\(response.code)' is declared twice") }
        if isStandard && response.success != nil {
            sink.error(response.spots["success"], "'\(response.code)' is a standard code; whether it counts as success is fixed")
        }
        var listed = Set<String>()
        for (i, name) in (response.properties ?? []).enumerated() {
            let itemSpot = response.spots["properties[\(i)]"]
            if intent.output(named: name) == nil {
                let hint = closest(to: name, in: intent.outputs.map(\.name)).map { "; did you mean '\($0)'?" }
                    ?? (intent.outputs.isEmpty ? " (the intent declares no outputs)" : " (its outputs: \(intent.outputs.map(\.name).joined(separator: ", ")))")
                sink.error(itemSpot, "'\(name)' is not one of the intent's outputs\(hint)")
            }
            if !listed.insert(name).inserted { sink.error(itemSpot, "'\(name)' is listed twice") }
        }
        if let dialog = response.dialog {
            let available = Set(carriedOutputs(code: response.code, in: intent).map(\.name))
            for slot in Template.slots(dialog) where !available.contains(slot) {
                let known = available.isEmpty ? "it carries no properties" : "its properties: \(available.sorted().joined(separator: ", "))"
                sink.error(response.spots["dialog"], "'${\(slot)}' is not a property of the response \(response.code) (\(known))")
            }
        }
    }

    // MARK: Helpers

    func manifestParameter(_ parameter: ParameterSpec, type: ValueType) -> ParameterDefinition {
        var values: [String]?
        if case .enumeration(let reference) = type { values = definition.cases(of: reference).map(\.value) }
        return ParameterDefinition(name: parameter.name, type: type.parameterType, multiple: parameter.multiple, values: values)
    }

    func describe(_ reference: EnumReference) -> String {
        switch reference {
        case .named(let name): name
        case .inline(_, let parameter): "'\(parameter)'"
        }
    }

    func describe(_ type: ValueType) -> String {
        switch type {
        case .string: "a string"
        case .integer: "an integer"
        case .number: "a number"
        case .boolean: "a boolean"
        case .date: "a date"
        case .file: "a file"
        case .enumeration: "an enum"
        case .custom(let name): "a \(name)"
        }
    }
}

extension ValueType {
    var isEnum: Bool { if case .enumeration = self { true } else { false } }
}

/// The outputs a response with `code` carries: those it lists; for `success` without a list, every output.
func carriedOutputs(code: String, in intent: IntentSpec) -> [PropertySpec] {
    if let names = intent.response(code: code)?.properties {
        return names.compactMap { intent.output(named: $0) }
    }
    return code == ResponseCode.success ? intent.outputs : []
}
