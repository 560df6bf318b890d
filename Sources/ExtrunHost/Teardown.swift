/// How a plugin process ends, as data: the steps in their order and the grace the plugin
/// has to exit once it is asked to. Every session ends by one of these, built here
/// (`plan`) and run in one place (`PluginSession.end`): after its last intent, at a
/// deadline or a cancellation, after a failure, when a pool lets a warm process go, and
/// when a session is dropped without having ended.
struct Teardown: Equatable, Sendable {
    /// How long the plugin has, from the start of the teardown, to take in what is queued
    /// for it and exit: the policy's `exitGraceMs` after an answer, its `cancelGraceMs`
    /// after a deadline or a cancellation, 0 when it is killed at once. `.closeInput` and
    /// `.waitForExit` share it.
    var graceMs: Int
    var steps: [TeardownStep]

    /// Why a session ends.
    enum Ending: Equatable, Sendable {
        /// Its last intent is over: the plugin is asked to exit (the end of fd 3), killed
        /// if it has not within the exit grace; the intent's report gets the evidence.
        case answered
        /// Its deadline passed, or its caller cancelled (`reason`: "timeout",
        /// "cancelled"): the plugin is sent `cancel` and its input ends, killed if it has
        /// not exited within the cancel grace (docs/protocol.md §12); the report gets the evidence.
        case stopped(reason: String)
        /// The intent failed (the plugin crashed, broke the protocol, went over a limit, or
        /// the host would not go on): what is left is killed at once; the report gets the evidence.
        case killed
        /// A warm process its pool lets go, between intents: asked to exit as after an answer; no report.
        case idle
        /// A session dropped without having ended (no intent ran to its end): killed at once; no report.
        case dropped
    }

    /// The one place a session's end is decided: its steps and its grace.
    static func plan(_ ending: Ending, policy: SandboxPolicy) -> Teardown {
        let end: [TeardownStep] = [.kill, .reap, .removeScratch]
        switch ending {
        case .answered:
            return Teardown(graceMs: policy.exitGraceMs, steps: [.closeInput, .waitForExit] + end + [.report, .removeCgroup])
        case .stopped(let reason):
            return Teardown(
                graceMs: policy.cancelGraceMs,
                steps: [.stopReading, .cancel(reason: reason), .closeInput, .waitForExit] + end + [.report, .removeCgroup])
        case .killed:
            return Teardown(graceMs: 0, steps: end + [.report, .removeCgroup])
        case .idle:
            return Teardown(graceMs: policy.exitGraceMs, steps: [.closeInput, .waitForExit] + end + [.removeCgroup])
        case .dropped:
            return Teardown(graceMs: 0, steps: end + [.removeCgroup])
        }
    }
}

/// One step of a plugin process's end (`Teardown`), run by `PluginSession.end`.
enum TeardownStep: Equatable, Sendable {
    /// Read and serve nothing more of the plugin's: its time is over, and the grace is not
    /// time to go on asking the host for things.
    case stopReading
    /// Send the `cancel` notification with its reason.
    case cancel(reason: String)
    /// Write what is queued for the plugin (within the grace) and close fd 3: the plugin
    /// sees the end of its input and exits (docs/protocol.md §12).
    case closeInput
    /// Read the plugin's channels until its process ends or the grace does; a protocol
    /// violation or a limit noticed meanwhile, or the grace running out, is what the
    /// teardown saw (`TeardownOutcome.late`).
    case waitForExit
    /// Have the supervisor kill the plugin and every process it started, if it has not exited.
    case kill
    /// Wait for the supervisor's last report (no process of the plugin's remains after
    /// it), reap the supervisor, close the run's descriptors and give back its uid.
    case reap
    /// Remove the scratch directory once the process and all it started are gone.
    case removeScratch
    /// Put what ended the process in the intent's report: the caller's error (or what the
    /// wait saw), then the evidence (a forbidden call, the disk quota, the memory cap), a
    /// scratch directory that could not be removed, the exit's metrics.
    case report
    /// Remove the run's cgroup (after the report, which reads its OOM kills and peak).
    case removeCgroup
}

/// What a teardown saw, for the report (`PluginSession.end`'s `settle`).
struct TeardownOutcome {
    /// What the wait for the exit ended with, if not the exit: a protocol violation or a
    /// limit noticed meanwhile (a late second answer, say), `.deadlineExpired` when the
    /// grace ran out and the plugin was killed.
    var late: CallFailure?
    /// The grace the teardown gave the plugin.
    var graceMs: Int
    /// How the process ended, when it exited within the grace (nil when it was killed, or
    /// when the teardown did not wait).
    var exit: ProcessExit?
    /// How long the teardown waited for the exit, in ms from its start (nil: it did not wait).
    var waitedMs: Double?
}
