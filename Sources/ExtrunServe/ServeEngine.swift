import ExtrunHost
import ExtrunProtocol
import Foundation
import Logging
import NIOPosix
import Synchronization
import NIOConcurrencyHelpers

/// The host's `Host` (Foundation has a `Host` too).
typealias Host = ExtrunHost.Host

/// Who called: the peer's uid from SO_PEERCRED on the Unix socket; over TCP, the token's
/// holder (uid nil: limited as one caller, `tcpCallerUID`).
struct Caller: Sendable {
    var uid: UInt32
    var pid: Int32?
    var tcp: Bool
    /// Who it is for the access rules, rate limits and audit log (ServeGate): `uid:N` on the
    /// Unix socket; over TCP the token's holders or a JWT's subject, set per request.
    var principal: Principal

    init(uid: UInt32, pid: Int32?, tcp: Bool, principal: Principal? = nil) {
        self.uid = uid
        self.pid = pid
        self.tcp = tcp
        self.principal = principal ?? (tcp ? .tokenHolder : .peer(uid: uid))
    }
}

/// What the service does with a decoded call; the HTTP side (ServeHTTPHandler) only
/// moves bytes. Intents run through the `IntentService` every front end shares: its
/// admission, its worker threads (never an event loop), its warm sessions for every verb,
/// its runs in flight and its shutdown. What is the service's own: the callers and their
/// grants, the prompts streamed over HTTP, the byte budgets, metrics, logs and backoffs.
final class ServeEngine: Sendable {
    let host: Host
    let service: IntentService
    var pool: PluginPool { service.pool }
    var admission: Admission { service.admission }
    let runs = RunRegistry()
    let metrics: ServeMetrics
    let logger: Logger
    let crashes: CrashTracker
    /// One thread for catalog lookups (`GET /v1/intents`): off the event loop, never a thread per request.
    let lookups: NIOThreadPool
    private let policyState: NIOLockedValueBox<ServePolicy>
    /// Request bytes reserved by the connections now reading a body (maxBufferedRequestBytes).
    let bufferedRequestBytes = Atomic<Int>(0)
    /// Answer bytes written and not yet taken by their callers (maxPendingResponseBytes).
    let pendingResponseBytes = Atomic<Int>(0)
    /// Connections open now, in all and per caller (maxConnections, maxConnectionsPerCaller).
    let connections = ConnectionLedger()
    /// Refusals in the log, summed up per caller every 10 s.
    let refusals: RefusalLog
    /// The service's own uid: limited only by maxConnections unless serve.json's callers names it.
    let serviceUID = getuid()
    /// Answer bytes released since the last return of free memory to the system (`trimMemory`).
    private let releasedSinceTrim = Atomic<Int>(0)
    /// Authentication, access rules, rate limits and the audit log (the /v1 API's and /mcp's).
    let gate: ServeGate
    /// The principal of each interactive run over TCP: only it answers the run's prompts.
    private let runPrincipals = NIOLockedValueBox<[String: String]>([:])

    init(host: Host, policy: ServePolicy, logger: Logger) {
        self.host = host
        self.logger = logger
        service = IntentService(host: host, admission: Self.admissionLimits(policy), warm: policy.warmLimits)
        policyState = NIOLockedValueBox(policy)
        metrics = ServeMetrics()
        refusals = RefusalLog(logger: logger)
        crashes = CrashTracker()
        lookups = NIOThreadPool(numberOfThreads: 1)
        lookups.start()
        gate = ServeGate(policy: policy, logger: logger)
    }

    var policy: ServePolicy { policyState.withLockedValue { $0 } }

    static func admissionLimits(_ policy: ServePolicy) -> Admission.Limits {
        Admission.Limits(maxConcurrent: policy.maxConcurrent, maxQueued: policy.maxQueued, maxQueuedPerCaller: policy.maxQueuedPerCaller) { uid in
            policy.maxConcurrent(forCaller: uid)
        }
    }

