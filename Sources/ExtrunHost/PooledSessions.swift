import ExtrunProtocol
import Foundation
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
    /// The most idle processes kept; the least recently used one is ended beyond it.
    let maxIdle: Int
    /// How long a wait for a warm plugin's answer reads without sleeping first (PluginConnection.spinNs).
    static let spinNs: UInt64 = 50_000
    /// How old a plugin file's identity (`stat`) may be when a warm process is looked up.
    static let fileIdentityMaxAgeNs: UInt64 = 10_000_000

    private struct State: @unchecked Sendable {
        var launches = 0
        var reuses = 0
        /// Processes waiting for an intent, least recently used first.
        var idle: [PluginSession] = []
        /// The plugins' manifests' and executables' identities, looked at again when
        /// older than `fileIdentityMaxAgeNs`.
        var identities: [String: (identity: FileIdentity?, at: UInt64)] = [:]
    }

    private let state = Mutex(State())

    init(maxIdle: Int) {
        self.maxIdle = max(0, maxIdle)
    }

    deinit { close() }

    /// How many plugin processes were started, and how many intents ran in an already running one.
    var launches: Int { state.withLock { $0.launches } }
    var reuses: Int { state.withLock { $0.reuses } }
    /// The number of processes waiting for another intent.
    var idleCount: Int { state.withLock { $0.idle.count } }

    func session(for spec: SessionSpec) throws(HostError) -> PluginSession {
        let now = MonotonicClock.now()
        let key = PluginSession.Key(spec) { path in fileIdentity(path, now: now) }
        while true {
            let candidate = state.withLock { state -> PluginSession? in
                guard let index = state.idle.lastIndex(where: { $0.key == key }) else { return nil }
                return state.idle.remove(at: index)
            }
            guard let candidate else { break }
            if candidate.isAlive {
                state.withLock { $0.reuses += 1 }
                return candidate
            }
            // It ended between intents (the plugin exited or was killed): start afresh.
            spec.log?("[extrun] \(spec.id)'s warm process ended while idle; starting a new one")
            candidate.close()
        }
        // Keyed by the files as they are now (a fresh `stat`), not as last looked at.
        let session = try PluginSession.launch(spec, key: PluginSession.Key(spec), keepsWarm: true)
        session.connection.spinNs = Self.spinNs
        spec.log?("[extrun] \(spec.id): a warm process (reused while the plugin allows it; docs/protocol.md §15)")
        state.withLock { $0.launches += 1 }
        return session
    }

    func finished(_ session: PluginSession) {
        guard session.isReusable else { return }
        let surplus = state.withLock { state -> [PluginSession] in
            state.idle.append(session)
            let extra = max(0, state.idle.count - maxIdle)
            defer { state.idle.removeFirst(extra) }
            return Array(state.idle.prefix(extra))
        }
        for process in surplus { process.close() }
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

    /// Ends every idle process (closes its channel, waits its exit grace).
    func close() {
        let all = state.withLock { state in
            defer { state.idle.removeAll() }
            return state.idle
        }
        for session in all { session.close() }
    }
}
