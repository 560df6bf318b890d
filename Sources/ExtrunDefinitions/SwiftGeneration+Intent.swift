import ExtrunProtocol
import Foundation

/// What `SwiftGenerator` writes per intent: the typed intent struct with its resolutions,
/// the response type, the handler protocol with its defaults, and the adapter to the
/// SDK's `IntentHandler`.
extension SwiftGenerator {
    // MARK: Intent

    func parameterType(_ parameter: ParameterSpec, _ intent: IntentSpec) -> (element: String, full: String, value: ValueType) {
        let value = definition.valueType(of: parameter, in: intent) ?? .string
        let element = swiftName(of: value)
        return (element, parameter.multiple ? "[\(element)]" : element, value)
    }

    func intentStruct(_ intent: IntentSpec) {
        line()
        line("// MARK: - \(intent.name)")
        line()
        doc("""
            \(intent.title ?? intent.name)\(intent.description.map { ": \($0)" } ?? "")

            The parameters as the plugin receives them: each is nil until it has a value.
            """)
        block("struct \(intent.name)Intent: Codable, Sendable, Hashable") { g in
            g.line("/// The intent's name in the manifest, in intent files and on the wire.")
            g.line("static let intentName = \(literal(intent.name))")
            for parameter in intent.parameters {
                let type = parameterType(parameter, intent)
                g.line()
                var notes: [String] = []
                if parameter.required { notes.append("required") }
                if let value = parameter.default, !value.isNull { notes.append("default \(jsonText(value))") }
                if let parent = parameter.parent { notes.append("shown when \(parent.parameter) is \(jsonText(parent.value))") }
                if parameter.dynamicOptions { notes.append("dynamic options") }
                g.doc("\(parameter.title ?? parameter.name)\(notes.isEmpty ? "" : " (\(notes.joined(separator: ", ")))")\(parameter.description.map { ": \($0)" } ?? "")")
                g.line("var \(SwiftNames.escaped(parameter.name)): \(type.full)?")
            }
            g.line()
            let arguments = intent.parameters.map { "\(SwiftNames.escaped($0.name)): \(parameterType($0, intent).full)? = nil" }
            g.block("init(\(arguments.joined(separator: ", ")))") { g in
                for parameter in intent.parameters {
                    let name = SwiftNames.escaped(parameter.name)
                    g.line("self.\(name) = \(name)")
                }
            }
        }
    }

    func intentNestedTypes(_ intent: IntentSpec) {
        let structName = "\(intent.name)Intent"
        line()
        block("extension \(structName)") { g in
            var first = true
            func separate(_ g: SwiftGenerator) {
                if !first { g.line() }
                first = false
            }
            for parameter in intent.parameters {
                let type = g.parameterType(parameter, intent)
                let upper = SwiftNames.upperFirst(parameter.name)
                if let value = parameter.default, !value.isNull, let literal = g.typedLiteral(value, type.value, multiple: parameter.multiple) {
                    separate(g)
                    g.line("/// The default of \(parameter.name).")
                    g.line("static let default\(upper): \(type.full) = \(literal)")
                }
                if parameter.type == "enum", let values = parameter.values {
                    separate(g)
                    g.enumeration(name: upper, description: "The values of \(parameter.name).", cases: values)
                }
                if !parameter.unsupportedReasons.isEmpty {
                    separate(g)
                    g.line("/// Why a value of \(parameter.name) can be unsupported, each with its message.")
                    g.block("enum \(upper)UnsupportedReason: String, Sendable, Hashable, CaseIterable") { g in
                        for reason in parameter.unsupportedReasons { g.line("case \(SwiftNames.escaped(reason.code))") }
                        g.line()
                        g.line("/// The message for people.")
                        g.block("var message: String") { g in
                            g.line("switch self {")
                            for reason in parameter.unsupportedReasons {
                                g.line("case .\(SwiftNames.escaped(reason.code)): \(g.literal(reason.message))")
                            }
                            g.line("}")
                        }
                    }
                }
                separate(g)
                g.resolution(parameter, in: intent)
            }
            if first { g.line("// (no parameters)") }
        }
    }

