import ExtrunHost
import ExtrunProtocol
import Foundation

/// The service's own policy: `$EXTRUN_HOME/serve.json` (or `--config`), every field
/// optional (docs/serve.md, "Policy"). Read at start and on SIGHUP; a bad file is an
/// error naming the field, and on SIGHUP the service keeps the policy it had.
public struct ServePolicy: Sendable, Equatable {
    /// Intents running at once (each on a thread of its own, with its own plugin process).
    public var maxConcurrent = 8
    /// Intents waiting for a place beyond `maxConcurrent`; one more is refused `overloaded`.
    public var maxQueued = 64
    /// Intents one caller (peer uid) may have running at once; more wait in the queue.
    public var maxConcurrentPerCaller = 6
    /// The most intents one caller may have waiting (its share of `maxQueued`).
    public var maxQueuedPerCaller = 16
    /// Per uid: `{"1000": {"maxConcurrent": 2, "maxConnections": 16}}` overrides
    /// `maxConcurrentPerCaller`, `maxConnectionsPerCaller` and the request deadlines for that uid.
    public var callers: [UInt32: CallerLimits] = [:]
    /// Connections one caller may hold open at once, whatever they are doing (a request's head
    /// or body on its way, an idle kept-alive connection, a stream): a peer uid on the Unix
    /// socket, a source address over TCP, and the token's holders over TCP. One more is
    /// answered 503 `overloaded` (reason `callerConnections`) and closed. The service's own
    /// uid is held only by `maxConnections`, unless `callers` names it.
    public var maxConnectionsPerCaller = 128
    /// Warm processes kept per plugin, and overall.
    public var maxWarmPerPlugin = 2
    public var maxWarm = 16
    /// An idle warm process is ended after this many seconds (Apple ends an idle extension after a few).
    public var idleTimeoutSeconds = 30.0
    /// A plugin whose intents ended `pluginCrashed` `crashLimit` times within
    /// `crashWindowSeconds` is backed off: its intents are refused `overloaded` for
    /// `crashBackoffSeconds` (doubling while it keeps crashing, up to 16 times).
    public var crashLimit = 3
    public var crashWindowSeconds = 10.0
    public var crashBackoffSeconds = 5.0
    /// How long a prompt waits for its answer before it counts as declined.
    public var promptTimeoutSeconds = 60.0
    /// How long a caller has to send its whole request once connected (or once its previous answer was written).
    public var requestTimeoutSeconds = 10.0
    /// How long a caller has to send a request's head (method, target, headers) once
    /// connected or once its previous answer was written: a slow head, or an idle kept-alive
    /// connection, is closed after it.
    public var requestHeadTimeoutSeconds = 5.0
    /// How long an answer may take to be written: a caller that does not read it is disconnected after this.
    public var writeTimeoutSeconds = 30.0
    /// On SIGTERM, how long intents in flight may take before they are cancelled.
    public var shutdownGraceSeconds = 10.0
    /// The largest request body (an intent with its inline files).
    public var maxRequestBytes = 48 << 20
    /// The most request bytes buffered at once across all connections (a request is
    /// reserved its whole Content-Length from its head): over it, a request is refused
    /// `overloaded` (503, reason `requestBudget`) before its body is read.
    public var maxBufferedRequestBytes = 128 << 20
    /// The most connections open at once; a connection over it is answered 503 and closed.
    public var maxConnections = 1024
    /// The most answer bytes written but not yet taken by their callers, across all
    /// connections: an answer over it is replaced by a 503 `overloaded` (reason
    /// `responseBudget`) with the numbers. With writeTimeoutSeconds it bounds what callers
    /// who never read can make the service hold.
    public var maxPendingResponseBytes = 256 << 20
    /// Which callers may run which owners' intents (ServeGrants; docs/serve.md, "Who may run what").
    public var grants = ServeGrants()
    /// Bearer JWTs over TCP (`authentication`; ServeAuthentication.swift): nil without issuers.
    public var verifier: BearerVerifier?
    /// Which principals or scopes may call which intents (`access`; ServeAccess.swift): nil: every call the grants allow.
    public var access: AccessRules?
    /// Calls per principal (`rateLimits`; ServeRateLimits.swift): nil: no limit.
    public var rateLimits: RateLimitSettings?
    /// The audit log (`audit`; ServeAudit.swift): nil: off.
    public var audit: AuditSettings?
    /// The MCP endpoint at `/mcp` (`mcp`; ServeMCP.swift): on, its request-state key under the home.
    public var mcp = MCPSettings()
    /// This host's name in a fleet (`hostName`, [a-z0-9-]{1,32}): an interactive run's id is
    /// then `NAME.UUID`, so that a balancer can send the run's answers to the host running it
    /// (docs/serve.md, "Interactive runs"). nil: ids are bare UUIDs.
    public var hostName: String?

