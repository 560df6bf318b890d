import CExtrunLinux
import ExtrunProtocol
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

/// The host's side of a conversation with one plugin process: framing, JSON-RPC
/// ids, and a single-threaded poll loop over the protocol channel, stdout,
/// stderr and the process's pidfd, bounded by a deadline.
final class PluginConnection {
    let process: PluginProcess
    let limits: ConnectionLimits
    private var decoder: FrameDecoder
    /// Frames queued for the plugin, as chunks: a small frame is one chunk (header and
    /// body, written with one `write`), a large one two (its body is not copied). Chunks
    /// before `outboundHead` are written; `outboundOffset` bytes of the head are.
    private var outbound: [[UInt8]] = []
    private var outboundHead = 0
    private var outboundOffset = 0
    /// Bytes queued for the plugin and not yet written.
    private var outboundPending = 0
    private var nextID: Int64 = 1
    /// Requests the host stopped waiting for (deadline): a late answer to one is not a violation.
    private var abandoned: Set<RequestID> = []
    private var waitingFor: RequestID?
    private var waitingMethod = ""
    private var reply: Result<JSONValue, RPCError>?
    /// Why the conversation cannot go on (a protocol violation, a limit), once noticed.
    private var failure: CallFailure?
    /// Requests the plugin sent in this run (and their bytes), for the budget's error.
    private var requestsServed = 0
    private var requestBytes = 0
    /// When the outbound queue last got smaller (or went over the high-water mark).
    private var lastDrain: UInt64 = 0
    /// False once the run is over (its deadline passed): nothing more of the plugin's is read or served.
    private var readsPlugin = true
    /// When the plugin closed its output (fd 4) or its input (fd 3) while still running.
    private var outputClosedAt: UInt64?
    private var inputClosedAt: UInt64?
    private(set) var stdout: OutputCapture
    private(set) var stderr: OutputCapture
    /// What `read` fills: left uninitialized (zeroing 256 KiB cost a cold run page faults
    /// before the plugin had said a word: docs/benchmarks.md, "Costs the source's comments point to"); bytes are only read back after `read` wrote them.
    private var readBuffer = [UInt8](unsafeUninitializedCapacity: 256 << 10) { _, count in count = 256 << 10 }

    /// Called with each line the plugin writes to stdout (`true`) or stderr (`false`).
    var onOutputLine: ((_ isStdout: Bool, _ line: String) -> Void)? {
        didSet {
            stdout.collectsLines = onOutputLine != nil
            stderr.collectsLines = onOutputLine != nil
        }
    }
    /// Called with each notification the plugin sends.
    var onNotification: ((_ method: String, _ params: JSONValue?) -> Void)?
    /// The caller's cancellation of the run in progress: a wait for an answer ends
    /// with `CallFailure.cancelled` once it is set.
    var cancellation: Cancellation?
    /// Answers requests the plugin sends to the host (globals, bookmarks...).
    var onRequest: ((_ method: String, _ params: JSONValue?) -> Result<JSONValue, RPCError>)?

    /// How often, at most, the plugin's memory is sampled while the host waits.
    static let sampleIntervalMs = 5

    /// Once per process: blocks of 1 MiB and more are mapped and given back when freed
    /// (glibc would otherwise keep what a plugin's large messages cost in the heap).
    private static let mallocPolicy: Void = extrun_set_mmap_threshold(1 << 20)

    init(process: PluginProcess, limits: ConnectionLimits = ConnectionLimits()) {
        Self.mallocPolicy
        self.process = process
        self.limits = limits
        self.decoder = FrameDecoder(maxFrameBytes: limits.maxFrameBytes)
        self.stdout = OutputCapture(limit: limits.outputCaptureBytes)
        self.stderr = OutputCapture(limit: limits.outputCaptureBytes)
    }

    /// Sends a request and runs the loop until its answer, the deadline, the
    /// process's end or a protocol violation.
    func call(_ method: String, _ params: JSONValue?, deadline: () -> UInt64) -> Result<Result<JSONValue, RPCError>, CallFailure> {
        let id = RequestID.int(nextID)
        nextID += 1
        waitingFor = id
        waitingMethod = method
        reply = nil
        enqueue(.request(id: id, method: method, params: params))
        defer { waitingFor = nil }
        switch pump(deadline: deadline, until: { self.reply != nil }) {
        case .done:
            guard let reply else { return .failure(.protocolViolation("internal: no reply")) }
            return .success(reply)
        case .failure(let failure):
            switch failure {
            case .deadlineExpired, .cancelled: abandoned.insert(id)
            default: break
            }
            return .failure(failure)
        }
    }

