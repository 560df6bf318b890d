import ExtrunHost
import ExtrunProtocol
import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// The MCP server without its transport (MCPEndpoint.swift describes the surface): it
/// places each message in its era, answers it, and runs each `tools/call` through the
/// `IntentService` every front end shares (warm sessions, admission, the runs in flight,
/// the shutdown), in the sandbox with its mode's limits. docs/mcp.md documents the mapping.
///
/// - **Modern** (2026-07-28): a request whose `_meta` names its protocol version; no
///   handshake, no session; `server/discover`; resolution as `input_required` rounds whose
///   progress is carried in a sealed `requestState` (MCPDispatcher+Modern.swift).
/// - **Legacy** (2025-11-25 … 2024-11-05): `initialize`, then requests in its session (the
///   stdio connection; over HTTP, `Mcp-Session-Id`), resolution as in-band
///   `elicitation/create` (MCPDispatcher+Legacy.swift).
///
/// Threads: `receive` answers what is quick on the caller's thread; each `tools/call`
/// runs on one of the service's worker threads (stdio: on the thread that read it, see
/// `submit`), which blocks in the intent (and, in the legacy era, in an elicitation) and
/// sends the final output from there; one more thread polls the plugin path for tools that changed.
public final class MCPDispatcher: Sendable {
    public struct Configuration: Sendable {
        /// The most `tools/call`s in flight; one more is answered with an error result saying so.
        public var maxConcurrentCalls = 8
        /// How often the plugin path is read again for `notifications/tools/list_changed`.
        public var catalogPollMs = 1000
        /// The options every intent runs with (limits from the command line, `--verbose`'s log).
        public var handleOptions = HandleOptions()
        /// Lines about the server itself (`--verbose`), on standard error.
        public var log: (@Sendable (String) -> Void)?
        /// The request-state key file (nil: `RequestStateKey.defaultFile()`).
        public var requestStateKeyFile: URL?
        /// How long a sealed `requestState` may be presented, in seconds.
        public var requestStateLifetimeSeconds: Double = 300
        /// `ttlMs` of a modern `tools/list`: how long a client may keep the list.
        public var toolsTTLMs = 10_000
        /// The most legacy HTTP sessions kept at once; the oldest idle one goes for a new one.
        public var maxLegacySessions = 256
        /// A legacy HTTP session unused this long (and with no call in flight) is forgotten.
        public var legacySessionIdleSeconds: Double = 3600
        /// Asked before a `tools/call` runs (after its tool is found, before its state is
        /// opened): a refusal is the call's answer, and nothing runs.
        public var authorizeTool: (@Sendable (MCPToolAccess) -> MCPToolRefusal?)?
        /// Whether `tools/list` shows a tool to this caller (nil: every tool). Kept apart from
        /// `authorizeTool`, which may count a rate: a listing asks once per tool.
        public var showsTool: (@Sendable (MCPToolAccess) -> Bool)?
        /// Told of every `tools/call` answered (each round of a modern call), on the thread that answers it.
        public var callFinished: (@Sendable (MCPCallRecord) -> Void)?
        public init() {}
    }