    func resolution(_ parameter: ParameterSpec, in intent: IntentSpec) {
        let type = parameterType(parameter, intent)
        let upper = SwiftNames.upperFirst(parameter.name)
        doc("The outcome of resolving \(parameter.name): `.success(value)`, `.needsValue`, `.disambiguation(options)`, `.confirmationRequired(value)`, `.unsupported(...)` or `.notRequired`.")
        block("struct \(upper)Resolution: Sendable, Hashable") { g in
            g.line("/// The result on the wire.")
            g.line("var result: ResolutionResult")
            g.line()
            g.block("init(result: ResolutionResult)") { g in g.line("self.result = result") }
            g.line()
            g.line("/// Use this value.")
            g.block("static func success(_ value: \(type.full)) -> Self") { g in
                g.line("Self(result: .success(value))")
            }
            g.line()
            let prompt = parameter.prompt.map { g.literal($0) } ?? "nil"
            g.line("/// A value is needed\(parameter.prompt.map { ": asks \(g.literal($0))" } ?? "").")
            g.block("static var needsValue: Self") { g in g.line("Self(result: .needsValue(prompt: \(prompt)))") }
            g.line()
            g.line("/// A value is needed: asks `prompt`.")
            g.block("static func needsValue(prompt: String) -> Self") { g in g.line("Self(result: .needsValue(prompt: prompt))") }
            g.line()
            g.line("/// One of these must be chosen.")
            g.block("static func disambiguation(_ options: [\(type.element)], prompt: String? = nil) -> Self") { g in
                g.line("Self(result: .disambiguation(options: options.map { _extrunJSON($0) }, prompt: prompt))")
            }
            g.line()
            let confirmation = parameter.confirmationPrompt.map { template in
                g.interpolation(template) { slot in
                    slot == parameter.name ? g.textExpression(type.value, multiple: parameter.multiple, "value") : nil
                }
            }
            g.line("/// The value must be confirmed\(parameter.confirmationPrompt.map { ": asks \(g.literal($0)) unless `prompt` is given" } ?? "").")
            g.block("static func confirmationRequired(_ value: \(type.full), prompt: String? = nil) -> Self") { g in
                // The SDK's helper encodes the value.
                g.line("Self(result: .confirmationRequired(value, prompt: prompt\(confirmation.map { " ?? \($0)" } ?? "")))")
            }
            g.line()
            if parameter.unsupportedReasons.isEmpty {
                g.line("/// The value cannot be used.")
                g.block("static var unsupported: Self") { g in g.line("Self(result: .unsupported(reason: nil, message: nil))") }
                g.line()
                g.line("/// The value cannot be used, for this reason.")
                g.block("static func unsupported(message: String) -> Self") { g in
                    g.line("Self(result: .unsupported(reason: nil, message: message))")
                }
            } else {
                g.line("/// The value cannot be used, for one of the declared reasons (its message is sent).")
                g.block("static func unsupported(_ reason: \(upper)UnsupportedReason) -> Self") { g in
                    g.line("Self(result: .unsupported(reason: reason.rawValue, message: reason.message))")
                }
            }
            g.line()
            g.line("/// The parameter does not matter this time.")
            g.block("static var notRequired: Self") { g in g.line("Self(result: .notRequired)") }
        }
    }

    // MARK: Response

