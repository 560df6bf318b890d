import ExtrunHost
import ExtrunProtocol
import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

extension MCPDispatcher {
    /// A request of the handshake eras, in `peer` (stdio's connection or an HTTP session).
    func legacy(id: JSONValue, method: String, params: JSONValue, context: MCPRequestContext, peer: Peer, exchange: MCPExchange, responder: Responder) {
        switch method {
        case "initialize":
            initialize(id: id, params: params, context: context, peer: peer, responder: responder)
        case "ping", "logging/setLevel":
            responder.final(Self.result(id: id, .object([:])))
        case "tools/list":
            let (structured, elicitation) = peer.settings(canStream: responder.canStream)
            let catalog = catalog(structured: structured, confirmArgument: !elicitation)
            listen(peer)
            responder.final(Self.result(id: id, ["tools": listing(catalog, context: context, era: exchange.era)]))
        case "tools/call":
            legacyCall(id: id, params: params, context: context, peer: peer, exchange: exchange, responder: responder)
        case "server/discover":
            // A legacy client that probes: the versions, as a modern server would name them.
            responder.final(discoverReply(id: id))
        default:
            responder.final(Self.error(id: id, code: -32601, "extrun mcp does not serve '\(method)' (it serves tools: tools/list, tools/call)"))
        }
    }

    /// The peer hears of tools that change (stdio: `notifications/tools/list_changed`).
    func listen(_ peer: Peer) {
        guard peer.notify != nil else { return }
        state.withLockedValue { state in
            if !state.ended { state.listeners[ObjectIdentifier(peer)] = peer }
        }
    }

    func initialize(id: JSONValue, params: JSONValue, context: MCPRequestContext, peer: Peer, responder: Responder) {
        let asked = params["protocolVersion"]?.stringValue ?? ""
        let version = Self.legacyVersions.contains(asked) ? asked : Self.legacyVersions[0]
        // Form elicitation: `"elicitation": {}` (2025-06-18), or with `form` (2025-11-25, which adds `url`).
        let declared = params["capabilities"]?["elicitation"]?.objectValue
        let elicitation = declared.map { $0.isEmpty || $0["form"] != nil } ?? false
        peer.negotiated(version: version, elicitation: elicitation && version >= "2025-06-18")
        let (structured, elicits) = peer.settings(canStream: responder.canStream)
        let catalog = catalog(structured: structured, confirmArgument: !elicits)
        configuration.log?(
            "[extrun mcp] initialize: protocol \(version) (asked \(asked)), elicitation \(elicitation ? "yes" : "no"), \(catalog.tools.count) tools")
        var reply = Self.result(
            id: id,
            [
                "protocolVersion": .string(version),
                "capabilities": ["tools": ["listChanged": true]],
                "serverInfo": Self.serverInfo,
                "instructions": .string(Self.instructions),
            ])
        if let session = peer.sessionID { reply.headers.append(("Mcp-Session-Id", session)) }
        responder.final(reply)
    }

