import ExtrunProtocol

/// A `session` answer (docs/protocol.md §15) being walked through: the host runs
/// its own lifecycle (resolve each parameter, confirm, handle) over the plugin's
/// answers as if it had asked for each, and checks that the plugin went exactly as
/// far as the protocol says: up to the first step where the host has to act.
struct SessionReplay {
    var result: SessionResult
    /// Whether the request asked the plugin to handle after a ready confirmation.
    var handleRequested: Bool
    /// The next resolution to take.
    var next = 0
}

extension IntentLifecycle {
    /// Asks a warm plugin for the whole intent at once; the steps that follow take
    /// their answers from it while they agree with it.
    mutating func requestSession(_ connection: PluginConnection, parameters: [String: JSONValue]) throws(LifecycleFailure) {
        phase = .session
        // A confirmation a person must give comes between confirm and handle: the host sends handle itself then.
        let personConfirms = definition.confirmation != nil && !intentConfirmed && !options.assumeYes
        let params = SessionParams(
            intent: definition.name, parameters: parameters,
            resolve: definition.parameters.map { SessionParameter(parameter: $0.name, required: $0.required, parent: $0.parent) },
            handle: !personConfirms, pollAfterUs: PooledSessions.pollAfterHint)
        let value = try call(connection, Method.session, params.jsonValue)
        let result: SessionResult
        do {
            result = try SessionResult(jsonValue: value)
        } catch {
            throw .protocolViolation("its session answer is malformed: \(JSONCoding.describe(error))")
        }
        replay = SessionReplay(result: result, handleRequested: params.handle)
    }

    /// The plugin's resolution of `parameter`, the next in its answer. Where the
    /// session stops for the host (a person, a missing value), nothing may follow it.
    mutating func replayedResolution(of parameter: ParameterDefinition, values: [String: JSONValue]) throws(LifecycleFailure) -> ResolutionResult {
        guard var state = replay else { throw .protocolViolation("internal: no session answer to replay") }
        let resolutions = state.result.resolutions
        guard state.next < resolutions.count else {
            throw .protocolViolation(
                "its session answer does not resolve '\(parameter.name)'"
                    + (state.result.confirm != nil ? " but goes on to confirm" : " and stops without a reason"))
        }
        let entry = resolutions[state.next]
        guard entry.parameter == parameter.name else {
            throw .protocolViolation("its session answer resolves '\(entry.parameter)' where '\(parameter.name)' comes next")
        }
        state.next += 1
        let step = SessionParameter(parameter: parameter.name, required: parameter.required, parent: parameter.parent)
        var after = values
        SessionParameter.apply(entry.result, to: parameter.name, values: &after)
        if step.goesOn(after: entry.result, values: after) {
            replay = state
        } else {
            // The host acts here (asks a person, or reports the parameter unresolved): the
            // plugin must have stopped, and what follows is asked step by step.
            if state.next < resolutions.count || state.result.confirm != nil || state.result.handle != nil {
                throw .protocolViolation(
                    "its session answer goes on after resolving '\(parameter.name)' as \(entry.result.kind), where the session stops for the host")
            }
            replay = nil
        }
        return entry.result
    }

    /// The plugin's answer to `confirm` or `handle` from its session answer, or nil
    /// when the host asks for it itself (handle after a person confirmed).
    mutating func replayedResponse(_ method: String) throws(LifecycleFailure) -> IntentResponse? {
        guard let state = replay else { return nil }
        if method == Method.confirm {
            if state.next < state.result.resolutions.count {
                throw .protocolViolation(
                    "its session answer resolves '\(state.result.resolutions[state.next].parameter)', which is not resolved for these values")
            }
            guard let confirm = state.result.confirm else {
                throw .protocolViolation("its session answer stops before confirm without a reason")
            }
            let proceeds = confirm.letsHandlingProceed
            if state.result.handle != nil && !(proceeds && state.handleRequested) {
                throw .protocolViolation(
                    proceeds
                        ? "its session answer handles the intent, which the host asked it not to (a person confirms it first)"
                        : "its session answer handles the intent after confirm answered '\(confirm.code)'")
            }
            if !state.handleRequested { replay = nil }
            return confirm
        }
        replay = nil
        guard state.handleRequested else { return nil }
        guard let handle = state.result.handle else {
            throw .protocolViolation("its session answer stops after confirm without handling the intent")
        }
        return handle
    }
}
