import CExtrunLinux
import ExtrunProtocol
import ExtrunSystem
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Why a call to the plugin did not produce an answer.
enum CallFailure: Error {
    /// The process ended (the channel may have closed first).
    case exited(ProcessExit)
    /// The deadline passed.
    case deadlineExpired
    /// The plugin broke the protocol.
    case protocolViolation(String)
    /// The plugin went over one of the host's limits (HostLimits).
    case overLimit(LimitBreach)
    /// The caller cancelled the run (`Cancellation`), with its reason.
    case cancelled(String)

    init(_ error: ConversationError) {
        switch error {
        case .protocolViolation(let what): self = .protocolViolation(what)
        case .overLimit(let breach): self = .overLimit(breach)
        }
    }
}

/// Limits on what the host keeps from a plugin, so that its own memory stays bounded
/// (the policy's `maxMessageBytes`, `outputCaptureBytes` and `host` fields).
public struct ConnectionLimits: Sendable {
    /// The largest frame accepted from the plugin, and the largest answer sent to it.
    public var maxFrameBytes: Int = 16 << 20
    /// How much of stdout and of stderr is kept (the rest is counted, not kept).
    public var outputCaptureBytes: Int = 64 << 10
    /// The run's budget for what the host holds for the plugin, and its policy field.
    public var memoryBytes: Int = HostLimits.default.extensionMemoryBytes
    public var memoryField = HostLimits.memoryField(for: .extension)
    public var unreadAnswersMs: Int = HostLimits.default.unreadAnswersMs
    public var maxResponseBytes: Int = HostLimits.default.maxResponseBytes
    public var maxNotificationBytes: Int = HostLimits.default.maxNotificationBytes
    public var maxMessageNodes: Int = HostLimits.default.maxMessageNodes
    public var closedChannelGraceMs: Int = HostLimits.default.closedChannelGraceMs

    public init() {}

    init(policy: SandboxPolicy, mode: Mode) {
        maxFrameBytes = policy.maxMessageBytes
        outputCaptureBytes = policy.outputCaptureBytes
        memoryBytes = policy.host.memoryBytes(for: mode)
        memoryField = HostLimits.memoryField(for: mode)
        unreadAnswersMs = policy.host.unreadAnswersMs
        maxResponseBytes = policy.host.maxResponseBytes
        maxNotificationBytes = policy.host.maxNotificationBytes
        maxMessageNodes = policy.host.maxMessageNodes
        closedChannelGraceMs = policy.host.closedChannelGraceMs
    }

    /// Past this many bytes of answers queued for the plugin, the host reads no more of its requests.
    var outboundHighWater: Int { max(1, memoryBytes / 2) }
}

/// The host's side of a conversation with one plugin process: a single-threaded
/// poll loop over the protocol channel (`PluginConversation` over a `PluginChannel`
/// on the plugin's pipes), stdout, stderr and the process's status pipe, bounded by
/// a deadline.
final class PluginConnection {
    let process: PluginProcess
    /// The JSON-RPC conversation over the plugin's fd 3 and fd 4.
    let conversation: PluginConversation
    private(set) var stdout: OutputCapture
    private(set) var stderr: OutputCapture

    var limits: ConnectionLimits { conversation.limits }
    private var channel: PluginChannel { conversation.channel }

    /// Called with each line the plugin writes to stdout (`true`) or stderr (`false`).
    var onOutputLine: ((_ isStdout: Bool, _ line: String) -> Void)? {
        didSet {
            stdout.collectsLines = onOutputLine != nil
            stderr.collectsLines = onOutputLine != nil
        }
    }
    /// Called with each notification the plugin sends.
    var onNotification: ((_ method: String, _ params: JSONValue?) -> Void)? {
        get { conversation.onNotification }
        set { conversation.onNotification = newValue }
    }
    /// The caller's cancellation of the run in progress: a wait for an answer ends
    /// with `CallFailure.cancelled` once it is set.
    var cancellation: Cancellation?
    /// Answers requests the plugin sends to the host (globals, bookmarks...).
    var onRequest: ((_ method: String, _ params: JSONValue?) -> Result<JSONValue, RPCError>)? {
        get { conversation.onRequest }
        set { conversation.onRequest = newValue }
    }

    /// How often, at most, the plugin's memory is sampled while the host waits.
    static let sampleIntervalMs = 5

    /// Once per process: blocks of 1 MiB and more are mapped and given back when freed
    /// (glibc would otherwise keep what a plugin's large messages cost in the heap).
    private static let mallocPolicy: Void = extrun_set_mmap_threshold(1 << 20)

