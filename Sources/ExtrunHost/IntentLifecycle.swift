import ExtrunProtocol
import Foundation

/// The lifecycle of one intent, as in SiriKit: handshake, resolve each parameter,
/// confirm, handle (or: the options of a parameter; or: continue a user activity).
/// It runs over any plugin session (`PluginSession`, from a `SessionSource`: a new
/// process, or a warm one) and keeps what belongs to the intent, not to the process:
/// the phase, the deadline, the values resolved, the confirmation, the replay of a
/// `session` answer. Where a person is needed (a missing value, a choice, a
/// confirmation) it asks through `options.prompter`, with the deadline's clock
/// stopped; without a prompter those end the intent with a clear error.
///
/// The steps are here; running them on a session, and what a failure becomes, is in
/// IntentLifecycle+Execution.swift; the replay of a `session` answer in
/// IntentLifecycle+SessionReplay.swift.
struct IntentLifecycle {
    let plugin: DiscoveredPlugin
    let definition: IntentDefinition
    let limits: EffectiveLimits
    let policy: SandboxPolicy
    let options: HandleOptions
    var mode: Mode { limits.mode }
    var id: String { plugin.manifest.id }
    var phase: Phase = .launch
    /// When this intent's budget started: the launch for a process's first intent,
    /// the `initialize` (or `session` request) for a later one in a warm process.
    var start: UInt64 = 0
    let deadline = Deadline()
    /// Answers the plugin's requests for its owner's globals and bookmarks.
    var services: StoreServices?
    /// `$EXTRUN_HOME`, which the sandbox hides from the plugin.
    var home: URL?
    /// Where relative file paths typed at a prompt are taken from.
    var baseDirectory: URL {
        get { givenBaseDirectory ?? URL(fileURLWithPath: FileManager.default.currentDirectoryPath) }
        set { givenBaseDirectory = newValue }
    }
    /// Set by the caller (the intent file's folder); the working directory is looked up
    /// only when needed (a URL for it costs a `getcwd` and a `stat` per intent in a pool).
    private var givenBaseDirectory: URL?
    /// The parameters once every one was resolved (set by `handle`), for a later step.
    var resolved: [String: JSONValue]?
    /// Whether a person (or --yes) confirmed the intent.
    var intentConfirmed = false
    /// Continuing an activity that no intent comes with: `initialize` names no intent.
    var activityOnly = false
    /// Ask for the whole session in one `session` request (a warm process whose plugin
    /// declared it; docs/protocol.md §15) instead of one request per step.
    var sessionRequest = false
    /// The `session` answer, replayed step by step while the host walks the lifecycle.
    var replay: SessionReplay?

    /// What an intent's run is for.
    enum Work {
        /// Resolve, confirm and handle the intent.
        case handle(parameters: [String: JSONValue])
        /// Ask for a parameter's possible values.
        case options(parameter: String, parameters: [String: JSONValue], search: String?)
        /// In in-app mode: carry on with a user activity (and the interaction an extension handed over).
        case continueActivity(UserActivity, interaction: Interaction?)
    }

    init(plugin: DiscoveredPlugin, definition: IntentDefinition, limits: EffectiveLimits, policy: SandboxPolicy, options: HandleOptions) {
        self.plugin = plugin
        self.definition = definition
        self.limits = limits
        self.policy = policy
        self.options = options
    }

    /// What the session it runs over must be.
    var sessionSpec: SessionSpec {
        SessionSpec(plugin: plugin, limits: limits, policy: policy, home: home, seal: services?.seal, log: options.log)
    }

    /// The same plugin, intent, policy, store and home, with other limits: the app's
    /// step after the extension's (in a new process).
    func appStep(limits: EffectiveLimits) -> IntentLifecycle {
        var next = IntentLifecycle(plugin: plugin, definition: definition, limits: limits, policy: policy, options: options)
        next.services = services
        next.home = home
        next.givenBaseDirectory = givenBaseDirectory
        next.activityOnly = activityOnly
        return next
    }
}

// MARK: - The steps

extension IntentLifecycle {
    @discardableResult
    mutating func initialize(_ connection: PluginConnection) throws(LifecycleFailure) -> InitializeResult {
        phase = .launch
        let params = InitializeParams(hostVersion: Host.version, mode: mode, intent: activityOnly ? nil : definition.name)
        let value = try call(connection, Method.initialize, params.jsonValue)
        let result: InitializeResult
        do {
            result = try InitializeResult(jsonValue: value)
        } catch {
            throw .protocolViolation("its initialize result is malformed: \(JSONCoding.describe(error))")
        }
        if result.protocolVersion != ProtocolVersion.current {
            throw .protocolViolation(
                "it speaks protocol version \(result.protocolVersion), this host speaks version \(ProtocolVersion.current)")
        }
        if result.plugin.id != id {
            throw .protocolViolation(
                "it introduced itself as '\(result.plugin.id)' but its manifest (\(plugin.manifestURL.path)) says '\(id)'")
        }
        if !activityOnly && !result.intents.contains(definition.name) {
            throw .protocolViolation(
                "its handshake does not list the intent '\(definition.name)' that its manifest declares (it lists: \(result.intents.joined(separator: ", ")))")
        }
        return result
    }

