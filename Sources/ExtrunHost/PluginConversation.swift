import ExtrunProtocol

/// Why a conversation with a plugin cannot go on (what the plugin said, not how it ended).
enum ConversationError: Error, Equatable {
    /// The plugin broke the protocol.
    case protocolViolation(String)
    /// The plugin went over one of the host's limits (HostLimits).
    case overLimit(LimitBreach)
}

/// The JSON-RPC conversation with a plugin over a `PluginChannel`: the host's
/// requests (one at a time) and their answers, the plugin's notifications, the
/// plugin's requests to the host and their answers, and the limits on all of these.
///
/// It does no waiting: whoever waits (`PluginConnection`, over a plugin's pipes)
/// calls `readChannel` when the read end is readable, `writeQueued` when the write
/// end has room, and `checkStalls` as time passes. The first breach of the protocol
/// or of a limit ends the conversation: `failure` keeps it, and `answer()` throws it.
final class PluginConversation {
    let channel: PluginChannel
    let limits: ConnectionLimits
    /// Called with each notification the plugin sends.
    var onNotification: ((_ method: String, _ params: JSONValue?) -> Void)?
    /// Answers requests the plugin sends to the host (globals, bookmarks...).
    var onRequest: ((_ method: String, _ params: JSONValue?) -> Result<JSONValue, RPCError>)?

    private var nextID: Int64 = 1
    /// Requests the host stopped waiting for (deadline): a late answer to one is not a violation.
    private var abandoned: Set<RequestID> = []
    /// The request in flight, and its method (for errors).
    private(set) var waitingFor: RequestID?
    private var waitingMethod = ""
    private var reply: Result<JSONValue, RPCError>?
    /// Why the conversation cannot go on (a protocol violation, a limit), once noticed.
    private(set) var failure: ConversationError?
    /// Requests the plugin sent in this run (and their bytes), for the budget's error.
    private var requestsServed = 0
    private var requestBytes = 0
    /// When the outbound queue last got smaller (or went over the high-water mark).
    private var lastDrain: UInt64 = 0
    /// False once the run is over (its deadline passed): nothing more of the plugin's is read or served.
    private(set) var readsPeer = true
    /// When the plugin closed its output (the read end) or its input (the write end).
    private var outputClosedAt: UInt64?
    private var inputClosedAt: UInt64?

    /// The longest method name the host looks up or repeats in an error.
    static let maxMethodNameBytes = 256

    init(ends: any ChannelEnds, limits: ConnectionLimits) {
        self.channel = PluginChannel(ends: ends, maxFrameBytes: limits.maxFrameBytes)
        self.limits = limits
    }

    // MARK: The host's requests

    /// Sends a request; the conversation waits for its answer (`answer()`) until `endRequest`.
    @discardableResult
    func send(_ method: String, _ params: JSONValue?) -> RequestID {
        let id = RequestID.int(nextID)
        nextID += 1
        waitingFor = id
        waitingMethod = method
        reply = nil
        enqueue(.request(id: id, method: method, params: params))
        return id
    }

    /// Whether the answer to the request in flight was read.
    var hasAnswer: Bool { reply != nil }

    /// The answer to the request in flight, nil until it is read; throws why the
    /// conversation cannot go on, if it cannot.
    func answer() throws(ConversationError) -> Result<JSONValue, RPCError>? {
        if let failure { throw failure }
        return reply
    }

    /// Stops waiting for the request in flight. An abandoned one (its deadline passed,
    /// the caller cancelled) may still be answered later: that answer is dropped.
    func endRequest(abandoned isAbandoned: Bool) {
        if isAbandoned, let waitingFor { abandoned.insert(waitingFor) }
        waitingFor = nil
        reply = nil
    }

    func notify(_ method: String, _ params: JSONValue?) {
        enqueue(.notification(method: method, params: params))
    }

    /// Reads and serves nothing more from the plugin (its deadline passed: the grace
    /// it gets to exit is not time to go on asking the host for things).
    func stopReading() {
        readsPeer = false
    }

    // MARK: Driving the channel

    /// Whether the host stops reading the plugin's requests until it reads its answers.
    var isBackpressured: Bool { channel.pendingBytes >= limits.outboundHighWater }

