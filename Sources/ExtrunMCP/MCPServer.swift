import ExtrunHost
import ExtrunProtocol
import Foundation
import NIOConcurrencyHelpers

/// `extrun mcp`: an MCP server over stdio (newline-delimited JSON-RPC 2.0) whose
/// tools are the installed intents, each call run by the `IntentService` every front end
/// shares (warm sessions, admission, the runs in flight, the shutdown) in the sandbox
/// with its mode's limits. docs/mcp.md documents the mapping; docs/architecture.md where it sits.
///
/// Threads: the caller's reads standard input and answers what is quick (initialize,
/// ping, tools/list, the client's answers to elicitations, cancellations); each
/// `tools/call` runs on one of the service's worker threads, which blocks in the intent
/// (and in an elicitation, waiting for the client's answer) without stopping the reader;
/// one more thread polls the plugin path and sends `notifications/tools/list_changed`.
public final class MCPServer: Sendable {
    public struct Configuration: Sendable {
        /// The most `tools/call`s in flight; one more is answered with an error result saying so.
        public var maxConcurrentCalls = 8
        /// How often the plugin path is read again for `notifications/tools/list_changed`.
        public var catalogPollMs = 1000
        /// The longest message line read; a longer one is answered with a parse error and skipped.
        public var maxLineBytes = 8 << 20
        /// The options every intent runs with (limits from the command line, `--verbose`'s log).
        public var handleOptions = HandleOptions()
        /// Lines about the server itself (`--verbose`), on standard error.
        public var log: (@Sendable (String) -> Void)?
        public init() {}
    }

