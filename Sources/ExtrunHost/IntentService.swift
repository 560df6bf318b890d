import ExtrunProtocol
import ExtrunSystem
import Foundation
import NIOConcurrencyHelpers

/// What a front end asks of the host: one of its verbs.
public enum IntentRequest: Sendable {
    case handle(IntentInvocation)
    case options(IntentInvocation, parameter: String, search: String?)
    case continueActivity(ActivityInvocation)
    case phrase(String)

    /// The intent the request names, where it names one (logs, refusals).
    public var intentName: String? {
        switch self {
        case .handle(let invocation), .options(let invocation, _, _): invocation.intent
        case .continueActivity(let invocation): invocation.interaction?.intent
        case .phrase: nil
        }
    }
}

/// The one layer between the front ends that run many intents (`extrun batch`, `extrun
/// serve`, `extrun mcp`) and the host: they decode their requests, supply a prompter and
/// an output, and the service does the rest.
///
/// - **Warm sessions** for every verb (`PluginPool`: handle, options, continue, phrase).
/// - **Admission**: at most `maxConcurrent` runs at once (and a caller's share), at most
///   `maxQueued` waiting; one more is refused at once, `overloaded` with its numbers.
/// - **Threads**: each admitted run on a worker thread (`Workers`): the host blocks for a
///   whole intent, so never on the caller's event loop or reader.
/// - **The runs in flight**, each with its `RunControl`: `cancelAll` reaches every one,
///   and `shutDown` is the one way a front end ends (stop taking runs, the grace, cancel
///   the rest, wait for them, end the warm processes).
public final class IntentService: Sendable {
    public let host: Host
    public let pool: PluginPool
    public let admission: Admission
    private let state = NIOLockedValueBox(State())

    private struct State {
        var inFlight: [UInt64: RunControl] = [:]
        var next: UInt64 = 0
        /// Why the runs in flight were cancelled (`cancelAll`): a run that starts afterwards is cancelled at once.
        var cancelled: String?
        /// `shutDown` has ended the warm processes: no run starts any more.
        var closed = false
    }

    public init(host: Host = Host(), admission limits: Admission.Limits, warm: PluginPool.WarmLimits) {
        self.host = host
        pool = PluginPool(host: host, limits: warm)
        admission = Admission(limits: limits)
    }

    // MARK: - Running

    /// Runs `request` on this thread through the pool's warm sessions. `control` stops it
    /// from outside (its cancellation is the run's); `cancelAll` reaches it meanwhile.
    public func perform(_ request: IntentRequest, options given: HandleOptions, control: RunControl = RunControl()) -> HandleReport {
        var options = given
        options.cancellation = control.cancellation
        let registered: (number: UInt64, cancelled: String?)? = state.withLockedValue { state in
            guard !state.closed else { return nil }
            state.next += 1
            state.inFlight[state.next] = control
            return (state.next, state.cancelled)
        }
        guard let (number, cancelled) = registered else {
            var report = HandleReport(intent: request.intentName)
            report.error = Admission.shuttingDown
            return report
        }
        // Admitted before the shutdown, started after its cancel: cancelled as the others were.
        if let cancelled { control.cancel(cancelled) }
        defer { state.withLockedValue { _ = $0.inFlight.removeValue(forKey: number) } }
        switch request {
        case .handle(let invocation):
            return pool.handle(invocation, options: options)
        case .options(let invocation, let parameter, let search):
            return pool.options(invocation, parameter: parameter, search: search, options: options)
        case .continueActivity(let invocation):
            return pool.continueActivity(invocation, options: options)
        case .phrase(let text):
            return pool.phrase(text, options: options)
        }
    }

    /// Takes a place for `uid` under the admission limits and runs `run` on a worker thread
    /// (now, or when a place frees); or refuses at once (`overloaded`: the queue or the
    /// caller's share is full, or the service is shutting down). A run still waiting in the
    /// queue at `stopAccepting` gets `refused` instead; one that had a place runs (and a
    /// shutdown past its grace cancels it).
    public func submit(
        uid: UInt32, refused: @escaping @Sendable (HostError) -> Void, _ run: @escaping @Sendable () -> Void
    ) -> Result<Admission.Ticket, HostError> {
        admission.submit(uid: uid, refused: refused, run)
    }

