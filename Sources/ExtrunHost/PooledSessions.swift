import ExtrunProtocol
import Foundation
import NIOConcurrencyHelpers
import Synchronization

/// Plugin processes kept warm between intents (docs/protocol.md §15): a plugin that
/// declares `"reusable": true` in its handshake runs the next intent for the same
/// plugin, mode, limits, policy and signature in the same process, without a new
/// launch. A process that is not reusable, or whose intent failed, ends with its
/// intent, as a one-shot session does. `PluginPool` (`extrun batch`) and
/// `Host.phrase` take their sessions from here.
///
/// Several threads may take sessions at once: each intent in flight has a process of
/// its own (a warm one when one is idle, else a new one). A process runs one intent
/// at a time: one in use is in no list, the thread running its intent holds it.
final class PooledSessions: SessionSource, Sendable {
    /// How long a wait for a warm plugin's answer reads without sleeping first (PluginConnection.spinNs).
    static let spinNs: UInt64 = 50_000

    /// The intents running through warm pools in this process now (`PluginPool`).
    static let running = Atomic<Int>(0)
    /// The CPUs this process may use (at least 1).
    static let processors = max(1, ProcessInfo.processInfo.activeProcessorCount)
    /// How long a warm plugin may read its channel without sleeping after its answer to a
    /// `session` request (docs/protocol.md §15.1, `pollAfterUs`). While fewer intents run
    /// here than there are CPUs, one is free for it: the next request (a client's next
    /// call through `extrun mcp`, say) then finds it awake, where a plugin asleep on an idle
    /// CPU is woken ~20 µs late on a VM and the whole round trip slows (docs/benchmarks.md,
    /// "MCP over stdio"). With as many intents as CPUs or more, it sleeps at once: its
    /// reading would take a CPU the others need.
    static let pollAfterUs = 200
    static var pollAfterHint: Int {
        pollAfterHint(running: running.load(ordering: .relaxed), processors: processors)
    }

    static func pollAfterHint(running: Int, processors: Int) -> Int {
        running < processors ? pollAfterUs : 0
    }
    /// How old a plugin file's identity (`stat`) may be when a warm process is looked up.
    static let fileIdentityMaxAgeNs: UInt64 = 10_000_000

    /// How many warm processes are kept, and for how long (`PluginPool.WarmLimits`).
    typealias Limits = PluginPool.WarmLimits

    private struct Idle {
        var session: PluginSession
        /// When its last intent ended (MonotonicClock).
        var since: UInt64
    }

    private struct State: @unchecked Sendable {
        var limits: Limits
        var launches = 0
        var reuses = 0
        /// Warm processes found dead when an intent wanted them (a crash or a kill while
        /// idle), and replaced by a new one.
        var replaced = 0
        /// Warm processes ended by the idle timeout or a limit.
        var retired = 0
        /// Processes waiting for an intent, least recently used first.
        var idle: [Idle] = []
        /// The plugins' manifests' and executables' identities, looked at again when
        /// older than `fileIdentityMaxAgeNs`.
        var identities: [String: (identity: FileIdentity?, at: UInt64)] = [:]
    }

    private let state: NIOLockedValueBox<State>

    init(limits: Limits) {
        state = NIOLockedValueBox(State(limits: limits))
    }

    /// At most `maxIdle` idle processes, kept until used or ended.
    convenience init(maxIdle: Int) {
        self.init(limits: Limits(maxIdle: maxIdle))
    }

    deinit { close() }

    /// The most idle processes kept overall; the least recently used one is ended beyond it.
    var maxIdle: Int { state.withLockedValue { $0.limits.maxIdle } }
    var limits: Limits {
        get { state.withLockedValue { $0.limits } }
    }

    /// New limits (a policy re-read); processes over them are ended now.
    func update(_ limits: Limits) {
        let surplus = state.withLockedValue { state in
            state.limits = limits
            return Self.trim(&state)
        }
        for process in surplus { process.close() }
    }

    /// How many plugin processes were started, and how many intents ran in an already running one.
    var launches: Int { state.withLockedValue { $0.launches } }
    var reuses: Int { state.withLockedValue { $0.reuses } }
    var replaced: Int { state.withLockedValue { $0.replaced } }
    var retired: Int { state.withLockedValue { $0.retired } }
    /// The number of processes waiting for another intent.
    var idleCount: Int { state.withLockedValue { $0.idle.count } }
    /// Idle processes by plugin id.
    var idleByPlugin: [String: Int] {
        state.withLockedValue { state in state.idle.reduce(into: [:]) { $0[$1.session.id, default: 0] += 1 } }
    }

