@testable import ExtrunHost
import ExtrunProtocol
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// How a plugin process ends (`Teardown`): the plans, as data, and `PluginSession.end`
/// running them on real plugin processes. Each run checks that no process of the plugin's
/// and no scratch directory is left.
@Suite("Teardown of a plugin process")
struct TeardownTests {
    // MARK: The plans

    @Test("each ending's steps and grace, the grace taken from the policy once")
    func plans() {
        var policy = SandboxPolicy.default
        policy.exitGraceMs = 1_234
        policy.cancelGraceMs = 321
        let end: [TeardownStep] = [.kill, .reap, .removeScratch]
        #expect(
            Teardown.plan(.answered, policy: policy)
                == Teardown(graceMs: 1_234, steps: [.closeInput, .waitForExit] + end + [.report, .removeCgroup]))
        #expect(
            Teardown.plan(.stopped(reason: "timeout"), policy: policy)
                == Teardown(
                    graceMs: 321, steps: [.stopReading, .cancel(reason: "timeout"), .closeInput, .waitForExit] + end + [.report, .removeCgroup]))
        #expect(Teardown.plan(.killed, policy: policy) == Teardown(graceMs: 0, steps: end + [.report, .removeCgroup]))
        #expect(Teardown.plan(.idle, policy: policy) == Teardown(graceMs: 1_234, steps: [.closeInput, .waitForExit] + end + [.removeCgroup]))
        #expect(Teardown.plan(.dropped, policy: policy) == Teardown(graceMs: 0, steps: end + [.removeCgroup]))
    }

    @Test("every plan kills, reaps, removes the scratch directory and the cgroup, in that order, the report before the cgroup goes")
    func everyPlanLeavesNothing() {
        let endings: [Teardown.Ending] = [.answered, .stopped(reason: "cancelled"), .killed, .idle, .dropped]
        for ending in endings {
            let steps = Teardown.plan(ending, policy: .default).steps
            let order: [TeardownStep] = [.kill, .reap, .removeScratch, .removeCgroup]
            let positions = order.compactMap { steps.firstIndex(of: $0) }
            #expect(positions.count == order.count && positions == positions.sorted(), "\(ending): \(steps)")
            let at = { (step: TeardownStep) in steps.firstIndex(of: step) ?? -1 }
            if steps.contains(.report) {
                #expect(at(.reap) < at(.report) && at(.report) < at(.removeCgroup), "\(ending): \(steps)")
            }
            // Waiting for the exit comes after the input is closed, and before the kill.
            if steps.contains(.waitForExit) {
                #expect(0 <= at(.closeInput) && at(.closeInput) < at(.waitForExit) && at(.waitForExit) < at(.kill), "\(ending): \(steps)")
            }
        }
    }

    @Test("a lifecycle failure's ending: a deadline or a cancellation is stopped with cancel, anything else killed at once")
    func failureEndings() {
        #expect(LifecycleFailure.call(.deadlineExpired).teardownEnding == .stopped(reason: "timeout"))
        #expect(LifecycleFailure.call(.cancelled("the client went away")).teardownEnding == .stopped(reason: "cancelled"))
        #expect(LifecycleFailure.call(.exited(ProcessExit(termination: .exited(1), cpuMs: 0, maxRSSBytes: 0))).teardownEnding == .killed)
        #expect(LifecycleFailure.protocolViolation("twice").teardownEnding == .killed)
        #expect(LifecycleFailure.host(HostError(.parameterUnresolved, "text: A value is needed")).teardownEnding == .killed)
    }

    // MARK: Running them

    /// One script plugin started as every session is, with `policy`.
    struct Launched {
        let tmp: TempDirectory
        let plugin: ScriptPlugin
        let session: PluginSession
        let scratch: URL
        let pid: pid_t

        init(_ name: String, script: String, policy: SandboxPolicy = .default) throws {
            tmp = try TempDirectory(name)
            plugin = try ScriptPlugin(in: tmp.url.appendingPathComponent("plugins"), name: name, script: script)
            let discovered = try PluginCatalog.plugin(in: plugin.directory)
            let limits = try EffectiveLimits.resolve(
                policy: policy, mode: .extension, manifest: discovered.manifest.limits, manifestFile: discovered.manifestPath,
                memoryOverride: nil, deadlineOverride: nil)
            session = try PluginSession.launch(
                SessionSpec(plugin: discovered, limits: limits, policy: policy, home: tmp.url.appendingPathComponent("home"), seal: nil, log: nil))
            scratch = session.scratch
            // The script notes its pid first thing (the file is made, then written): wait for it.
            let limit = Date().addingTimeInterval(30)
            while plugin.note("pid").flatMap({ pid_t($0.trimmingCharacters(in: .whitespacesAndNewlines)) }) == nil && Date() < limit {
                usleep(5_000)
            }
            pid = try plugin.pid()
        }

        /// Nothing of the run is left: no process of the plugin's, no scratch directory.
        func expectNothingLeft(sourceLocation: SourceLocation = #_sourceLocation) {
            expectGone(noted: pid, mentioning: plugin.directory.path, sourceLocation: sourceLocation)
            let left = processes(mentioning: plugin.directory.path)
            #expect(left.isEmpty, "processes still running: \(left)", sourceLocation: sourceLocation)
            #expect(!FileManager.default.fileExists(atPath: scratch.path), "scratch directory \(scratch.path) left", sourceLocation: sourceLocation)
        }
    }

    static func policy(exitGraceMs: Int = 2_000, cancelGraceMs: Int = 500) -> SandboxPolicy {
        var policy = SandboxPolicy.default
        policy.exitGraceMs = exitGraceMs
        policy.cancelGraceMs = cancelGraceMs
        return policy
    }

    @Test("answered: a plugin that exits at the end of fd 3 exits with 0 within the grace; the report gets its metrics")
    func answeredExits() throws {
        let launched = try Launched("td-exits", script: "serve()")
        var report = HandleReport(intent: "Echo")
        var settled: [TeardownOutcome] = []
        let started = MonotonicClock.now()
        launched.session.end(Teardown.plan(.answered, policy: .default), during: .handle, into: &report) { _, outcome in settled.append(outcome) }
        let tookMs = MonotonicClock.milliseconds(from: started)
        #expect(settled.count == 1)
        #expect(settled.first?.late == nil && settled.first?.graceMs == SandboxPolicy.default.exitGraceMs)
        #expect(launched.session.process.exit?.termination == .exited(0))
        #expect(tookMs < Double(SandboxPolicy.default.exitGraceMs), "took \(tookMs) ms")
        #expect(report.error == nil)
        #expect(report.metrics != nil)
        launched.expectNothingLeft()
    }

    @Test("answered: a plugin that goes on after the end of fd 3 is killed when the exit grace ends, and the wait says so")
    func answeredIgnoresEndOfInput() throws {
        let launched = try Launched("td-stays", script: "serve(at_eof=hang)", policy: Self.policy(exitGraceMs: 300))
        var report = HandleReport(intent: "Echo")
        var late: CallFailure?
        let started = MonotonicClock.now()
        launched.session.end(Teardown.plan(.answered, policy: Self.policy(exitGraceMs: 300)), during: .handle, into: &report) { _, outcome in
            late = outcome.late
        }
        let tookMs = MonotonicClock.milliseconds(from: started)
        guard case .deadlineExpired? = late else {
            Issue.record("the wait saw \(String(describing: late)), not the grace running out")
            return
        }
        #expect(tookMs >= 300 && tookMs < 5_000, "took \(tookMs) ms")
        #expect(launched.session.process.exit?.termination == .signaled(SIGKILL))
        launched.expectNothingLeft()
    }

    @Test("stopped: the plugin is sent cancel with the reason, and has the cancel grace to exit")
    func stoppedSendsCancel() throws {
        let script = """
            def on_cancel(msg):
                note("cancel", msg["params"]["reason"])
                sys.exit(3)
            serve(on={"cancel": on_cancel})
            """
        let policy = Self.policy(cancelGraceMs: 2_000)
        let launched = try Launched("td-cancel", script: script, policy: policy)
        var report = HandleReport(intent: "Echo")
        launched.session.end(Teardown.plan(.stopped(reason: "timeout"), policy: policy), during: .handle, into: &report)
        #expect(launched.plugin.note("cancel") == "timeout")
        #expect(launched.session.process.exit?.termination == .exited(3))
        launched.expectNothingLeft()
    }

    @Test("killed: the plugin is killed at once, without waiting for it")
    func killedAtOnce() throws {
        let launched = try Launched("td-killed", script: "serve(at_eof=hang)", policy: Self.policy(exitGraceMs: 10_000))
        var report = HandleReport(intent: "Echo")
        let started = MonotonicClock.now()
        launched.session.end(Teardown.plan(.killed, policy: Self.policy(exitGraceMs: 10_000)), during: .handle, into: &report)
        let tookMs = MonotonicClock.milliseconds(from: started)
        #expect(tookMs < 5_000, "took \(tookMs) ms")
        #expect(launched.session.process.exit?.termination == .signaled(SIGKILL))
        launched.expectNothingLeft()
    }

    @Test("a session ends once: a second end, or the pool's close after it, does nothing")
    func endsOnce() throws {
        let launched = try Launched("td-once", script: "serve()")
        var report = HandleReport(intent: "Echo")
        var settled = 0
        launched.session.end(Teardown.plan(.answered, policy: .default), during: .handle, into: &report) { _, _ in settled += 1 }
        launched.session.end(Teardown.plan(.killed, policy: .default), during: .handle, into: &report) { _, _ in settled += 1 }
        launched.session.close()
        #expect(settled == 1)
        #expect(launched.session.process.exit?.termination == .exited(0))
        launched.expectNothingLeft()
    }

    @Test("idle: a warm process its pool lets go gets the end of fd 3 and the exit grace, then is killed")
    func idleClose() throws {
        let launched = try Launched("td-idle", script: "serve(at_eof=hang)", policy: Self.policy(exitGraceMs: 200))
        let started = MonotonicClock.now()
        launched.session.close()
        let tookMs = MonotonicClock.milliseconds(from: started)
        #expect(tookMs >= 200 && tookMs < 5_000, "took \(tookMs) ms")
        #expect(launched.session.process.exit?.termination == .signaled(SIGKILL))
        launched.expectNothingLeft()
    }

    @Test("dropped: a session let go without an end is killed, and leaves nothing")
    func dropped() throws {
        let tmp: TempDirectory
        let (pid, directory, scratch): (pid_t, String, URL)
        do {
            let launched = try Launched("td-dropped", script: "serve(at_eof=hang)")
            (tmp, pid, directory, scratch) = (launched.tmp, launched.pid, launched.plugin.directory.path, launched.scratch)
        }
        expectGone(noted: pid, mentioning: directory)
        #expect(processes(mentioning: directory).isEmpty)
        #expect(!FileManager.default.fileExists(atPath: scratch.path))
        withExtendedLifetime(tmp) {}
    }
}
