import ExtrunProtocol
import Foundation
import NIOConcurrencyHelpers
import Synchronization

/// Handles many intents in one host process, keeping plugin processes warm
/// between them (docs/protocol.md §15). Each intent is handled by `Host.handle`'s
/// own path (`Host.run`), with its sessions from `PooledSessions` (the app's step when an extension asks for it, the donation of a
/// successful run); what differs is where: a plugin that declares `"reusable": true`
/// in its handshake runs the next intent for the same plugin, mode, limits and
/// policy in the same process, without a new launch. Every other plugin, and
/// every intent after a failure, gets a fresh process, exactly as `Host.handle`.
/// The policy file is read once per pool; the plugin catalog and the permissions of
/// the home (store, keys, containers) at most once a second.
///
/// What stays per intent: the checks of the intent against the manifest, the
/// deadline (counted from the session's `initialize`, or its `session` request;
/// from the launch for a process's first session), the report. What is per
/// process: the memory cap (the whole life counts), the sandbox, the scratch
/// directory (HOME, TMPDIR). A crash, a timeout, a protocol violation or a
/// forbidden system call ends the process and is reported for the intent in flight.
///
/// ```swift
/// let pool = PluginPool()
/// for invocation in invocations { print(pool.handle(invocation).json) }
/// pool.close()   // or let it go: idle processes are ended on deinit
/// ```
///
/// Several threads may call `handle` at once: each intent in flight has a process
/// of its own (a warm one when one is idle, else a new one), so N callers keep up
/// to N processes of a plugin busy. A process runs one session at a time.
public final class PluginPool: Sendable {
    /// How many warm processes a pool keeps, and for how long (docs/serve.md, the policy's
    /// `maxWarm`, `maxWarmPerPlugin`, `idleTimeoutSeconds`).
    public struct WarmLimits: Sendable, Equatable {
        /// The most idle processes kept overall; the least recently used one is ended beyond it.
        public var maxIdle: Int
        /// The most idle processes kept for one plugin.
        public var maxIdlePerPlugin: Int
        /// An idle process is ended after this long without an intent (`endIdle()`); nil: never.
        public var idleTimeoutNs: UInt64?

        public init(maxIdle: Int, maxIdlePerPlugin: Int? = nil, idleTimeoutNs: UInt64? = nil) {
            self.maxIdle = max(0, maxIdle)
            self.maxIdlePerPlugin = max(0, maxIdlePerPlugin ?? maxIdle)
            self.idleTimeoutNs = idleTimeoutNs
        }
    }

    public let host: Host
    /// The most idle processes kept (at the pool's start; `warmLimits` has the current limits).
    public let maxIdleProcesses: Int
    /// How many plugin processes were started, and how many sessions ran in an
    /// already running one.
    public var launches: Int { sessions.launches }
    public var reuses: Int { sessions.reuses }
    /// Warm processes found dead (crashed or killed while idle) and replaced by a new one.
    public var replacedProcesses: Int { sessions.replaced }
    /// Warm processes ended by the idle timeout or the limits.
    public var retiredProcesses: Int { sessions.retired }
    /// Idle processes by plugin id.
    public var idleProcessesByPlugin: [String: Int] { sessions.idleByPlugin }
    /// The limits in force.
    public var warmLimits: WarmLimits {
        get { sessions.limits }
    }

    /// The warm processes.
    let sessions: PooledSessions

    /// What the pool reads once, or at most once a second, instead of once per intent.
    private struct Shared: @unchecked Sendable {
        var policy: (SandboxPolicy, String)?
        /// The plugin catalog, discovered again when older than `catalogMaxAgeNs`: a
        /// plugin installed or changed while the pool runs is seen within a second.
        var catalog: (PluginCatalog, discovered: UInt64)?
        /// When the home's permissions were last found in order.
        var homeChecked: UInt64?
    }

    private let shared = NIOLockedValueBox(Shared())
    static let catalogMaxAgeNs: UInt64 = 1_000_000_000

    public convenience init(host: Host = Host(), maxIdleProcesses: Int = 4) {
        self.init(host: host, limits: WarmLimits(maxIdle: maxIdleProcesses))
    }

    public init(host: Host, limits: WarmLimits) {
        self.host = host
        self.maxIdleProcesses = limits.maxIdle
        sessions = PooledSessions(limits: limits)
        // A long-lived host: its stores fold their log less often, and on close.
        StoreConnections.useLongLivedLogs()
    }

    /// New warm limits (a policy re-read): processes over them are ended now.
    public func update(_ limits: WarmLimits) {
        sessions.update(limits)
    }

    /// Ends the processes idle for longer than `warmLimits.idleTimeoutNs`; returns how many.
    @discardableResult
    public func endIdleProcesses() -> Int {
        sessions.endIdle()
    }

    /// Forgets the policy read once per pool, so that the next intent reads
    /// `$EXTRUN_HOME/policy.json` again (SIGHUP in `extrun serve`); returns the policy's
    /// source, or the error that keeps the pool on the policy it had.
    @discardableResult
    public func reloadPolicy() throws(HostError) -> String {
        let loaded = try SandboxPolicy.load(home: host.paths.home)
        shared.withLockedValue { $0.policy = loaded }
        return loaded.1
    }