    /// A new policy (SIGHUP): the limits apply to the next intents; warm processes over them end now.
    func update(_ policy: ServePolicy) {
        policyState.withLockedValue { $0 = policy }
        gate.update(policy)
        admission.update(Self.admissionLimits(policy))
        pool.update(policy.warmLimits)
    }

    // MARK: Runs

    /// A run's answer, for the HTTP side: the status (when not streamed) and the envelope.
    struct Outcome: Sendable {
        var status: Int
        var body: JSONValue
        var retryAfterSeconds: Int?
        /// The body as written (JSON and a newline), rendered on the run's worker thread
        /// so that the one event loop only copies it out (docs/benchmarks.md, "extrun serve").
        var rendered: [UInt8]?
        /// A 403's `WWW-Authenticate` (insufficient_scope) for a JWT's subject.
        var challenge: String?

        init(status: Int, body: JSONValue, retryAfterSeconds: Int? = nil) {
            self.status = status
            self.body = body
            self.retryAfterSeconds = retryAfterSeconds
        }
    }

    /// Admits a run: `begin` runs on a worker thread when it starts; `finish` with its outcome.
    /// Returns the ticket (to withdraw it if the caller goes away first) or the refusal.
    func admit(
        _ call: ServeCall, caller: Caller, control: RunControl, sink: (any EventSink)?,
        finish: @escaping @Sendable (Outcome) -> Void
    ) -> Admission.Ticket? {
        // The principal's rate (serve.json rateLimits): over it, 429 with Retry-After; nothing is queued.
        if let limited = gate.checkRate(caller.principal) {
            metrics.breach("rateLimit")
            refusals.refused(
                caller.principal.name, reason: "rateLimit", message: "refused: \(limited.error.message)", metadata: ["call": "\(call.label)"])
            var outcome = refusal(limited.error, call: call)
            outcome.retryAfterSeconds = limited.retryAfterSeconds
            audit(call, caller: caller, plugin: nil, error: limited.error, status: outcome.status, started: MonotonicClock.now(), run: nil)
            finish(outcome)
            return nil
        }
        let submitted = service.submit(uid: caller.uid, refused: { [self] in finish(refusal($0, call: call)) }) { [self] in
            var outcome = run(call, caller: caller, control: control, sink: sink)
            if sink == nil {
                var bytes = JSONWriter.bytes(outcome.body)
                bytes.append(0x0A)
                outcome.rendered = bytes
            }
            finish(outcome)
        }
        switch submitted {
        case .success(let ticket):
            return ticket
        case .failure(let error):
            let reason = error.details["reason"]?.stringValue ?? "overloaded"
            metrics.breach(reason)
            refusals.refused(
                caller.tcp ? "TCP callers" : "uid \(caller.uid)", reason: reason, message: "refused: \(error.message)",
                metadata: ["uid": "\(caller.uid)", "call": "\(call.label)"])
            let outcome = refusal(error, call: call)
            audit(call, caller: caller, plugin: nil, error: error, status: outcome.status, started: MonotonicClock.now(), run: nil)
            finish(outcome)
            return nil
        }
    }

    func refusal(_ error: HostError, call: ServeCall) -> Outcome {
        let report = ServeResponse.refusal(error, intent: call.intentName)
        var text = false
        if case .handle(_, let options) = call { text = options.text }
        return Outcome(
            status: ServeResponse.status(refusal: error, exitStatus: report.exitCode), body: ServeResponse.envelope(report, text: text),
            retryAfterSeconds: error.kind == .overloaded ? max(1, Int(((error.details["retryAfterMs"]?.doubleValue ?? 1000) / 1000).rounded(.up))) : nil)
    }