    /// The protocol versions answered as asked; any other is answered with the newest.
    static let protocolVersions = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]

    let host: ExtrunHost.Host
    let service: IntentService
    var pool: PluginPool { service.pool }
    let configuration: Configuration
    let writer: LineWriter
    private let state = NIOLockedValueBox(State())

    struct State {
        var protocolVersion = MCPServer.protocolVersions[0]
        /// The client declared `elicitation` (form mode) in its capabilities.
        var elicitation = false
        var catalog: ToolCatalog?
        var calls: [JSONValue: Call] = [:]
        var pending: [String: PendingAnswer] = [:]
        var nextRequest = 1
        var ended = false
    }

    public init(host: ExtrunHost.Host = ExtrunHost.Host(), configuration: Configuration = Configuration(), output: Int32 = STDOUT_FILENO) {
        self.host = host
        self.configuration = configuration
        // At most maxConcurrentCalls at once, none waiting: one more is refused at once (overloaded).
        self.service = IntentService(
            host: host, admission: Admission.Limits(maxConcurrent: configuration.maxConcurrentCalls, maxQueued: 0),
            warm: PluginPool.WarmLimits(maxIdle: max(4, configuration.maxConcurrentCalls)))
        self.writer = LineWriter(fd: output)
    }

    /// Serves until standard input ends; then cancels the calls in flight, waits for
    /// them and ends the warm processes.
    public func run(input: Int32 = STDIN_FILENO) {
        let watcher = Thread { [self] in watchCatalog() }
        watcher.start()
        var reader = LineReader(fd: input, maxLineBytes: configuration.maxLineBytes)
        loop: while true {
            switch reader.next() {
            case .end: break loop
            case .tooLong(let size):
                sendError(id: .null, code: -32700, "a message line is over \(configuration.maxLineBytes) bytes (\(size) so far); it was skipped")
            case .message(let line):
                receive(line)
            }
        }
        shutDown(reason: "the client closed the connection")
    }

    // MARK: - Messages in

    func receive(_ line: ArraySlice<UInt8>) {
        let message: JSONValue
        do {
            message = try JSONParser.parse(line)
        } catch {
            sendError(id: .null, code: -32700, "not JSON: \(error)")
            return
        }
        guard case .object(let fields) = message else {
            sendError(id: .null, code: -32600, "a message must be one JSON object (batches are not part of MCP since 2025-06-18)")
            return
        }
        let id = fields["id"]
        // JSON-RPC 2.0: every message says so, and an id is a string or an integer (MCP: not null).
        if let id {
            switch id {
            case .string, .int: break
            default:
                sendError(id: .null, code: -32600, "an id must be a string or an integer, not \(id.typeNameWithArticle)")
                return
            }
        }
        guard fields["jsonrpc"] == .string("2.0") else {
            let said = fields["jsonrpc"].map { String(decoding: JSONWriter.bytes($0), as: UTF8.self) } ?? "nothing"
            sendError(id: id ?? .null, code: -32600, "\"jsonrpc\" must be \"2.0\" (it was \(said)): extrun mcp speaks JSON-RPC 2.0")
            return
        }
        if let method = fields["method"]?.stringValue {
            let params = fields["params"] ?? .object([:])
            if let id {
                request(id: id, method: method, params: params)
            } else {
                notification(method: method, params: params)
            }
        } else if let id, fields["result"] != nil || fields["error"] != nil {
            answer(id: id, message: message)
        } else {
            sendError(id: id ?? .null, code: -32600, "neither a request, a notification nor a response")
        }
    }

    func request(id: JSONValue, method: String, params: JSONValue) {
        switch method {
        case "initialize":
            initialize(id: id, params: params)
        case "ping":
            send(["jsonrpc": "2.0", "id": id, "result": .object([:])])
        case "tools/list":
            let catalog = currentCatalog()
            send(["jsonrpc": "2.0", "id": id, "result": ["tools": catalog.listing]])
        case "tools/call":
            call(id: id, params: params)
        case "logging/setLevel":
            send(["jsonrpc": "2.0", "id": id, "result": .object([:])])
        default:
            sendError(id: id, code: -32601, "extrun mcp does not serve '\(method)' (it serves tools: tools/list, tools/call)")
        }
    }

    func notification(method: String, params: JSONValue) {
        switch method {
        case "notifications/cancelled":
            guard let id = params["requestId"] else { return }
            let reason = params["reason"]?.stringValue ?? "cancelled by the client"
            let call = state.withLockedValue { $0.calls[id] }
            call?.cancel(reason, byClient: true, server: self)
        default:
            // notifications/initialized, notifications/progress, roots...: nothing to do.
            break
        }
    }

    func initialize(id: JSONValue, params: JSONValue) {
        let asked = params["protocolVersion"]?.stringValue ?? ""
        let version = Self.protocolVersions.contains(asked) ? asked : Self.protocolVersions[0]
        // Form elicitation: `"elicitation": {}` (2025-06-18), or with `form` (2025-11-25, which adds `url`).
        let declared = params["capabilities"]?["elicitation"]?.objectValue
        let elicitation = declared.map { $0.isEmpty || $0["form"] != nil } ?? false
        state.withLockedValue {
            $0.protocolVersion = version
            $0.elicitation = elicitation && version >= "2025-06-18"
            $0.catalog = nil
        }
        let catalog = currentCatalog()
        configuration.log?(
            "[extrun mcp] initialize: protocol \(version) (asked \(asked)), elicitation \(elicitation ? "yes" : "no"), \(catalog.tools.count) tools")
        send([
            "jsonrpc": "2.0", "id": id,
            "result": [
                "protocolVersion": .string(version),
                "capabilities": ["tools": ["listChanged": true]],
                "serverInfo": ["name": "extrun", "title": "extrun: intents as tools, sandboxed", "version": .string(Host.version)],
                "instructions": """
                    Each tool is an intent of an installed extrun plugin, run in a sandbox with memory and time limits. \
                    A missing value or a confirmation is asked of the user (elicitation) when the client supports it; \
                    otherwise the result says what is missing. Errors carry a kind (e.g. memoryLimitExceeded) and their numbers.
                    """,
            ],
        ])
    }

    // MARK: - Tools

    /// The tools for this client (its protocol version and elicitation decide two details).
    func currentCatalog() -> ToolCatalog {
        if let known = state.withLockedValue({ $0.catalog }) { return known }
        let catalog = freshCatalog()
        state.withLockedValue { $0.catalog = catalog }
        return catalog
    }

    func freshCatalog() -> ToolCatalog {
        let (version, elicitation) = state.withLockedValue { ($0.protocolVersion, $0.elicitation) }
        return ToolCatalog(catalog: host.catalog(), structured: version >= "2025-06-18", confirmArgument: !elicitation)
    }

    /// Reads the plugin path again every `catalogPollMs`; a change of the tools
    /// (a plugin installed, removed or changed) is announced to the client.
    func watchCatalog() {
        while true {
            usleep(UInt32(max(10, configuration.catalogPollMs)) * 1000)
            if state.withLockedValue({ $0.ended }) { return }
            let fresh = freshCatalog()
            let changed: Bool = state.withLockedValue { state in
                guard let known = state.catalog else { return false }
                if known.listing == fresh.listing { return false }
                state.catalog = fresh
                return true
            }
            if changed {
                configuration.log?("[extrun mcp] the tools changed: \(fresh.tools.map(\.name).joined(separator: ", "))")
                send(["jsonrpc": "2.0", "method": "notifications/tools/list_changed"])
            }
        }
    }

    func call(id: JSONValue, params: JSONValue) {
        guard let name = params["name"]?.stringValue else {
            sendError(id: id, code: -32602, "tools/call needs a tool name (params.name)")
            return
        }
        let arguments = params["arguments"] ?? .object([:])
        guard case .object(var parameters) = arguments else {
            sendError(id: id, code: -32602, "the arguments of \(name) must be an object, not \(arguments.typeNameWithArticle)")
            return
        }
        let catalog = currentCatalog()
        guard let tool = catalog.tool(named: name) else {
            sendError(id: id, code: -32602, "Unknown tool: \(name) (the tools: \(catalog.tools.map(\.name).joined(separator: ", ")))")
            return
        }
        let (structured, elicitation) = state.withLockedValue { ($0.protocolVersion >= "2025-06-18", $0.elicitation) }
        let call = Call(id: id, progressToken: params["_meta"]?["progressToken"])
        let registered: Bool = state.withLockedValue { state in
            guard !state.ended, state.calls[id] == nil else { return false }
            state.calls[id] = call
            return true
        }
        guard registered else {
            var report = HandleReport(intent: tool.intent)
            report.error = HostError(
                .invalidIntent, "the request id \(String(decoding: JSONWriter.bytes(id), as: UTF8.self)) is in use by a call still running, or the server is ending",
                details: ["field": "id"])
            send(["jsonrpc": "2.0", "id": id, "result": ToolResult.result(of: report, structured: structured)])
            return
        }
        let confirmed = tool.json["inputSchema"]?["properties"]?[ToolCatalog.confirmedArgument] != nil
            && parameters.removeValue(forKey: ToolCatalog.confirmedArgument)?.boolValue == true
        var options = configuration.handleOptions
        options.caller = options.caller ?? CallerIdentity(uid: getuid(), principal: "mcp")
        if elicitation {
            options.prompter = ElicitingPrompter(server: self, call: call)
        } else if confirmed {
            options.assumeYes = true
        }
        if call.progressToken != nil {
            options.onProgress = { [self] progress in call.progress(progress, server: self) }
        }
        let invocation = IntentInvocation(
            intent: tool.intent, parameters: parameters, source: "tools/call \(name)",
            baseDirectory: URL(fileURLWithPath: FileManager.default.currentDirectoryPath))
        let callOptions = options
        _ = service.submit(.handle(invocation), options: callOptions, uid: getuid(), control: call.control) { [self] handled in
            var report = handled
            var missing: [OptionItem]?
            if !elicitation, let error = report.error, error.kind == .parameterUnresolved, error.details["options"] == nil,
                error.details["value"] == nil, let parameter = error.details["parameter"]?.stringValue,
                tool.definition.parameter(named: parameter)?.dynamicOptions == true, !call.cancellation.isCancelled
            {
                // Without elicitation, the model is told the values the app offers, to call again with one.
                missing = service.perform(.options(invocation, parameter: parameter, search: nil), options: callOptions, control: call.control)
                    .options?.allItems
            }
            if let refused = call.refusedAnswer, let error = report.error,
                error.kind == .parameterUnresolved || error.kind == .confirmationDeclined
            {
                // The run stopped because the client's answer was not of the type asked: say that, not "no answer".
                report.error = refused
            }
            configuration.log?(
                "[extrun mcp] \(name): \(report.error.map { "error \($0.kind.rawValue)" } ?? report.response.map { "answered \($0.code)" } ?? "no answer")")
            // A call the client cancelled gets no answer (MCP: the receiver of notifications/cancelled
            // sends none); one cancelled by the end of the input or a signal gets its result, an error.
            if !call.cancelledByClient {
                send(["jsonrpc": "2.0", "id": id, "result": ToolResult.result(of: report, structured: structured, missingOptions: missing)])
            }
            state.withLockedValue { _ = $0.calls.removeValue(forKey: id) }
        }
    }

    // MARK: - Requests to the client

    /// Sends a request to the client and waits for its answer: its `result`, or nil
    /// when it answered with an error, the call was cancelled or the input ended.
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
            send(["jsonrpc": "2.0", "id": .string(id), "method": .string(method), "params": params])
        }
        let answer = pending.wait()
        call.done(waiting: id)
        state.withLockedValue { _ = $0.pending.removeValue(forKey: id) }
        return answer?["result"]
    }

    func answer(id: JSONValue, message: JSONValue) {
        guard let key = id.stringValue, let pending = state.withLockedValue({ $0.pending[key] }) else {
            configuration.log?("[extrun mcp] an answer to no request of ours: \(String(decoding: JSONWriter.bytes(id), as: UTF8.self))")
            return
        }
        pending.fulfil(message)
    }

    // MARK: - Messages out

    /// Queues a message for the client (never blocks: LineWriter). `droppable`: progress,
    /// which a client that is behind may miss. A client that left `LineWriter.maxPendingBytes`
    /// unread is taken as gone: the calls in flight are cancelled, as at the end of input.
    func send(_ message: JSONValue, droppable: Bool = false) {
        writer.send(message, droppable: droppable)
        if writer.broken {
            let (calls, pending) = state.withLockedValue { state in (Array(state.calls.values), Array(state.pending.values)) }
            if !calls.isEmpty || !pending.isEmpty {
                configuration.log?("[extrun mcp] the client is not reading (or closed) its input: the calls in flight are cancelled")
            }
            for call in calls { call.control.cancel("the client stopped reading the server's output") }
            for answer in pending { answer.fulfil(nil) }
        }
    }

    func sendError(id: JSONValue, code: Int, _ message: String) {
        send(["jsonrpc": "2.0", "id": id, "error": ["code": .int(Int64(code)), "message": .string(message)]])
    }

    // MARK: - The end

    /// Ends the server as the end of its input does (from another thread: a signal).
    public func stop(reason: String) {
        shutDown(reason: reason)
    }

    func shutDown(reason: String) {
        let (calls, pending) = state.withLockedValue { state in
            state.ended = true
            return (Array(state.calls.values), Array(state.pending.values))
        }
        for call in calls { call.cancel(reason, byClient: false, server: self) }
        for answer in pending { answer.fulfil(nil) }
        // No grace: the calls are cancelled now (each plugin's cancel grace), answered, and waited for.
        service.shutDown(grace: 0, reason: reason, cancelWaitSeconds: 3600)
        writer.finish()
    }
}

