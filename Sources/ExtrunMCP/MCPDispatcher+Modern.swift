import ExtrunHost
import ExtrunProtocol
import Foundation

#if canImport(Glibc)
import Glibc
#endif

extension MCPDispatcher {
    /// A request of the modern era (its `_meta` names a version this server speaks): served
    /// on its own, from what it carries. Its client capabilities decide whether the person
    /// can be asked (`elicitation` declared: `input_required` rounds) or not (the result
    /// says what is missing; tools that may ask for a confirmation take `_confirmed`).
    func modern(
        id: JSONValue, method: String, params: JSONValue, version: String, context: MCPRequestContext, peer: Peer?, exchange: MCPExchange,
        responder: Responder
    ) {
        let capabilities = params["_meta"]?[Self.metaCapabilities]?.objectValue ?? [:]
        // Form elicitation: `{}` or with `form` (`url` alone cannot carry a form).
        let elicitation = capabilities["elicitation"]?.objectValue.map { $0.isEmpty || $0["form"] != nil } ?? false
        switch method {
        case "server/discover":
            responder.final(discoverReply(id: id))
        case "ping":
            responder.final(Self.result(id: id, Self.modernResult([:])))
        case "tools/list":
            let catalog = catalog(structured: true, confirmArgument: !elicitation)
            responder.final(
                Self.result(
                    id: id, Self.modernResult(["tools": listing(catalog, context: context, era: exchange.era), "ttlMs": .int(Int64(configuration.toolsTTLMs)), "cacheScope": "private"])))
        case "tools/call":
            modernCall(id: id, params: params, elicitation: elicitation, context: context, peer: peer, exchange: exchange, responder: responder)
        case "subscriptions/listen":
            subscribe(id: id, params: params, peer: peer, exchange: exchange, responder: responder)
        default:
            responder.final(
                Self.error(id: id, code: -32601, "extrun mcp does not serve '\(method)' (it serves server/discover, tools/list, tools/call, subscriptions/listen)", status: 404))
        }
    }

    /// A modern result: `resultType` and the server's `_meta` stamp beside `fields`.
    static func modernResult(_ fields: [String: JSONValue], type: String = "complete") -> JSONValue {
        var fields = fields
        fields["resultType"] = .string(type)
        fields["_meta"] = [metaServerInfo: serverInfo]
        return .object(fields)
    }

    /// `server/discover`: the versions, the capabilities, the instructions (any era may ask).
    func discoverReply(id: JSONValue) -> MCPReply {
        Self.result(
            id: id,
            Self.modernResult([
                "supportedVersions": .array(Self.supportedVersions.map(JSONValue.string)),
                "capabilities": ["tools": ["listChanged": true]],
                "instructions": .string(Self.instructions),
                "ttlMs": .int(Int64(configuration.toolsTTLMs)),
                "cacheScope": "public",
            ]))
    }

    /// `subscriptions/listen`: acknowledged at once; then `notifications/tools/list_changed`
    /// (when asked for) on the request's own stream until the client cancels it.
    func subscribe(id: JSONValue, params: JSONValue, peer: Peer?, exchange: MCPExchange, responder: Responder) {
        guard responder.canStream else {
            responder.final(Self.error(id: id, code: -32600, "subscriptions/listen answers with a stream: send Accept: text/event-stream"))
            return
        }
        let tools = params["notifications"]?["toolsListChanged"]?.boolValue == true
        let subscription = Subscription(id: id, toolsListChanged: tools, responder: responder)
        let key = ObjectIdentifier(subscription)
        let added = state.withLockedValue { state -> Bool in
            guard !state.ended else { return false }
            state.subscriptions[key] = subscription
            return true
        }
        guard added else {
            subscription.close()
            return
        }
        if let peer {
            // stdio: notifications/cancelled with the listen's id ends it.
            _ = peer.register(Call(id: id, progressToken: nil, control: exchange.control, responder: responder))
        }
        exchange.control.onCancel { [self] in
            responder.silence()
            _ = state.withLockedValue { $0.subscriptions.removeValue(forKey: key) }
        }
        // The watcher compares with the tools as they are now.
        _ = catalog(structured: true, confirmArgument: false)
        var agreed: [String: JSONValue] = [:]
        if tools { agreed["toolsListChanged"] = true }
        responder.interim([
            "jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
            "params": ["notifications": .object(agreed), "_meta": [Self.metaSubscription: id]],
        ])
    }

