import ExtrunProtocol
import Foundation

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
}

/// Limits on what the host keeps from a plugin, so that its own memory stays bounded.
public struct ConnectionLimits: Sendable {
    /// The largest frame accepted from the plugin.
    public var maxFrameBytes: Int = 64 << 20
    /// How much of stdout and of stderr is kept (the rest is counted, not kept).
    public var outputCaptureBytes: Int = 64 << 10

    public init() {}
}

/// The host's side of a conversation with one plugin process: framing, JSON-RPC
/// ids, and a single-threaded poll loop over the protocol channel, stdout,
/// stderr and the process's pidfd, bounded by a deadline.
final class PluginConnection {
    let process: PluginProcess
    let limits: ConnectionLimits
    private var decoder: FrameDecoder
    private var outbound: [UInt8] = []
    private var outboundOffset = 0
    private var nextID: Int64 = 1
    /// Requests the host stopped waiting for (deadline): a late answer to one is not a violation.
    private var abandoned: Set<RequestID> = []
    private var waitingFor: RequestID?
    private var reply: Result<JSONValue, RPCError>?
    private var violation: String?
    private(set) var stdout: OutputCapture
    private(set) var stderr: OutputCapture
    /// What `read` fills: left uninitialized (zeroing 256 KiB cost a cold run 64 page faults
    /// before the plugin had said a word); bytes are only read back after `read` wrote them.
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
    /// Answers requests the plugin sends to the host (globals, bookmarks...).
    var onRequest: ((_ method: String, _ params: JSONValue?) -> Result<JSONValue, RPCError>)?

    /// How often, at most, the plugin's memory is sampled while the host waits.
    static let sampleIntervalMs = 5

    init(process: PluginProcess, limits: ConnectionLimits = ConnectionLimits()) {
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
        reply = nil
        enqueue(.request(id: id, method: method, params: params))
        defer { waitingFor = nil }
        switch pump(deadline: deadline, until: { self.reply != nil }) {
        case .done:
            guard let reply else { return .failure(.protocolViolation("internal: no reply")) }
            return .success(reply)
        case .failure(let failure):
            if case .deadlineExpired = failure { abandoned.insert(id) }
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
        case .failure(.exited): return violation.map { .protocolViolation($0) }
        case .failure(let failure): return failure
        }
    }

    /// Writes what is queued (a `cancel`, say) without waiting for an answer.
    func flushOutbound(deadline: UInt64) {
        guard outboundOffset < outbound.count else { return }
        _ = pump(deadline: { deadline }, until: { self.outboundOffset >= self.outbound.count })
    }

    private func enqueue(_ message: Message) {
        if outboundOffset == outbound.count {
            outbound.removeAll(keepingCapacity: true)
            outboundOffset = 0
        }
        outbound.append(contentsOf: Framing.frame(message.encoded()))
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

    private func pump(deadline: () -> UInt64, until done: () -> Bool) -> PumpResult {
        var spun = spinNs == 0
        while true {
            if let violation { return .failure(.protocolViolation(violation)) }
            if done() { return .done }
            if !spun, process.fromPlugin >= 0 {
                spun = true
                let until = MonotonicClock.now() &+ spinNs
                while process.fromPlugin >= 0 && !readProtocol() && MonotonicClock.now() < until { sched_yield() }
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
            // Wake up at least every few milliseconds to sample the plugin's memory.
            let timeoutMs = Int32(min((limit - now + 999_999) / 1_000_000, UInt64(Self.sampleIntervalMs)))

            var fds: [pollfd] = []
            func watch(_ fd: Int32, _ events: Int32) {
                if fd >= 0 { fds.append(pollfd(fd: fd, events: Int16(events), revents: 0)) }
            }
            watch(process.fromPlugin, Int32(POLLIN))
            watch(process.stdoutFD, Int32(POLLIN))
            watch(process.stderrFD, Int32(POLLIN))
            if outboundOffset < outbound.count { watch(process.toPlugin, Int32(POLLOUT)) }
            watch(process.statusFD, Int32(POLLIN))
            let ready = poll(&fds, nfds_t(fds.count), timeoutMs)
            if ready < 0 {
                if errno == EINTR { continue }
                return .failure(.protocolViolation("poll failed: \(String(cString: strerror(errno)))"))
            }
            process.memory.sample()
            for entry in fds where entry.revents != 0 {
                switch entry.fd {
                case process.fromPlugin: readProtocol()
                case process.stdoutFD: readOutput(isStdout: true)
                case process.stderrFD: readOutput(isStdout: false)
                case process.toPlugin: writeOutbound()
                case process.statusFD:
                    process.readEvents()
                    if process.exit != nil || process.statusFD < 0 { drainAfterExit() }
                default: break
                }
            }
        }
    }

    /// After the process has ended, reads what is left in the pipes without waiting
    /// (a grandchild may hold them open; we do not wait for its end of file).
    private func drainAfterExit() {
        while process.fromPlugin >= 0 && violation == nil {
            if !readProtocol() { break }
        }
        while process.stdoutFD >= 0 && readOutput(isStdout: true) {}
        while process.stderrFD >= 0 && readOutput(isStdout: false) {}
        for (isStdout, capture) in [(true, stdout), (false, stderr)] {
            var copy = capture
            if let line = copy.flush() { onOutputLine?(isStdout, line) }
        }
    }

    /// Reads once from the protocol channel. Returns whether bytes were read.
    @discardableResult
    private func readProtocol() -> Bool {
        let count = readBuffer.withUnsafeMutableBytes { read(process.fromPlugin, $0.baseAddress, $0.count) }
        if count == 0 || (count < 0 && errno != EAGAIN && errno != EINTR) {
            close(process.fromPlugin)
            process.fromPlugin = -1
            return false
        }
        guard count > 0 else { return false }
        readBuffer.withUnsafeBytes { decoder.append(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
        do {
            while violation == nil, let body = try decoder.nextFrame() {
                let message: Message
                do {
                    message = try Message.decode(body)
                } catch {
                    violation = "the plugin sent an invalid message: \(error)"
                    return true
                }
                receive(message)
            }
        } catch {
            violation = "the plugin sent a malformed frame: \(error)"
        }
        return true
    }

    private func receive(_ message: Message) {
        switch message {
        case .response(let id, let result):
            accept(id: id, .success(result))
        case .errorResponse(let id, let error):
            guard let id else {
                violation = "the plugin reported a protocol error: \(error.message) (code \(error.code))"
                return
            }
            accept(id: id, .failure(error))
        case .notification(let method, let params):
            onNotification?(method, params)
        case .request(let id, let method, let params):
            let result =
                onRequest?(method, params)
                ?? .failure(RPCError(code: RPCError.methodNotFound, message: "the host does not offer '\(method)'"))
            switch result {
            case .success(let value): enqueue(.response(id: id, result: value))
            case .failure(let error): enqueue(.errorResponse(id: id, error: error))
            }
        }
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
            violation = "the plugin answered request \(id) twice"
        } else {
            violation = "the plugin answered request \(id), which the host never sent"
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

    private func writeOutbound() {
        guard process.toPlugin >= 0 else { return }
        let written = outbound.withUnsafeBytes { raw in
            write(process.toPlugin, raw.baseAddress! + outboundOffset, raw.count - outboundOffset)
        }
        if written > 0 {
            outboundOffset += written
        } else if written < 0 && errno != EAGAIN && errno != EINTR {
            // The plugin closed its input: what we wanted to say is lost; its exit will tell the rest.
            outboundOffset = outbound.count
            process.closeToPlugin()
        }
    }
}