    /// 2026-07-28 and later: the version in every request's `_meta`.
    public static let modernVersions = ["2026-07-28"]
    /// The handshake versions, newest first: an `initialize` with another is answered with the newest.
    public static let legacyVersions = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]
    public static var supportedVersions: [String] { modernVersions + legacyVersions }

    static let metaVersion = "io.modelcontextprotocol/protocolVersion"
    static let metaCapabilities = "io.modelcontextprotocol/clientCapabilities"
    static let metaServerInfo = "io.modelcontextprotocol/serverInfo"
    static let metaSubscription = "io.modelcontextprotocol/subscriptionId"

    static let instructions = """
        Each tool is an intent of an installed extrun plugin, run in a sandbox with memory and time limits. \
        A missing value or a confirmation is asked of the user (elicitation) when the client supports it; \
        otherwise the result says what is missing. Errors carry a kind (e.g. memoryLimitExceeded) and their numbers.
        """

    static var serverInfo: JSONValue {
        ["name": "extrun", "title": "extrun: intents as tools, sandboxed", "version": .string(Host.version)]
    }

    public let host: ExtrunHost.Host
    public let service: IntentService
    /// The service was made here (and `shutDown` ends it), not given.
    let ownsService: Bool
    let configuration: Configuration
    let stateKey: RequestStateKey
    let state = NIOLockedValueBox(State())
    /// What a call's relative paths are relative to: the working directory (nothing in
    /// the process changes it), read once: per call, `getcwd` and the `stat` that
    /// `URL(fileURLWithPath:)` makes were ~a third of a `tools/call`'s dispatch.
    let baseDirectory = URL(fileURLWithPath: FileManager.default.currentDirectoryPath, isDirectory: true)

    struct State {
        /// Legacy HTTP sessions by their `Mcp-Session-Id`.
        var sessions: [String: Peer] = [:]
        /// The peers that listed the tools and hear of a change (stdio's connection).
        var listeners: [ObjectIdentifier: Peer] = [:]
        var subscriptions: [ObjectIdentifier: Subscription] = [:]
        /// The tools, by (structured, confirmArgument), until they change.
        var catalogs: [Int: ToolCatalog] = [:]
        /// The listing the watcher compares with (set by the first listing).
        var baseline: JSONValue?
        /// The calls running, for `shutDown` (a given service is not this dispatcher's to end).
        var running: [ObjectIdentifier: RunControl] = [:]
        /// The calls running on their peer's threads (`Peer.runner`: stdio), which this admission counts.
        var runningHere = 0
        var ended = false
    }

    /// Reads (or makes) the request-state key; refused when the key file is unsafe (RequestStateKey.load).
    ///
    /// - Parameter service: the service the calls run on (`extrun serve`'s: one pool and one
    ///   admission for every front end; its host is then the dispatcher's). Nil: one of its own,
    ///   `maxConcurrentCalls` at once and none waiting, which `shutDown` ends.
    public init(host: ExtrunHost.Host = ExtrunHost.Host(), service given: IntentService? = nil, configuration: Configuration = Configuration())
        throws(RequestStateKey.Refused)
    {
        self.host = given?.host ?? host
        self.configuration = configuration
        stateKey = try RequestStateKey.load(from: configuration.requestStateKeyFile ?? RequestStateKey.defaultFile(paths: self.host.paths))
        if let given {
            service = given
            ownsService = false
        } else {
            // At most maxConcurrentCalls at once, none waiting: one more is refused at once (overloaded).
            service = IntentService(
                host: host, admission: Admission.Limits(maxConcurrent: configuration.maxConcurrentCalls, maxQueued: 0),
                warm: PluginPool.WarmLimits(maxIdle: max(4, configuration.maxConcurrentCalls)))
            ownsService = true
        }
        let watcher = Thread { [self] in watchCatalog() }
        watcher.name = "extrun-mcp-catalog"
        watcher.start()
    }

    // MARK: - Messages in

    /// Takes one message (one HTTP body, one stdio line) and answers it through `output`:
    /// any number of `.interim` outputs, then exactly one `.final` (possibly before
    /// `receive` returns). Nothing is sent after `exchange.clientGone()`.
    public func receive(
        _ body: some Collection<UInt8>, context: MCPRequestContext, output: @escaping @Sendable (MCPOutput) -> Void
    ) -> MCPExchange {
        receive(body, context: context, peer: nil, output: output)
    }

    func receive(_ body: some Collection<UInt8>, context: MCPRequestContext, peer: Peer?, output: @escaping @Sendable (MCPOutput) -> Void)
        -> MCPExchange
    {
        let message: JSONValue
        do {
            message = try JSONParser.parse(body)
        } catch {
            output(.final(Self.error(id: .null, code: -32700, "not JSON: \(error)", status: 400)))
            return MCPExchange(era: .unknown, method: nil, isRequest: false)
        }
        return receive(message: message, context: context, peer: peer, output: output)
    }

    func receive(message: JSONValue, context: MCPRequestContext, peer given: Peer?, output: @escaping @Sendable (MCPOutput) -> Void) -> MCPExchange {
        func refuse(_ id: JSONValue, _ code: Int, _ text: String, status: Int = 400, era: MCPEra = .unknown) -> MCPExchange {
            output(.final(Self.error(id: id, code: code, text, status: status)))
            return MCPExchange(era: era, method: nil, isRequest: false)
        }
        guard case .object(let fields) = message else {
            return refuse(.null, -32600, "a message must be one JSON object (batches are not part of MCP since 2025-06-18)")
        }
        let id = fields["id"]
        // JSON-RPC 2.0: every message says so, and an id is a string or an integer (MCP: not null).
        if let id {
            switch id {
            case .string, .int: break
            default: return refuse(.null, -32600, "an id must be a string or an integer, not \(id.typeNameWithArticle)")
            }
        }
        guard fields["jsonrpc"] == .string("2.0") else {
            let said = fields["jsonrpc"].map { String(decoding: JSONWriter.bytes($0), as: UTF8.self) } ?? "nothing"
            return refuse(id ?? .null, -32600, "\"jsonrpc\" must be \"2.0\" (it was \(said)): extrun mcp speaks JSON-RPC 2.0")
        }
        guard let method = fields["method"]?.stringValue else {
            guard let id, fields["result"] != nil || fields["error"] != nil else {
                return refuse(id ?? .null, -32600, "neither a request, a notification nor a response")
            }
            // A client's answer to our elicitation (legacy era).
            let peer = given ?? context.headers?["mcp-session-id"].flatMap { session(named: $0, principal: context.principal) }
            peer?.answer(id: id, message: message)
            if peer == nil { configuration.log?("[extrun mcp] an answer for no session: \(String(decoding: JSONWriter.bytes(id), as: UTF8.self))") }
            output(.final(MCPReply(status: 202, message: nil)))
            return MCPExchange(era: .legacy(session: peer?.sessionID), method: nil, isRequest: false)
        }
        let params = fields["params"] ?? .object([:])
        let modernVersion = method == "initialize" ? nil : params["_meta"]?[Self.metaVersion]?.stringValue
        if let headers = context.headers, let mismatch = Self.headerMismatch(method: method, params: params, version: modernVersion, headers: headers) {
            return refuse(id ?? .null, -32020, "Header mismatch: \(mismatch)", era: modernVersion.map { .modern(version: $0) } ?? .unknown)
        }
        guard let id else {
            notification(method: method, params: params, context: context, peer: given)
            output(.final(MCPReply(status: 202, message: nil)))
            return MCPExchange(era: modernVersion.map { .modern(version: $0) } ?? .legacy(session: given?.sessionID), method: method, isRequest: false)
        }
        if let version = modernVersion {
            let exchange = MCPExchange(era: .modern(version: version), method: method, isRequest: true)
            let responder = Responder(output: output, canStream: context.canStream)
            exchange.attach(responder)
            guard Self.modernVersions.contains(version) else {
                responder.final(
                    Self.error(
                        id: id, code: -32022, "Unsupported protocol version: \(version) (this server speaks \(Self.supportedVersions.joined(separator: ", ")))",
                        data: ["supported": .array(Self.supportedVersions.map(JSONValue.string)), "requested": .string(version)], status: 400))
                return exchange
            }
            modern(id: id, method: method, params: params, version: version, context: context, peer: given, exchange: exchange, responder: responder)
            return exchange
        }
        // The legacy eras: stdio's connection, or an HTTP session.
        let peer: Peer
        if let given {
            peer = given
        } else if method == "initialize" {
            guard let made = newSession(principal: context.principal) else {
                return refuse(id, -32000, "too many MCP sessions are open; end one (DELETE) or try again later", status: 503)
            }
            peer = made
        } else if let name = context.headers?["mcp-session-id"] {
            guard let known = session(named: name, principal: context.principal) else {
                return refuse(id, -32001, "Session not found: \(name) (it ended, or this server never made it): send initialize again", status: 404)
            }
            peer = known
        } else {
            return refuse(
                id, -32600,
                "Bad Request: no Mcp-Session-Id: send initialize first, or a 2026-07-28 request with its _meta (\(Self.metaVersion))")
        }
        let exchange = MCPExchange(era: .legacy(session: peer.sessionID), method: method, isRequest: true)
        let responder = Responder(output: output, canStream: context.canStream)
        exchange.attach(responder)
        legacy(id: id, method: method, params: params, context: context, peer: peer, exchange: exchange, responder: responder)
        return exchange
    }

    func notification(method: String, params: JSONValue, context: MCPRequestContext, peer given: Peer?) {
        switch method {
        case "notifications/cancelled":
            // stdio's way to cancel (HTTP's is closing the request's stream).
            let peer = given ?? context.headers?["mcp-session-id"].flatMap { session(named: $0, principal: context.principal) }
            guard let peer, let id = params["requestId"] else { return }
            peer.cancel(id: id, reason: params["reason"]?.stringValue ?? "cancelled by the client")
        default:
            // notifications/initialized, notifications/progress, roots...: nothing to do.
            break
        }
    }

    // MARK: - Legacy HTTP sessions

    func newSession(principal: String) -> Peer? {
        let name = (0..<4).map { _ in String(format: "%08x", UInt32.random(in: 0...UInt32.max)) }.joined()
        let peer = Peer(sessionID: name, principal: principal, notify: nil)
        let now = MonotonicClock.now()
        let idleNs = UInt64(max(0, configuration.legacySessionIdleSeconds) * 1e9)
        return state.withLockedValue { state -> Peer? in
            guard !state.ended else { return nil }
            // Forget the idle ones; the oldest idle one when still full.
            for (key, session) in state.sessions where session.isIdle && now &- session.lastUsed > idleNs {
                state.sessions[key] = nil
            }
            if state.sessions.count >= configuration.maxLegacySessions {
                guard let oldest = state.sessions.values.filter(\.isIdle).min(by: { $0.lastUsed < $1.lastUsed }), let key = oldest.sessionID else { return nil }
                state.sessions[key] = nil
            }
            state.sessions[name] = peer
            return peer
        }
    }

    /// The legacy session `name`, when it exists and belongs to `principal`.
    func session(named name: String, principal: String) -> Peer? {
        guard let peer = state.withLockedValue({ $0.sessions[name] }), peer.principal == principal else { return nil }
        peer.touch()
        return peer
    }

    /// `DELETE /mcp` with `Mcp-Session-Id`: the session ends (its calls are cancelled).
    /// 200, or 404 for a session unknown (or another principal's); 400 without the header.
    public func endSession(_ name: String?, context: MCPRequestContext) -> MCPReply {
        guard let name else { return Self.error(id: .null, code: -32600, "Bad Request: DELETE needs an Mcp-Session-Id", status: 400) }
        guard let peer = session(named: name, principal: context.principal) else {
            return Self.error(id: .null, code: -32001, "Session not found: \(name)", status: 404)
        }
        state.withLockedValue {
            $0.sessions[name] = nil
            $0.listeners[ObjectIdentifier(peer)] = nil
        }
        peer.end(reason: "the client ended its MCP session")
        return MCPReply(status: 200, message: nil)
    }

    /// The legacy sessions open now (HTTP).
    public var sessionCount: Int { state.withLockedValue { $0.sessions.count } }

    // MARK: - Tools

    /// The tools (cached until the plugin path changes). `structured`: with `outputSchema`
    /// (2025-06-18 and later); `confirmArgument`: offer `_confirmed` (a client that cannot answer elicitations).
    func catalog(structured: Bool, confirmArgument: Bool) -> ToolCatalog {
        let key = (structured ? 2 : 0) + (confirmArgument ? 1 : 0)
        if let known = state.withLockedValue({ $0.catalogs[key] }) { return known }
        let plugins = host.catalog()
        let catalog = ToolCatalog(catalog: plugins, structured: structured, confirmArgument: confirmArgument)
        let baseline = state.withLockedValue { $0.baseline == nil } ? ToolCatalog(catalog: plugins, structured: true, confirmArgument: true).listing : nil
        state.withLockedValue { state in
            state.catalogs[key] = catalog
            if state.baseline == nil { state.baseline = baseline }
        }
        return catalog
    }

    /// Reads the plugin path again every `catalogPollMs` once someone listed the tools; a
    /// change (a plugin installed, removed or changed) is announced to the legacy peers
    /// that listed them and to the modern subscriptions that asked for it.
    func watchCatalog() {
        while true {
            usleep(UInt32(max(10, configuration.catalogPollMs)) * 1000)
            if state.withLockedValue({ $0.ended }) { return }
            guard state.withLockedValue({ $0.baseline != nil }) else { continue }
            let fresh = ToolCatalog(catalog: host.catalog(), structured: true, confirmArgument: true)
            let told: ([Peer], [Subscription])? = state.withLockedValue { state in
                guard state.baseline != fresh.listing, !state.ended else { return nil }
                state.baseline = fresh.listing
                state.catalogs = [:]
                return (Array(state.listeners.values), Array(state.subscriptions.values))
            }
            guard let (peers, subscriptions) = told else { continue }
            configuration.log?("[extrun mcp] the tools changed: \(fresh.tools.map(\.name).joined(separator: ", "))")
            for peer in peers { peer.notify?(["jsonrpc": "2.0", "method": "notifications/tools/list_changed"]) }
            for subscription in subscriptions where subscription.toolsListChanged {
                subscription.send(["jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": ["_meta": [Self.metaSubscription: subscription.id]]])
            }
        }
    }

    /// A `HandleReport` for a call refused before it ran.
    func refusedReport(intent: String, _ message: String) -> HandleReport {
        var report = HandleReport(intent: intent)
        report.error = HostError(.invalidIntent, message, details: ["field": "id"])
        return report
    }

    // MARK: - The end

    /// Ends the dispatcher: no new calls; the calls in flight are cancelled (each plugin's
    /// cancel grace), answered and waited for; subscriptions end with their result; the
    /// legacy sessions are forgotten; the warm processes end.
    public func shutDown(reason: String) {
        let (peers, subscriptions) = state.withLockedValue { state -> ([Peer], [Subscription]) in
            state.ended = true
            let peers = Array(state.sessions.values) + Array(state.listeners.values)
            state.sessions = [:]
            state.listeners = [:]
            defer { state.subscriptions = [:] }
            return (peers, Array(state.subscriptions.values))
        }
        for peer in peers { peer.end(reason: reason) }
        for subscription in subscriptions { subscription.close() }
        if ownsService {
            if state.withLockedValue({ $0.runningHere > 0 }) {
                // Calls on their peer's threads (stdio): cancelled now (one admitted but not started yet
                // too: cancelAll's reason cancels it as it starts), answered, and waited for, as the service's own.
                service.cancelAll(reason)
                while state.withLockedValue({ $0.runningHere > 0 }) { usleep(5_000) }
            }
            // No grace: the calls are cancelled now (each plugin's cancel grace), answered, and waited for.
            service.shutDown(grace: 0, reason: reason, cancelWaitSeconds: 3600)
        } else {
            // Another front end's service: only this dispatcher's calls are cancelled (each is answered, an error).
            for control in state.withLockedValue({ Array($0.running.values) }) { control.cancel(reason) }
        }
    }

    // MARK: - Policy and audit

    func access(_ tool: ToolCatalog.Tool, context: MCPRequestContext, era: MCPEra) -> MCPToolAccess {
        MCPToolAccess(
            principal: context.principal, scopes: context.scopes, tool: tool.name, intent: tool.intent, plugin: tool.plugin.manifest.id, era: era)
    }

    /// The tools this caller is shown.
    func listing(_ catalog: ToolCatalog, context: MCPRequestContext, era: MCPEra) -> JSONValue {
        guard let shows = configuration.showsTool else { return catalog.listing }
        return .array(catalog.tools.filter { shows(access($0, context: context, era: era)) }.map(\.json))
    }

    /// The front end's refusal of this call, as its answer; nil: it may run.
    func refusal(of tool: ToolCatalog.Tool, id: JSONValue, context: MCPRequestContext, era: MCPEra) -> MCPReply? {
        guard let authorize = configuration.authorizeTool, let refused = authorize(access(tool, context: context, era: era)) else { return nil }
        var reply = Self.error(id: id, code: refused.code, refused.message, data: refused.data, status: refused.status)
        reply.headers = refused.headers
        return reply
    }

    /// Tells `callFinished` of one answered call.
    func record(
        _ name: String, tool: ToolCatalog.Tool?, context: MCPRequestContext, era: MCPEra, started: UInt64, report: HandleReport? = nil,
        errorKind: String? = nil, inputRequired: Bool = false, round: Int? = nil
    ) {
        guard let finished = configuration.callFinished else { return }
        finished(
            MCPCallRecord(
                principal: context.principal, tool: name, intent: tool?.intent, plugin: tool?.plugin.manifest.id, era: era,
                responseCode: report?.response?.code, succeeded: report?.error == nil && report?.responseIsSuccess == true,
                errorKind: errorKind ?? report?.error?.kind.rawValue, inputRequired: inputRequired, round: round,
                durationMs: Int(MonotonicClock.milliseconds(from: started)), runID: report?.id))
    }

    /// Runs a call's request and gives `completion` its report: on the service's worker
    /// threads; or, for a peer that runs its calls itself (`Peer.runner`: stdio, whose reader
    /// runs the call where it was read, without waking a worker, and passes its reading to
    /// another thread only when input arrives meanwhile: `ReadRelay`), on the peer's thread, at
    /// most `maxConcurrentCalls` at once and none waiting, as the service's own admission.
    func submit(
        _ request: IntentRequest, options: HandleOptions, uid: UInt32, control: RunControl, peer: Peer?,
        completion: @escaping @Sendable (HandleReport) -> Void
    ) {
        guard ownsService, let runner = peer?.runner else {
            _ = service.submit(request, options: options, uid: uid, control: control, completion: completion)
            return
        }
        let limit = configuration.maxConcurrentCalls
        let refused = state.withLockedValue { state -> HostError? in
            if state.ended { return Admission.shuttingDown }
            guard state.runningHere < limit else {
                let running = Int64(state.runningHere)
                return HostError(
                    .overloaded,
                    "the service is busy: \(running) intents running (maxConcurrent \(limit)) and 0 waiting (maxQueued 0); try again shortly",
                    details: [
                        "reason": "queueFull", "running": .int(running), "queued": 0, "maxConcurrent": .int(Int64(limit)), "maxQueued": 0,
                        "callerRunning": .int(running), "callerLimit": .int(Int64(Int.max)), "uid": .int(Int64(uid)),
                    ])
            }
            state.runningHere += 1
            return nil
        }
        if let refused {
            var report = HandleReport(intent: request.intentName)
            report.error = refused
            completion(report)
            return
        }
        runner { [self] release in
            let report = service.perform(request, options: options, control: control)
            release()
            completion(report)
            state.withLockedValue { $0.runningHere -= 1 }
        }
    }

    /// Keeps `control` among the calls running until `done`.
    func running(_ control: RunControl) -> @Sendable () -> Void {
        let key = ObjectIdentifier(control)
        state.withLockedValue { $0.running[key] = control }
        return { [self] in _ = state.withLockedValue { $0.running.removeValue(forKey: key) } }
    }

    var ended: Bool { state.withLockedValue { $0.ended } }

    // MARK: - Replies

    static func result(id: JSONValue, _ result: JSONValue) -> MCPReply {
        MCPReply(status: 200, message: ["jsonrpc": "2.0", "id": id, "result": result])
    }

    static func error(id: JSONValue, code: Int, _ message: String, data: JSONValue? = nil, status: Int = 200) -> MCPReply {
        var error: [String: JSONValue] = ["code": .int(Int64(code)), "message": .string(message)]
        if let data { error["data"] = data }
        return MCPReply(status: status, message: ["jsonrpc": "2.0", "id": id, "error": .object(error)])
    }

    /// Where an HTTP request's headers disagree with its body (Streamable HTTP, "Server
    /// Validation"): `Mcp-Method` with `method`; `Mcp-Name` (its `=?base64?…?=` form
    /// decoded) with `params.name` or `params.uri`; `MCP-Protocol-Version` with the
    /// `_meta`'s version. A modern request must carry them; a legacy one is checked where it does.
    static func headerMismatch(method: String, params: JSONValue, version: String?, headers: MCPHeaders) -> String? {
        let modern = version != nil
        if let said = headers["mcp-method"] {
            if said != method { return "Mcp-Method header value '\(said)' does not match body value '\(method)'" }
        } else if modern {
            return "the Mcp-Method header is missing"
        }
        if ["tools/call", "resources/read", "prompts/get"].contains(method) {
            let body = params["name"]?.stringValue ?? params["uri"]?.stringValue ?? ""
            if let said = headers["mcp-name"] {
                guard let name = decodeHeaderValue(said) else { return "the Mcp-Name header value '\(said)' is malformed" }
                if name != body { return "Mcp-Name header value '\(name)' does not match body value '\(body)'" }
            } else if modern {
                return "the Mcp-Name header is missing"
            }
        }
        if let version {
            guard let said = headers["mcp-protocol-version"] else { return "the MCP-Protocol-Version header is missing" }
            if said != version { return "MCP-Protocol-Version header value '\(said)' does not match body value '\(version)'" }
        }
        return nil
    }

    /// A header value, its `=?base64?…?=` form decoded; nil when that form is malformed.
    static func decodeHeaderValue(_ value: String) -> String? {
        guard value.hasPrefix("=?base64?"), value.hasSuffix("?="), value.count >= 11 else { return value }
        let encoded = value.dropFirst(9).dropLast(2)
        guard let data = Data(base64Encoded: String(encoded)) else { return nil }
        return String(data: data, encoding: .utf8)
    }
}