    /// Whether the read end is to be read when it is readable (backpressure: while the
    /// plugin leaves its answers unread, its requests stay in the pipe).
    var wantsInput: Bool { readsPeer && !isBackpressured && channel.readFD >= 0 }

    /// Whether frames read while the queue was full wait to be served (`serveBuffered`).
    var hasUnservedInput: Bool { readsPeer && !isBackpressured && channel.hasBufferedBytes }

    /// Whether bytes wait to be written (`writeQueued` when the write end has room).
    var hasPendingOutput: Bool { channel.pendingBytes > 0 }

    /// Reads once from the channel and serves the frames completed. Returns whether
    /// bytes were read. At the end of the stream the read end is closed (and the time
    /// noted for `checkStalls`).
    @discardableResult
    func readChannel(deadline: () -> UInt64) -> Bool {
        switch channel.read() {
        case .read:
            serveBuffered(deadline: deadline)
            return true
        case .wouldBlock:
            return false
        case .closed:
            outputClosedAt = MonotonicClock.now()
            return false
        }
    }

    /// Serves the complete frames buffered, one at a time, until the queue for the
    /// plugin is over its high-water mark or the deadline has passed (checked between
    /// frames: a run ends on time however many requests the plugin wrote at once).
    /// Returns whether a frame was served.
    @discardableResult
    func serveBuffered(deadline: () -> UInt64) -> Bool {
        var served = false
        do throws(FramingError) {
            while failure == nil, !isBackpressured, MonotonicClock.now() < deadline(),
                let body = try channel.nextFrame()
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

    /// Writes what is queued while the write end takes it. A failed write (the plugin
    /// closed its input) drops the queue; the time is noted for `checkStalls`.
    func writeQueued() {
        let result = channel.writeQueued()
        if result.written > 0 { lastDrain = MonotonicClock.now() }
        if result.closed { inputClosedAt = MonotonicClock.now() }
    }

    /// A plugin that closed a channel and kept running (`peerIsRunning`, asked only once
    /// a grace has passed since), or that keeps the host holding answers it does not
    /// read: throws why the conversation stops, if it must.
    func checkStalls(now: UInt64, peerIsRunning: () -> Bool) throws(ConversationError) {
        let grace = UInt64(limits.closedChannelGraceMs) * 1_000_000
        if waitingFor != nil, let closed = outputClosedAt, channel.readFD < 0, now &- closed >= grace, peerIsRunning() {
            throw .protocolViolation(
                "it closed its channel (fd 4, its output) and kept running: no answer to \(waitingMethod) can come (waited \(limits.closedChannelGraceMs) ms for its exit)")
        }
        if waitingFor != nil, let closed = inputClosedAt, now &- closed >= grace, peerIsRunning() {
            throw .protocolViolation(
                "it closed its channel (fd 3, its input) and kept running: it cannot read \(waitingMethod) (waited \(limits.closedChannelGraceMs) ms for its exit)")
        }
        if isBackpressured, now &- lastDrain >= UInt64(limits.unreadAnswersMs) * 1_000_000 {
            let pending = channel.pendingBytes
            throw .overLimit(
                LimitBreach(
                    limit: limits.memoryField, limitValue: limits.memoryBytes, measured: pending,
                    what:
                        "it sent \(requestsServed) requests (\(ByteCount.format(Int64(requestBytes)))) and read none of the \(ByteCount.format(Int64(pending))) of answers queued for it for \(limits.unreadAnswersMs) ms; the host holds at most half of its budget of \(ByteCount.format(Int64(limits.memoryBytes))) (\(limits.memoryField)) in answers for a plugin, and stops one that does not read them",
                    extra: ["requests": .int(Int64(requestsServed)), "requestBytes": .int(Int64(requestBytes))]))
        }
    }

    // MARK: Messages

    private func enqueue(_ message: Message) {
        enqueue(body: message.encoded())
    }

    private func enqueue(body: [UInt8]) {
        let wasBackpressured = isBackpressured
        channel.enqueue(body: body)
        if !wasBackpressured && isBackpressured { lastDrain = MonotonicClock.now() }
        // Written at once where the channel takes it (it is non-blocking); what is left,
        // the waiting loop writes when the write end has room.
        writeQueued()
    }

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

    private func responseTooLarge(_ bytes: Int) -> ConversationError {
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
}