    func legacyCall(id: JSONValue, params: JSONValue, context: MCPRequestContext, peer: Peer, exchange: MCPExchange, responder: Responder) {
        guard let name = params["name"]?.stringValue else {
            responder.final(Self.error(id: id, code: -32602, "tools/call needs a tool name (params.name)"))
            return
        }
        let arguments = params["arguments"] ?? .object([:])
        guard case .object(var parameters) = arguments else {
            responder.final(Self.error(id: id, code: -32602, "the arguments of \(name) must be an object, not \(arguments.typeNameWithArticle)"))
            return
        }
        let (structured, elicitation) = peer.settings(canStream: responder.canStream)
        let catalog = catalog(structured: structured, confirmArgument: !elicitation)
        let started = MonotonicClock.now()
        guard let tool = catalog.tool(named: name) else {
            record(name, tool: nil, context: context, era: exchange.era, started: started, errorKind: "invalidParams")
            responder.final(Self.error(id: id, code: -32602, "Unknown tool: \(name) (the tools: \(catalog.tools.map(\.name).joined(separator: ", ")))"))
            return
        }
        if let refused = refusal(of: tool, id: id, context: context, era: exchange.era) {
            record(name, tool: tool, context: context, era: exchange.era, started: started, errorKind: "refused")
            responder.final(refused)
            return
        }
        let call = Call(id: id, progressToken: params["_meta"]?["progressToken"], control: exchange.control, responder: responder)
        guard peer.register(call) else {
            let report = refusedReport(
                intent: tool.intent,
                "the request id \(String(decoding: JSONWriter.bytes(id), as: UTF8.self)) is in use by a call still running, or the server is ending")
            responder.final(Self.result(id: id, ToolResult.result(of: report, structured: structured)))
            return
        }
        let confirmed = tool.json["inputSchema"]?["properties"]?[ToolCatalog.confirmedArgument] != nil
            && parameters.removeValue(forKey: ToolCatalog.confirmedArgument)?.boolValue == true
        var options = runOptions(context: context, call: call)
        if elicitation {
            options.prompter = ElicitingPrompter(peer: peer, call: call)
        } else if confirmed {
            options.assumeYes = true
        }
        let invocation = IntentInvocation(
            intent: tool.intent, parameters: parameters, source: "tools/call \(name)",
            baseDirectory: baseDirectory)
        let callOptions = options
        let done = running(call.control)
        submit(.handle(invocation), options: callOptions, uid: context.uid, control: call.control, peer: peer) { [self] handled in
            defer { done() }
            var report = handled
            var missing: [OptionItem]?
            if !elicitation {
                missing = missingOptions(report, tool: tool, invocation: invocation, options: callOptions, call: call)
            }
            if let refused = call.refusedAnswer, let error = report.error,
                error.kind == .parameterUnresolved || error.kind == .confirmationDeclined
            {
                // The run stopped because the client's answer was not of the type asked: say that, not "no answer".
                report.error = refused
            }
            log(name, report)
            record(name, tool: tool, context: context, era: exchange.era, started: started, report: report)
            // A call the client cancelled gets no answer (MCP: the receiver of notifications/cancelled
            // sends none); one cancelled by the end of the input or a signal gets its result, an error.
            responder.final(Self.result(id: id, ToolResult.result(of: report, structured: structured, missingOptions: missing)))
            peer.unregister(call)
        }
    }

    /// This process's uid, read once (a system call per `tools/call` otherwise).
    static let ownUID = getuid()

    /// The options a call runs with: the configuration's, its caller, its cancellation, its progress.
    func runOptions(context: MCPRequestContext, call: Call) -> HandleOptions {
        var options = configuration.handleOptions
        options.caller = context.caller ?? options.caller ?? CallerIdentity(uid: Self.ownUID, principal: "mcp")
        if call.progressToken != nil {
            options.onProgress = { progress in call.progress(progress) }
        }
        return options
    }

    /// Without elicitation, a value missing for a parameter with dynamic options: the values
    /// the app offers, for the model to call again with one.
    func missingOptions(_ report: HandleReport, tool: ToolCatalog.Tool, invocation: IntentInvocation, options: HandleOptions, call: Call) -> [OptionItem]? {
        guard let error = report.error, error.kind == .parameterUnresolved, error.details["options"] == nil,
            error.details["value"] == nil, let parameter = error.details["parameter"]?.stringValue,
            tool.definition.parameter(named: parameter)?.dynamicOptions == true, !call.cancellation.isCancelled
        else { return nil }
        return service.perform(.options(invocation, parameter: parameter, search: nil), options: options, control: call.control).options?.allItems
    }

    func log(_ name: String, _ report: HandleReport) {
        configuration.log?(
            "[extrun mcp] \(name): \(report.error.map { "error \($0.kind.rawValue)" } ?? report.response.map { "answered \($0.code)" } ?? "no answer")")
    }
}

