#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import ExtrunProtocol
import Foundation
import Synchronization
import NIOConcurrencyHelpers

/// The thread that serves the protocol: it reads the host's frames from fd 3 and
/// runs the requests' tasks itself, as their task executor. A request's answer is
/// thus computed and written on the thread that read it, with no hand-off to a
/// pool thread (on a VM, each hand-off is a wake-up through the hypervisor:
/// docs/benchmarks.md). Code that awaits elsewhere (an actor, a sleep) comes back
/// here through `enqueue`, which wakes the loop when it sleeps.
///
/// While a handler computes for a long time without suspending, the loop cannot
/// read; a watchdog thread then reads for it, so that `cancel` still reaches the
/// handler's task (`Task.isCancelled`) within about 25 ms.
final class ChannelLoop: TaskExecutor, @unchecked Sendable {
    private struct Queue {
        var jobs: [UnownedJob] = []
        /// The loop is (about to be) blocked in poll: an enqueue must wake it.
        var sleeping = false
    }

    let inputFD: Int32
    private let queue = NIOLockedValueBox(Queue())
    /// A pipe that wakes the loop from poll (its read end is non-blocking).
    private let wakeRead: Int32
    private let wakeWrite: Int32
    /// Reading and decoding the input, by the loop or by the watchdog.
    private let input: NIOLockedValueBox<FrameDecoder>
    /// What `read` fills (used under `input`'s lock only).
    private nonisolated(unsafe) var readBuffer = [UInt8](repeating: 0, count: 64 << 10)
    private let onMessage: @Sendable (Message, ChannelLoop) -> Void
    private let onError: @Sendable (any Error) -> Never
    /// When the loop started the job it is running (monotonic ns), or 0.
    private let busySince = Atomic<UInt64>(0)
    /// When the loop last read from the host (monotonic ns).
    private let lastInput = Atomic<UInt64>(0)
    /// Spins in a row that found nothing, and the loop's waits (the loop's thread only).
    private nonisolated(unsafe) var fruitlessSpins = 0
    private nonisolated(unsafe) var waits = 0
    /// Until when (monotonic ns) the waits after an answer read without sleeping, as the
    /// host asked in its request (`pollAfterUs`); 0: the host asked nothing, the loop's own
    /// `spinNs` holds. Cleared when the host's next message arrives.
    private let pollUntil = Atomic<UInt64>(0)