    /// One audit record (ServeGate.audit; nothing when the audit log is off). Never an argument's value.
    func audit(
        _ call: ServeCall, caller: Caller, plugin: String?, error: HostError?, outcome: String? = nil, status: Int, started: UInt64, run: String?
    ) {
        gate.audit(
            AuditRecord(
                principal: caller.principal.name, transport: caller.tcp ? "tcp" : "unix", call: call.label, intent: call.intentName, plugin: plugin,
                outcome: outcome ?? (error == nil ? "none" : (run == nil ? "refused" : "error")), error: error?.kind.rawValue,
                reason: error?.details["reason"]?.stringValue, status: status, durationMs: Double(MonotonicClock.now() &- started) / 1e6, run: run))
    }

    /// serve.json's access rules for a call (ServeGate.authorize), with its plugin when the intent is known.
    private func authorize(_ call: ServeCall, caller: Caller) -> AccessRefusal? {
        guard gate.hasAccessRules else { return nil }
        let intent = call.intentName
        let plugin = intent.flatMap { try? pool.currentCatalog().handler(for: $0).0.manifest.id }
        return gate.authorize(caller.principal, intent: intent, plugin: plugin)
    }

    /// Runs one admitted call on the current (worker) thread.
    private func run(_ call: ServeCall, caller: Caller, control: RunControl, sink: (any EventSink)?) -> Outcome {
        let started = MonotonicClock.now()
        let policy = self.policy
        var options = HandleOptions()
        options.caller = callerIdentity(caller, grants: policy.grants)  // who may run which owners (ServeGrants)
        var callOptions = RunOptions()
        var interactive: InteractiveRun?
        // In a fleet the id names this host (serve.json hostName): HOST.UUID, which the balancer routes answers on.
        let runID = policy.hostName.map { "\($0).\(RandomIdentifier.uuid())" } ?? RandomIdentifier.uuid()
        switch call {
        case .handle(_, let o), .options(_, _, _, let o), .continueActivity(_, let o), .phrase(_, let o): callOptions = o
        default: break
        }
        options.apply(callOptions)
        var log = logger
        log[metadataKey: "run"] = "\(runID)"
        log[metadataKey: "uid"] = "\(caller.uid)"
        if let pid = caller.pid { log[metadataKey: "pid"] = "\(pid)" }
        if let intent = call.intentName { log[metadataKey: "intent"] = "\(intent)" }
        if log.logLevel <= .debug {
            let lineLog = log
            options.log = { line in lineLog.debug("\(line)") }
        }
        if let denied = authorize(call, caller: caller) {
            // serve.json's access rules: 403 notPermitted naming the principal and the intent; nothing ran.
            log.info("not permitted", metadata: ["principal": "\(denied.error.details["principal"]?.stringValue ?? "")", "reason": "access"])
            var outcome = refusal(denied.error, call: call)
            outcome.challenge = caller.principal.scopes.isEmpty && caller.principal.uid != nil ? nil : gate.insufficientScopeChallenge(denied, host: nil)
            audit(call, caller: caller, plugin: denied.error.details["plugin"]?.stringValue, error: denied.error, status: outcome.status, started: started, run: nil)
            return outcome
        }
        if callOptions.interactive, let sink {
            if caller.tcp { runPrincipals.withLockedValue { $0[runID] = caller.principal.name } }
            let prompter = InteractiveRun(id: runID, uid: caller.uid, tcp: caller.tcp, sink: sink, timeoutSeconds: policy.promptTimeoutSeconds)
            interactive = prompter
            runs.add(prompter)
            options.prompter = prompter
            options.onProgress = { progress in
                var event: [String: JSONValue] = ["event": "progress", "run": .string(runID)]
                if let fraction = progress.fraction { event["fraction"] = .double(fraction) }
                if let message = progress.message { event["message"] = .string(message) }
                sink.sendProgress(.object(event))
            }
            control.onCancel { prompter.close() }
            sink.send(.object(["event": "started", "run": .string(runID)]))
        }
        defer {
            if let interactive {
                interactive.close()
                runs.remove(interactive)
                if caller.tcp { _ = runPrincipals.withLockedValue { $0.removeValue(forKey: runID) } }
            }
        }

        // The service never reads a path for a caller: every file parameter's path (the
        // intent, a prompt's answer, a phrase's slot, an activity's interaction) is refused
        // on this thread, whoever the caller (docs/serve.md, "Files").
        let (reportMade, pluginFound) = IntentFileParser.$pathsRefused.withValue(Self.pathsRefusedReason) {
            runOnHost(call, options: options, control: control)
        }
        var report = reportMade
        let pluginID = pluginFound ?? report.plugin
        if var error = report.error, error.kind == .noHandler {
            // The service's plugin path is its own business: in the log, not in the answer.
            log.info("no handler", metadata: ["detail": "\(error.message)"])
            error.message = Self.withoutPluginPath(error.message)
            report.error = error
        }
        if let pluginID { crashes.record(plugin: pluginID, report: report, policy: policy, logger: log) }
        report.updateHostPeakRSS(maxAgeNs: 50_000_000)
        let elapsed = MonotonicClock.now() &- started
        let outcome = report.error?.kind.rawValue ?? report.response?.code ?? (report.options != nil ? "options" : "none")
        metrics.intent(call: call.label, plugin: pluginID, outcome: outcome, durationNs: elapsed)
        if let kind = report.error?.kind, [.timeout, .memoryLimitExceeded, .diskLimitExceeded, .sandboxViolation].contains(kind) {
            metrics.breach(kind.rawValue)
        }
        log.info(
            "intent",
            metadata: [
                "call": "\(call.label)", "plugin": "\(pluginID ?? "")", "outcome": "\(outcome)", "exitStatus": "\(report.exitCode)",
                "id": "\(report.id ?? "")", "ms": "\(Double(elapsed / 1000) / 1000)",
            ])
        let status = ServeResponse.status(exitStatus: report.exitCode, error: report.error?.kind)
        audit(call, caller: caller, plugin: pluginID, error: report.error, outcome: report.error == nil ? outcome : "error", status: status, started: started, run: runID)
        return Outcome(status: status, body: ServeResponse.envelope(report, text: callOptions.text))
    }