    /// Resolves, confirms (asking the intent's confirmation question, if it has one) and handles.
    mutating func handle(_ connection: PluginConnection, parameters: [String: JSONValue], into report: inout HandleReport) throws(LifecycleFailure) {
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
    ) throws(LifecycleFailure) {
        phase = .continueActivity
        let params = ContinueParams(activity: activity, interaction: interaction)
        let value = try call(connection, Method.continue, encoded(params))
        let response: IntentResponse
        do {
            response = try IntentResponse(jsonValue: value)
        } catch {
            throw .protocolViolation("its continue response is malformed: \(JSONCoding.describe(error))")
        }
        if !definition.isKnownResponseCode(response.code) {
            throw .protocolViolation(
                "it answered continue with the code '\(response.code)', which is neither a standard code nor one its manifest declares"
                    + (activityOnly ? "" : " for \(definition.name)"))
        }
        report.response = response
        report.responseIsSuccess = definition.isSuccessCode(response.code)
    }

    /// Asks a person (`body` calls the prompter) with the deadline's clock stopped; a run
    /// cancelled while the question was open ends here (`CallFailure.cancelled`).
    func asking<Answer>(_ body: () -> Answer?) throws(LifecycleFailure) -> Answer? {
        let answer = deadline.excluding(body)
        try checkCancelled()
        return answer
    }

    func confirmWithPerson(_ question: String) throws(LifecycleFailure) {
        if options.assumeYes { return }
        guard let prompter = options.prompter else {
            throw .host(
                HostError(
                    .confirmationDeclined, "\(definition.name) needs a confirmation: \(question) (run with --yes to confirm, or on a terminal)",
                    details: ["prompt": .string(question)]))
        }
        let answer = try asking { prompter.confirm(question) }
        guard answer == true else {
            throw .host(
                HostError(
                    .confirmationDeclined, "\(definition.name) was not confirmed: \(question) \(answer == nil ? "(no answer)" : "(declined)")",
                    details: ["prompt": .string(question)]))
        }
    }

    mutating func options(_ connection: PluginConnection, parameter: String, parameters: [String: JSONValue], search: String?) throws(LifecycleFailure)
        -> OptionsResult
    {
        let params = OptionsParams(intent: definition.name, parameter: parameter, parameters: parameters, search: search)
        let value = try call(connection, Method.options, encoded(params))
        let result: OptionsResult
        do {
            result = try JSONCoding.decode(OptionsResult.self, from: value)
        } catch {
            throw .protocolViolation("its options for '\(parameter)' are malformed: \(JSONCoding.describe(error))")
        }
        if let definition = definition.parameter(named: parameter) {
            let single = ParameterDefinition(name: definition.name, type: definition.type, values: definition.values, customType: definition.customType)
            for item in result.allItems {
                if let problem = ParameterValueCheck.problem(item.value, for: single) {
                    throw .protocolViolation("its option '\(item.identifier)' for '\(parameter)' does not fit the parameter's type: \(problem)")
                }
            }
        }
        return result
    }

    /// The most times one parameter is resolved again after a person answered.
    static let maxResolutionRounds = 6