    func notify(_ method: String, _ params: JSONValue?) {
        enqueue(.notification(method: method, params: params))
    }

    /// Closes the host's end of the channel (the plugin sees end of file and
    /// should exit) and waits for the process to end, until `deadline`.
    /// Returns a protocol violation noticed meanwhile (a late second answer, say).
    func closeAndWait(deadline: UInt64) -> CallFailure? {
        flushOutbound(deadline: deadline)
        process.closeToPlugin()
        switch pump(deadline: { deadline }, until: { false }) {
        case .done: return nil
        case .failure(.exited): return failure
        case .failure(let failure): return failure
        }
    }

    /// Reads and serves nothing more from the plugin (its deadline passed: the grace
    /// it gets to exit is not time to go on asking the host for things).
    func stopReading() {
        readsPlugin = false
    }

    /// Writes what is queued (a `cancel`, say) without waiting for an answer.
    func flushOutbound(deadline: UInt64) {
        guard outboundPending > 0 else { return }
        _ = pump(deadline: { deadline }, until: { self.outboundPending == 0 })
    }

    /// Whether the host stops reading the plugin's requests until it reads its answers.
    private var isBackpressured: Bool { outboundPending >= limits.outboundHighWater }

    private func enqueue(_ message: Message) {
        enqueue(body: message.encoded())
    }

