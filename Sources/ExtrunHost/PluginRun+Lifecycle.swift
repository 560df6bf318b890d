import ExtrunProtocol
import Foundation

/// The lifecycle of an intent, as in SiriKit: handshake, resolve each parameter,
/// confirm, handle. Where a person is needed (a missing value, a choice, a
/// confirmation) the run asks through `options.prompter`, with the deadline's
/// clock stopped; without a prompter those end the run with a clear error.
extension PluginRun {
    @discardableResult
    mutating func initialize(_ connection: PluginConnection) throws -> InitializeResult {
        phase = .launch
        let params = InitializeParams(hostVersion: Host.version, mode: mode, intent: activityOnly ? nil : definition.name)
        let value = try call(connection, Method.initialize, params.jsonValue)
        let result: InitializeResult
        do {
            result = try InitializeResult(jsonValue: value)
        } catch {
            throw CallFailure.protocolViolation("its initialize result is malformed: \(JSONCoding.describe(error))")
        }
        if result.protocolVersion != ProtocolVersion.current {
            throw CallFailure.protocolViolation(
                "it speaks protocol version \(result.protocolVersion), this host speaks version \(ProtocolVersion.current)")
        }
        if result.plugin.id != id {
            throw CallFailure.protocolViolation(
                "it introduced itself as '\(result.plugin.id)' but its manifest (\(plugin.manifestURL.path)) says '\(id)'")
        }
        if !activityOnly && !result.intents.contains(definition.name) {
            throw CallFailure.protocolViolation(
                "its handshake does not list the intent '\(definition.name)' that its manifest declares (it lists: \(result.intents.joined(separator: ", ")))")
        }
        return result
    }

    /// Resolves, confirms (asking the intent's confirmation question, if it has one) and handles.
    mutating func handle(_ connection: PluginConnection, parameters: [String: JSONValue], into report: inout HandleReport) throws {
        if sessionRequest { try requestSession(connection, parameters: parameters) }
        let resolved = try resolveAll(connection, parameters: parameters)
        self.resolved = resolved
        phase = .confirm
        let confirmation = try intentResponse(connection, Method.confirm, parameters: resolved)
        guard confirmation.letsHandlingProceed else {
            report.response = confirmation
            report.responseIsSuccess = definition.isSuccessCode(confirmation.code)
            return
        }
        if let template = definition.confirmation, !intentConfirmed {
            try confirmWithPerson(Phrase.fill(template, with: resolved))
            intentConfirmed = true
        }
        phase = .handle
        let response = try intentResponse(connection, Method.handle, parameters: resolved)
        report.response = response
        report.responseIsSuccess = definition.isSuccessCode(response.code)
    }

    /// In in-app mode: hands the plugin the user activity and the interaction it came
    /// from, and takes its answer as the intent's response.
    mutating func continueActivity(
        _ connection: PluginConnection, activity: UserActivity, interaction: Interaction?, into report: inout HandleReport
    ) throws {
        phase = .continueActivity
        let params = ContinueParams(activity: activity, interaction: interaction)
        let value = try call(connection, Method.continue, try JSONCoding.value(of: params))
        let response: IntentResponse
        do {
            response = try IntentResponse(jsonValue: value)
        } catch {
            throw CallFailure.protocolViolation("its continue response is malformed: \(JSONCoding.describe(error))")
        }
        if !definition.isKnownResponseCode(response.code) {
            throw CallFailure.protocolViolation(
                "it answered continue with the code '\(response.code)', which is neither a standard code nor one its manifest declares"
                    + (activityOnly ? "" : " for \(definition.name)"))
        }
        report.response = response
        report.responseIsSuccess = definition.isSuccessCode(response.code)
    }

    func confirmWithPerson(_ question: String) throws {
        if options.assumeYes { return }
        guard let prompter = options.prompter else {
            throw HostError(
                .confirmationDeclined, "\(definition.name) needs a confirmation: \(question) (run with --yes to confirm, or on a terminal)",
                details: ["prompt": .string(question)])
        }
        let answer = deadline.excluding { prompter.confirm(question) }
        guard answer == true else {
            throw HostError(
                .confirmationDeclined, "\(definition.name) was not confirmed: \(question) \(answer == nil ? "(no answer)" : "(declined)")",
                details: ["prompt": .string(question)])
        }
    }

