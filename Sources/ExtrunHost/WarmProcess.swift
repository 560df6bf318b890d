import ExtrunProtocol
import Foundation

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
    }

    let key: Key
    let process: PluginProcess
    let connection: PluginConnection
    let scratch: URL
    let cgroup: CgroupRun?
    /// Sessions run so far (the first one included).
    private(set) var sessions = 0
    /// Whether another session may start: the plugin declared `reusable` in its
    /// last handshake and nothing has gone wrong.
    private(set) var isReusable = false
    /// The first session's run: its deadline counts from the launch.
    private var launchStart: UInt64

    private init(key: Key, process: PluginProcess, connection: PluginConnection, scratch: URL, cgroup: CgroupRun?, launchStart: UInt64) {
        self.key = key
        self.process = process
        self.connection = connection
        self.scratch = scratch
        self.cgroup = cgroup
        self.launchStart = launchStart
    }

    static func key(for run: PluginRun) -> Key {
        Key(
            manifestPath: run.plugin.manifestURL.path, pluginID: run.id, limits: run.limits, policy: run.policy,
            owner: run.plugin.manifest.owner)
    }

    /// Starts the plugin for `run` in its sandbox, as `PluginRun.execute` does.
    static func launch(for run: inout PluginRun) throws(HostError) -> WarmProcess {
        let scratch = try ScratchDirectory.create()
        var cgroup: CgroupRun?
        let cgroupSupport = CgroupSupport.detectHere(configured: run.policy.cgroup)
        if case .available(let parent) = cgroupSupport {
            cgroup = CgroupRun(parent: parent, memoryBytes: run.limits.memoryBytes)
        }
        run.cgroup = cgroup
        let sandbox = SandboxSettings(policy: run.policy, limits: run.limits, capabilities: SandboxCapabilities.current, cgroup: cgroup)
        let start = MonotonicClock.now()
        let process: PluginProcess
        do throws(HostError) {
            process = try PluginProcess.launch(try run.launchSpec(scratch: scratch), sandbox: sandbox)
        } catch {
            cgroup?.remove()
            ScratchDirectory.remove(scratch)
            throw error
        }
        run.options.log?("[extrun] \(run.id): a warm process (reused while the plugin allows it; docs/protocol.md §15), namespaces: \(SandboxSettings.describe(namespaces: process.activeNamespaces)), scratch directory \(scratch.path)")
        var connectionLimits = ConnectionLimits()
        connectionLimits.maxFrameBytes = run.policy.maxMessageBytes
        connectionLimits.outputCaptureBytes = run.policy.outputCaptureBytes
        let connection = PluginConnection(process: process, limits: connectionLimits)
        return WarmProcess(key: key(for: run), process: process, connection: connection, scratch: scratch, cgroup: cgroup, launchStart: start)
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
        bind(run)
        isReusable = false
        var launchMs: Double?
        var ended = false
        do {
            let handshake = try run.initialize(connection)
            launchMs = MonotonicClock.milliseconds(from: run.start)
            run.options.log?("[extrun] \(run.id) session \(sessions) in \(run.mode.rawValue) mode, handshake after \(launchMs ?? 0) ms\(handshake.reusable == true ? " (reusable)" : "")")
            switch work {
            case .handle(let parameters):
                try run.handle(connection, parameters: parameters, into: &report)
            case .options(let parameter, let parameters, let search):
                run.phase = .options
                report.options = try run.options(connection, parameter: parameter, parameters: parameters, search: search)
            }
            if handshake.reusable == true, report.error == nil {
                isReusable = true
            } else {
                closeAndWait(run, report: &report)
                ended = true
            }
        } catch let failure as CallFailure {
            if case .deadlineExpired = failure {
                connection.notify(Method.cancel, try? JSONCoding.value(of: CancelParams(reason: "timeout")))
                let grace = MonotonicClock.now() + UInt64(run.policy.cancelGraceMs) * 1_000_000
                connection.flushOutbound(deadline: grace)
                _ = connection.closeAndWait(deadline: grace)
            }
            report.error = run.error(for: failure, connection: connection)
        } catch let error as HostError {
            report.error = error
        } catch {
            report.error = HostError(.internalError, "\(error)")
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

    /// Points the connection's callbacks at this session's run (its deadline, its log, its services).
    private func bind(_ run: PluginRun) {
        if let log = run.options.log {
            let id = run.id
            connection.onOutputLine = { isStdout, line in log("[\(id) \(isStdout ? "stdout" : "stderr")] \(line)") }
        } else {
            connection.onOutputLine = nil
        }
        connection.onNotification = { [log = run.options.log, id = run.id, deadline = run.deadline, mode = run.mode] method, params in
            if method == Method.log, let params, let entry = try? JSONCoding.decode(LogParams.self, from: params) {
                log?("[\(id) log \(entry.level)] \(entry.message)")
            } else if method == Method.progress, mode == .extension, deadline.extend() {
                log?("[extrun] \(id) reported progress: deadline now \(deadline.currentMs) ms from the session's start")
            }
        }
        if let services = run.services {
            connection.onRequest = { method, params in services.answer(method, params) }
        } else {
            connection.onRequest = nil
        }
    }

    /// The normal end of a last session: close fd 3, wait for the exit within the grace.
    private func closeAndWait(_ run: PluginRun, report: inout HandleReport) {
        let exitDeadline = MonotonicClock.now() + UInt64(run.policy.exitGraceMs) * 1_000_000
        if let failure = connection.closeAndWait(deadline: exitDeadline) {
            if case .protocolViolation = failure {
                report.response = nil
                report.error = run.error(for: failure, connection: connection)
            } else {
                run.options.log?("[extrun] \(run.id) did not exit within \(run.policy.exitGraceMs) ms after the channel closed; killed")
            }
        }
        process.finish()
    }

    /// After the process ended: a forbidden system call or the memory cap explains
    /// the failure, as in `PluginRun.execute`; the exit's CPU and RSS go in the metrics.
    private func end(_ run: PluginRun, report: inout HandleReport) {
        if let violation = process.violation {
            report.response = nil
            report.responseIsSuccess = false
            report.error = HostError(
                .sandboxViolation,
                "\(run.id) made the forbidden system call \(violation.description) during \(run.phase.rawValue) and was killed (the sandbox denies it: see docs/sandbox.md)",
                details: [
                    "syscall": .string(violation.syscallName), "syscallNumber": .int(Int64(violation.syscallNumber)),
                    "phase": .string(run.phase.rawValue),
                ])
        } else if report.error?.kind == .pluginCrashed, let exit = process.exit,
            let breach = run.memoryBreach(exit: exit, process: process, connection: connection)
        {
            report.error = breach
        }
        var metrics = RunMetrics(wallMs: 0)
        if let exit = process.exit {
            metrics.cpuMs = exit.cpuMs > 0 ? exit.cpuMs : process.memory.lastCPUMs.rounded(toPlaces: 3)
            if exit.maxRSSBytes > 0 { metrics.peakRSSBytes = exit.maxRSSBytes }
        }
        metrics.peakMemoryBytes = run.peakMemory(process)
        report.metrics = metrics
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
