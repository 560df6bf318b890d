import ExtrunProtocol
import ExtrunStore
import Foundation

/// An intent's lifecycle run over a plugin session: one path for every session,
/// a new process's or a warm one's (docs/architecture.md).
extension IntentLifecycle {
    /// Takes a session from `sessions`, runs `work` on it and hands it back (a pool keeps
    /// it for the next intent when it may); everything that happened is in `report`.
    mutating func execute(_ work: Work, from sessions: any SessionSource, into report: inout HandleReport) {
        if let cancellation = options.cancellation, cancellation.isCancelled {
            // Cancelled before a process was asked for: none is started.
            report.error = cancelledError(reason: cancellation.reason, elapsedMs: 0)
            return
        }
        let session: PluginSession
        do throws(HostError) {
            session = try sessions.session(for: sessionSpec)
        } catch {
            report.error = error
            return
        }
        run(work, on: session, into: &report)
        sessions.finished(session)
    }

    /// Runs one intent (initialize, then `work`) on `session`. After it the process is
    /// either ready for another intent (`session.isReusable`: its source keeps warm
    /// processes, the plugin declared `reusable`, nothing went wrong) or ended by its
    /// teardown (`Teardown.plan`), its error, evidence and exit metrics in the report.
    mutating func run(_ work: Work, on session: PluginSession, into report: inout HandleReport) {
        let connection = session.connection
        let first = session.intents == 0
        session.intents += 1
        // The first intent's budget counts from the launch, a later one's from its initialize.
        start = first ? session.launchStart : MonotonicClock.now()
        deadline.set(start: start, limits: limits)
        session.log = options.log
        bind(connection)
        session.isReusable = false
        var launchMs: Double?
        var failure: LifecycleFailure?
        do throws(LifecycleFailure) {
            let handshake: InitializeResult
            if let last = session.lastHandshake, last.session == true, case .handle = work {
                // A later intent in one `session` request: no initialize (docs/protocol.md §15);
                // the last handshake's declarations hold.
                handshake = last
                sessionRequest = true
                options.log?("[extrun] \(id) session \(session.intents) in \(mode.rawValue) mode, in one session request")
            } else {
                handshake = try initialize(connection)
                session.lastHandshake = handshake
                launchMs = MonotonicClock.milliseconds(from: start)
                if session.keepsWarm {
                    options.log?("[extrun] \(id) session \(session.intents) in \(mode.rawValue) mode, handshake after \(launchMs ?? 0) ms\(handshake.reusable == true ? " (reusable)" : "")")
                } else {
                    options.log?("[extrun] \(id) started in \(mode.rawValue) mode, handshake after \(launchMs ?? 0) ms")
                }
            }
            try perform(work, connection, into: &report)
            session.isReusable = session.keepsWarm && handshake.reusable == true && report.error == nil
        } catch {
            failure = error
        }
        if !session.isReusable {
            end(session, after: failure, into: &report)
        }
        var metrics = report.metrics ?? RunMetrics(wallMs: 0)
        metrics.wallMs = MonotonicClock.milliseconds(from: start)
        metrics.launchMs = launchMs
        if session.isReusable {
            // The process lives on: its peak so far (the cap counts the whole life).
            metrics.peakMemoryBytes = session.peakMemory()
        }
        metrics.hostPeakRSSBytes = session.ownPeakRSS()
        report.metrics = metrics
    }

    /// Ends the session after its intent: at a deadline or a cancellation the plugin is
    /// sent `cancel`, after another failure it is killed, without one it ends as `ending`
    /// says (after an answer: asked to exit; `Teardown.plan`). The report gets the
    /// failure's error, made once the plugin had its grace (with what it wrote to stderr
    /// meanwhile; the time is the deadline's), or, after an answer, a protocol violation
    /// or a limit noticed while it exited. What the teardown saw (nil: the session had ended).
    @discardableResult
    func end(
        _ session: PluginSession, after failure: LifecycleFailure?, otherwise ending: Teardown.Ending = .answered,
        into report: inout HandleReport
    ) -> TeardownOutcome? {
        let elapsed = MonotonicClock.milliseconds(from: start)
        let teardown = Teardown.plan(failure?.teardownEnding ?? ending, policy: policy)
        return session.end(teardown, during: phase, into: &report) { report, outcome in
            switch failure {
            case .call(let failure):
                report.error = error(for: failure, connection: session.connection, elapsedMs: elapsed)
            case .host(let error):
                report.error = error
            case nil:
                switch outcome.late {
                case .protocolViolation, .overLimit:
                    report.response = nil
                    report.error = outcome.late.map { error(for: $0, connection: session.connection) }
                case .exited, .deadlineExpired, .cancelled:
                    options.log?("[extrun] \(id) did not exit within \(outcome.graceMs) ms after the channel closed; killed")
                case nil:
                    break
                }
            }
        }
    }

