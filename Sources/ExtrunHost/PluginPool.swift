import ExtrunProtocol
import ExtrunStore
import Foundation

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
/// deadline (counted from the session's `initialize`; from the launch for a
/// process's first session), the report. What is per process: the memory cap
/// (the whole life counts), the sandbox, the scratch directory (HOME, TMPDIR).
/// A crash, a timeout, a protocol violation or a forbidden system call ends the
/// process and is reported for the intent in flight.
///
/// ```swift
/// let pool = PluginPool()
/// for invocation in invocations { print(pool.handle(invocation).json) }
/// pool.close()   // or let it go: idle processes are ended on deinit
/// ```
///
/// Not thread-safe: use one pool from one thread at a time (one pool per thread
/// for parallel work).
public final class PluginPool {
    public let host: Host
    /// The most idle processes kept; the least recently used one is ended beyond it.
    public let maxIdleProcesses: Int
    /// How many plugin processes were started, and how many sessions ran in an
    /// already running one.
    public private(set) var launches = 0
    public private(set) var reuses = 0

    private var idle: [WarmProcess] = []
    private var policy: (SandboxPolicy, String)?
    /// The plugin catalog, discovered again when older than `catalogMaxAgeNs`: a
    /// plugin installed or changed while the pool runs is seen within a second.
    private var catalog: (PluginCatalog, discovered: UInt64)?
    static let catalogMaxAgeNs: UInt64 = 1_000_000_000
    /// When the home's permissions were last found in order.
    private var homeChecked: UInt64?

    public init(host: Host = Host(), maxIdleProcesses: Int = 4) {
        self.host = host
        self.maxIdleProcesses = max(0, maxIdleProcesses)
    }

    deinit { close() }

    /// The number of processes waiting for another intent.
    public var idleProcessCount: Int { idle.count }

    /// Handles one intent, in a warm process when one fits. Never throws: every
    /// failure is in the report, as with `Host.handle`.
    public func handle(_ invocation: IntentInvocation, options: HandleOptions = HandleOptions()) -> HandleReport {
        var report = HandleReport(intent: invocation.intent)
        report.id = invocation.id ?? Host.newIdentifier()
        var options = options
        if options.policy == nil {
            // The policy file is read once per pool, not once per intent.
            do {
                if policy == nil {
                    policy = try SandboxPolicy.load(home: host.paths.home)
                    options.log?("[extrun] policy for this pool (read once): \(policy?.1 ?? "")")
                }
                options.policy = policy?.0
            } catch {
                report.error = error
                return report
            }
        }
        let now = MonotonicClock.now()
        if catalog == nil || now &- (catalog?.discovered ?? 0) > Self.catalogMaxAgeNs {
            catalog = (host.catalog(), now)
        }
        // The home's permissions (store, keys, containers: docs/sandbox.md) at most once a second, as the catalog.
        let checkHome = homeChecked.map { now &- $0 > Self.catalogMaxAgeNs } ?? true
        guard let (prepared, parameters) = host.prepare(invocation, options: options, report: &report, catalog: catalog?.0, checkHome: checkHome)
        else {
            if checkHome { homeChecked = nil }
            return report
        }
        if checkHome { homeChecked = now }
        var run = prepared
        // The pool's one store connection serves the plugins' requests and the donations.
        let home = host.paths.home
        run.services?.storeSource = { [weak self] in try self?.donationStore() ?? Store(home: home) }
        let key = WarmProcess.key(for: run)
        let warm: WarmProcess
        if let index = idle.lastIndex(where: { $0.key == key }) {
            let candidate = idle.remove(at: index)
            if candidate.isAlive {
                warm = candidate
                reuses += 1
            } else {
                // It ended between sessions (the plugin exited or was killed): start afresh.
                options.log?("[extrun] \(run.id)'s warm process ended while idle; starting a new one")
                candidate.close()
                guard let fresh = launch(&run, report: &report) else { return report }
                warm = fresh
            }
        } else {
            guard let fresh = launch(&run, report: &report) else { return report }
            warm = fresh
        }
        warm.session(&run, .handle(parameters: parameters), into: &report)
        if warm.isReusable {
            idle.append(warm)
            while idle.count > maxIdleProcesses { idle.removeFirst().close() }
        }
        // As Host.handle: the app's step (a new process, not pooled) when the extension
        // asks for it, then the donation, through one store connection for the pool.
        let owner = run.plugin.manifest.owner
        host.finishHandling(run, parameters: parameters, report: &report, invocation: invocation, options: options) {
            try self.donationStore().donations(of: owner)
        }
        return report
    }

    /// The store donations are written to, opened on the pool's first donation.
    private var store: Store?

    private func donationStore() throws -> Store {
        if let store { return store }
        let opened = try Store(home: host.paths.home)
        store = opened
        return opened
    }

    /// Ends every idle process (closes its channel, waits its exit grace).
    public func close() {
        let all = idle
        idle.removeAll()
        for warm in all { warm.close() }
    }

    private func launch(_ run: inout PluginRun, report: inout HandleReport) -> WarmProcess? {
        do throws(HostError) {
            let warm = try WarmProcess.launch(for: &run)
            launches += 1
            return warm
        } catch {
            report.error = error
            return nil
        }
    }
}