    /// A noHandler message without the service's plugin path (docs/serve.md, "Callers").
    static func withoutPluginPath(_ message: String) -> String {
        guard let range = message.range(of: " (plugin path: ") else { return message }
        return String(message[..<range.lowerBound]) + String(message[range.lowerBound...].drop { $0 != ")" }.dropFirst())
    }

    static let pathsRefusedReason =
        "the service does not read files for its callers (it would read them with its own rights, not yours): a file prompt cannot be answered over the service; put the file in the intent's parameters instead, which `extrun handle --server` sends inline"

    /// The host's part of a run (on the run's thread, with paths refused): the report and the plugin.
    private func runOnHost(_ call: ServeCall, options: HandleOptions, control: RunControl) -> (HandleReport, String?) {
        var report: HandleReport
        var pluginID: String?
        switch call {
        case .handle(let invocation, _):
            do throws(HostError) {
                let plugin = try checkPlugin(for: invocation)
                pluginID = plugin
                try crashes.check(plugin: plugin)
                report = service.perform(.handle(invocation), options: options, control: control)
            } catch {
                report = ServeResponse.refusal(error, intent: invocation.intent)
                report.id = invocation.id
            }
        case .options(let invocation, let parameter, let search, _):
            do throws(HostError) {
                pluginID = try checkPlugin(for: invocation)
                report = service.perform(.options(invocation, parameter: parameter, search: search), options: options, control: control)
            } catch {
                report = ServeResponse.refusal(error, intent: invocation.intent)
            }
        case .continueActivity(let invocation, _):
            report = service.perform(.continueActivity(invocation), options: options, control: control)
        case .phrase(let text, _):
            report = service.perform(.phrase(text), options: options, control: control)
        default:
            report = ServeResponse.refusal(HostError(.internalError, "\(call.label) is not a run"))
        }
        return (report, pluginID)
    }