    func responseStruct(_ intent: IntentSpec) {
        let name = "\(intent.name)Response"
        let custom = intent.responses.filter { !ResponseCode.standard.contains($0.code) }
        line()
        doc("What \(intent.name) answers: a response code with its output properties and dialog.")
        block("struct \(name): Sendable, Hashable") { g in
            g.line("/// The standard codes, and the ones the definition declares.")
            g.block("enum Code: String, Sendable, Hashable, CaseIterable") { g in
                g.line("case \(ResponseCode.standard.joined(separator: ", "))")
                for response in custom { g.line("case \(SwiftNames.escaped(response.code))") }
                g.line()
                g.line("/// Whether `extrun handle` counts it as success (exit status 0).")
                g.block("var isSuccess: Bool") { g in
                    let successes = [ResponseCode.success] + custom.filter { $0.success == true }.map(\.code)
                    g.line("switch self {")
                    g.line("case \(successes.map { ".\(SwiftNames.escaped($0))" }.joined(separator: ", ")): true")
                    g.line("default: false")
                    g.line("}")
                }
            }
            g.line()
            g.line("var code: Code")
            g.line("/// The output properties, as they go on the wire.")
            g.line("var properties: [String: JSONValue]")
            g.line("var dialog: Dialog?")
            g.line("var userActivity: UserActivity?")
            g.line("/// With `inProgress`: how far along the work is, 0...1.")
            g.line("var progress: Double?")
            g.line()
            g.block("init(code: Code, properties: [String: JSONValue] = [:], dialog: Dialog? = nil, userActivity: UserActivity? = nil, progress: Double? = nil)") { g in
                for field in ["code", "properties", "dialog", "userActivity", "progress"] { g.line("self.\(field) = \(field)") }
            }
            g.line()
            g.line("/// The response on the wire.")
            g.block("var intentResponse: IntentResponse") { g in
                g.line("IntentResponse(code: code.rawValue, properties: properties, dialog: dialog, userActivity: userActivity, progress: progress)")
            }

            // Declared codes (standard or custom) and success: their properties and dialog template.
            var declared = intent.responses.map(\.code)
            if !declared.contains(ResponseCode.success) { declared.insert(ResponseCode.success, at: 0) }
            var seen = Set<String>()
            for code in declared where seen.insert(code).inserted {
                g.line()
                g.responseConstructor(code: code, in: intent)
            }
            // The other standard codes.
            let others: [(String, [String])] = [
                (ResponseCode.failure, ["/// `failure`, with a message for people.", "static func failure(_ message: String? = nil) -> Self", "Self(code: .failure, dialog: message.map { Dialog(full: $0) })"]),
                (ResponseCode.continueInApp, ["/// `continueInApp`: the app should take over.", "static func continueInApp(userActivity: UserActivity? = nil, dialog: Dialog? = nil) -> Self", "Self(code: .continueInApp, dialog: dialog, userActivity: userActivity)"]),
                (ResponseCode.failureRequiringAppLaunch, ["/// `failureRequiringAppLaunch`, with a message for people.", "static func failureRequiringAppLaunch(_ message: String? = nil) -> Self", "Self(code: .failureRequiringAppLaunch, dialog: message.map { Dialog(full: $0) })"]),
                (ResponseCode.inProgress, ["/// `inProgress`, with how far along the work is.", "static func inProgress(progress: Double? = nil, dialog: Dialog? = nil) -> Self", "Self(code: .inProgress, dialog: dialog, progress: progress)"]),
                (ResponseCode.ready, ["/// `ready`: what `confirm` answers to go ahead.", "static var ready: Self", "Self(code: .ready)"]),
                (ResponseCode.unspecified, ["/// `unspecified`.", "static var unspecified: Self", "Self(code: .unspecified)"]),
            ]
            for (code, text) in others where !seen.contains(code) {
                g.line()
                g.line(text[0])
                g.block(text[1]) { g in g.line(text[2]) }
            }
        }
    }

    func responseConstructor(code: String, in intent: IntentSpec) {
        let response = intent.response(code: code)
        let outputs = carriedOutputs(code: code, in: intent)
        let arguments = outputs.map { output -> String in
            let type = swiftType(of: output)
            return "\(SwiftNames.escaped(output.name)): \(type)"
        } + ["dialog: Dialog? = nil"]
        if let template = response?.dialog {
            line("/// `\(code)`: \(literal(template)), unless `dialog` is given.")
        } else {
            line("/// `\(code)`\(outputs.isEmpty ? "" : " with its properties").")
        }
        block("static func \(SwiftNames.escaped(code))(\(arguments.joined(separator: ", "))) -> Self") { g in
            let properties = outputs.map { "\(g.literal($0.name)): _extrunJSON(\(SwiftNames.escaped($0.name)))" }
            let dictionary = properties.isEmpty ? "[:]" : "[\(properties.joined(separator: ", "))]"
            var dialog = "dialog"
            if let template = response?.dialog {
                let text = g.interpolation(template) { slot in
                    guard let output = outputs.first(where: { $0.name == slot }), let value = g.definition.valueType(named: output.type) else { return nil }
                    return g.textExpression(value, multiple: output.multiple, SwiftNames.escaped(output.name))
                }
                dialog = "dialog ?? Dialog(full: \(text))"
            }
            g.line("Self(code: .\(SwiftNames.escaped(code)), properties: \(dictionary), dialog: \(dialog))")
        }
    }

    // MARK: Handler protocol