    mutating func options(_ connection: PluginConnection, parameter: String, parameters: [String: JSONValue], search: String?) throws
        -> OptionsResult
    {
        let params = OptionsParams(intent: definition.name, parameter: parameter, parameters: parameters, search: search)
        let value = try call(connection, Method.options, try JSONCoding.value(of: params))
        let result: OptionsResult
        do {
            result = try JSONCoding.decode(OptionsResult.self, from: value)
        } catch {
            throw CallFailure.protocolViolation("its options for '\(parameter)' are malformed: \(JSONCoding.describe(error))")
        }
        if let definition = definition.parameter(named: parameter) {
            let single = ParameterDefinition(name: definition.name, type: definition.type, values: definition.values, customType: definition.customType)
            for item in result.allItems {
                if let problem = ParameterValueCheck.problem(item.value, for: single) {
                    throw CallFailure.protocolViolation("its option '\(item.identifier)' for '\(parameter)' does not fit the parameter's type: \(problem)")
                }
            }
        }
        return result
    }

    /// The most times one parameter is resolved again after a person answered.
    static let maxResolutionRounds = 6

    mutating func resolveAll(_ connection: PluginConnection, parameters: [String: JSONValue]) throws -> [String: JSONValue] {
        phase = .resolve
        var values = parameters
        for parameter in definition.parameters {
            guard parameter.isShown(given: values) else {
                // Its parent condition is not met: not resolved at all, and no value is passed on.
                values[parameter.name] = nil
                continue
            }
            var round = 0
            while true {
                round += 1
                let resolution: ResolutionResult
                if replay != nil {
                    resolution = try replayedResolution(of: parameter, values: values)
                } else {
                    let params = ResolveParams(intent: definition.name, parameter: parameter.name, parameters: values)
                    let value = try call(connection, Method.resolve, params.jsonValue)
                    do {
                        resolution = try ResolutionResult(jsonValue: value)
                    } catch {
                        throw CallFailure.protocolViolation("its resolution of '\(parameter.name)' is malformed: \(JSONCoding.describe(error))")
                    }
                }
                let again = try apply(resolution, to: parameter, values: &values, connection: connection, canAsk: round < Self.maxResolutionRounds)
                if !again { break }
            }
        }
        return values
    }

    /// Applies one resolution. Returns true when a person gave a new value, to be resolved again.
    mutating func apply(
        _ resolution: ResolutionResult, to parameter: ParameterDefinition, values: inout [String: JSONValue], connection: PluginConnection,
        canAsk: Bool
    ) throws -> Bool {
        func unresolved(_ message: String, _ extra: [String: JSONValue] = [:]) -> HostError {
            var details = extra
            details["parameter"] = .string(parameter.name)
            details["resolution"] = resolution.jsonValue
            return HostError(.parameterUnresolved, message, details: details)
        }
        let prompter = canAsk ? options.prompter : nil
        let prompt = parameter.prompt ?? "A value is needed for \(parameter.title ?? parameter.name)."
        switch resolution {
        case .success(let value), .confirmationRequired(let value, _):
            if case .confirmationRequired(_, let question) = resolution, !options.assumeYes {
                let question = question ?? parameter.confirmationPrompt ?? "Is \(TextFormat.describe(value)) right for \(parameter.title ?? parameter.name)?"
                guard let prompter else {
                    throw unresolved("\(parameter.name): \(question) (run with --yes to accept it)", ["value": value, "prompt": .string(question)])
                }
                let answer = deadline.excluding { prompter.confirm(question) }
                if answer == nil { throw unresolved("\(parameter.name): \(question) (no answer)", ["value": value]) }
                if answer == false {
                    // Declined: ask for another value.
                    return try askForValue(parameter, prompt: prompt, prompter: prompter, values: &values, connection: connection, unresolved: unresolved)
                }
            }
            if value.isNull {
                values[parameter.name] = nil
            } else if let problem = ParameterValueCheck.problem(value, for: parameter) {
                throw CallFailure.protocolViolation("it resolved '\(parameter.name)' to a value that does not fit its type: \(problem)")
            } else {
                values[parameter.name] = value
            }
        case .needsValue(let question):
            guard let prompter else { throw unresolved("\(parameter.name): \(question ?? prompt)", ["prompt": .string(question ?? prompt)]) }
            return try askForValue(parameter, prompt: question ?? prompt, prompter: prompter, values: &values, connection: connection, unresolved: unresolved)
        case .disambiguation(let choices, let question):
            let question = question ?? "Which \(parameter.title ?? parameter.name)?"
            guard let prompter, !choices.isEmpty else {
                throw unresolved(
                    "\(parameter.name): \(question) (\(choices.count) options; pass one in the intent file)", ["options": .array(choices)])
            }
            guard let index = deadline.excluding({ prompter.choose(question, among: choices.map(TextFormat.describe)) }) else {
                throw unresolved("\(parameter.name): \(question) (no answer)", ["options": .array(choices)])
            }
            values[parameter.name] = choices[index]
            return true
        case .unsupported(let reason, let message):
            let declared = parameter.unsupportedReasons?.first { $0.code == reason }?.message
            let text = message ?? declared ?? "this value is not supported"
            guard let prompter else {
                var extra: [String: JSONValue] = [:]
                if let reason { extra["reason"] = .string(reason) }
                throw unresolved("\(parameter.name): \(text)", extra)
            }
            prompter.tell(text)
            return try askForValue(parameter, prompt: prompt, prompter: prompter, values: &values, connection: connection, unresolved: unresolved)
        case .notRequired:
            break
        }
        if parameter.required && values[parameter.name] == nil {
            guard let prompter else { throw unresolved("\(parameter.name): \(prompt)", ["prompt": .string(prompt)]) }
            return try askForValue(parameter, prompt: prompt, prompter: prompter, values: &values, connection: connection, unresolved: unresolved)
        }
        return false
    }