/// A legacy session: stdio's connection (one per `extrun mcp`), or an HTTP session made
/// by `initialize` (`Mcp-Session-Id`). It keeps the negotiated version and elicitation,
/// the calls in flight (for `notifications/cancelled`) and the elicitations waiting for
/// the client's answer. A modern request on stdio registers its call here too, to be cancellable.
final class Peer: Sendable {
    /// The HTTP session's id; nil for stdio.
    let sessionID: String?
    let principal: String
    /// Sends a message outside any request (stdio: the connection's stream); nil over HTTP.
    let notify: (@Sendable (JSONValue) -> Void)?
    /// Runs a call's job on the thread that read it (stdio: MCPServer), which calls `release`
    /// once its work is done and before it answers (what follows must not wait: the input is
    /// no longer watched for it); nil: the service's workers run it (`MCPDispatcher.submit`).
    let runner: (@Sendable (@escaping @Sendable (_ release: () -> Void) -> Void) -> Void)?
    private let state = NIOLockedValueBox(PeerState())

    struct PeerState {
        var protocolVersion = MCPDispatcher.legacyVersions[0]
        /// The client declared `elicitation` (form mode) in its capabilities.
        var elicitation = false
        var calls: [JSONValue: Call] = [:]
        var pending: [String: PendingAnswer] = [:]
        var nextRequest = 1
        var ended = false
        var lastUsed = MonotonicClock.now()
    }

    init(
        sessionID: String?, principal: String, notify: (@Sendable (JSONValue) -> Void)?,
        runner: (@Sendable (@escaping @Sendable (_ release: () -> Void) -> Void) -> Void)? = nil
    ) {
        self.sessionID = sessionID
        self.principal = principal
        self.notify = notify
        self.runner = runner
    }

    func negotiated(version: String, elicitation: Bool) {
        state.withLockedValue {
            $0.protocolVersion = version
            $0.elicitation = elicitation
        }
    }

    /// Whether results carry `structuredContent` (2025-06-18 and later), and whether the
    /// client can be asked (it declared elicitation and its answer can reach it: a stream).
    func settings(canStream: Bool) -> (structured: Bool, elicitation: Bool) {
        state.withLockedValue { ($0.protocolVersion >= "2025-06-18", $0.elicitation && canStream) }
    }

    var lastUsed: UInt64 { state.withLockedValue { $0.lastUsed } }
    var isIdle: Bool { state.withLockedValue { $0.calls.isEmpty } }
    func touch() { state.withLockedValue { $0.lastUsed = MonotonicClock.now() } }

    /// False when the id is in use by a call still running, or the peer ended.
    func register(_ call: Call) -> Bool {
        state.withLockedValue { state in
            guard !state.ended, state.calls[call.id] == nil else { return false }
            state.calls[call.id] = call
            return true
        }
    }

    func unregister(_ call: Call) {
        state.withLockedValue { state in
            if state.calls[call.id] === call { state.calls[call.id] = nil }
        }
    }

    /// `notifications/cancelled`: the call gets no answer; its run is cancelled.
    func cancel(id: JSONValue, reason: String) {
        state.withLockedValue { $0.calls[id] }?.cancel(reason, byClient: true)
    }

    /// The session ends (stdio's input ended, DELETE, the server's end): its calls are
    /// cancelled (and answered, an error), the answers it waits for given up.
    func end(reason: String) {
        let (calls, pending) = state.withLockedValue { state in
            state.ended = true
            return (Array(state.calls.values), Array(state.pending.values))
        }
        for call in calls { call.cancel(reason, byClient: false) }
        for answer in pending { answer.fulfil(nil) }
    }

    /// The client stopped reading: the calls in flight are cancelled, the answers given up.
    func abandon(reason: String) {
        let (calls, pending) = state.withLockedValue { state in (Array(state.calls.values), Array(state.pending.values)) }
        for call in calls { call.control.cancel(reason) }
        for answer in pending { answer.fulfil(nil) }
    }

    var hasWork: Bool { state.withLockedValue { !$0.calls.isEmpty || !$0.pending.isEmpty } }