    /// The plugin of an intent, and the check that its file parameters are inline: a path
    /// would be read with the service's rights instead of the caller's (docs/serve.md, "Files").
    private func checkPlugin(for invocation: IntentInvocation) throws(HostError) -> String? {
        guard let (plugin, definition) = try? pool.currentCatalog().handler(for: invocation.intent) else { return nil }
        var byPath: [String] = []
        for parameter in definition.parameters where parameter.type == .file {
            guard let value = invocation.parameters[parameter.name] else { continue }
            let values = value.arrayValue ?? [value]
            if values.contains(where: { $0.stringValue != nil || $0["path"] != nil }) { byPath.append(parameter.name) }
        }
        if !byPath.isEmpty {
            throw HostError(
                .invalidIntent,
                "<request>: parameters.\(byPath[0]): over the service a file is sent inline, as {\"filename\": NAME, \"data\": BASE64} or {\"filename\": NAME, \"text\": TEXT}, not as a path (the service would read it with its own rights, not yours); `extrun handle --server` inlines the files itself",
                details: ["field": .string("parameters.\(byPath[0])"), "fileParameters": .array(byPath.map(JSONValue.string)), "reason": "path"])
        }
        return plugin.manifest.id
    }

    /// Reserves `bytes` of the shared request budget; nil when it fits, else the refusal with its numbers.
    func reserveRequestBytes(_ bytes: Int) -> HostError? {
        let budget = policy.maxBufferedRequestBytes
        while true {
            let used = bufferedRequestBytes.load(ordering: .relaxed)
            if used + bytes > budget {
                return HostError(
                    .overloaded,
                    "the service buffers \(ByteCount.format(Int64(used))) of requests now and this one needs \(ByteCount.format(Int64(bytes))) more, over its budget of \(ByteCount.format(Int64(budget))) (serve.json maxBufferedRequestBytes); try again later",
                    details: [
                        "reason": "requestBudget", "limit": "maxBufferedRequestBytes", "limitValue": .int(Int64(budget)),
                        "buffered": .int(Int64(used)), "measured": .int(Int64(bytes)), "retryAfterMs": 1000,
                    ])
            }
            if bufferedRequestBytes.compareExchange(expected: used, desired: used + bytes, ordering: .relaxed).exchanged { return nil }
        }
    }

    /// Reserves `bytes` of the answers' budget; nil when it fits, else the refusal with its numbers.
    func reserveResponseBytes(_ bytes: Int) -> HostError? {
        let budget = policy.maxPendingResponseBytes
        while true {
            let used = pendingResponseBytes.load(ordering: .relaxed)
            if used + bytes > budget {
                return HostError(
                    .overloaded,
                    "the service holds \(ByteCount.format(Int64(used))) of answers its callers have not read yet and this one is \(ByteCount.format(Int64(bytes))), over its budget of \(ByteCount.format(Int64(budget))) (serve.json maxPendingResponseBytes); the answer was dropped, try again later",
                    details: [
                        "reason": "responseBudget", "limit": "maxPendingResponseBytes", "limitValue": .int(Int64(budget)),
                        "pending": .int(Int64(used)), "measured": .int(Int64(bytes)), "retryAfterMs": 1000,
                    ])
            }
            if pendingResponseBytes.compareExchange(expected: used, desired: used + bytes, ordering: .relaxed).exchanged { return nil }
        }
    }

    func releaseResponseBytes(_ bytes: Int) {
        if bytes > 0 {
            pendingResponseBytes.subtract(bytes, ordering: .relaxed)
            releasedSinceTrim.add(bytes, ordering: .relaxed)
        }
    }

    /// After a burst of answers (at least `trimAfterBytes` released, none held now), the
    /// allocator's free memory goes back to the system (malloc_trim): glibc keeps what
    /// intents' threads freed in their arenas otherwise, and the service's RSS stayed at its
    /// peak (issue 30: 52 -> 128 MB over three rounds of callers that never read). Called
    /// once a second by the reaper thread; true when it trimmed.
    @discardableResult
    func trimMemoryIfDue(trimAfterBytes: Int = 4 << 20) -> Bool {
        guard releasedSinceTrim.load(ordering: .relaxed) >= trimAfterBytes, pendingResponseBytes.load(ordering: .relaxed) == 0,
            bufferedRequestBytes.load(ordering: .relaxed) == 0
        else { return false }
        releasedSinceTrim.store(0, ordering: .relaxed)
        ServeMemory.trim()
        return true
    }

