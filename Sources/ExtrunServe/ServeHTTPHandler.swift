import ExtrunHost
import ExtrunMCP
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
    var caller = Caller(uid: UInt32.max, pid: nil, tcp: false)
    private var head: HTTPRequestHead?
    var body: [UInt8] = []
    /// Bytes of the service's request budget (maxBufferedRequestBytes) this connection holds.
    private var reserved = 0
    /// Who this connection counts for (maxConnectionsPerCaller), once counted.
    private var holder: ConnectionHolder?
    /// Over TCP: whether it counts for the token's holders too, since a request showed the token.
    private var countedForToken = false
    /// Refused at its accept (a connection limit): whatever it sends is ignored until it is closed.
    private var overCap = false
    /// An interactive stream's bytes written and not yet taken by the caller, and the
    /// progress events dropped because of them (progress is lossy; prompts and the report are not).
    private var streamPending = 0
    private var droppedProgress = 0
    /// The most a stream may hold unread before its progress events are dropped.
    static let progressBudgetBytes = 256 << 10
    private var refused = false
    private var requestTimer: Scheduled<Void>?
    /// The head's deadline (requestHeadTimeoutSeconds), cancelled when the head arrives.
    private var headTimer: Scheduled<Void>?
    /// The run this connection waits for, and its stream when interactive.
    private var control: RunControl?
    private var ticket: Admission.Ticket?
    private var stream: StreamSink?
    var active = true
    /// `/mcp` (ServeHTTPHandler+MCP.swift): the dispatcher (nil when serve.json turns MCP off),
    /// the message in its hands, and whether its answer became an SSE stream.
    let mcp: MCPDispatcher?
    var mcpExchange: MCPExchange?
    var mcpStreaming = false

    init(engine: ServeEngine, token: [UInt8]?, mcp: MCPDispatcher? = nil) {
        self.engine = engine
        self.token = token
        self.mcp = mcp
    }

    func channelActive(context: ChannelHandlerContext) {
        if token != nil {
            caller = Caller(uid: ServeService.tcpCallerUID, pid: nil, tcp: true)
            admitConnection(.address(context.channel.remoteAddress?.ipAddress ?? "unknown"), context: context)
        } else if let provider = context.channel as? any SocketOptionProvider {
            // On the event loop the option is read at once and the future is already complete.
            let future: EventLoopFuture<PeerCredentials> = provider.unsafeGetSocketOption(
                level: PeerCredentials.level, name: PeerCredentials.option)
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            future.whenComplete { result in
                let (handler, context) = bound.value
                if case .success(let credentials) = result {
                    handler.caller = Caller(uid: credentials.uid, pid: credentials.pid, tcp: false)
                }
                handler.admitConnection(.uid(handler.caller.uid), context: context)
            }
        } else {
            admitConnection(.uid(caller.uid), context: context)
        }
        context.fireChannelActive()
    }

    /// Counts the connection for its holder, or refuses it: 503 `overloaded` with the numbers,
    /// written before any byte is read, then closed (the refusal in the log at most a few lines
    /// per 10 s, and in `extrun_connections_refused_total`).
    private func admitConnection(_ holder: ConnectionHolder, context: ChannelHandlerContext) {
        guard active else { return }
        let policy = engine.policy
        let limit: Int
        switch holder {
        case .uid(let uid): limit = policy.maxConnections(forCaller: uid, serviceUID: engine.serviceUID)
        case .address, .token: limit = policy.maxConnectionsPerCaller
        }
        if let error = engine.connections.open(holder, limit: limit, total: policy.maxConnections) {
            overCap = true
            refuseConnection(error, holder: holder, context: context, atAccept: true)
            return
        }
        self.holder = holder
        armRequestTimer(context: context)
    }

    private func refuseConnection(_ error: HostError, holder: ConnectionHolder, context: ChannelHandlerContext, atAccept: Bool) {
        refused = true
        let reason = error.details["reason"]?.stringValue ?? "connections"
        engine.metrics.connectionRefused(reason: reason)
        engine.refusals.refused(
            reason == "connections" ? "the service" : "\(holder)", reason: reason,
            message: "connection refused: \(error.message)",
            metadata: [
                "open": "\(error.details["open"]?.intValue ?? 0)", "limit": "\(error.details["limit"]?.stringValue ?? "")",
                "limitValue": "\(error.details["limitValue"]?.intValue ?? 0)",
            ])
        var body = JSONWriter.bytes(ServeResponse.early(error))
        body.append(0x0A)
        guard atAccept else {
            var headers = HTTPHeaders()
            headers.add(name: "retry-after", value: "1")
            respond(context: context, status: 503, bytes: body, contentType: "application/json", close: true, extraHeaders: headers, budgeted: false)
            return
        }
        // No request has come: the answer goes out as bytes from the first handler (the
        // response encoder), past the HTTP pipeline, which has no request to answer.
        let text = "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: \(body.count)\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
        var buffer = context.channel.allocator.buffer(capacity: text.utf8.count + body.count)
        buffer.writeString(text)
        buffer.writeBytes(body)
        guard let first = try? context.pipeline.syncOperations.context(handlerType: HTTPResponseEncoder.self) else {
            context.close(promise: nil)
            return
        }
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        let timeout = context.eventLoop.scheduleTask(in: .seconds(1)) { bound.value.close(promise: nil) }
        first.writeAndFlush(NIOAny(buffer)).whenComplete { _ in
            timeout.cancel()
            bound.value.close(promise: nil)
        }
    }

    /// The deadlines of the next request: its head within requestHeadTimeoutSeconds, all of it
    /// within requestTimeoutSeconds (the caller's own, when serve.json's callers names its uid).
    func armRequestTimer(context: ChannelHandlerContext) {
        requestTimer?.cancel()
        headTimer?.cancel()
        let (head, whole) = engine.policy.requestDeadlines(forCaller: caller.uid)
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        requestTimer = context.eventLoop.scheduleTask(in: .milliseconds(Int64(whole * 1000))) {
            // The caller did not send a whole request in time (or stayed idle between two): closed.
            bound.value.close(promise: nil)
        }
        headTimer = context.eventLoop.scheduleTask(in: .milliseconds(Int64(head * 1000))) {
            bound.value.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        active = false
        dropBody()
        if let holder {
            self.holder = nil
            engine.connections.close(holder)
        }
        if countedForToken {
            countedForToken = false
            engine.connections.close(.token, counted: false)
        }
        requestTimer?.cancel()
        headTimer?.cancel()
        stream?.close()
        if let exchange = mcpExchange {
            mcpExchange = nil
            exchange.clientGone()
        }
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
            headTimer?.cancel()
            headTimer = nil
            head = request
            dropBody()
            refused = false
            // Over TCP the credentials are checked at the head, before any byte of the body is
            // read (ServeGate.authenticate: the token, or a bearer JWT); two Authorization headers
            // are refused, whichever holds the token. The protected resource metadata is public.
            if let token, !(request.method == .GET && ServeGate.isMetadataPath(request.uri)) {
                let sent = request.headers["authorization"]
                guard sent.count <= 1 else {
                    refused = true
                    let error = HostError(
                        .invalidIntent, "the request has \(sent.count) Authorization headers; send one: 'Authorization: Bearer TOKEN'",
                        details: ["field": "authorization", "measured": .int(Int64(sent.count))])
                    respond(context: context, status: 400, body: ServeResponse.early(error), close: true)
                    return
                }
                switch engine.gate.authenticate(authorization: sent.first, token: token) {
                case .success(let principal):
                    caller.principal = principal
                case .failure(let failure):
                    refused = true
                    var headers = HTTPHeaders()
                    headers.add(name: "www-authenticate", value: engine.gate.challenge(failure, host: request.headers.first(name: "host")))
                    engine.gate.audit(
                        AuditRecord(
                            principal: "none", transport: "tcp", call: String(request.uri.prefix { $0 != "?" }.prefix(200)), outcome: "refused",
                            error: failure.error.kind.rawValue, reason: failure.reason.rawValue, status: 401, durationMs: 0))
                    respond(context: context, status: 401, body: .object(["error": failure.error.json]), close: true, extraHeaders: headers)
                    return
                }
                if !countedForToken {
                    // The token's holders together: maxConnectionsPerCaller.
                    if let error = engine.connections.add(.token, limit: engine.policy.maxConnectionsPerCaller) {
                        refuseConnection(error, holder: .token, context: context, atAccept: false)
                        return
                    }
                    countedForToken = true
                }
            }
            let limit = engine.policy.maxRequestBytes
            if let length = request.headers.first(name: "content-length").flatMap(Int.init), length > 0 {
                if length > limit {
                    refuseTooLarge(context: context, size: length, exact: true)
                    return
                } else if let error = engine.reserveRequestBytes(length) {
                    refuseBudget(error, context: context)
                    return
                } else {
                    reserved = length
                    body.reserveCapacity(length)
                }
            }
            // Expect (RFC 9110 10.1.1): 100-continue is answered 100 now, once the head passed
            // the checks above (a refused body is answered at once, without 100); any other
            // expectation is refused 417.
            let expectations = request.headers["expect"]
            if !expectations.isEmpty {
                if expectations.count == 1, expectations[0].lowercased() == "100-continue" {
                    if request.version.major == 1, request.version.minor >= 1 {
                        context.writeAndFlush(wrapOutboundOut(.head(HTTPResponseHead(version: request.version, status: .continue))), promise: nil)
                    }
                } else {
                    refused = true
                    dropBody()
                    let error = HostError(
                        .invalidIntent, "the service meets only 'Expect: 100-continue'; this request expects '\(expectations.joined(separator: ", ").prefix(200))'",
                        details: ["field": "expect"])
                    respond(context: context, status: 417, body: ServeResponse.early(error), close: true)
                    return
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
    func dropBody() {
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
        if Self.isMCPPath(head.uri) {
            dispatchMCP(head, context: context)
            return
        }
        if ServeGate.isMetadataPath(head.uri) {
            // RFC 9728: the protected resource metadata, for anyone; GET only (405 with Allow otherwise).
            dropBody()
            guard head.method == .GET else {
                var allow = HTTPHeaders()
                allow.add(name: "allow", value: "GET")
                let error = HostError(.invalidIntent, "\(ServeGate.metadataPath) takes GET, not \(head.method.rawValue)", details: ["allow": "GET"])
                respond(context: context, status: 405, body: .object(["error": error.json]), close: !keepAlive, extraHeaders: allow)
                return
            }
            respond(context: context, status: 200, body: engine.gate.resourceMetadata(host: head.headers.first(name: "host")), close: !keepAlive)
            return
        }
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
                bound.value.close(promise: nil)
            }
            return
        }
        var headers = HTTPHeaders()
        if let retry = outcome.retryAfterSeconds { headers.add(name: "retry-after", value: String(retry)) }
        if let challenge = outcome.challenge { headers.add(name: "www-authenticate", value: challenge) }
        if let rendered = outcome.rendered {
            respond(
                context: context, status: outcome.status, bytes: rendered, contentType: "application/json", close: !keepAlive,
                extraHeaders: headers)
        } else {
            respond(context: context, status: outcome.status, body: outcome.body, close: !keepAlive, extraHeaders: headers)
        }
    }

    /// Writes an event line of an interactive run (on the event loop).
    fileprivate func writeEvent(_ line: [UInt8], lossy: Bool, context: ChannelHandlerContext) {
        guard active, stream != nil else { return }
        writeStreamed(line, lossy: lossy, context: context)
    }

    /// Writes one event of a streamed answer (an interactive run's NDJSON line, an MCP
    /// call's SSE event), on the event loop. Progress (`lossy`) is dropped while the stream
    /// holds more than progressBudgetBytes the caller has not read; any other event (a
    /// prompt, a tell, an in-band question) not taken within writeTimeoutSeconds closes the
    /// connection, which cancels the run.
    func writeStreamed(_ line: [UInt8], lossy: Bool, context: ChannelHandlerContext) {
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

    func respond(
        context: ChannelHandlerContext, status: Int, body: JSONValue, close: Bool, lingering: Bool = false, extraHeaders: HTTPHeaders = [:]
    ) {
        var bytes = JSONWriter.bytes(body)
        bytes.append(0x0A)
        respond(
            context: context, status: status, bytes: bytes, contentType: "application/json", close: close, lingering: lingering,
            extraHeaders: extraHeaders)
    }

    func respond(
        context: ChannelHandlerContext, status: Int, bytes: [UInt8], contentType: String, close: Bool, lingering: Bool = false,
        extraHeaders: HTTPHeaders = [:], budgeted: Bool = true
    ) {
        guard active else { return }
        var status = status
        var bytes = bytes
        var contentType = contentType
        var reservedAnswer = budgeted ? bytes.count : 0
        if budgeted, let error = engine.reserveResponseBytes(bytes.count) {
            // Callers that do not read hold too much already: this answer is dropped for a
            // refusal with the numbers (small, and not counted).
            engine.metrics.breach("responseBudget")
            engine.refusals.refused(
                caller.tcp ? "TCP callers" : "uid \(caller.uid)", reason: "responseBudget", message: "answer dropped: \(error.message)")
            status = 500  // not 503: the run happened (a balancer retries 503, which must mean nothing ran)
            bytes = JSONWriter.bytes(ServeResponse.envelope(ServeResponse.refusal(error), text: false))
            bytes.append(0x0A)
            contentType = "application/json"
            reservedAnswer = 0
        }
        var headers = extraHeaders
        // An answer with no body (202) names no content type.
        if !contentType.isEmpty { headers.add(name: "content-type", value: contentType) }
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
        let reservedBytes = reservedAnswer
        done.whenComplete { _ in
            timeout.cancel()
            engine.releaseResponseBytes(reservedBytes)
        }
        if close {
            done.whenComplete { _ in bound.value.close(promise: nil) }
        } else if !lingering {
            armRequestTimer(context: context)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
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
        var bytes = JSONWriter.bytes(event)
        bytes.append(0x0A)
        let line = bytes
        let bound = self.bound
        eventLoop.execute {
            let (handler, context) = bound.value
            handler.writeEvent(line, lossy: lossy, context: context)
        }
        return true
    }
}