/// One `tools/call` in flight: its cancellation, its progress token, the elicitations it waits on.
final class Call: Sendable {
    let id: JSONValue
    let progressToken: JSONValue?
    /// The run's control in the service (`cancelAll` at the end reaches it too).
    let control = RunControl()
    var cancellation: Cancellation { control.cancellation }
    private let state = NIOLockedValueBox(CallState())

    struct CallState {
        var lastProgress = -1.0
        var waiting: [String: PendingAnswer] = [:]
        var cancelledByClient = false
        var refusedAnswer: HostError?
    }

    init(id: JSONValue, progressToken: JSONValue?) {
        self.id = id
        self.progressToken = progressToken
    }

    /// Whether the client cancelled the call (`notifications/cancelled`): it is then not answered.
    var cancelledByClient: Bool { state.withLockedValue { $0.cancelledByClient } }

    /// Why an elicitation's answer was refused (of another type than the one asked), if one was.
    var refusedAnswer: HostError? { state.withLockedValue { $0.refusedAnswer } }

    func refuse(_ error: HostError) {
        state.withLockedValue { if $0.refusedAnswer == nil { $0.refusedAnswer = error } }
    }

    /// `notifications/cancelled` (`byClient`) or the server's end: the run is cancelled, and an
    /// elicitation it waits on answers nil.
    func cancel(_ reason: String, byClient: Bool, server: MCPServer) {
        if byClient { state.withLockedValue { $0.cancelledByClient = true } }
        control.cancel(reason)
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
    func progress(_ params: ProgressParams, server: MCPServer) {
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
        server.send(["jsonrpc": "2.0", "method": "notifications/progress", "params": .object(fields)], droppable: true)
    }
}

/// An answer the client owes us; `wait` blocks until it comes (or is given up: nil).
typealias PendingAnswer = Promise<JSONValue?>