    /// Points the connection's callbacks at this run: its log, its deadline (progress), its store services.
    func bind(_ connection: PluginConnection) {
        connection.cancellation = options.cancellation
        if let log = options.log {
            let id = self.id
            connection.onOutputLine = { isStdout, line in log("[\(id) \(isStdout ? "stdout" : "stderr")] \(line)") }
        } else {
            connection.onOutputLine = nil
        }
        connection.onNotification = { [log = options.log, onProgress = options.onProgress, id = self.id, deadline = self.deadline, mode = self.mode] method, params in
            if method == Method.log, let params, let entry = try? LogParams(jsonValue: params) {
                log?("[\(id) log \(entry.level)] \(entry.message)")
            } else if method == Method.progress {
                let progress = params.flatMap { try? ProgressParams(jsonValue: $0) }
                if let onProgress, let progress { onProgress(progress) }
                if mode == .extension, deadline.extend() {
                    log?("[extrun] \(id) reported progress \(progress?.fraction.map { "\($0)" } ?? "") \(progress?.message ?? ""): deadline now \(deadline.currentMs) ms from launch")
                }
            }
        }
        if let services {
            services.maxAnswerBytes = connection.limits.maxFrameBytes
        }
        if let services, let log = options.log {
            // --verbose: each host-service request, its outcome and its time.
            let id = self.id
            connection.onRequest = { [deadline = self.deadline] method, params in
                let started = MonotonicClock.now()
                // A store held by another process waits no longer than the run's deadline (StoreDeadline).
                let answer = StoreDeadline.$current.withValue(deadline.instant) { services.answer(method, params) }
                let name = params?["name"]?.stringValue ?? params?["bookmark"]?.stringValue ?? params?["intent"]?.stringValue
                let outcome: String
                switch answer {
                case .success: outcome = "answered"
                case .failure(let error): outcome = "refused (\(error.data?["kind"]?.stringValue ?? "code \(error.code)"))"
                }
                log("[extrun] \(id) asked \(method)\(name.map { " '\($0)'" } ?? ""): \(outcome) in \(MonotonicClock.milliseconds(from: started)) ms")
                return answer
            }
        } else if let services {
            // A store held by another process waits no longer than the run's deadline (StoreDeadline).
            connection.onRequest = { [deadline = self.deadline] method, params in
                StoreDeadline.$current.withValue(deadline.instant) { services.answer(method, params) }
            }
        } else {
            connection.onRequest = nil
        }
    }

    /// The work of an intent, after `initialize`.
    mutating func perform(_ work: Work, _ connection: PluginConnection, into report: inout HandleReport) throws(LifecycleFailure) {
        switch work {
        case .handle(let parameters):
            try handle(connection, parameters: parameters, into: &report)
        case .options(let parameter, let parameters, let search):
            phase = .options
            report.options = try options(connection, parameter: parameter, parameters: parameters, search: search)
        case .continueActivity(let activity, let interaction):
            try continueActivity(connection, activity: activity, interaction: interaction, into: &report)
        }
    }

    // MARK: Reporting

    /// The run was cancelled by its caller (`HandleOptions.cancellation`).
    func cancelledError(reason: String?, elapsedMs: Double, details: [String: JSONValue] = [:]) -> HostError {
        var details = details
        details["phase"] = .string(phase.rawValue)
        details["elapsedMs"] = .double(elapsedMs)
        details["reason"] = .string(reason ?? "cancelled by the caller")
        let started = phase != .launch || elapsedMs > 0
        return HostError(
            .cancelled,
            started
                ? "\(id) was cancelled during \(phase.rawValue) after \(Int(elapsedMs)) ms (\(reason ?? "cancelled by the caller")); it was sent cancel and, after a grace of up to \(policy.cancelGraceMs) ms, killed with every process it started"
                : "\(definition.name) was cancelled before \(id) started (\(reason ?? "cancelled by the caller"))",
            details: details)
    }

    /// After a question to a person: a run cancelled meanwhile ends here, not with an
    /// unanswered question (the front end that cancels makes its prompter return nil).
    func checkCancelled() throws(LifecycleFailure) {
        if let cancellation = options.cancellation, cancellation.isCancelled {
            throw .call(.cancelled(cancellation.reason ?? "cancelled by the caller"))
        }
    }

    func error(for failure: CallFailure, connection: PluginConnection, elapsedMs: Double? = nil) -> HostError {
        let stderrTail = connection.stderr.lastLines(20)
        var details: [String: JSONValue] = ["phase": .string(phase.rawValue)]
        if !stderrTail.isEmpty { details["stderr"] = .array(stderrTail.map { .string($0) }) }
        switch failure {
        case .deadlineExpired:
            let elapsed = elapsedMs ?? MonotonicClock.milliseconds(from: start)
            let deadlineMs = deadline.currentMs
            details["deadlineMs"] = .int(Int64(deadlineMs))
            details["elapsedMs"] = .double(elapsed)
            details["mode"] = .string(mode.rawValue)
            return HostError(
                .timeout,
                "\(id) did not answer \(phase.rawValue) within its deadline of \(deadlineMs) ms in \(mode.rawValue) mode (counted from launch; \(Int(elapsed)) ms elapsed); it was sent cancel and, after a grace of up to \(policy.cancelGraceMs) ms, killed with every process it started",
                details: details)
        case .cancelled(let reason):
            return cancelledError(reason: reason, elapsedMs: elapsedMs ?? MonotonicClock.milliseconds(from: start), details: details)
        case .protocolViolation(let what):
            return HostError(.protocolError, "\(id) broke the protocol during \(phase.rawValue): \(what)", details: details)
        case .overLimit(let breach):
            details.merge(breach.details) { _, new in new }
            return HostError(
                .protocolError, "\(id) went over a limit of the host during \(phase.rawValue): \(breach.what); it was stopped", details: details)
        case .exited(let exit):
            switch exit.termination {
            case .exited(let code): details["exitStatus"] = .int(Int64(code))
            case .signaled(let signal):
                details["signal"] = .int(Int64(signal))
                details["signalName"] = .string(signalName(signal))
            }
            var message = "\(id) \(exit.description) during \(phase.rawValue), before it answered"
            if let last = stderrTail.last { message += "; last stderr line: \(last)" }
            return HostError(.pluginCrashed, message, details: details)
        }
    }
}