    func releaseRequestBytes(_ bytes: Int) {
        if bytes > 0 { bufferedRequestBytes.subtract(bytes, ordering: .relaxed) }
    }

    // MARK: Answers, describe

    func answer(run id: String, prompt: String, value: JSONValue, caller: Caller) -> Outcome {
        // Only the caller that started the run: the same uid over the Unix socket; over TCP
        // (whose callers hold the token) only a run started over TCP. Another caller's run is
        // answered as one that does not exist, with the same body: a caller learns nothing of
        // the others' runs (issue 30).
        guard let run = runs.run(id), caller.tcp == run.tcp, caller.tcp || caller.uid == run.uid,
            !caller.tcp || runPrincipals.withLockedValue({ $0[id] }) == caller.principal.name
        else {
            return Outcome(
                status: 404,
                body: .object([
                    "error": HostError(
                        .notFound, "no interactive run '\(id.prefix(64))' of yours is in flight (it ended, never asked, or was never yours)",
                        details: ["run": .string(String(id.prefix(64)))]
                    ).json
                ]))
        }
        do throws(InteractiveRun.Refusal) {
            try run.answer(prompt, value)
            return Outcome(status: 200, body: .object(["accepted": true]))
        } catch {
            return Outcome(status: error.status, body: .object(["error": HostError(.invalidIntent, error.message).json]))
        }
    }

    func describe(intent: String?) -> Outcome {
        let catalog = pool.currentCatalog()
        if let intent {
            do throws(HostError) {
                // What `extrun describe --format json` prints (IntentDescription), from the
                // catalog the runs use; no folder: the plugin path is the service's business.
                let (plugin, definition) = try catalog.handler(for: intent)
                return Outcome(status: 200, body: IntentDescription(plugin: plugin, definition: definition).json)
            } catch {
                var error = error
                if error.kind == .noHandler {
                    logger.info("no handler", metadata: ["detail": "\(error.message)"])
                    error.message = Self.withoutPluginPath(error.message)
                }
                return Outcome(status: error.kind == .noHandler ? 404 : 500, body: .object(["error": error.json]))
            }
        }
        let intents: [JSONValue] = catalog.plugins.flatMap { plugin in
            plugin.manifest.intents.map { definition in
                JSONValue.object([
                    "intent": .string(definition.name), "plugin": .string(plugin.manifest.id),
                    "title": definition.title.map(JSONValue.string) ?? .null,
                ])
            }
        }
        return Outcome(status: 200, body: .object(["intents": .array(intents)]))
    }

    func health() -> JSONValue {
        let policy = self.policy
        return .object([
            "limits": .object([
                "maxConcurrent": .int(Int64(policy.maxConcurrent)), "maxQueued": .int(Int64(policy.maxQueued)),
                "maxConcurrentPerCaller": .int(Int64(policy.maxConcurrentPerCaller)), "maxQueuedPerCaller": .int(Int64(policy.maxQueuedPerCaller)),
                "promptTimeoutSeconds": .double(policy.promptTimeoutSeconds),
                "maxWarmPerPlugin": .int(Int64(policy.maxWarmPerPlugin)), "maxWarm": .int(Int64(policy.maxWarm)),
                "idleTimeoutSeconds": .double(policy.idleTimeoutSeconds),
            ]),
            "status": "ok", "version": .string(Host.version), "running": .int(Int64(admission.running)),
            "queued": .int(Int64(admission.queued)), "warmProcesses": .int(Int64(pool.idleProcessCount)),
            "launches": .int(Int64(pool.launches)), "reuses": .int(Int64(pool.reuses)),
            "backedOff": .object(crashes.backedOff().mapValues { .int(Int64($0)) }),
            "residentBytes": ServeMemory.residentBytes().map { .int($0) } ?? .null,
        ])
    }