    private func enqueue(body: [UInt8]) {
        let wasBackpressured = isBackpressured
        if body.count <= 64 << 10 {
            let frame = Framing.frame(body)
            outboundPending += frame.count
            outbound.append(frame)
        } else {
            let header = Array("Content-Length: \(body.count)\r\n\r\n".utf8)
            outboundPending += header.count + body.count
            outbound.append(header)
            outbound.append(body)
        }
        if !wasBackpressured && isBackpressured { lastDrain = MonotonicClock.now() }
        // Written at once where the pipe takes it (it is non-blocking); what is left,
        // the loop writes when poll says the pipe has room.
        writeOutbound()
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
    static let maxSpinners = max(0, ProcessInfo.processInfo.activeProcessorCount - 1)

    private func pump(deadline: () -> UInt64, until done: () -> Bool) -> PumpResult {
        var spun = spinNs == 0
        while true {
            if let failure { return .failure(failure) }
            if done() { return .done }
            // A wait for an answer ends when the caller cancels (not the wait for the exit after the last answer).
            if waitingFor != nil, let cancellation, cancellation.isCancelled {
                return .failure(.cancelled(cancellation.reason ?? "cancelled by the caller"))
            }
            if !spun, readsPlugin, process.fromPlugin >= 0 {
                spun = true
                // Only while fewer threads spin than there are other CPUs: with more waits
                // at once (8 callers of a service on 2 cores) the spinning took the CPU the
                // plugins needed to answer (docs/benchmarks.md, "extrun serve").
                if Self.spinners.add(1, ordering: .relaxed).newValue <= Self.maxSpinners {
                    let until = MonotonicClock.now() &+ spinNs
                    while process.fromPlugin >= 0 && !readProtocol(deadline: deadline) && MonotonicClock.now() < until { sched_yield() }
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
            if let stop = checkChannel(now: now) { return .failure(stop) }
            // Frames read while the queue was full are served once it has drained.
            if readsPlugin && !isBackpressured && decoder.hasBufferedBytes {
                if serveFrames(deadline: deadline) { continue }
            }
            // Wake up at least every few milliseconds to sample the plugin's memory.
            let timeoutMs = Int32(min((limit - now + 999_999) / 1_000_000, UInt64(Self.sampleIntervalMs)))

            var fds: [pollfd] = []
            func watch(_ fd: Int32, _ events: Int32) {
                if fd >= 0 { fds.append(pollfd(fd: fd, events: Int16(events), revents: 0)) }
            }
            // Backpressure: while the plugin leaves its answers unread, its requests stay in the pipe.
            if readsPlugin && !isBackpressured { watch(process.fromPlugin, Int32(POLLIN)) }
            watch(process.stdoutFD, Int32(POLLIN))
            watch(process.stderrFD, Int32(POLLIN))
            if outboundPending > 0 { watch(process.toPlugin, Int32(POLLOUT)) }
            watch(process.statusFD, Int32(POLLIN))
            let ready = poll(&fds, nfds_t(fds.count), timeoutMs)
            if ready < 0 {
                if errno == EINTR { continue }
                return .failure(.protocolViolation("poll failed: \(String(cString: strerror(errno)))"))
            }
            process.memory.sample()
            for entry in fds where entry.revents != 0 {
                switch entry.fd {
                case process.fromPlugin: readProtocol(deadline: deadline)
                case process.stdoutFD: readOutput(isStdout: true)
                case process.stderrFD: readOutput(isStdout: false)
                case process.toPlugin: writeOutbound()
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
        while readsPlugin && process.fromPlugin >= 0 && failure == nil && !isBackpressured {
            if !readProtocol(deadline: deadline) { break }
        }
        while process.stdoutFD >= 0 && readOutput(isStdout: true) {}
        while process.stderrFD >= 0 && readOutput(isStdout: false) {}
        for (isStdout, capture) in [(true, stdout), (false, stderr)] {
            var copy = capture
            if let line = copy.flush() { onOutputLine?(isStdout, line) }
        }
    }

    /// A plugin that closed a channel and kept running, or that keeps the host holding
    /// answers it does not read: why the conversation stops, if it must.
    private func checkChannel(now: UInt64) -> CallFailure? {
        let grace = UInt64(limits.closedChannelGraceMs) * 1_000_000
        if waitingFor != nil, let closed = outputClosedAt, process.fromPlugin < 0, now &- closed >= grace, pluginIsRunning() {
            return .protocolViolation(
                "it closed its channel (fd 4, its output) and kept running: no answer to \(waitingMethod) can come (waited \(limits.closedChannelGraceMs) ms for its exit)")
        }
        if waitingFor != nil, let closed = inputClosedAt, now &- closed >= grace, pluginIsRunning() {
            return .protocolViolation(
                "it closed its channel (fd 3, its input) and kept running: it cannot read \(waitingMethod) (waited \(limits.closedChannelGraceMs) ms for its exit)")
        }
        if isBackpressured, now &- lastDrain >= UInt64(limits.unreadAnswersMs) * 1_000_000 {
            return .overLimit(
                LimitBreach(
                    limit: limits.memoryField, limitValue: limits.memoryBytes, measured: outboundPending,
                    what:
                        "it sent \(requestsServed) requests (\(ByteCount.format(Int64(requestBytes)))) and read none of the \(ByteCount.format(Int64(outboundPending))) of answers queued for it for \(limits.unreadAnswersMs) ms; the host holds at most half of its budget of \(ByteCount.format(Int64(limits.memoryBytes))) (\(limits.memoryField)) in answers for a plugin, and stops one that does not read them",
                    extra: ["requests": .int(Int64(requestsServed)), "requestBytes": .int(Int64(requestBytes))]))
        }
        return nil
    }

    /// Whether the plugin's process is still running, not ending: a plugin that dies (a
    /// crash, the memory cap) closes its channels before its exit is reported, and on a
    /// busy machine that report can take longer than the grace. (Read only once a grace
    /// has passed after a closed channel.)
    private func pluginIsRunning() -> Bool {
        guard process.pid > 0, let stat = try? String(contentsOfFile: "/proc/\(process.pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return false }
        let state = stat[stat.index(after: close)...].drop(while: { $0 == " " }).first
        return state != "Z" && state != "X" && state != "x"
    }

    /// Reads once from the protocol channel and serves the frames completed. Returns whether bytes were read.
    @discardableResult
    private func readProtocol(deadline: () -> UInt64) -> Bool {
        let count = readBuffer.withUnsafeMutableBytes { read(process.fromPlugin, $0.baseAddress, $0.count) }
        if count == 0 || (count < 0 && errno != EAGAIN && errno != EINTR) {
            close(process.fromPlugin)
            process.fromPlugin = -1
            if process.exit == nil { outputClosedAt = MonotonicClock.now() }
            return false
        }
        guard count > 0 else { return false }
        readBuffer.withUnsafeBytes { decoder.append(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
        serveFrames(deadline: deadline)
        return true
    }

    /// Serves the complete frames buffered, one at a time, until the queue for the
    /// plugin is over its high-water mark or the deadline has passed (checked between
    /// frames: a run ends on time however many requests the plugin wrote at once).
    /// Returns whether a frame was served.
    @discardableResult
    private func serveFrames(deadline: () -> UInt64) -> Bool {
        var served = false
        do {
            while failure == nil, !isBackpressured, MonotonicClock.now() < deadline(),
                let body = try decoder.nextFrame()
            {
                served = true
                let message: Message
                do {
                    message = try Message.decode(body, maxNodes: limits.maxMessageNodes)
                } catch let error as JSONParseError where error.exceedsNodeLimit {
                    failure = .overLimit(
                        LimitBreach(
                            limit: "host.maxMessageNodes", limitValue: limits.maxMessageNodes, measured: limits.maxMessageNodes + 1,
                            what: "it sent a message of \(ByteCount.format(Int64(body.count))) holding more than \(limits.maxMessageNodes) JSON values (host.maxMessageNodes)",
                            extra: ["messageBytes": .int(Int64(body.count))]))
                    return served
                } catch {
                    failure = .protocolViolation("the plugin sent an invalid message: \(error)")
                    return served
                }
                receive(message, bytes: body.count)
            }
        } catch {
            if case .frameTooLarge(let length, let limit) = error {
                failure = .overLimit(
                    LimitBreach(
                        limit: "maxMessageBytes", limitValue: limit, measured: length,
                        what: "it sent a \(error) (maxMessageBytes)"))
            } else {
                failure = .protocolViolation("the plugin sent a malformed frame: \(error)")
            }
        }
        return served
    }

    /// The longest method name the host looks up or repeats in an error.
    static let maxMethodNameBytes = 256

    private func receive(_ message: Message, bytes: Int) {
        switch message {
        case .response(let id, let result):
            if id == waitingFor, bytes > limits.maxResponseBytes {
                failure = responseTooLarge(bytes)
                return
            }
            accept(id: id, .success(result))
        case .errorResponse(let id, let error):
            guard let id else {
                failure = .protocolViolation("the plugin reported a protocol error: \(error.message.prefix(1000)) (code \(error.code))")
                return
            }
            if id == waitingFor, bytes > limits.maxResponseBytes {
                failure = responseTooLarge(bytes)
                return
            }
            accept(id: id, .failure(error))
        case .notification(let method, let params):
            if bytes > limits.maxNotificationBytes {
                failure = .overLimit(
                    LimitBreach(
                        limit: "host.maxNotificationBytes", limitValue: limits.maxNotificationBytes, measured: bytes,
                        what: "it sent a notification '\(method.prefix(64))' of \(ByteCount.format(Int64(bytes))), over the limit of \(ByteCount.format(Int64(limits.maxNotificationBytes))) (host.maxNotificationBytes)"))
                return
            }
            onNotification?(method, params)
        case .request(let id, let method, let params):
            requestsServed += 1
            requestBytes += bytes
            let result: Result<JSONValue, RPCError>
            if method.utf8.count > Self.maxMethodNameBytes {
                result = .failure(
                    RPCError(
                        code: RPCError.methodNotFound,
                        message: "a method name of \(method.utf8.count) bytes (the host's are under \(Self.maxMethodNameBytes))"))
            } else {
                result =
                    onRequest?(method, params)
                    ?? .failure(RPCError(code: RPCError.methodNotFound, message: "the host does not offer '\(method)'"))
            }
            var body: [UInt8]
            switch result {
            case .success(let value): body = Message.response(id: id, result: value).encoded()
            case .failure(let error): body = Message.errorResponse(id: id, error: error).encoded()
            }
            if body.count > limits.maxFrameBytes {
                // Too large to send: the plugin gets an error that says so, not the answer.
                let error = RPCError(
                    code: RPCError.serviceError,
                    message: "the answer to \(method) is \(ByteCount.format(Int64(body.count))), over the limit of \(ByteCount.format(Int64(limits.maxFrameBytes))) on a message (maxMessageBytes)",
                    data: [
                        "kind": "tooLarge", "limit": "maxMessageBytes", "limitValue": .int(Int64(limits.maxFrameBytes)),
                        "measured": .int(Int64(body.count)),
                    ])
                body = Message.errorResponse(id: id, error: error).encoded()
            }
            enqueue(body: body)
        }
    }

    private func responseTooLarge(_ bytes: Int) -> CallFailure {
        .overLimit(
            LimitBreach(
                limit: "host.maxResponseBytes", limitValue: limits.maxResponseBytes, measured: bytes,
                what: "its answer to \(waitingMethod) is \(ByteCount.format(Int64(bytes))), over the limit of \(ByteCount.format(Int64(limits.maxResponseBytes))) on an answer (host.maxResponseBytes)"))
    }

    /// Ids are 1, 2, 3...: every id below `nextID` that is not waited for nor
    /// abandoned was answered. (No set of answered ids: a warm process answers
    /// millions of requests over its life.)
    private func wasSentAndAnswered(_ id: RequestID) -> Bool {
        guard case .int(let number) = id else { return false }
        return number >= 1 && number < nextID && id != waitingFor && !abandoned.contains(id)
    }

    private func accept(id: RequestID, _ result: Result<JSONValue, RPCError>) {
        if id == waitingFor && reply == nil {
            reply = result
        } else if abandoned.remove(id) != nil {
            // The answer to a request that timed out (typically "cancelled"): too late, but honest.
        } else if wasSentAndAnswered(id) || id == waitingFor {
            failure = .protocolViolation("the plugin answered request \(id) twice")
        } else {
            failure = .protocolViolation("the plugin answered request \(id), which the host never sent")
        }
    }

    /// Reads once from stdout or stderr. Returns whether bytes were read.
    @discardableResult
    private func readOutput(isStdout: Bool) -> Bool {
        let fd = isStdout ? process.stdoutFD : process.stderrFD
        let count = readBuffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, min($0.count, 64 << 10)) }
        if count == 0 || (count < 0 && errno != EAGAIN && errno != EINTR) {
            close(fd)
            if isStdout { process.stdoutFD = -1 } else { process.stderrFD = -1 }
            return false
        }
        guard count > 0 else { return false }
        let lines = readBuffer.withUnsafeBytes { raw in
            let chunk = UnsafeRawBufferPointer(rebasing: raw[0..<count])
            return isStdout ? stdout.append(chunk) : stderr.append(chunk)
        }
        if let onOutputLine { for line in lines { onOutputLine(isStdout, line) } }
        return true
    }

    /// Writes queued chunks while the pipe takes them (it is non-blocking).
    private func writeOutbound() {
        while process.toPlugin >= 0, outboundHead < outbound.count {
            let chunk = outbound[outboundHead]
            let left = chunk.count - outboundOffset
            let written = chunk.withUnsafeBytes { raw in
                guard let base = raw.baseAddress else { return 0 }
                return write(process.toPlugin, base + outboundOffset, left)
            }
            if written > 0 {
                outboundOffset += written
                outboundPending -= written
                lastDrain = MonotonicClock.now()
                if written < left { return }
                // A written chunk's bytes go now: the array keeps its slot until compaction,
                // and 64 written 4 MiB answers held there were 90 MiB of the host's memory.
                outbound[outboundHead] = []
                outboundHead += 1
                outboundOffset = 0
                compactOutbound()
            } else if written < 0 && errno == EINTR {
                continue
            } else if written < 0 && errno != EAGAIN {
                // The plugin closed its input: what we wanted to say is lost; its exit will tell the rest.
                outbound.removeAll()
                outboundHead = 0
                outboundOffset = 0
                outboundPending = 0
                process.closeToPlugin()
                if process.exit == nil { inputClosedAt = MonotonicClock.now() }
                return
            } else {
                return
            }
        }
    }

    /// Drops written chunks: all of them once the queue is empty (keeping the array's
    /// small capacity), else the written ones when they are most of the array.
    private func compactOutbound() {
        if outboundHead == outbound.count {
            outbound.removeAll(keepingCapacity: outbound.capacity <= 64)
            outboundHead = 0
        } else if outboundHead >= 64 && outboundHead * 2 >= outbound.count {
            outbound.removeFirst(outboundHead)
            outboundHead = 0
        }
    }
}
