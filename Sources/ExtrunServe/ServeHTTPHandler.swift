import ExtrunHost
import ExtrunProtocol
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// One connection: reads a request (bounded in size and time), hands it to the engine,
/// writes the answer. Runs on the connection's event loop; intents never do (they run on
/// worker threads and come back here through `eventLoop.execute`).
final class ServeHTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let engine: ServeEngine
    /// Over TCP: the token callers must send (`Authorization: Bearer TOKEN`); nil on the Unix socket.
    let token: [UInt8]?
    private var caller = Caller(uid: UInt32.max, pid: nil, tcp: false)
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []
    /// Bytes of the service's request budget (maxBufferedRequestBytes) this connection holds.
    private var reserved = 0
    /// Whether this connection counts in `openConnections` (maxConnections).
    private var counted = false
    /// Refused at once for maxConnections: whatever it sends is ignored until it is closed.
    private var overCap = false
    /// An interactive stream's bytes written and not yet taken by the caller, and the
    /// progress events dropped because of them (progress is lossy; prompts and the report are not).
    private var streamPending = 0
    private var droppedProgress = 0
    /// The most a stream may hold unread before its progress events are dropped.
    static let progressBudgetBytes = 256 << 10
    private var refused = false
    private var requestTimer: Scheduled<Void>?
    /// The run this connection waits for, and its stream when interactive.
    private var control: RunControl?
    private var ticket: Admission.Ticket?
    private var stream: StreamSink?
    private var active = true

    init(engine: ServeEngine, token: [UInt8]?) {
        self.engine = engine
        self.token = token
    }

    func channelActive(context: ChannelHandlerContext) {
        counted = true
        let open = engine.openConnections.add(1, ordering: .relaxed).newValue
        let most = engine.policy.maxConnections
        if open > most {
            // Closed at once, before a byte is read (HTTP has no answer before a request);
            // the log and the metric have the numbers.
            engine.metrics.breach("connections")
            engine.logger.warning(
                "connection refused: too many open (serve.json maxConnections)",
                metadata: ["open": "\(open - 1)", "maxConnections": "\(most)"])
            refused = true
            overCap = true
            context.close(promise: nil)
            context.fireChannelActive()
            return
        }
        if token != nil {
            caller = Caller(uid: ServeService.tcpCallerUID, pid: nil, tcp: true)
        } else if let provider = context.channel as? any SocketOptionProvider {
            let future: EventLoopFuture<PeerCredentials> = provider.unsafeGetSocketOption(
                level: NIOBSDSocket.OptionLevel(rawValue: SOL_SOCKET), name: NIOBSDSocket.Option(rawValue: SO_PEERCRED))
            let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
            future.whenSuccess { credentials in
                bound.value.caller = Caller(uid: credentials.uid, pid: credentials.pid, tcp: false)
            }
        }
        armRequestTimer(context: context)
        context.fireChannelActive()
    }

    private func armRequestTimer(context: ChannelHandlerContext) {
        requestTimer?.cancel()
        let seconds = engine.policy.requestTimeoutSeconds
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        requestTimer = context.eventLoop.scheduleTask(in: .milliseconds(Int64(seconds * 1000))) {
            // The caller did not send a whole request in time (or stayed idle between two): closed.
            bound.value.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        active = false
        dropBody()
        if counted {
            counted = false
            engine.openConnections.subtract(1, ordering: .relaxed)
        }
        requestTimer?.cancel()
        stream?.close()
        if let control {
            if let ticket, engine.admission.withdraw(ticket) {
                // It was still waiting for a place: nothing ran.
            } else {
                control.cancel("the caller disconnected")
            }
        }
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let request):
            guard active, !overCap else { return }
            head = request
            dropBody()
            refused = false
            // Over TCP the token is checked at the head, before any byte of the body is read.
            if let token {
                let sent = request.headers.first(name: "authorization").map { Array($0.utf8) } ?? []
                guard ServeService.constantTimeEqual(sent, Array("Bearer ".utf8) + token) else {
                    refused = true
                    let error = HostError(.invalidIntent, "this TCP listener needs 'Authorization: Bearer TOKEN' with the token of the service's --token-file")
                    respond(context: context, status: 401, body: .object(["error": error.json]), close: true)
                    return
                }
            }
            let limit = engine.policy.maxRequestBytes
            if let length = request.headers.first(name: "content-length").flatMap(Int.init), length > 0 {
                if length > limit {
                    refuseTooLarge(context: context, size: length, exact: true)
                } else if let error = engine.reserveRequestBytes(length) {
                    refuseBudget(error, context: context)
                } else {
                    reserved = length
                    body.reserveCapacity(length)
                }
            }
        case .body(var buffer):
            guard !refused else { return }
            let limit = engine.policy.maxRequestBytes
            let needed = body.count + buffer.readableBytes
            if needed > limit {
                refuseTooLarge(context: context, size: needed, exact: false)
                return
            }
            if needed > reserved {
                // A body without a Content-Length (chunked): reserved as it comes.
                if let error = engine.reserveRequestBytes(needed - reserved) {
                    refuseBudget(error, context: context)
                    return
                }
                reserved = needed
            }
            body += buffer.readBytes(length: buffer.readableBytes) ?? []
        case .end:
            if refused {
                context.close(promise: nil)
                return
            }
            guard let head else { return }
            requestTimer?.cancel()
            requestTimer = nil
            dispatch(head, context: context)
        }
    }

    /// The body's bytes and their share of the service's request budget, given back.
    private func dropBody() {
        body = []
        engine.releaseRequestBytes(reserved)
        reserved = 0
    }

    /// The service's request budget is spent: 503 overloaded with the numbers, the body not read.
    private func refuseBudget(_ error: HostError, context: ChannelHandlerContext) {
        refused = true
        dropBody()
        engine.metrics.breach("requestBudget")
        var headers = HTTPHeaders()
        headers.add(name: "retry-after", value: "1")
        respond(
            context: context, status: 503, body: ServeResponse.envelope(ServeResponse.refusal(error), text: false), close: false, lingering: true,
            extraHeaders: headers)
        requestTimer?.cancel()
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        requestTimer = context.eventLoop.scheduleTask(in: .seconds(1)) { bound.value.close(promise: nil) }
    }

    private func refuseTooLarge(context: ChannelHandlerContext, size: Int, exact: Bool) {
        refused = true
        dropBody()
        let limit = engine.policy.maxRequestBytes
        let error = HostError(
            .invalidIntent,
            "the request's body is \(exact ? "" : "more than ")\(ByteCount.format(Int64(size))) (\(size) bytes), over the service's limit of \(ByteCount.format(Int64(limit))) (serve.json maxRequestBytes); it was not read",
            details: ["limit": "maxRequestBytes", "limitValue": .int(Int64(limit)), "measured": .int(Int64(size))])
        // The answer, then a lingering close: the rest of the body is read and dropped for a
        // moment, so that the caller reads the answer instead of a reset.
        respond(context: context, status: 413, body: ServeResponse.envelope(ServeResponse.refusal(error), text: false), close: false, lingering: true)
        requestTimer?.cancel()
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        requestTimer = context.eventLoop.scheduleTask(in: .seconds(1)) { bound.value.close(promise: nil) }
    }

    private func dispatch(_ head: HTTPRequestHead, context: ChannelHandlerContext) {
        let keepAlive = head.isKeepAlive
        let call: ServeCall
        do throws(ServeRequestError) {
            call = try ServeRequestDecoder.decode(method: head.method.rawValue, target: head.uri, body: body)
            dropBody()
        } catch {
            dropBody()
            var headers = HTTPHeaders()
            if let allow = error.allow { headers.add(name: "allow", value: allow) }
            respond(
                context: context, status: error.status,
                body: error.bare ? .object(["error": error.error.json]) : ServeResponse.envelope(ServeResponse.refusal(error.error), text: false),
                close: !keepAlive, extraHeaders: headers)
            return
        }
        switch call {
        case .health:
            respond(context: context, status: 200, body: engine.health(), close: !keepAlive)
        case .metrics:
            respond(context: context, status: 200, bytes: engine.renderMetrics(), contentType: "text/plain; version=0.0.4", close: !keepAlive)
        case .answer(let run, let prompt, let value):
            let outcome = engine.answer(run: run, prompt: prompt, value: value, caller: caller)
            respond(context: context, status: outcome.status, body: outcome.body, close: !keepAlive)
        case .describe(let intent):
            // The catalog may be discovered again (files): off the event loop.
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            let engine = self.engine
            let eventLoop = context.eventLoop
            engine.lookups.submit { _ in
                let outcome = engine.describe(intent: intent)
                eventLoop.execute {
                    let (handler, context) = bound.value
                    handler.respond(context: context, status: outcome.status, body: outcome.body, close: !keepAlive)
                }
            }
        case .handle(_, let options), .options(_, _, _, let options), .continueActivity(_, let options), .phrase(_, let options):
            let control = RunControl()
            self.control = control
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            let eventLoop = context.eventLoop
            var sink: StreamSink?
            if options.interactive {
                let stream = StreamSink(bound: bound, eventLoop: eventLoop)
                self.stream = stream
                sink = stream
                var headers = HTTPHeaders()
                headers.add(name: "content-type", value: "application/x-ndjson")
                headers.add(name: "cache-control", value: "no-store")
                context.writeAndFlush(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: headers))), promise: nil)
            }
            ticket = engine.admit(call, caller: caller, control: control, sink: sink) { outcome in
                eventLoop.execute {
                    let (handler, context) = bound.value
                    handler.finishRun(outcome, context: context, keepAlive: keepAlive)
                }
            }
        }
    }

    private func finishRun(_ outcome: ServeEngine.Outcome, context: ChannelHandlerContext, keepAlive: Bool) {
        control = nil
        ticket = nil
        engine.metrics.request(status: outcome.status)
        guard active else { return }
        if let stream {
            self.stream = nil
            stream.close()
            var event = outcome.body.objectValue ?? [:]
            event["event"] = "report"
            event["status"] = .int(Int64(outcome.status))
            var line = JSONWriter.bytes(.object(event))
            line.append(0x0A)
            context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: line)))), promise: nil)
            let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
            let timeout = context.eventLoop.scheduleTask(in: .milliseconds(Int64(engine.policy.writeTimeoutSeconds * 1000))) {
                bound.value.close(promise: nil)
            }
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
                timeout.cancel()
                context.close(promise: nil)
            }
            return
        }
        var headers = HTTPHeaders()
        if let retry = outcome.retryAfterSeconds { headers.add(name: "retry-after", value: String(retry)) }
        if let rendered = outcome.rendered {
            respond(
                context: context, status: outcome.status, bytes: rendered, contentType: "application/json", close: !keepAlive,
                extraHeaders: headers)
        } else {
            respond(context: context, status: outcome.status, body: outcome.body, close: !keepAlive, extraHeaders: headers)
        }
    }

    /// Writes an event line of an interactive run (on the event loop).
    /// Progress (`lossy`) is dropped while the stream holds more than progressBudgetBytes
    /// the caller has not read; any other event (a prompt, a tell) not taken within
    /// writeTimeoutSeconds closes the connection, which cancels the run.
    fileprivate func writeEvent(_ line: [UInt8], lossy: Bool, context: ChannelHandlerContext) {
        guard active, stream != nil else { return }
        if lossy, streamPending + line.count > Self.progressBudgetBytes {
            droppedProgress += 1
            if droppedProgress == 1 {
                engine.logger.notice(
                    "progress dropped: the caller does not read its stream",
                    metadata: ["pendingBytes": "\(streamPending)", "budgetBytes": "\(Self.progressBudgetBytes)"])
            }
            return
        }
        streamPending += line.count
        let promise = context.eventLoop.makePromise(of: Void.self)
        context.writeAndFlush(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: line)))), promise: promise)
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let timeout: Scheduled<Void>? =
            lossy
            ? nil
            : context.eventLoop.scheduleTask(in: .milliseconds(Int64(engine.policy.writeTimeoutSeconds * 1000))) {
                let (handler, context) = bound.value
                handler.engine.logger.warning(
                    "the caller did not take a prompt within writeTimeoutSeconds: disconnected, the run is cancelled",
                    metadata: ["pendingBytes": "\(handler.streamPending)"])
                context.close(promise: nil)
            }
        let size = line.count
        promise.futureResult.whenComplete { _ in
            timeout?.cancel()
            bound.value.0.streamPending -= size
        }
    }

    private func respond(
        context: ChannelHandlerContext, status: Int, body: JSONValue, close: Bool, lingering: Bool = false, extraHeaders: HTTPHeaders = [:]
    ) {
        var bytes = JSONWriter.bytes(body)
        bytes.append(0x0A)
        respond(
            context: context, status: status, bytes: bytes, contentType: "application/json", close: close, lingering: lingering,
            extraHeaders: extraHeaders)
    }

    private func respond(
        context: ChannelHandlerContext, status: Int, bytes: [UInt8], contentType: String, close: Bool, lingering: Bool = false,
        extraHeaders: HTTPHeaders = [:]
    ) {
        guard active else { return }
        var status = status
        var bytes = bytes
        var contentType = contentType
        var reservedAnswer = bytes.count
        if let error = engine.reserveResponseBytes(bytes.count) {
            // Callers that do not read hold too much already: this answer is dropped for a
            // refusal with the numbers (small, and not counted).
            engine.metrics.breach("responseBudget")
            engine.logger.warning("answer dropped", metadata: ["error": "\(error.message)"])
            status = 503
            bytes = JSONWriter.bytes(ServeResponse.envelope(ServeResponse.refusal(error), text: false))
            bytes.append(0x0A)
            contentType = "application/json"
            reservedAnswer = 0
        }
        var headers = extraHeaders
        headers.add(name: "content-type", value: contentType)
        headers.add(name: "content-length", value: String(bytes.count))
        if close || lingering { headers.add(name: "connection", value: "close") }
        let head = HTTPResponseHead(version: .http1_1, status: HTTPResponseStatus(statusCode: status), headers: headers)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: bytes)))), promise: nil)
        let done = context.writeAndFlush(wrapOutboundOut(.end(nil)))
        self.head = nil
        // A caller that does not read its answer is disconnected after writeTimeoutSeconds:
        // what the service holds for it is bounded by one answer, for a bounded time.
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        let timeout = context.eventLoop.scheduleTask(in: .milliseconds(Int64(engine.policy.writeTimeoutSeconds * 1000))) {
            bound.value.close(promise: nil)
        }
        let engine = self.engine
        done.whenComplete { _ in
            timeout.cancel()
            engine.releaseResponseBytes(reservedAnswer)
        }
        if close {
            done.whenComplete { _ in context.close(promise: nil) }
        } else if !lingering {
            armRequestTimer(context: context)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

/// `struct ucred` of SO_PEERCRED (Glibc shows it only with _GNU_SOURCE): the same layout.
struct PeerCredentials: Sendable {
    var pid: Int32 = 0
    var uid: UInt32 = 0
    var gid: UInt32 = 0
}

/// An interactive run's stream of NDJSON events, written on the connection's event loop.
final class StreamSink: EventSink, Sendable {
    private let bound: NIOLoopBound<(ServeHTTPHandler, ChannelHandlerContext)>
    private let eventLoop: any EventLoop
    private let closed = Atomic<Bool>(false)

    init(bound: NIOLoopBound<(ServeHTTPHandler, ChannelHandlerContext)>, eventLoop: any EventLoop) {
        self.bound = bound
        self.eventLoop = eventLoop
    }

    func close() { closed.store(true, ordering: .relaxed) }

    @discardableResult
    func send(_ event: JSONValue) -> Bool { send(event, lossy: false) }

    func sendProgress(_ event: JSONValue) { send(event, lossy: true) }

    @discardableResult
    private func send(_ event: JSONValue, lossy: Bool) -> Bool {
        guard !closed.load(ordering: .relaxed) else { return false }
        var line = JSONWriter.bytes(event)
        line.append(0x0A)
        let bound = self.bound
        eventLoop.execute {
            let (handler, context) = bound.value
            handler.writeEvent(line, lossy: lossy, context: context)
        }
        return true
    }
}
