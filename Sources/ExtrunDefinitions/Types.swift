import ExtrunProtocol

/// The type of a parameter, property or output, once names are looked up.
public enum ValueType: Sendable, Hashable {
    case string, integer, number, boolean, date, file
    case enumeration(EnumReference)
    case custom(String)

    /// The manifest's type.
    public var parameterType: ParameterType {
        switch self {
        case .string: .string
        case .integer: .integer
        case .number: .number
        case .boolean: .boolean
        case .date: .date
        case .file: .file
        case .enumeration: .enum
        case .custom: .custom
        }
    }

    static func builtin(_ name: String) -> ValueType? {
        switch name {
        case "string": .string
        case "integer": .integer
        case "number": .number
        case "boolean": .boolean
        case "date": .date
        case "file": .file
        default: nil
        }
    }
}

/// An enum declared in `enums`, or in place in a parameter's `values`.
public enum EnumReference: Sendable, Hashable {
    case named(String)
    case inline(intent: String, parameter: String)
}

extension Definition {
    /// The type named by a property's or an output's `type`: a built-in, an enum or a custom type.
    public func valueType(named name: String) -> ValueType? {
        if let builtin = ValueType.builtin(name) { return builtin }
        if enumSpec(named: name) != nil { return .enumeration(.named(name)) }
        if typeSpec(named: name) != nil { return .custom(name) }
        return nil
    }

    /// A parameter's type: as a property's, or an enum declared in place (`"type": "enum"` with `values`).
    public func valueType(of parameter: ParameterSpec, in intent: IntentSpec) -> ValueType? {
        if parameter.type == "enum" {
            return parameter.values == nil ? nil : .enumeration(.inline(intent: intent.name, parameter: parameter.name))
        }
        return valueType(named: parameter.type)
    }

    /// The cases of an enum.
    public func cases(of reference: EnumReference) -> [EnumCaseSpec] {
        switch reference {
        case .named(let name):
            return enumSpec(named: name)?.cases ?? []
        case .inline(let intentName, let parameterName):
            let intent = intents.first { $0.name == intentName }
            return intent?.parameter(named: parameterName)?.values ?? []
        }
    }
}