    init(process: PluginProcess, limits: ConnectionLimits = ConnectionLimits()) {
        Self.mallocPolicy
        self.process = process
        self.conversation = PluginConversation(ends: process, limits: limits)
        self.stdout = OutputCapture(limit: limits.outputCaptureBytes)
        self.stderr = OutputCapture(limit: limits.outputCaptureBytes)
    }

    /// Sends a request and runs the loop until its answer, the deadline, the
    /// process's end or a protocol violation.
    func request(_ method: String, _ params: JSONValue?, deadline: () -> UInt64) throws(CallFailure) -> Result<JSONValue, RPCError> {
        conversation.send(method, params)
        switch pump(deadline: deadline, until: { self.conversation.hasAnswer }) {
        case .done:
            let answer = try? conversation.answer()
            conversation.endRequest(abandoned: false)
            guard let answer else { throw .protocolViolation("internal: no reply") }
            return answer
        case .failure(let failure):
            switch failure {
            case .deadlineExpired, .cancelled: conversation.endRequest(abandoned: true)
            default: conversation.endRequest(abandoned: false)
            }
            throw failure
        }
    }

    /// `request`'s outcome as a `Result`.
    func call(_ method: String, _ params: JSONValue?, deadline: () -> UInt64) -> Result<Result<JSONValue, RPCError>, CallFailure> {
        do throws(CallFailure) {
            return .success(try request(method, params, deadline: deadline))
        } catch {
            return .failure(error)
        }
    }

    func notify(_ method: String, _ params: JSONValue?) {
        conversation.notify(method, params)
    }

    /// Closes the host's end of the channel (the plugin sees end of file and
    /// should exit) and waits for the process to end, until `deadline`.
    /// Returns a protocol violation noticed meanwhile (a late second answer, say).
    func closeAndWait(deadline: UInt64) -> CallFailure? {
        flushOutbound(deadline: deadline)
        channel.closeWrite()
        return waitForExit(deadline: deadline)
    }

    /// Waits for the process to end, until `deadline` (`.deadlineExpired` if it runs on),
    /// reading and serving the plugin meanwhile (unless `stopReading`). Returns a protocol
    /// violation or a limit noticed meanwhile (a late second answer, say).
    func waitForExit(deadline: UInt64) -> CallFailure? {
        switch pump(deadline: { deadline }, until: { false }) {
        case .done: return nil
        case .failure(.exited): return conversation.failure.map(CallFailure.init)
        case .failure(let failure): return failure
        }
    }

    /// Reads and serves nothing more from the plugin (its deadline passed: the grace
    /// it gets to exit is not time to go on asking the host for things).
    func stopReading() {
        conversation.stopReading()
    }

    /// Writes what is queued (a `cancel`, say) without waiting for an answer.
    func flushOutbound(deadline: UInt64) {
        guard conversation.hasPendingOutput else { return }
        _ = pump(deadline: { deadline }, until: { !self.conversation.hasPendingOutput })
    }

    private enum PumpResult {
        case done
        case failure(CallFailure)
    }

    /// How long to keep reading the channel without sleeping before a wait blocks in
    /// poll (0: block at once). A warm plugin answers a session in tens of
    /// microseconds, and going to sleep and being woken costs as much again on a VM
    /// (docs/benchmarks.md); the reads yield the CPU between tries.
    var spinNs: UInt64 = 0
    /// The waits spinning now, in this process, and the most that may (the CPUs but one).
    static let spinners = Atomic<Int>(0)
    static let maxSpinners = PooledSessions.processors - 1