    /// Asks a person for a value (offering the plugin's options when it has dynamic ones).
    mutating func askForValue(
        _ parameter: ParameterDefinition, prompt: String, prompter: any Prompter, values: inout [String: JSONValue],
        connection: PluginConnection, unresolved: (String, [String: JSONValue]) -> HostError
    ) throws -> Bool {
        if parameter.dynamicOptions {
            let saved = phase
            let offered = try options(connection, parameter: parameter.name, parameters: values, search: nil).allItems
            phase = saved
            guard !offered.isEmpty else { throw unresolved("\(parameter.name): \(prompt) (the plugin offers no options)", [:]) }
            let labels = offered.map { item in item.subtitle.map { "\(item.title) — \($0)" } ?? item.title }
            guard let index = deadline.excluding({ prompter.choose(prompt, among: labels) }) else {
                throw unresolved("\(parameter.name): \(prompt) (no answer)", ["prompt": .string(prompt)])
            }
            values[parameter.name] = parameter.multiple ? .array([offered[index].value]) : offered[index].value
            return true
        }
        for _ in 0..<3 {
            guard let text = deadline.excluding({ prompter.ask(promptLine(prompt, for: parameter)) }) else {
                throw unresolved("\(parameter.name): \(prompt) (no answer)", ["prompt": .string(prompt)])
            }
            switch PromptedValue.parse(text, for: parameter, baseDirectory: baseDirectory) {
            case .success(let value):
                values[parameter.name] = value
                return true
            case .failure(let problem):
                prompter.tell(problem.message)
            }
        }
        throw unresolved("\(parameter.name): \(prompt) (no usable answer)", ["prompt": .string(prompt)])
    }

    func promptLine(_ prompt: String, for parameter: ParameterDefinition) -> String {
        switch parameter.type {
        case .enum:
            let choices = (parameter.values ?? []).map { parameter.valueTitles?[$0] ?? $0 }
            return "\(prompt) (\(choices.joined(separator: ", ")))"
        case .boolean: return "\(prompt) (yes/no)"
        case .date: return "\(prompt) (e.g. 2026-11-22)"
        case .file: return "\(prompt) (a path)"
        default: return parameter.multiple ? "\(prompt) (separate values with commas)" : prompt
        }
    }

    mutating func intentResponse(_ connection: PluginConnection, _ method: String, parameters: [String: JSONValue]) throws -> IntentResponse {
        if replay != nil, let replayed = try replayedResponse(method) {
            return try checked(replayed, method)
        }
        let params = IntentParams(intent: definition.name, parameters: parameters)
        let value = try call(connection, method, params.jsonValue)
        let response: IntentResponse
        do {
            response = try IntentResponse(jsonValue: value)
        } catch {
            throw CallFailure.protocolViolation("its \(method) response is malformed: \(JSONCoding.describe(error))")
        }
        return try checked(response, method)
    }

    /// A response whose code is standard or declared in the manifest.
    func checked(_ response: IntentResponse, _ method: String) throws -> IntentResponse {
        if !definition.isKnownResponseCode(response.code) {
            let custom = definition.responses.map(\.code)
            throw CallFailure.protocolViolation(
                "it answered \(method) with the code '\(response.code)', which is neither a standard code nor one its manifest declares"
                    + (custom.isEmpty ? "" : " (declared: \(custom.joined(separator: ", ")))"))
        }
        return response
    }

