import ExtrunProtocol
import Foundation
import NIOConcurrencyHelpers

/// Who may run now: at most `maxConcurrent` intents at once, at most the caller's limit
/// per peer uid, and at most `maxQueued` waiting; one more is refused at once with
/// `overloaded` and its numbers (never an unbounded backlog). A waiting intent starts, in
/// the order of arrival, as soon as a place frees for its caller.
public final class Admission: Sendable {
    public struct Limits: Sendable {
        public var maxConcurrent: Int
        public var maxQueued: Int
        /// The most intents one caller may have waiting: its share of the queue.
        public var maxQueuedPerCaller: Int = .max
        /// The most intents one caller (uid) may run at once.
        public var perCaller: @Sendable (UInt32) -> Int

        public init(maxConcurrent: Int, maxQueued: Int, maxQueuedPerCaller: Int = .max, perCaller: @escaping @Sendable (UInt32) -> Int = { _ in .max }) {
            self.maxConcurrent = maxConcurrent
            self.maxQueued = maxQueued
            self.maxQueuedPerCaller = maxQueuedPerCaller
            self.perCaller = perCaller
        }
    }

    public struct Ticket: Sendable, Hashable {
        public let number: UInt64
        public let uid: UInt32
    }

    private struct Waiting {
        var ticket: Ticket
        var start: @Sendable () -> Void
        /// Told instead of `start` when the admission closes while it waits.
        var refused: (@Sendable (HostError) -> Void)?
    }

    /// The refusal of what comes, or still waits, once the admission is closed.
    public static let shuttingDown = HostError(
        .overloaded, "the service is shutting down and takes no new intents", details: ["reason": "shutdown"])

    private struct State: @unchecked Sendable {
        var limits: Limits
        var running = 0
        var runningByCaller: [UInt32: Int] = [:]
        var queue: [Waiting] = []
        var next: UInt64 = 0
        var refused = 0
        var closed = false
    }

    private let state: NIOLockedValueBox<State>
    private let workers: Workers

    public init(limits: Limits) {
        state = NIOLockedValueBox(State(limits: limits))
        workers = Workers()
    }

    public func update(_ limits: Limits) {
        let ready = state.withLockedValue { state in
            state.limits = limits
            return Self.startable(&state)
        }
        for job in ready { launch(job) }
    }

    /// Runs a job that took a place; the place frees when it returns.
    private func launch(_ job: Waiting) {
        workers.run { [self] in
            job.start()
            finished(job.ticket)
        }
    }

    public var running: Int { state.withLockedValue { $0.running } }
    public var queued: Int { state.withLockedValue { $0.queue.count } }
    public var refused: Int { state.withLockedValue { $0.refused } }

    /// Runs `start` on a worker thread now, or later when a place frees; or refuses.
    /// A run that took a place always starts (a shutdown cancels it instead); one still
    /// waiting when the admission closes gets `refused` (`shuttingDown`) instead.
    public func submit(
        uid: UInt32, refused: (@Sendable (HostError) -> Void)? = nil, _ start: @escaping @Sendable () -> Void
    ) -> Result<Ticket, HostError> {
        let outcome = state.withLockedValue { state -> Result<(Ticket, Bool), HostError> in
            state.next += 1
            let ticket = Ticket(number: state.next, uid: uid)
            if state.closed { return .failure(Self.shuttingDown) }
            let callerLimit = state.limits.perCaller(uid)
            let callerRunning = state.runningByCaller[uid, default: 0]
            // Everything still waiting while a place is free is held by its own caller's
            // limit (startable runs whenever a place frees): only this caller's earlier
            // intents go first, never another caller's that cannot start.
            let callerQueued = state.queue.reduce(0) { $0 + ($1.ticket.uid == uid ? 1 : 0) }
            if state.running < state.limits.maxConcurrent, callerRunning < callerLimit, callerQueued == 0 {
                state.running += 1
                state.runningByCaller[uid, default: 0] += 1
                return .success((ticket, true))
            }
            guard callerQueued < state.limits.maxQueuedPerCaller else {
                state.refused += 1
                return .failure(
                    HostError(
                        .overloaded,
                        "uid \(uid) has \(callerQueued) intents waiting already, its share of the queue (maxQueuedPerCaller \(state.limits.maxQueuedPerCaller)), and \(callerRunning) running (its limit \(callerLimit)); try again shortly",
                        details: [
                            "reason": "callerQueueFull", "running": .int(Int64(state.running)), "queued": .int(Int64(state.queue.count)),
                            "callerQueued": .int(Int64(callerQueued)), "maxQueuedPerCaller": .int(Int64(state.limits.maxQueuedPerCaller)),
                            "callerRunning": .int(Int64(callerRunning)), "callerLimit": .int(Int64(callerLimit)), "uid": .int(Int64(uid)),
                        ]))
            }
            guard state.queue.count < state.limits.maxQueued else {
                state.refused += 1
                return .failure(
                    HostError(
                        .overloaded,
                        "the service is busy: \(state.running) intents running (maxConcurrent \(state.limits.maxConcurrent)) and \(state.queue.count) waiting (maxQueued \(state.limits.maxQueued)); try again shortly",
                        details: [
                            "reason": "queueFull", "running": .int(Int64(state.running)), "queued": .int(Int64(state.queue.count)),
                            "maxConcurrent": .int(Int64(state.limits.maxConcurrent)), "maxQueued": .int(Int64(state.limits.maxQueued)),
                            "callerRunning": .int(Int64(callerRunning)), "callerLimit": .int(Int64(callerLimit)), "uid": .int(Int64(uid)),
                        ]))
            }
            state.queue.append(Waiting(ticket: ticket, start: start, refused: refused))
            return .success((ticket, false))
        }
        switch outcome {
        case .failure(let error): return .failure(error)
        case .success(let (ticket, now)):
            if now { launch(Waiting(ticket: ticket, start: start, refused: refused)) }
            return .success(ticket)
        }
    }