    /// Sends a request to the client on the call's output and waits for its answer: its
    /// `result`, or nil when it answered with an error, the call was cancelled or the session ended.
    func ask(_ method: String, _ params: JSONValue, for call: Call) -> JSONValue? {
        let pending = PendingAnswer()
        let id: String? = state.withLockedValue { state in
            guard !state.ended else { return nil }
            let id = "extrun-\(state.nextRequest)"
            state.nextRequest += 1
            state.pending[id] = pending
            return id
        }
        guard let id else { return nil }
        call.waiting(on: id, pending)
        if call.cancellation.isCancelled {
            pending.fulfil(nil)
        } else {
            call.responder.interim(["jsonrpc": "2.0", "id": .string(id), "method": .string(method), "params": params])
        }
        let answer = pending.wait()
        call.done(waiting: id)
        state.withLockedValue { _ = $0.pending.removeValue(forKey: id) }
        return answer?["result"]
    }

    func answer(id: JSONValue, message: JSONValue) {
        guard let key = id.stringValue, let pending = state.withLockedValue({ $0.pending[key] }) else { return }
        pending.fulfil(message)
    }
}

/// One `tools/call` in flight: its cancellation, its progress token, the elicitations it waits on.
final class Call: Sendable {
    let id: JSONValue
    let progressToken: JSONValue?
    /// The run's control in the service (`cancelAll` at the end reaches it too); the exchange's.
    let control: RunControl
    let responder: Responder
    var cancellation: Cancellation { control.cancellation }
    private let state = NIOLockedValueBox(CallState())

    struct CallState {
        var lastProgress = -1.0
        var waiting: [String: PendingAnswer] = [:]
        var refusedAnswer: HostError?
    }

    init(id: JSONValue, progressToken: JSONValue?, control: RunControl, responder: Responder) {
        self.id = id
        self.progressToken = progressToken
        self.control = control
        self.responder = responder
        // However the run is cancelled (the client, an HTTP stream closed, the end), an elicitation it waits on answers nil.
        control.onCancel { [weak self] in self?.releaseWaits() }
    }

    /// Why an elicitation's answer was refused (of another type than the one asked), if one was.
    var refusedAnswer: HostError? { state.withLockedValue { $0.refusedAnswer } }

    func refuse(_ error: HostError) {
        state.withLockedValue { if $0.refusedAnswer == nil { $0.refusedAnswer = error } }
    }

    /// `notifications/cancelled` (`byClient`: no answer is sent) or the server's end.
    func cancel(_ reason: String, byClient: Bool) {
        if byClient { responder.silence() }
        control.cancel(reason)
    }

    private func releaseWaits() {
        let waiting = state.withLockedValue { Array($0.waiting.values) }
        for answer in waiting { answer.fulfil(nil) }
    }

    func waiting(on id: String, _ answer: PendingAnswer) {
        state.withLockedValue { $0.waiting[id] = answer }
    }

    func done(waiting id: String) {
        _ = state.withLockedValue { $0.waiting.removeValue(forKey: id) }
    }

    /// The plugin's `progress` as `notifications/progress` (0...1 of a total of 1). MCP's
    /// progress must grow: a fraction no larger than the last one, or none, is sent only
    /// with a message, a hair above the last.
    func progress(_ params: ProgressParams) {
        guard let token = progressToken else { return }
        let value: Double? = state.withLockedValue { state in
            if let fraction = params.fraction, fraction.isFinite, fraction > state.lastProgress {
                state.lastProgress = min(fraction, 1)
                return state.lastProgress
            }
            guard params.message != nil else { return nil }
            state.lastProgress = max(0, state.lastProgress).nextUp
            return state.lastProgress
        }
        guard let value else { return }
        var fields: [String: JSONValue] = ["progressToken": token, "progress": .double(value), "total": .double(1)]
        if let message = params.message { fields["message"] = .string(message) }
        responder.interim(["jsonrpc": "2.0", "method": "notifications/progress", "params": .object(fields)])
    }
}

/// An answer the client owes us; `wait` blocks until it comes (or is given up: nil).
typealias PendingAnswer = Promise<JSONValue?>
