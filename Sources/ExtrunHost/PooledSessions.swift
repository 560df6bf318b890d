import ExtrunProtocol
import Foundation
import ExtrunStore

/// One plugin process that may run several sessions, one after another (warm
/// reuse, docs/protocol.md §15). It reuses PluginRun's session code (initialize,
/// resolve, confirm, handle, the error reports); what differs from
/// `PluginRun.execute` is only that the process is not ended after a session
/// when the plugin declared `"reusable": true` and the session ended with a
/// response.
///
/// Not thread-safe: `PluginPool` uses it from one thread at a time.
final class WarmProcess {
    /// What must be equal for an intent to run in this process.
    struct Key: Equatable {
        var manifestPath: String
        var pluginID: String
        var limits: EffectiveLimits
        var policy: SandboxPolicy
        var owner: String
        /// The manifest's and the executable's versions: a plugin reinstalled or edited
        /// while the pool runs gets a new process, not the old one.
        var manifest: FileIdentity?
        var executable: FileIdentity?
        /// What the plugin's signature proved when the process was started: a process started
        /// unsigned (or signed by another key) runs the code it read then, which the signature
        /// found later did not cover (a file rewritten in place, its modification time set back).
        var seal: PluginSeal?
    }

    let key: Key
    let process: PluginProcess
    let connection: PluginConnection
    let scratch: URL
    let cgroup: CgroupRun?
    /// How long a wait for a warm plugin's answer reads without sleeping first (PluginConnection.spinNs).
    static let spinNs: UInt64 = 50_000
    /// Sessions run so far (the first one included).
    private(set) var sessions = 0
    /// Whether another session may start: the plugin declared `reusable` in its
    /// last handshake and nothing has gone wrong.
    private(set) var isReusable = false
    /// The first session's run: its deadline counts from the launch.
    private var launchStart: UInt64
    /// The plugin's answer to the last `initialize`: whether it takes `session` requests.
    private var lastHandshake: InitializeResult?

    private init(key: Key, process: PluginProcess, connection: PluginConnection, scratch: URL, cgroup: CgroupRun?, launchStart: UInt64) {
        self.key = key
        self.process = process
        self.connection = connection
        self.scratch = scratch
        self.cgroup = cgroup
        self.launchStart = launchStart
    }

    static func key(for run: PluginRun, identity: (String) -> FileIdentity? = { FileIdentity(path: $0) }) -> Key {
        Key(
            manifestPath: run.plugin.manifestPath, pluginID: run.id, limits: run.limits, policy: run.policy,
            owner: run.plugin.manifest.owner, manifest: identity(run.plugin.manifestPath),
            executable: identity(run.plugin.executablePath), seal: run.services?.seal)
    }

    /// Starts the plugin for `run` in its sandbox, with `PluginRun.launch`, as every run does.
    static func launch(for run: inout PluginRun) throws(HostError) -> WarmProcess {
        let launched = try run.launch()
        run.options.log?("[extrun] \(run.id): a warm process (reused while the plugin allows it; docs/protocol.md §15)")
        return WarmProcess(
            key: key(for: run), process: launched.process, connection: launched.connection, scratch: launched.scratch,
            cgroup: launched.cgroup, launchStart: run.start)
    }

    /// Whether the process is still there to run a session: it has not exited
    /// (or been killed) since the last one.
    var isAlive: Bool {
        guard process.exit == nil, process.readEvents() else { return false }
        return process.exit == nil && process.violation == nil
    }

    /// Runs one session (initialize, then `work`) for `run`. After it the process
    /// is either ready for another session (`isReusable`) or ended.
    func session(_ run: inout PluginRun, _ work: PluginRun.Work, into report: inout HandleReport) {
        let first = sessions == 0
        sessions += 1
        run.cgroup = cgroup
        // The first session's budget counts from the launch, a later one's from its initialize.
        run.start = first ? launchStart : MonotonicClock.now()
        run.deadline.set(start: run.start, limits: run.limits)
        run.bind(connection)
        connection.spinNs = Self.spinNs
        isReusable = false
        var launchMs: Double?
        var ended = false
        do {
            let handshake: InitializeResult
            if let last = lastHandshake, last.session == true, case .handle = work {
                // A later session in one `session` request: no initialize (docs/protocol.md §15);
                // the last handshake's declarations hold.
                handshake = last
                run.sessionRequest = true
                run.options.log?("[extrun] \(run.id) session \(sessions) in \(run.mode.rawValue) mode, in one session request")
            } else {
                handshake = try run.initialize(connection)
                lastHandshake = handshake
                launchMs = MonotonicClock.milliseconds(from: run.start)
                run.options.log?("[extrun] \(run.id) session \(sessions) in \(run.mode.rawValue) mode, handshake after \(launchMs ?? 0) ms\(handshake.reusable == true ? " (reusable)" : "")")
            }
            try run.perform(work, connection, into: &report)
            if handshake.reusable == true, report.error == nil {
                isReusable = true
            } else {
                run.closeAndWait(process, connection, into: &report)
                process.finish()
                ended = true
            }
        } catch {
            run.fail(error, connection, into: &report)
        }
        if !isReusable {
            if !ended { process.finish() }
            end(run, report: &report)
        }
        var metrics = report.metrics ?? RunMetrics(wallMs: 0)
        metrics.wallMs = MonotonicClock.milliseconds(from: run.start)
        metrics.launchMs = launchMs
        if isReusable {
            // The process lives on: its peak so far (the cap counts the whole life).
            metrics.peakMemoryBytes = run.peakMemory(process)
        }
        metrics.hostPeakRSSBytes = ownPeakRSS()
        report.metrics = metrics
    }

    private var lastOwnPeak: (bytes: Int64?, at: UInt64) = (nil, 0)

    /// The host's VmHWM, read at most every 50 ms (a warm session can take tens of microseconds).
    private func ownPeakRSS() -> Int64? {
        let now = MonotonicClock.now()
        if lastOwnPeak.bytes == nil || now &- lastOwnPeak.at > 50_000_000 {
            lastOwnPeak = (MemorySampler.ownPeakRSS(), now)
        }
        return lastOwnPeak.bytes
    }

    /// Ends a process that is kept between sessions: closes fd 3, waits the exit grace, kills what is left.
    func close() {
        guard !released else { return }
        if process.exit == nil {
            _ = connection.closeAndWait(deadline: MonotonicClock.now() + UInt64(key.policy.exitGraceMs) * 1_000_000)
        }
        process.finish()
        release()
    }

    // MARK: Private

    /// After the process ended: a forbidden system call or the memory cap explains
    /// the failure, as in `PluginRun.execute`; the exit's CPU and RSS go in the metrics.
    private func end(_ run: PluginRun, report: inout HandleReport) {
        run.attribute(process, connection, into: &report)
        report.metrics = run.exitMetrics(process, wallMs: 0)
        release()
    }

    private var released = false

    private func release() {
        guard !released else { return }
        released = true
        cgroup?.remove()
        ScratchDirectory.remove(scratch)
    }

    deinit {
        if !released {
            process.finish()
            release()
        }
    }
}