    /// The plugin catalog as the pool sees it (discovered again at most once a second).
    public func currentCatalog() -> PluginCatalog {
        let now = MonotonicClock.now()
        return shared.withLockedValue { state in
            if let known = state.catalog, now &- known.discovered <= Self.catalogMaxAgeNs { return known.0 }
            let catalog = host.catalog()
            state.catalog = (catalog, now)
            return catalog
        }
    }

    deinit { close() }

    /// The number of processes waiting for another intent.
    public var idleProcessCount: Int { sessions.idleCount }

    /// Handles one intent, in a warm process when one fits. Never throws: every
    /// failure is in the report, as with `Host.handle`.
    public func handle(_ invocation: IntentInvocation, options: HandleOptions = HandleOptions()) -> HandleReport {
        // As Host.handle: the app's step (a new process, not pooled) when the extension
        // asks for it, then the donation.
        withContext(options, intent: invocation.intent, id: invocation.id ?? Host.newIdentifier()) { options, context in
            host.run(invocation, options: options, context: context)
        }
    }

    /// The dynamic options of a parameter (`Host.options`), in a warm process when one fits.
    public func options(
        _ invocation: IntentInvocation, parameter: String, search: String?, options: HandleOptions = HandleOptions()
    ) -> HandleReport {
        withContext(options, intent: invocation.intent, id: invocation.id) { options, context in
            host.options(invocation, parameter: parameter, search: search, options: options, context: context)
        }
    }

    /// A user activity continued in in-app mode (`Host.continueActivity`), in a warm process when one fits.
    public func continueActivity(_ invocation: ActivityInvocation, options: HandleOptions = HandleOptions()) -> HandleReport {
        withContext(options, intent: invocation.interaction?.intent, id: invocation.interaction?.identifier ?? Host.newIdentifier()) {
            options, context in
            host.continueActivity(invocation, options: options, context: context)
        }
    }

    /// What a person said, matched and handled (`Host.phrase`): the options and the intent in warm processes.
    public func phrase(_ text: String, options: HandleOptions = HandleOptions()) -> HandleReport {
        withContext(options, intent: nil, id: nil) { options, context in
            host.phrase(text, options: options, context: context)
        }
    }

    /// Runs `body` with the pool's sessions and caches: the policy file once per pool; the
    /// catalog and the home's permissions at most once a second. A failure of those is the
    /// report's error (`intent`, `id`: the report's).
    private func withContext(
        _ given: HandleOptions, intent: String?, id: String?, _ body: (HandleOptions, RunContext) -> HandleReport
    ) -> HandleReport {
        var options = given
        let now = MonotonicClock.now()
        let cached: Result<(policy: SandboxPolicy?, catalog: PluginCatalog, checkHome: Bool), HostError> = shared.withLockedValue { state in
            var policy: SandboxPolicy?
            if options.policy == nil {
                do {
                    if state.policy == nil {
                        state.policy = try SandboxPolicy.load(home: host.paths.home)
                        options.log?("[extrun] policy for this pool (read once): \(state.policy?.1 ?? "")")
                    }
                    policy = state.policy?.0
                } catch let error as HostError {
                    return .failure(error)
                } catch {
                    return .failure(HostError(.internalError, "\(error)"))
                }
            }
            let catalog: PluginCatalog
            if let known = state.catalog, now &- known.discovered <= Self.catalogMaxAgeNs {
                catalog = known.0
            } else {
                catalog = host.catalog()
                state.catalog = (catalog, now)
            }
            let checkHome = state.homeChecked.map { now &- $0 > Self.catalogMaxAgeNs } ?? true
            return .success((policy, catalog, checkHome))
        }
        func failed(_ error: HostError) -> HandleReport {
            var report = HandleReport(intent: intent)
            report.id = id
            report.error = error
            return report
        }
        let values: (policy: SandboxPolicy?, catalog: PluginCatalog, checkHome: Bool)
        switch cached {
        case .failure(let error): return failed(error)
        case .success(let found): values = found
        }
        if let policy = values.policy { options.policy = policy }
        if values.checkHome {
            do throws(HostError) {
                try HomeProtection.check(home: host.paths.home)
                shared.withLockedValue { $0.homeChecked = now }
            } catch {
                shared.withLockedValue { $0.homeChecked = nil }
                return failed(error)
            }
        }
        let context = RunContext(sessions: sessions, catalog: values.catalog, checkHome: false, sealMaxAgeNs: PooledSessions.fileIdentityMaxAgeNs)
        PooledSessions.running.add(1, ordering: .relaxed)
        defer { PooledSessions.running.subtract(1, ordering: .relaxed) }
        return body(options, context)
    }

    /// Whether fewer intents run through warm pools in this process than there are CPUs:
    /// a CPU is then free for a thread (or a warm plugin) to poll for what comes next
    /// instead of sleeping (`PooledSessions.pollAfterHint`, `extrun mcp`'s reading).
    public static var hasSpareCPU: Bool {
        PooledSessions.running.load(ordering: .relaxed) < PooledSessions.processors
    }

    /// Ends every idle process (closes its channel, waits its exit grace).
    public func close() {
        sessions.close()
        StoreConnections.foldLogs()
    }
}