    public init() {}

    /// Whether `name` is a valid `hostName`: 1 to 32 of a-z, 0-9 and '-'.
    public static func isValidHostName(_ name: String) -> Bool {
        let utf8 = name.utf8
        return (1...32).contains(utf8.count) && utf8.allSatisfy { (0x61...0x7A).contains($0) || (0x30...0x39).contains($0) || $0 == 0x2D }
    }

    public var warmLimits: PluginPool.WarmLimits {
        PluginPool.WarmLimits(
            maxIdle: maxWarm, maxIdlePerPlugin: maxWarmPerPlugin,
            idleTimeoutNs: idleTimeoutSeconds > 0 ? UInt64(idleTimeoutSeconds * 1e9) : nil)
    }

    public func maxConcurrent(forCaller uid: UInt32) -> Int {
        callers[uid]?.maxConcurrent ?? maxConcurrentPerCaller
    }

    /// What one uid may hold open: its `callers` entry, else `maxConnectionsPerCaller`; the
    /// service's own uid (`serviceUID`) only `maxConnections` unless `callers` names it.
    public func maxConnections(forCaller uid: UInt32, serviceUID: UInt32) -> Int {
        if let limit = callers[uid]?.maxConnections { return limit }
        return uid == serviceUID ? maxConnections : maxConnectionsPerCaller
    }

    /// The head and whole-request deadlines of one uid, in seconds.
    public func requestDeadlines(forCaller uid: UInt32) -> (head: Double, request: Double) {
        let request = callers[uid]?.requestTimeoutSeconds ?? requestTimeoutSeconds
        let head = callers[uid]?.requestHeadTimeoutSeconds ?? requestHeadTimeoutSeconds
        return (min(head, request), request)
    }

    /// The file's path: `--config`, else `$EXTRUN_HOME/serve.json`.
    public static func path(config: String?, home: URL) -> String {
        config ?? home.appendingPathComponent("serve.json").path
    }

    /// Reads the policy; the defaults when the file does not exist and was not named.
    public static func load(path: String, required: Bool) throws(HostError) -> (ServePolicy, source: String) {
        guard FileManager.default.fileExists(atPath: path) else {
            if required {
                throw HostError(.configurationError, "\(path): the service's policy file does not exist", details: ["file": .string(path)])
            }
            return (ServePolicy(), "built-in defaults (no \(path))")
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw HostError(.configurationError, "\(path): cannot read the service's policy", details: ["file": .string(path)])
        }
        return (try parse(Array(data), source: path), path)
    }