/// Sends one exchange's outputs: interim ones while it may stream, one final one; none
/// after `silence` (a call the client cancelled gets no answer).
final class Responder: Sendable {
    private let output: @Sendable (MCPOutput) -> Void
    let canStream: Bool
    private let done = NIOLockedValueBox(false)

    init(output: @escaping @Sendable (MCPOutput) -> Void, canStream: Bool) {
        self.output = output
        self.canStream = canStream
    }

    func interim(_ message: JSONValue) {
        guard canStream, !done.withLockedValue({ $0 }) else { return }
        output(.interim(message))
    }

    func final(_ reply: MCPReply) {
        let first = done.withLockedValue { done -> Bool in
            defer { done = true }
            return !done
        }
        if first { output(.final(reply)) }
    }

    /// No output any more.
    func silence() {
        done.withLockedValue { $0 = true }
    }
}

/// A modern `subscriptions/listen` stream: open until the client cancels it (stdio's
/// `notifications/cancelled`, HTTP's closed stream) or the server ends (its result then).
final class Subscription: Sendable {
    let id: JSONValue
    let toolsListChanged: Bool
    let responder: Responder

    init(id: JSONValue, toolsListChanged: Bool, responder: Responder) {
        self.id = id
        self.toolsListChanged = toolsListChanged
        self.responder = responder
    }

    func send(_ notification: JSONValue) {
        responder.interim(notification)
    }

    /// The server ends the subscription: its result.
    func close() {
        responder.final(MCPDispatcher.result(id: id, ["resultType": "complete", "_meta": [MCPDispatcher.metaSubscription: id]]))
    }
}