    /// A modern `tools/call`. With elicitation, each question of the resolution makes the
    /// call answer `input_required` with the question and a sealed state; the retry
    /// (`inputResponses`, `requestState`, the same name and arguments) runs the intent again
    /// with the answers so far, up to the next question or the end.
    func modernCall(
        id: JSONValue, params: JSONValue, elicitation: Bool, context: MCPRequestContext, peer: Peer?, exchange: MCPExchange, responder: Responder
    ) {
        guard let name = params["name"]?.stringValue else {
            responder.final(Self.error(id: id, code: -32602, "tools/call needs a tool name (params.name)"))
            return
        }
        let arguments = params["arguments"] ?? .object([:])
        guard case .object(var parameters) = arguments else {
            responder.final(Self.error(id: id, code: -32602, "the arguments of \(name) must be an object, not \(arguments.typeNameWithArticle)"))
            return
        }
        let catalog = catalog(structured: true, confirmArgument: !elicitation)
        let started = MonotonicClock.now()
        let era = exchange.era
        guard let tool = catalog.tool(named: name) else {
            record(name, tool: nil, context: context, era: era, started: started, errorKind: "invalidParams")
            responder.final(Self.error(id: id, code: -32602, "Unknown tool: \(name) (the tools: \(catalog.tools.map(\.name).joined(separator: ", ")))"))
            return
        }
        // The front end's policy first: a caller refused learns nothing of the state.
        if let refused = refusal(of: tool, id: id, context: context, era: era) {
            record(name, tool: tool, context: context, era: era, started: started, errorKind: "refused")
            responder.final(refused)
            return
        }
        // The state first: a refused one runs nothing.
        let digest = RequestState.digest(of: arguments)
        var recorded: [RequestState.Answer] = []
        var pending: (fingerprint: String, response: JSONValue?)?
        if let given = params["requestState"], given != .null {
            guard let sealed = given.stringValue else {
                responder.final(Self.error(id: id, code: -32602, "invalid requestState: it must be the string this server sent"))
                return
            }
            switch RequestState.open(sealed, with: stateKey, principal: context.principal, tool: name, argumentsDigest: digest, nowMs: Self.nowMs()) {
            case .failure(let refusal):
                configuration.log?("[extrun mcp] \(name): requestState refused: \(refusal.message)")
                record(name, tool: tool, context: context, era: era, started: started, errorKind: "invalidRequestState")
                responder.final(Self.error(id: id, code: -32602, "invalid requestState: \(refusal.message)"))
                return
            case .success(let opened):
                recorded = opened.answers
                if let question = opened.pending {
                    pending = (question, params["inputResponses"]?[Self.inputKey(recorded.count)])
                }
            }
        }
        let call = Call(id: id, progressToken: params["_meta"]?["progressToken"], control: exchange.control, responder: responder)
        if let peer, !peer.register(call) {
            let report = refusedReport(
                intent: tool.intent,
                "the request id \(String(decoding: JSONWriter.bytes(id), as: UTF8.self)) is in use by a call still running, or the server is ending")
            responder.final(Self.result(id: id, Self.modernToolResult(ToolResult.result(of: report, structured: true))))
            return
        }
        let confirmed = tool.json["inputSchema"]?["properties"]?[ToolCatalog.confirmedArgument] != nil
            && parameters.removeValue(forKey: ToolCatalog.confirmedArgument)?.boolValue == true
        var options = runOptions(context: context, call: call)
        let prompter = elicitation ? ReplayingPrompter(recorded: recorded, pending: pending) : nil
        if let prompter {
            options.prompter = prompter
        } else if confirmed {
            options.assumeYes = true
        }
        let invocation = IntentInvocation(
            intent: tool.intent, parameters: parameters, source: "tools/call \(name)",
            baseDirectory: baseDirectory)
        let callOptions = options
        let principal = context.principal
        let round = recorded.count + 1
        let done = running(call.control)
        submit(.handle(invocation), options: callOptions, uid: context.uid, control: call.control, peer: peer) { [self] report in
            defer {
                peer?.unregister(call)
                done()
            }
            switch prompter?.stop {
            case .stale(let index):
                // Nothing ran past the question: the resolution stopped there.
                configuration.log?("[extrun mcp] \(name): requestState answer \(index + 1) no longer fits the intent's questions")
                record(name, tool: tool, context: context, era: era, started: started, report: report, errorKind: "invalidRequestState", round: round)
                responder.final(
                    Self.error(
                        id: id, code: -32602,
                        "invalid requestState: its answer \(index + 1) was given to another question than the one \(name) asks now (the plugin's questions changed); call again without requestState"
                    ))
            case .needs(let question, let mistyped) where !call.cancellation.isCancelled:
                // The run stopped at a question nobody answered yet: nothing was handled, and its report is not sent.
                let answers = prompter?.answers ?? []
                let state = RequestState(
                    principal: principal, tool: name, argumentsDigest: digest,
                    expiresMs: Self.nowMs() + Int64(configuration.requestStateLifetimeSeconds * 1000), answers: answers,
                    pending: question.fingerprint)
                var elicit = question.elicitation
                if case .object(var fields) = elicit {
                    fields["mode"] = "form"
                    if let mistyped { fields["message"] = .string("\(mistyped)\n\(question.message)") }
                    elicit = .object(fields)
                }
                configuration.log?("[extrun mcp] \(name): input required (question \(answers.count + 1), \(question.kind.rawValue) '\(question.property)')")
                record(name, tool: tool, context: context, era: era, started: started, inputRequired: true, round: round)
                responder.final(
                    Self.result(
                        id: id,
                        Self.modernResult(
                            [
                                "inputRequests": [Self.inputKey(answers.count): ["method": "elicitation/create", "params": elicit]],
                                "requestState": .string(state.seal(with: stateKey)),
                            ], type: "input_required")))
            default:
                let missing = prompter == nil ? missingOptions(report, tool: tool, invocation: invocation, options: callOptions, call: call) : nil
                log(name, report)
                record(name, tool: tool, context: context, era: era, started: started, report: report, round: round)
                responder.final(Self.result(id: id, Self.modernToolResult(ToolResult.result(of: report, structured: true, missingOptions: missing))))
            }
        }
    }

    /// The key of the input request for question `index` (0-based, in the order the run asks).
    static func inputKey(_ index: Int) -> String {
        "question-\(index + 1)"
    }

    static func modernToolResult(_ result: JSONValue) -> JSONValue {
        guard case .object(let fields) = result else { return result }
        return modernResult(fields)
    }

    static func nowMs() -> Int64 {
        Int64(Date().timeIntervalSince1970 * 1000)
    }
}