    func session(for spec: SessionSpec) throws(HostError) -> PluginSession {
        let now = MonotonicClock.now()
        let key = PluginSession.Key(spec) { path in fileIdentity(path, now: now) }
        while true {
            let candidate = state.withLockedValue { state -> PluginSession? in
                guard let index = state.idle.lastIndex(where: { $0.session.key == key }) else { return nil }
                return state.idle.remove(at: index).session
            }
            guard let candidate else { break }
            if candidate.isAlive {
                state.withLockedValue { $0.reuses += 1 }
                return candidate
            }
            // It ended between intents (the plugin exited or was killed): start afresh.
            spec.log?("[extrun] \(spec.id)'s warm process ended while idle; starting a new one")
            state.withLockedValue { $0.replaced += 1 }
            candidate.close()
        }
        // Keyed by the files as they are now (a fresh `stat`), not as last looked at.
        let session = try PluginSession.launch(spec, key: PluginSession.Key(spec), keepsWarm: true)
        session.connection.spinNs = Self.spinNs
        spec.log?("[extrun] \(spec.id): a warm process (reused while the plugin allows it; docs/protocol.md §15)")
        state.withLockedValue { $0.launches += 1 }
        return session
    }

    func finished(_ session: PluginSession) {
        guard session.isReusable else { return }
        let surplus = state.withLockedValue { state -> [PluginSession] in
            state.idle.append(Idle(session: session, since: MonotonicClock.now()))
            return Self.trim(&state)
        }
        for process in surplus { process.close() }
    }

    /// Takes out of `state.idle` what is over the limits: beyond `maxIdlePerPlugin` for a
    /// plugin, then beyond `maxIdle` overall, least recently used first.
    private static func trim(_ state: inout State) -> [PluginSession] {
        var surplus: [PluginSession] = []
        var perPlugin: [String: Int] = [:]
        for entry in state.idle { perPlugin[entry.session.id, default: 0] += 1 }
        var index = 0
        while index < state.idle.count {
            let id = state.idle[index].session.id
            if let count = perPlugin[id], count > state.limits.maxIdlePerPlugin {
                perPlugin[id] = count - 1
                surplus.append(state.idle.remove(at: index).session)
            } else {
                index += 1
            }
        }
        let extra = max(0, state.idle.count - state.limits.maxIdle)
        surplus += state.idle.prefix(extra).map(\.session)
        state.idle.removeFirst(extra)
        state.retired += surplus.count
        return surplus
    }

    /// Ends the processes idle for longer than the limits' `idleTimeoutNs` (nil: none);
    /// returns how many. A long-lived host calls it on a timer (`extrun serve`).
    @discardableResult
    func endIdle(now: UInt64 = MonotonicClock.now()) -> Int {
        let expired = state.withLockedValue { state -> [PluginSession] in
            guard let timeout = state.limits.idleTimeoutNs else { return [] }
            let (old, kept) = (state.idle.filter { now &- $0.since >= timeout }, state.idle.filter { now &- $0.since < timeout })
            state.idle = kept
            state.retired += old.count
            return old.map(\.session)
        }
        for process in expired { process.close() }
        return expired.count
    }

    /// A plugin file's identity (device, inode, size, modification time), from a `stat`
    /// at most `fileIdentityMaxAgeNs` old: a plugin reinstalled while the pool runs gets
    /// a new process for the intents that start 10 ms after the new files are in place.
    /// (Two stats per intent were a tenth of a warm intent's host time.)
    private func fileIdentity(_ path: String, now: UInt64) -> FileIdentity? {
        if let known = state.withLockedValue({ $0.identities[path] }), now &- known.at <= Self.fileIdentityMaxAgeNs { return known.identity }
        let identity = FileIdentity(path: path)
        state.withLockedValue { state in
            if state.identities.count > 256 { state.identities.removeAll() }
            state.identities[path] = (identity, now)
        }
        return identity
    }

    /// Ends every idle process (closes its channel, waits its exit grace).
    func close() {
        let all = state.withLockedValue { state in
            defer { state.idle.removeAll() }
            return state.idle.map(\.session)
        }
        for session in all { session.close() }
    }
}