    func call(_ connection: PluginConnection, _ method: String, _ params: JSONValue) throws -> JSONValue {
        let deadline = self.deadline
        let sent = MonotonicClock.now()
        let outcome = connection.call(method, params, deadline: { deadline.instant })
        if let log = options.log {
            // --verbose: each phase's request with its time (plugin-guide.md, "Testing a plugin").
            let parameter = params["parameter"]?.stringValue.map { " '\($0)'" } ?? ""
            let answer: String
            switch outcome {
            case .success(.success(let value)):
                answer = value["result"]?.stringValue ?? value["code"]?.stringValue ?? "answered"
            case .success(.failure(let rpcError)): answer = "error \(rpcError.code)"
            case .failure: answer = "no answer"
            }
            log("[extrun] \(id) \(method)\(parameter): \(answer) in \(MonotonicClock.milliseconds(from: sent)) ms (\(MonotonicClock.milliseconds(from: start)) ms from launch)")
        }
        switch outcome {
        case .success(.success(let value)):
            return value
        case .success(.failure(let rpcError)):
            let kind: ErrorKind =
                rpcError.code == RPCError.unknownIntent || rpcError.code == RPCError.methodNotFound
                    || rpcError.code == RPCError.invalidParams
                ? .protocolError : .pluginError
            throw HostError(
                kind, "\(id) answered \(method) with an error: \(rpcError.message) (code \(rpcError.code))",
                details: ["phase": .string(phase.rawValue), "code": .int(Int64(rpcError.code))])
        case .failure(let failure):
            throw failure
        }
    }
}

/// Turns what a person typed into a parameter value.
enum PromptedValue {
    struct Problem: Error {
        var message: String
    }

    static func parse(_ text: String, for parameter: ParameterDefinition, baseDirectory: URL) -> Result<JSONValue, Problem> {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if parameter.multiple {
            var items: [JSONValue] = []
            for part in trimmed.split(separator: ",") {
                switch single(String(part).trimmingCharacters(in: .whitespaces), parameter, baseDirectory) {
                case .success(let value): items.append(value)
                case .failure(let problem): return .failure(problem)
                }
            }
            return items.isEmpty ? .failure(Problem(message: "Please enter at least one value.")) : .success(.array(items))
        }
        return single(trimmed, parameter, baseDirectory)
    }

    static func single(_ text: String, _ parameter: ParameterDefinition, _ baseDirectory: URL) -> Result<JSONValue, Problem> {
        switch parameter.type {
        case .string:
            return .success(.string(text))
        case .integer:
            guard let value = Int64(text) else { return .failure(Problem(message: "'\(text)' is not a whole number.")) }
            return .success(.int(value))
        case .number:
            guard let value = Double(text), value.isFinite else { return .failure(Problem(message: "'\(text)' is not a number.")) }
            return .success(.double(value))
        case .boolean:
            switch text.lowercased() {
            case "y", "yes", "true", "1", "on": return .success(.bool(true))
            case "n", "no", "false", "0", "off": return .success(.bool(false))
            default: return .failure(Problem(message: "Please answer yes or no."))
            }
        case .date:
            guard ISODate.parse(text) != nil else { return .failure(Problem(message: "'\(text)' is not a date like 2026-11-22.")) }
            return .success(.string(text))
        case .enum:
            let values = parameter.values ?? []
            let folded = text.folding(options: [.caseInsensitive, .diacriticInsensitive], locale: nil)
            if let match = values.first(where: {
                $0.folding(options: [.caseInsensitive, .diacriticInsensitive], locale: nil) == folded
                    || (parameter.valueTitles?[$0]?.folding(options: [.caseInsensitive, .diacriticInsensitive], locale: nil) == folded)
            }) {
                return .success(.string(match))
            }
            return .failure(Problem(message: "'\(text)' is not one of \(values.map { parameter.valueTitles?[$0] ?? $0 }.joined(separator: ", "))."))
        case .file:
            let invocation = IntentInvocation(intent: "", parameters: [:], source: "prompt", baseDirectory: baseDirectory)
            do {
                return .success(try IntentFileParser.loadFile(.string(text), parameter: parameter, field: parameter.name, invocation: invocation))
            } catch {
                return .failure(Problem(message: error.message))
            }
        case .custom:
            return .success(.object(["identifier": .string(text), "title": .string(text)]))
        }
    }
}