    func handlingProtocol(_ intent: IntentSpec) {
        let intentType = "\(intent.name)Intent"
        let response = "\(intent.name)Response"
        line()
        doc("""
            What you implement to handle \(intent.name). The host resolves each parameter in order, \
            then confirms, then handles; only `handle` has no default.
            """)
        block("protocol \(intent.name)Handling: Sendable") { g in
            for parameter in intent.parameters {
                let upper = SwiftNames.upperFirst(parameter.name)
                g.line("/// Resolves \(parameter.name). The default: \(g.defaultResolutionSummary(parameter)).")
                g.line("func resolve\(upper)(for intent: \(intentType), context: IntentContext) async throws -> \(intentType).\(upper)Resolution")
                if parameter.dynamicOptions {
                    let type = g.parameterType(parameter, intent)
                    g.line("/// The possible values of \(parameter.name), narrowed by what the person typed (`search`).")
                    g.line("func provide\(upper)Options(for intent: \(intentType), search: String?, context: IntentContext) async throws -> [\(type.element)]")
                    g.line("/// The same values in titled sections. The default: one untitled section of `provide\(upper)Options`.")
                    g.line("func provide\(upper)OptionSections(for intent: \(intentType), search: String?, context: IntentContext) async throws -> [(title: String?, values: [\(type.element)])]")
                }
            }
            g.line("/// Whether the intent can go ahead: `.ready` (the default), or the final response.")
            g.line("func confirm(intent: \(intentType), context: IntentContext) async throws -> \(response)")
            g.line("/// Does the work and answers.")
            g.line("func handle(intent: \(intentType), context: IntentContext) async throws -> \(response)")
            g.line("/// In in-app mode, after the extension answered `continueInApp` or `failureRequiringAppLaunch`")
            g.line("/// (`extensionResponse`) with `activity`: carries on. The default: `handle`, now with in-app limits.")
            g.line("func continueInApp(intent: \(intentType), activity: UserActivity, extensionResponse: IntentResponse?, context: IntentContext) async throws -> \(response)")
        }
        line()
        block("extension \(intent.name)Handling") { g in
            for parameter in intent.parameters {
                let upper = SwiftNames.upperFirst(parameter.name)
                let name = SwiftNames.escaped(parameter.name)
                let type = g.parameterType(parameter, intent)
                g.block("func resolve\(upper)(for intent: \(intentType), context: IntentContext) async throws -> \(intentType).\(upper)Resolution") { g in
                    if let parent = parameter.parent, let condition = g.parentCondition(parent, in: intent) {
                        g.line("guard \(condition) else { return .notRequired }")
                    }
                    if parameter.multiple && parameter.required {
                        g.line("if let value = intent.\(name), !value.isEmpty { return .success(value) }")
                    } else {
                        g.line("if let value = intent.\(name) { return .success(value) }")
                    }
                    if let value = parameter.default, !value.isNull, g.typedLiteral(value, type.value, multiple: parameter.multiple) != nil {
                        g.line("return .success(\(intentType).default\(upper))")
                    } else {
                        g.line("return \(parameter.required ? ".needsValue" : ".notRequired")")
                    }
                }
                g.line()
            }
            for parameter in intent.parameters where parameter.dynamicOptions {
                let upper = SwiftNames.upperFirst(parameter.name)
                let type = g.parameterType(parameter, intent)
                g.block("func provide\(upper)OptionSections(for intent: \(intentType), search: String?, context: IntentContext) async throws -> [(title: String?, values: [\(type.element)])]") { g in
                    g.line("[(title: nil, values: try await provide\(upper)Options(for: intent, search: search, context: context))]")
                }
                g.line()
            }
            g.block("func confirm(intent: \(intentType), context: IntentContext) async throws -> \(response)") { g in
                g.line("\(response)(code: .ready)")
            }
            g.line()
            g.block("func continueInApp(intent: \(intentType), activity: UserActivity, extensionResponse: IntentResponse?, context: IntentContext) async throws -> \(response)") { g in
                g.line("try await handle(intent: intent, context: context)")
            }
        }
    }

    func defaultResolutionSummary(_ parameter: ParameterSpec) -> String {
        var parts: [String] = []
        if let parent = parameter.parent { parts.append("`.notRequired` unless \(parent.parameter) is \(jsonText(parent.value)); then") }
        parts.append("the value as given\(parameter.multiple && parameter.required ? " (a non-empty list)" : "")")
        if let value = parameter.default, !value.isNull {
            parts.append("or the default \(jsonText(value))")
        } else if parameter.required {
            parts.append("or `.needsValue`\(parameter.prompt.map { " (\(literal($0)))" } ?? "")")
        } else {
            parts.append("or `.notRequired`")
        }
        return parts.joined(separator: " ")
    }