    /// A queued intent whose caller went away: out of the queue (true), or already running (false).
    public func withdraw(_ ticket: Ticket) -> Bool {
        state.withLockedValue { state in
            guard let index = state.queue.firstIndex(where: { $0.ticket == ticket }) else { return false }
            state.queue.remove(at: index)
            return true
        }
    }

    /// A running intent ended: its place goes to the first waiting intent that may run.
    private func finished(_ ticket: Ticket) {
        let ready = state.withLockedValue { state in
            state.running -= 1
            state.runningByCaller[ticket.uid, default: 1] -= 1
            if state.runningByCaller[ticket.uid] == 0 { state.runningByCaller[ticket.uid] = nil }
            return Self.startable(&state)
        }
        for job in ready { launch(job) }
    }

    /// Takes no more intents. The waiting ones are refused (`shuttingDown`, on a worker
    /// thread: the caller may hold a lock); the running ones go on.
    public func close() {
        let waiting = state.withLockedValue { state in
            state.closed = true
            defer { state.queue.removeAll() }
            return state.queue
        }
        for job in waiting {
            if let refused = job.refused {
                workers.run { refused(Self.shuttingDown) }
            } else {
                workers.run(job.start)
            }
        }
    }

    private static func startable(_ state: inout State) -> [Waiting] {
        var ready: [Waiting] = []
        var index = 0
        while index < state.queue.count, state.running < state.limits.maxConcurrent {
            let uid = state.queue[index].ticket.uid
            if state.runningByCaller[uid, default: 0] < state.limits.perCaller(uid) {
                let job = state.queue.remove(at: index)
                state.running += 1
                state.runningByCaller[uid, default: 0] += 1
                ready.append(job)
            } else {
                index += 1
            }
        }
        return ready
    }
}

/// Threads for intents: the host blocks for a whole intent, so each running intent has a
/// thread, never an event loop. A thread that finished its intent waits for the next one,
/// so there are about as many threads as intents ran at once (`maxConcurrent` through
/// `Admission`; a thread whose intent has just ended may not be waiting yet, and the next
/// intent then starts another). The thread that went idle last takes the next job (a
/// stack, each thread woken by its own semaphore): its stack and caches are the warmest,
/// and the threads that are not needed stay asleep. `package` for ExtrunHTTPFloor
/// (Benchmarks/HTTPFloor), whose `--hop` measures this hand-over.
package final class Workers: @unchecked Sendable {
    package init() {}

    /// One thread and the job handed to it (set under `lock`, taken after `wake`).
    private final class Worker: @unchecked Sendable {
        let wake = DispatchSemaphore(value: 0)
        var job: (@Sendable () -> Void)?
    }

    private let lock = NIOLock()
    /// Threads waiting for a job, the most recently idle last.
    private var idle: [Worker] = []
    /// Threads started.
    private var started = 0

    package func run(_ job: @escaping @Sendable () -> Void) {
        let waiting: Worker? = lock.withLock {
            guard let worker = idle.popLast() else {
                started += 1
                return nil
            }
            worker.job = job
            return worker
        }
        if let waiting {
            waiting.wake.signal()
            return
        }
        let worker = Worker()
        worker.job = job
        let thread = Thread { [self] in
            // Named from inside: a name set before start() does not reach the thread on Linux.
            Thread.current.name = "extrun-intent"
            loop(worker)
        }
        thread.start()
    }

    /// Threads started so far.
    package var threads: Int { lock.withLock { started } }

    /// Threads waiting for a job now.
    package var idleThreads: Int { lock.withLock { idle.count } }

    private func loop(_ worker: Worker) {
        while true {
            let job = lock.withLock {
                defer { worker.job = nil }
                return worker.job
            }
            job?()
            lock.withLock { idle.append(worker) }
            worker.wake.wait()
        }
    }
}