    func renderMetrics() -> [UInt8] {
        metrics.render(pool: pool, admission: admission, backedOff: crashes.backedOff().count, openConnections: connections.open)
    }

    // MARK: Shutdown

    /// SIGTERM: stop taking intents; the ones in flight get the grace, then are cancelled
    /// (`IntentService.shutDown`), a prompt still open closed with its run (`RunControl.onCancel`).
    func shutDown(reason: String) {
        service.shutDown(grace: policy.shutdownGraceSeconds, reason: reason) { [self] running in
            logger.warning("cancelling intents still running after the grace", metadata: ["running": "\(running)"])
        }
        gate.close()
    }

    var runningCount: Int { service.running }
}

extension ServeCall {
    var intentName: String? {
        switch self {
        case .handle(let invocation, _), .options(let invocation, _, _, _): invocation.intent
        case .continueActivity(let invocation, _): invocation.interaction?.intent
        default: nil
        }
    }
}

/// Plugins that keep crashing: `crashLimit` crashes within `crashWindowSeconds` back the
/// plugin off for `crashBackoffSeconds`, doubled at each new backoff while it keeps
/// crashing (at most 16 times); a run that does not crash resets it. While backed off its
/// intents are refused `overloaded` (reason `backoff`, with the crashes and the time left),
/// and `GET /v1/health` lists it.
final class CrashTracker: Sendable {
    private struct Entry {
        var crashes: [UInt64] = []
        var until: UInt64 = 0
        var backoffs = 0
    }

    private let state = NIOLockedValueBox<[String: Entry]>([:])

    func check(plugin: String?) throws(HostError) {
        guard let plugin else { return }
        let now = MonotonicClock.now()
        let entry = state.withLockedValue { $0[plugin] }
        guard let entry, entry.until > now else { return }
        let leftMs = Double((entry.until - now) / 1_000_000)
        throw HostError(
            .overloaded,
            "\(plugin) crashed \(entry.crashes.count) times in a row and is backed off for another \(Int(leftMs)) ms (policy crashLimit, crashBackoffSeconds); its intents are refused meanwhile",
            details: [
                "reason": "backoff", "plugin": .string(plugin), "crashes": .int(Int64(entry.crashes.count)), "retryAfterMs": .double(leftMs),
            ])
    }

    func record(plugin: String, report: HandleReport, policy: ServePolicy, logger: Logger) {
        let crashed = report.error?.kind == .pluginCrashed || report.steps.contains { $0.error?.kind == .pluginCrashed }
        let now = MonotonicClock.now()
        let window = UInt64(policy.crashWindowSeconds * 1e9)
        let backoff: UInt64? = state.withLockedValue { state in
            var entry = state[plugin] ?? Entry()
            defer { state[plugin] = entry.crashes.isEmpty && entry.until <= now ? nil : entry }
            guard crashed else {
                if report.error == nil { entry = Entry() }
                return nil
            }
            entry.crashes = entry.crashes.filter { now &- $0 <= window } + [now]
            guard entry.crashes.count >= policy.crashLimit else { return nil }
            let length = UInt64(policy.crashBackoffSeconds * 1e9) << UInt64(min(entry.backoffs, 4))
            entry.backoffs += 1
            entry.until = now + length
            return length
        }
        if let backoff {
            logger.error(
                "plugin backed off after repeated crashes",
                metadata: ["plugin": "\(plugin)", "crashLimit": "\(policy.crashLimit)", "backoffMs": "\(backoff / 1_000_000)"])
        }
    }

    /// The plugins backed off now, with the milliseconds left.
    func backedOff() -> [String: Int] {
        let now = MonotonicClock.now()
        return state.withLockedValue { state in
            state.compactMapValues { $0.until > now ? Int(($0.until - now) / 1_000_000) : nil }
        }
    }
}