    public static func parse(_ bytes: [UInt8], source: String) throws(HostError) -> ServePolicy {
        func fail(_ field: String, _ message: String) -> HostError {
            HostError(.configurationError, "\(source): \(field): \(message)", details: ["file": .string(source), "field": .string(field)])
        }
        let value: JSONValue
        do {
            value = try JSONParser.parse(bytes)
        } catch {
            throw HostError(.configurationError, "\(source): not JSON: \(error)", details: ["file": .string(source)])
        }
        guard case .object(let object) = value else { throw fail("(top)", "the policy is a JSON object") }
        var policy = ServePolicy()
        func count(_ name: String, _ range: ClosedRange<Int>) throws(HostError) -> Int? {
            guard let field = object[name] else { return nil }
            guard let number = field.intValue, range.contains(Int(number)) else {
                throw fail(name, "expected a whole number from \(range.lowerBound) to \(range.upperBound); got \(field)")
            }
            return Int(number)
        }
        func seconds(_ name: String, _ range: ClosedRange<Double>) throws(HostError) -> Double? {
            guard let field = object[name] else { return nil }
            guard let number = field.doubleValue, range.contains(number) else {
                throw fail(name, "expected seconds from \(range.lowerBound) to \(range.upperBound); got \(field)")
            }
            return number
        }
        let known: Set<String> = [
            "maxConcurrent", "maxQueued", "maxConcurrentPerCaller", "maxQueuedPerCaller", "callers", "maxWarmPerPlugin", "maxWarm", "idleTimeoutSeconds",
            "crashLimit", "crashWindowSeconds", "crashBackoffSeconds", "promptTimeoutSeconds", "requestTimeoutSeconds", "writeTimeoutSeconds",
            "shutdownGraceSeconds", "maxRequestBytes", "maxBufferedRequestBytes", "maxConnections", "maxPendingResponseBytes",
            "grants", "authentication", "access", "rateLimits", "audit", "mcp",
            "maxConnectionsPerCaller", "requestHeadTimeoutSeconds", "hostName",
        ]
        if let unknown = object.keys.sorted().first(where: { !known.contains($0) }) {
            throw fail(unknown, "unknown field (the fields: \(known.sorted().joined(separator: ", ")); docs/serve.md)")
        }
        policy.maxConcurrent = try count("maxConcurrent", 1...1024) ?? policy.maxConcurrent
        policy.maxQueued = try count("maxQueued", 0...100_000) ?? policy.maxQueued
        policy.maxConcurrentPerCaller = try count("maxConcurrentPerCaller", 1...1024) ?? policy.maxConcurrentPerCaller
        policy.maxQueuedPerCaller = try count("maxQueuedPerCaller", 0...100_000) ?? policy.maxQueuedPerCaller
        policy.maxWarmPerPlugin = try count("maxWarmPerPlugin", 0...1024) ?? policy.maxWarmPerPlugin
        policy.maxWarm = try count("maxWarm", 0...4096) ?? policy.maxWarm
        policy.idleTimeoutSeconds = try seconds("idleTimeoutSeconds", 0...86_400) ?? policy.idleTimeoutSeconds
        policy.crashLimit = try count("crashLimit", 1...1000) ?? policy.crashLimit
        policy.crashWindowSeconds = try seconds("crashWindowSeconds", 0.001...86_400) ?? policy.crashWindowSeconds
        policy.crashBackoffSeconds = try seconds("crashBackoffSeconds", 0...86_400) ?? policy.crashBackoffSeconds
        policy.promptTimeoutSeconds = try seconds("promptTimeoutSeconds", 0.001...86_400) ?? policy.promptTimeoutSeconds
        policy.requestTimeoutSeconds = try seconds("requestTimeoutSeconds", 0.001...3600) ?? policy.requestTimeoutSeconds
        policy.requestHeadTimeoutSeconds = try seconds("requestHeadTimeoutSeconds", 0.001...3600) ?? policy.requestHeadTimeoutSeconds
        policy.writeTimeoutSeconds = try seconds("writeTimeoutSeconds", 0.001...3600) ?? policy.writeTimeoutSeconds
        policy.shutdownGraceSeconds = try seconds("shutdownGraceSeconds", 0...3600) ?? policy.shutdownGraceSeconds
        policy.maxRequestBytes = try count("maxRequestBytes", 1024...(1 << 30)) ?? policy.maxRequestBytes
        policy.maxBufferedRequestBytes = try count("maxBufferedRequestBytes", 1024...(1 << 34)) ?? policy.maxBufferedRequestBytes
        policy.maxConnections = try count("maxConnections", 1...1_000_000) ?? policy.maxConnections
        policy.maxConnectionsPerCaller = try count("maxConnectionsPerCaller", 1...1_000_000) ?? policy.maxConnectionsPerCaller
        policy.maxPendingResponseBytes = try count("maxPendingResponseBytes", 1024...(1 << 34)) ?? policy.maxPendingResponseBytes
        if let callers = object["callers"] {
            let shape = "expected an object of uid: {\"maxConcurrent\": N, \"maxConnections\": N, \"requestHeadTimeoutSeconds\": S, \"requestTimeoutSeconds\": S} (each optional)"
            guard case .object(let entries) = callers else { throw fail("callers", shape) }
            for (key, entry) in entries {
                guard let uid = UInt32(key) else { throw fail("callers.\(key)", "the key is a numeric uid") }
                guard case .object(let fields) = entry else { throw fail("callers.\(key)", shape) }
                var limits = CallerLimits()
                for (name, field) in fields {
                    let path = "callers.\(key).\(name)"
                    switch name {
                    case "maxConcurrent", "maxConnections":
                        let range = name == "maxConcurrent" ? 1...1024 : 1...1_000_000
                        guard let number = field.intValue, range.contains(Int(number)) else {
                            throw fail(path, "expected a whole number from \(range.lowerBound) to \(range.upperBound); got \(field)")
                        }
                        if name == "maxConcurrent" { limits.maxConcurrent = Int(number) } else { limits.maxConnections = Int(number) }
                    case "requestHeadTimeoutSeconds", "requestTimeoutSeconds":
                        guard let number = field.doubleValue, (0.001...3600).contains(number) else {
                            throw fail(path, "expected seconds from 0.001 to 3600; got \(field)")
                        }
                        if name == "requestTimeoutSeconds" { limits.requestTimeoutSeconds = number } else { limits.requestHeadTimeoutSeconds = number }
                    default:
                        throw fail(path, "unknown field; \(shape)")
                    }
                }
                policy.callers[uid] = limits
            }
        }
        if let grants = object["grants"] { policy.grants = try ServeGrants.parse(grants, source: source) }
        if let access = object["access"] { policy.access = try AccessRules.parse(access, source: source) }
        if let limits = object["rateLimits"] { policy.rateLimits = try RateLimitSettings.parse(limits, source: source) }
        if let audit = object["audit"] { policy.audit = try AuditSettings.parse(audit, source: source) }
        if let mcp = object["mcp"] { policy.mcp = try MCPSettings.parse(mcp, source: source) }
        if let field = object["hostName"] {
            guard let name = field.stringValue, isValidHostName(name) else {
                throw fail("hostName", "expected 1 to 32 of a-z, 0-9 and '-' (this host's name in a fleet; run ids become NAME.UUID); got \(field)")
            }
            policy.hostName = name
        }
        if let authentication = object["authentication"] {
            // The issuers' key sets are read here: one that does not load fails the start (or SIGHUP).
            let settings = try AuthenticationSettings.parse(authentication, source: source)
            policy.verifier = settings.issuers.isEmpty && settings.resource == nil ? nil : try BearerVerifier.loadBlocking(settings, source: source)
        }
        return policy
    }
}

/// One uid's own limits (`callers` in serve.json); nil fields keep the policy's.
public struct CallerLimits: Sendable, Equatable {
    public var maxConcurrent: Int?
    public var maxConnections: Int?
    public var requestHeadTimeoutSeconds: Double?
    public var requestTimeoutSeconds: Double?

    public init(maxConcurrent: Int? = nil, maxConnections: Int? = nil, requestHeadTimeoutSeconds: Double? = nil, requestTimeoutSeconds: Double? = nil) {
        self.maxConcurrent = maxConcurrent
        self.maxConnections = maxConnections
        self.requestHeadTimeoutSeconds = requestHeadTimeoutSeconds
        self.requestTimeoutSeconds = requestTimeoutSeconds
    }
}