    /// `submit` for one request: `completion` gets its report (or the refusal's) on the worker thread.
    public func submit(
        _ request: IntentRequest, options: HandleOptions, uid: UInt32, control: RunControl = RunControl(),
        completion: @escaping @Sendable (HandleReport) -> Void
    ) -> Result<Admission.Ticket, HostError> {
        @Sendable func refusal(_ error: HostError) -> HandleReport {
            var report = HandleReport(intent: request.intentName)
            report.error = error
            return report
        }
        let submitted = submit(uid: uid, refused: { completion(refusal($0)) }) { [self] in
            completion(perform(request, options: options, control: control))
        }
        if case .failure(let error) = submitted { completion(refusal(error)) }
        return submitted
    }

    /// A queued run whose caller went away: out of the queue (true), or already running (false).
    public func withdraw(_ ticket: Admission.Ticket) -> Bool {
        admission.withdraw(ticket)
    }

    /// Runs admitted and not finished (running now).
    public var running: Int { admission.running }

    // MARK: - Ending

    /// Takes no new runs: what is submitted or waiting from now on is refused (`overloaded`, reason `shutdown`).
    public func stopAccepting() {
        admission.close()
    }

    /// Cancels every run in flight (the plugin gets `cancel` and its grace; a prompt waiting is
    /// closed), and a run admitted before that starts afterwards.
    public func cancelAll(_ reason: String) {
        let controls = state.withLockedValue { state in
            state.cancelled = reason
            return Array(state.inFlight.values)
        }
        for control in controls { control.cancel(reason) }
    }

    /// Waits until no run is in flight, or `seconds` have passed; true when none is.
    @discardableResult
    public func waitForRuns(seconds: Double) -> Bool {
        let end = MonotonicClock.now() &+ UInt64(max(0, seconds) * 1e9)
        while running > 0 || state.withLockedValue({ !$0.inFlight.isEmpty }) {
            if MonotonicClock.now() >= end { return false }
            SystemCall.sleep(nanoseconds: 5_000_000)
        }
        return true
    }

    /// The one shutdown of a front end: no new runs; the runs in flight get `grace` seconds to
    /// end; the rest are cancelled (each plugin's cancel grace, then a kill) and waited for,
    /// at most `cancelWaitSeconds`; then the warm processes end. `cancelling` is told how many
    /// runs are cancelled (for the front end's log) before they are.
    public func shutDown(grace: Double, reason: String, cancelWaitSeconds: Double = 10, cancelling: ((Int) -> Void)? = nil) {
        stopAccepting()
        if !waitForRuns(seconds: grace) {
            cancelling?(max(running, state.withLockedValue { $0.inFlight.count }))
            cancelAll(reason)
            waitForRuns(seconds: cancelWaitSeconds)
        }
        state.withLockedValue { $0.closed = true }
        pool.close()
    }
}

/// One run's means of being stopped from outside: its `Cancellation`, and what else must
/// be told (a prompt waiting for an answer, which the host does not interrupt: a cancelled
/// run's prompt must return nil). A front end makes one per run, before admission.
public final class RunControl: Sendable {
    public let cancellation = Cancellation()
    private let closers = NIOLockedValueBox<[@Sendable () -> Void]>([])

    public init() {}

    /// `close` runs when the run is cancelled (now, when it was already).
    public func onCancel(_ close: @escaping @Sendable () -> Void) {
        closers.withLockedValue { $0.append(close) }
        if cancellation.isCancelled { close() }
    }

    /// The caller went away, or the front end is stopping.
    public func cancel(_ reason: String) {
        cancellation.cancel(reason)
        for close in closers.withLockedValue({ $0 }) { close() }
    }
}

/// A value one thread hands to another: `fulfil` once, `wait` until it is there.
public final class Promise<Value: Sendable>: @unchecked Sendable {
    private let condition = NSCondition()
    private var value: Value?

    public init() {}

    /// The first value given is kept; later ones are ignored.
    public func fulfil(_ given: Value) {
        condition.lock()
        if value == nil {
            value = given
            condition.broadcast()
        }
        condition.unlock()
    }

    public func wait() -> Value {
        condition.lock()
        defer { condition.unlock() }
        while true {
            if let value { return value }
            condition.wait()
        }
    }
}