    /// - Parameters:
    ///   - onMessage: called with each message and this loop (the executor for its task),
    ///     in order, on the loop's thread (or the watchdog's, while the loop is busy);
    ///     never concurrently.
    ///   - onError: a framing or message error; must end the process.
    init(inputFD: Int32, onMessage: @escaping @Sendable (Message, ChannelLoop) -> Void, onError: @escaping @Sendable (any Error) -> Never) {
        self.inputFD = inputFD
        self.onMessage = onMessage
        self.onError = onError
        self.input = NIOLockedValueBox(FrameDecoder())
        var fds: [Int32] = [-1, -1]
        if pipe(&fds) != 0 { fds = [-1, -1] }
        wakeRead = fds[0]
        wakeWrite = fds[1]
        for fd in [wakeRead, wakeWrite, inputFD] where fd >= 0 {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
    }

    // MARK: TaskExecutor

    func enqueue(_ job: consuming ExecutorJob) {
        let unowned = UnownedJob(job)
        let wake = queue.withLockedValue { state in
            state.jobs.append(unowned)
            defer { state.sleeping = false }
            return state.sleeping
        }
        if wake {
            var byte: UInt8 = 1
            _ = write(wakeWrite, &byte, 1)
        }
    }

    // MARK: The loop

    /// Starts the loop's thread and the watchdog's. At end of file on fd 3 the process exits 0.
    func start() {
        let loop = Thread { [self] in run() }
        loop.stackSize = Self.threadStackBytes()
        loop.start()
        let watchdog = Thread { [self] in watch() }
        watchdog.stackSize = 128 << 10
        watchdog.start()
    }

    /// Handlers run on the loop's thread: give it the stack a pool thread would have
    /// (the process's stack limit: 1 MiB in extension mode, 8 MiB in-app), at least 512 KiB.
    private static func threadStackBytes() -> Int {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_STACK.rawValue), &limit) == 0, limit.rlim_cur < rlim_t(8 << 20) else { return 8 << 20 }
        return max(512 << 10, min(Int(limit.rlim_cur), 8 << 20))
    }

    private func run() -> Never {
        var fds = [pollfd(fd: inputFD, events: Int16(POLLIN), revents: 0), pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)]
        while true {
            runJobs()
            let sleep = queue.withLockedValue { state in
                if state.jobs.isEmpty { state.sleeping = true }
                return state.sleeping
            }
            if sleep, case let until = spinUntil(), until > Self.now(), shouldSpin() {
                if spin(until: until) {
                    fruitlessSpins = 0
                    queue.withLockedValue { $0.sleeping = false }
                    continue
                }
                fruitlessSpins += 1
            }
            if sleep {
                fds[0].revents = 0
                fds[1].revents = 0
                let ready = poll(&fds, nfds_t(fds.count), -1)
                queue.withLockedValue { $0.sleeping = false }
                if ready < 0 && errno != EINTR { onError(MessageError("waiting for the host failed: \(String(cString: strerror(errno)))")) }
                if fds[1].revents != 0 {
                    var sink = [UInt8](repeating: 0, count: 64)
                    while sink.withUnsafeMutableBytes({ read(wakeRead, $0.baseAddress, $0.count) }) > 0 {}
                }
            }
            readAvailable()
        }
    }

    private static func now() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    /// How long the loop reads without sleeping before it blocks in poll: in a warm
    /// process the host's next request often follows within microseconds, and
    /// sleeping and being woken costs as much again on a VM. Reads yield the CPU between tries.
    /// A host's `pollAfterUs` (`pollAfter`) replaces it for the waits after that answer.
    static let spinNs: UInt64 = 50_000

    /// After this many spins in a row found nothing, the loop blocks at once and spins again
    /// only every `probeEvery`th wait, until a spin finds something: a host that sends the
    /// next request within microseconds (`extrun batch`, one caller) keeps the loop
    /// spinning; one whose next request comes milliseconds later (`extrun serve` with more
    /// callers than CPUs: each spin then burned 50 µs of a CPU the others needed, 6% of
    /// the machine's samples) stops it.
    static let maxFruitlessSpins = 16
    static let probeEvery = 8

    private func shouldSpin() -> Bool {
        waits &+= 1
        return fruitlessSpins < Self.maxFruitlessSpins || waits % Self.probeEvery == 0
    }

    /// The longest a host's `pollAfterUs` may make a wait read without sleeping.
    static let maxPollAfterUs = 1_000

    /// Takes the `pollAfterUs` of the request just answered (nil: none given): until the
    /// host's next message, the loop reads without sleeping for that long after now (0:
    /// it sleeps at once; at most `maxPollAfterUs`).
    func pollAfter(microseconds: Int?) {
        guard let microseconds else { return }
        let duration = UInt64(min(max(microseconds, 0), Self.maxPollAfterUs)) * 1_000
        // 1: a time long past, so that "sleep at once" differs from "no hint" (0).
        pollUntil.store(duration == 0 ? 1 : Self.now() &+ duration, ordering: .relaxed)
    }

    /// Until when a wait starting now may read without sleeping: the host's hint, else `spinNs` from now.
    func spinUntil() -> UInt64 {
        let hinted = pollUntil.load(ordering: .relaxed)
        return hinted == 0 ? Self.now() &+ Self.spinNs : hinted
    }

    /// Reads (and hands over) what arrives until `until` (monotonic ns); whether anything did. Stops early when a job is queued.
    private func spin(until: UInt64) -> Bool {
        repeat {
            if readAvailable() { return true }
            if queue.withLockedValue({ !$0.jobs.isEmpty }) { return true }
            sched_yield()
        } while Self.now() < until
        return false
    }

    private func runJobs() {
        while true {
            let jobs = queue.withLockedValue { state -> [UnownedJob] in
                defer { state.jobs.removeAll(keepingCapacity: true) }
                return state.jobs
            }
            if jobs.isEmpty { return }
            for job in jobs {
                busySince.store(Self.now(), ordering: .relaxed)
                job.runSynchronously(on: asUnownedTaskExecutor())
                busySince.store(0, ordering: .relaxed)
            }
        }
    }

    /// Reads what the host has written, without blocking, and hands over each message.
    /// End of file: the host ended the session; the process exits 0.
    @discardableResult
    private func readAvailable() -> Bool {
        input.withLockedValue { decoder in
            var got = false
            while true {
                let count = readBuffer.withUnsafeMutableBytes { read(inputFD, $0.baseAddress, $0.count) }
                if count < 0 {
                    if errno == EINTR { continue }
                    if errno == EAGAIN || errno == EWOULDBLOCK { return got }
                    onError(MessageError("reading the protocol channel failed: \(String(cString: strerror(errno)))"))
                }
                if count == 0 { exit(0) }
                got = true
                // The host spoke again: its hint was for the wait that ended here.
                pollUntil.store(0, ordering: .relaxed)
                lastInput.store(Self.now(), ordering: .relaxed)
                readBuffer.withUnsafeBytes { decoder.append(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
                do {
                    while let body = try decoder.nextFrame() { onMessage(try Message.decode(body), self) }
                } catch {
                    onError(error)
                }
                if count < readBuffer.count { return got }
            }
        }
    }

    /// Reads for the loop while it runs one job for long (so `cancel` gets through);
    /// after two idle seconds it waits for the host's next bytes instead of ticking.
    private func watch() -> Never {
        let tickNs: UInt64 = 25_000_000
        while true {
            let now = Self.now()
            let busy = busySince.load(ordering: .relaxed)
            if busy != 0 && now &- busy > tickNs {
                var probe = pollfd(fd: inputFD, events: Int16(POLLIN), revents: 0)
                if poll(&probe, 1, 0) > 0 { readAvailable() }
            }
            if busy == 0 && now &- lastInput.load(ordering: .relaxed) > 2_000_000_000 {
                var probe = pollfd(fd: inputFD, events: Int16(POLLIN), revents: 0)
                _ = poll(&probe, 1, -1)
            }
            var pause = timespec(tv_sec: 0, tv_nsec: Int(tickNs))
            nanosleep(&pause, nil)
        }
    }
}