    /// `intent.changeCase == true`.
    func parentCondition(_ parent: ParentCondition, in intent: IntentSpec) -> String? {
        guard let spec = intent.parameter(named: parent.parameter), let type = definition.valueType(of: spec, in: intent),
            let literal = typedLiteral(parent.value, type, multiple: false)
        else { return nil }
        return "intent.\(SwiftNames.escaped(spec.name)) == \(literal)"
    }

    // MARK: Adapter

    func adapter(_ intent: IntentSpec) {
        let intentType = "\(intent.name)Intent"
        line()
        block("extension \(intentType)") { g in
            g.line("/// Serves your \(intent.name)Handling as the SDK's `IntentHandler` (`PluginMain` uses it).")
            g.block("struct Adapter<Handler: \(intent.name)Handling>: IntentHandler") { g in
                g.line("typealias Parameters = \(intentType)")
                g.line("static var intentName: String { \(intentType).intentName }")
                g.line("let handler: Handler")
                g.line()
                g.block("init(_ handler: Handler)") { g in g.line("self.handler = handler") }
                g.line()
                g.block("func resolve(_ parameter: String, _ request: IntentRequest<\(intentType)>) async throws -> ResolutionResult") { g in
                    g.line("switch parameter {")
                    for parameter in intent.parameters {
                        g.line("case \(g.literal(parameter.name)):")
                        g.line("    return try await handler.resolve\(SwiftNames.upperFirst(parameter.name))(for: request.parameters, context: request.context).result")
                    }
                    g.line("default:")
                    g.line("    return .notRequired")
                    g.line("}")
                }
                g.line()
                g.block("func provideOptions(_ parameter: String, _ request: IntentRequest<\(intentType)>, search: String?) async throws -> OptionsResult") { g in
                    g.line("switch parameter {")
                    for parameter in intent.parameters where parameter.dynamicOptions {
                        let type = g.parameterType(parameter, intent)
                        g.line("case \(g.literal(parameter.name)):")
                        g.line("    let sections = try await handler.provide\(SwiftNames.upperFirst(parameter.name))OptionSections(for: request.parameters, search: search, context: request.context)")
                        g.line("    return OptionsResult(sections: sections.map { section in OptionsSection(title: section.title, items: section.values.map { \(g.optionItem(type.value, "$0")) }) })")
                    }
                    g.line("default:")
                    g.line("    return OptionsResult(sections: [])")
                    g.line("}")
                }
                g.line()
                g.block("func confirm(_ request: IntentRequest<\(intentType)>) async throws -> IntentResponse") { g in
                    g.line("try await handler.confirm(intent: request.parameters, context: request.context).intentResponse")
                }
                g.line()
                g.block("func handle(_ request: IntentRequest<\(intentType)>) async throws -> IntentResponse") { g in
                    g.line("try await handler.handle(intent: request.parameters, context: request.context).intentResponse")
                }
                g.line()
                g.block("func continueInApp(_ activity: UserActivity, _ request: IntentRequest<\(intentType)>, extensionResponse: IntentResponse?) async throws -> IntentResponse") { g in
                    g.line("try await handler.continueInApp(intent: request.parameters, activity: activity, extensionResponse: extensionResponse, context: request.context).intentResponse")
                }
            }
        }
    }

    func optionItem(_ type: ValueType, _ value: String) -> String {
        switch type {
        case .custom:
            return "OptionItem(identifier: \(value).identifier, title: \(value).displayRepresentation.title, subtitle: \(value).displayRepresentation.subtitle, image: \(value).displayRepresentation.image, value: _extrunJSON(\(value)))"
        case .string:
            return "OptionItem(identifier: \(value), title: \(value), value: .string(\(value)))"
        case .integer:
            return "OptionItem(identifier: String(\(value)), title: String(\(value)), value: .int(Int64(\(value))))"
        default:
            return "OptionItem(identifier: _extrunText(\(value)), title: _extrunText(\(value)), value: _extrunJSON(\(value)))"
        }
    }
}