    mutating func resolveAll(_ connection: PluginConnection, parameters: [String: JSONValue]) throws(LifecycleFailure) -> [String: JSONValue] {
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
                        throw .protocolViolation("its resolution of '\(parameter.name)' is malformed: \(JSONCoding.describe(error))")
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
    ) throws(LifecycleFailure) -> Bool {
        func unresolved(_ message: String, _ extra: [String: JSONValue] = [:]) -> LifecycleFailure {
            var details = extra
            details["parameter"] = .string(parameter.name)
            details["resolution"] = resolution.jsonValue
            return .host(HostError(.parameterUnresolved, message, details: details))
        }
        let prompter = canAsk ? options.prompter : nil
        let prompt = parameter.prompt ?? "A value is needed for \(parameter.title ?? parameter.name)."
        switch resolution {
        case .success(let value), .confirmationRequired(let value, _):
            if case .confirmationRequired(_, let question) = resolution, !options.assumeYes {
                let question = question ?? parameter.confirmationPrompt ?? "Is \(ValueText.describe(value)) right for \(parameter.title ?? parameter.name)?"
                guard let prompter else {
                    throw unresolved("\(parameter.name): \(question) (run with --yes to accept it)", ["value": value, "prompt": .string(question)])
                }
                let answer = try asking { prompter.confirm(question) }
                if answer == nil { throw unresolved("\(parameter.name): \(question) (no answer)", ["value": value]) }
                if answer == false {
                    // Declined: ask for another value.
                    return try askForValue(parameter, prompt: prompt, prompter: prompter, values: &values, connection: connection, unresolved: unresolved)
                }
            }
            if value.isNull {
                values[parameter.name] = nil
            } else if let problem = ParameterValueCheck.problem(value, for: parameter) {
                throw .protocolViolation("it resolved '\(parameter.name)' to a value that does not fit its type: \(problem)")
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
            let offered = choices.enumerated().map { index, choice in
                PromptOption(
                    identifier: choice["identifier"]?.stringValue ?? String(index + 1), label: ValueText.describe(choice),
                    title: choice["title"]?.stringValue)
            }
            guard let index = try asking({ prompter.choose(question, among: offered, for: parameter) }), choices.indices.contains(index) else {
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
        connection: PluginConnection, unresolved: (String, [String: JSONValue]) -> LifecycleFailure
    ) throws(LifecycleFailure) -> Bool {
        if parameter.dynamicOptions {
            let saved = phase
            let offered = try options(connection, parameter: parameter.name, parameters: values, search: nil).allItems
            phase = saved
            guard !offered.isEmpty else { throw unresolved("\(parameter.name): \(prompt) (the plugin offers no options)", [:]) }
            let labels = offered.map { item in item.subtitle.map { "\(item.title) — \($0)" } ?? item.title }
            let choices = zip(offered, labels).map { PromptOption(identifier: $0.identifier, label: $1) }
            guard let index = try asking({ prompter.choose(prompt, among: choices, for: parameter) }), offered.indices.contains(index) else {
                throw unresolved("\(parameter.name): \(prompt) (no answer)", ["prompt": .string(prompt)])
            }
            values[parameter.name] = parameter.multiple ? .array([offered[index].value]) : offered[index].value
            return true
        }
        for _ in 0..<3 {
            guard let text = try asking({ prompter.ask(promptLine(prompt, for: parameter), for: parameter) }) else {
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

    mutating func intentResponse(_ connection: PluginConnection, _ method: String, parameters: [String: JSONValue]) throws(LifecycleFailure) -> IntentResponse {
        if replay != nil, let replayed = try replayedResponse(method) {
            return try checked(replayed, method)
        }
        let params = IntentParams(intent: definition.name, parameters: parameters)
        let value = try call(connection, method, params.jsonValue)
        let response: IntentResponse
        do {
            response = try IntentResponse(jsonValue: value)
        } catch {
            throw .protocolViolation("its \(method) response is malformed: \(JSONCoding.describe(error))")
        }
        return try checked(response, method)
    }

    /// A response whose code is standard or declared in the manifest.
    func checked(_ response: IntentResponse, _ method: String) throws(LifecycleFailure) -> IntentResponse {
        if !definition.isKnownResponseCode(response.code) {
            let custom = definition.responses.map(\.code)
            throw .protocolViolation(
                "it answered \(method) with the code '\(response.code)', which is neither a standard code nor one its manifest declares"
                    + (custom.isEmpty ? "" : " (declared: \(custom.joined(separator: ", ")))"))
        }
        return response
    }

    /// A request's parameters as JSON (a type of the protocol's own: its encoding failing
    /// would be the host's fault).
    func encoded(_ params: some Encodable) throws(LifecycleFailure) -> JSONValue {
        do {
            return try JSONCoding.value(of: params)
        } catch {
            throw .host(HostError(.internalError, "\(error)"))
        }
    }

    func call(_ connection: PluginConnection, _ method: String, _ params: JSONValue) throws(LifecycleFailure) -> JSONValue {
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
            var details: [String: JSONValue] = ["phase": .string(phase.rawValue), "code": .int(Int64(rpcError.code))]
            var cause = ""
            if kind == .pluginError, let failure = services?.storeFailure {
                // The plugin failed after the store failed it: the report says so, typed.
                details["store"] = ["kind": .string(failure.kind.rawValue), "message": .string(failure.message)]
                if !rpcError.message.contains(failure.message) { cause = "; the store failed it first: \(failure.message) (\(failure.kind.rawValue))" }
            }
            throw .host(HostError(kind, "\(id) answered \(method) with an error: \(rpcError.message) (code \(rpcError.code))\(cause)", details: details))
        case .failure(let failure):
            throw .call(failure)
        }
    }
}
