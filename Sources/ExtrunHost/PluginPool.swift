import ExtrunProtocol
import ExtrunStore
import Foundation
import Synchronization

/// Handles many intents in one host process, keeping plugin processes warm
/// between them (docs/protocol.md §15). Each intent is handled as `Host.handle`
/// does it (the app's step when an extension asks for it, the donation of a
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
    public let host: Host
    /// The most idle processes kept; the least recently used one is ended beyond it.
    public let maxIdleProcesses: Int
    /// How many plugin processes were started, and how many sessions ran in an
    /// already running one.
    public var launches: Int { state.withLock { $0.launches } }
    public var reuses: Int { state.withLock { $0.reuses } }

    private struct State: @unchecked Sendable {
        var launches = 0
        var reuses = 0
        /// Processes waiting for an intent, least recently used first. A process in use
        /// is in no list: the thread running its session holds it.
        var idle: [WarmProcess] = []
        var policy: (SandboxPolicy, String)?
        /// The plugin catalog, discovered again when older than `catalogMaxAgeNs`: a
        /// plugin installed or changed while the pool runs is seen within a second.
        var catalog: (PluginCatalog, discovered: UInt64)?
        /// When the home's permissions were last found in order.
        var homeChecked: UInt64?
        /// The store donations are written to, opened on the pool's first donation.
        var store: Store?
        /// The plugins' manifests' and executables' identities, looked at again when
        /// older than `fileIdentityMaxAgeNs`.
        var identities: [String: (identity: FileIdentity?, at: UInt64)] = [:]
    }

    private let state = Mutex(State())
    static let catalogMaxAgeNs: UInt64 = 1_000_000_000

    public init(host: Host = Host(), maxIdleProcesses: Int = 4) {
        self.host = host
        self.maxIdleProcesses = max(0, maxIdleProcesses)
    }

    deinit { close() }

    /// The number of processes waiting for another intent.
    public var idleProcessCount: Int { state.withLock { $0.idle.count } }

    /// Handles one intent, in a warm process when one fits. Never throws: every
    /// failure is in the report, as with `Host.handle`.
    public func handle(_ invocation: IntentInvocation, options: HandleOptions = HandleOptions()) -> HandleReport {
        var report = HandleReport(intent: invocation.intent)
        report.id = invocation.id ?? Host.newIdentifier()
        var options = options
        let now = MonotonicClock.now()
        // The policy file once per pool; the catalog and the home's permissions at most once a second.
        let shared: Result<(policy: SandboxPolicy?, catalog: PluginCatalog, checkHome: Bool), HostError> = state.withLock { state in
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
        let catalog: PluginCatalog
        let checkHome: Bool
        switch shared {
        case .failure(let error):
            report.error = error
            return report
        case .success(let values):
            if let policy = values.policy { options.policy = policy }
            catalog = values.catalog
            checkHome = values.checkHome
        }
        guard let (prepared, parameters) = host.prepare(
            invocation, options: options, report: &report, catalog: catalog, checkHome: checkHome, sealMaxAgeNs: Self.fileIdentityMaxAgeNs)
        else {
            if checkHome { state.withLock { $0.homeChecked = nil } }
            return report
        }
        if checkHome { state.withLock { $0.homeChecked = now } }
        var run = prepared
        // The pool's one store connection serves the plugins' requests and the donations.
        let home = host.paths.home
        run.services?.storeSource = { [weak self] in try self?.donationStore() ?? Store(home: home) }
        let key = WarmProcess.key(for: run) { path in fileIdentity(path, now: now) }
        var warm: WarmProcess?
        while warm == nil {
            let candidate = state.withLock { state -> WarmProcess? in
                guard let index = state.idle.lastIndex(where: { $0.key == key }) else { return nil }
                return state.idle.remove(at: index)
            }
            guard let candidate else { break }
            if candidate.isAlive {
                warm = candidate
                state.withLock { $0.reuses += 1 }
            } else {
                // It ended between sessions (the plugin exited or was killed): start afresh.
                options.log?("[extrun] \(run.id)'s warm process ended while idle; starting a new one")
                candidate.close()
            }
        }
        if warm == nil {
            do throws(HostError) {
                warm = try WarmProcess.launch(for: &run)
                state.withLock { $0.launches += 1 }
            } catch {
                report.error = error
                return report
            }
        }
        guard let warm else { return report }
        warm.session(&run, .handle(parameters: parameters), into: &report)
        if warm.isReusable {
            let surplus = state.withLock { state -> [WarmProcess] in
                state.idle.append(warm)
                let extra = max(0, state.idle.count - maxIdleProcesses)
                defer { state.idle.removeFirst(extra) }
                return Array(state.idle.prefix(extra))
            }
            for process in surplus { process.close() }
        }
        // As Host.handle: the app's step (a new process, not pooled) when the extension
        // asks for it, then the donation, through one store connection for the pool.
        let owner = run.plugin.manifest.owner
        host.finishHandling(run, parameters: parameters, report: &report, invocation: invocation, options: options) {
            try self.donationStore().donations(of: owner)
        }
        return report
    }

    /// A plugin file's identity (device, inode, size, modification time), from a `stat`
    /// at most `fileIdentityMaxAgeNs` old: a plugin reinstalled while the pool runs gets
    /// a new process for the intents that start 10 ms after the new files are in place.
    /// (Two stats per intent were a tenth of a warm intent's host time.)
    private func fileIdentity(_ path: String, now: UInt64) -> FileIdentity? {
        if let known = state.withLock({ $0.identities[path] }), now &- known.at <= Self.fileIdentityMaxAgeNs { return known.identity }
        let identity = FileIdentity(path: path)
        state.withLock { state in
            if state.identities.count > 256 { state.identities.removeAll() }
            state.identities[path] = (identity, now)
        }
        return identity
    }

    static let fileIdentityMaxAgeNs: UInt64 = 10_000_000

    private func donationStore() throws -> Store {
        try state.withLock { state in
            if let store = state.store { return store }
            let opened = try Store(home: host.paths.home)
            state.store = opened
            return opened
        }
    }

    /// Ends every idle process (closes its channel, waits its exit grace).
    public func close() {
        let all = state.withLock { state in
            defer { state.idle.removeAll() }
            return state.idle
        }
        for warm in all { warm.close() }
    }
}