    private func pump(deadline: () -> UInt64, until done: () -> Bool) -> PumpResult {
        var spun = spinNs == 0
        while true {
            if let failure = conversation.failure { return .failure(CallFailure(failure)) }
            if done() { return .done }
            // A wait for an answer ends when the caller cancels (not the wait for the exit after the last answer).
            if conversation.waitingFor != nil, let cancellation, cancellation.isCancelled {
                return .failure(.cancelled(cancellation.reason ?? "cancelled by the caller"))
            }
            if !spun, conversation.readsPeer, channel.readFD >= 0 {
                spun = true
                // Only while fewer threads spin than there are other CPUs: with more waits
                // at once (8 callers of a service on 2 cores) the spinning took the CPU the
                // plugins needed to answer (docs/benchmarks.md, "extrun serve").
                if Self.spinners.add(1, ordering: .relaxed).newValue <= Self.maxSpinners {
                    let until = MonotonicClock.now() &+ spinNs
                    while channel.readFD >= 0 && !conversation.readChannel(deadline: deadline) && MonotonicClock.now() < until { sched_yield() }
                }
                Self.spinners.subtract(1, ordering: .relaxed)
                continue
            }
            if let exit = process.exit {
                // Whatever the plugin wrote before it ended has been drained: no answer is coming.
                return .failure(.exited(exit))
            }
            if process.statusFD < 0 {
                return .failure(.protocolViolation("the plugin's supervisor ended without a report"))
            }
            let now = MonotonicClock.now()
            let limit = deadline()
            if now >= limit { return .failure(.deadlineExpired) }
            do throws(ConversationError) {
                try conversation.checkStalls(now: now, peerIsRunning: pluginIsRunning)
            } catch {
                return .failure(CallFailure(error))
            }
            // Frames read while the queue was full are served once it has drained.
            if conversation.hasUnservedInput && conversation.serveBuffered(deadline: deadline) { continue }
            // Wake up at least every few milliseconds to sample the plugin's memory.
            let timeoutMs = Int32(min((limit - now + 999_999) / 1_000_000, UInt64(Self.sampleIntervalMs)))

            var fds: [pollfd] = []
            func watch(_ fd: Int32, _ events: Int32) {
                if fd >= 0 { fds.append(pollfd(fd: fd, events: Int16(events), revents: 0)) }
            }
            // Backpressure: while the plugin leaves its answers unread, its requests stay in the pipe.
            if conversation.wantsInput { watch(channel.readFD, Int32(POLLIN)) }
            watch(process.stdoutFD, Int32(POLLIN))
            watch(process.stderrFD, Int32(POLLIN))
            if conversation.hasPendingOutput { watch(channel.writeFD, Int32(POLLOUT)) }
            watch(process.statusFD, Int32(POLLIN))
            // 0 after a signal as after the timeout: the loop comes back with what is left.
            do throws(SystemCallError) {
                _ = try SystemCall.poll(&fds, timeoutMs: timeoutMs)
            } catch {
                return .failure(.protocolViolation("poll failed: \(error.reason)"))
            }
            process.memory.sample()
            for entry in fds where entry.revents != 0 {
                switch entry.fd {
                case channel.readFD: conversation.readChannel(deadline: deadline)
                case process.stdoutFD: readOutput(isStdout: true)
                case process.stderrFD: readOutput(isStdout: false)
                case channel.writeFD: conversation.writeQueued()
                case process.statusFD:
                    process.readEvents()
                    if process.exit != nil || process.statusFD < 0 { drainAfterExit(deadline: deadline) }
                default: break
                }
            }
        }
    }

    /// After the process has ended, reads what is left in the pipes without waiting
    /// (a grandchild may hold them open; we do not wait for its end of file).
    private func drainAfterExit(deadline: () -> UInt64) {
        while conversation.wantsInput && conversation.failure == nil {
            if !conversation.readChannel(deadline: deadline) { break }
        }
        while process.stdoutFD >= 0 && readOutput(isStdout: true) {}
        while process.stderrFD >= 0 && readOutput(isStdout: false) {}
        for (isStdout, capture) in [(true, stdout), (false, stderr)] {
            var copy = capture
            if let line = copy.flush() { onOutputLine?(isStdout, line) }
        }
    }

    /// Whether the plugin's process is still running, not ending: a plugin that dies (a
    /// crash, the memory cap) closes its channels before its exit is reported, and on a
    /// busy machine that report can take longer than the grace. (Read only once a grace
    /// has passed after a closed channel.)
    private func pluginIsRunning() -> Bool {
        ProcFS.isRunning(process.pid)
    }

    /// Reads once from stdout or stderr (into the channel's read buffer). Returns whether bytes were read.
    @discardableResult
    private func readOutput(isStdout: Bool) -> Bool {
        let fd = isStdout ? process.stdoutFD : process.stderrFD
        var lines: [String] = []
        let result = channel.read(from: fd, maxBytes: 64 << 10) { chunk in
            lines = isStdout ? stdout.append(chunk) : stderr.append(chunk)
        }
        switch result {
        case .read:
            if let onOutputLine { for line in lines { onOutputLine(isStdout, line) } }
            return true
        case .wouldBlock:
            return false
        case .closed:
            close(fd)
            if isStdout { process.stdoutFD = -1 } else { process.stderrFD = -1 }
            return false
        }
    }
}
