import ExtrunHost
import ExtrunMCP
import ExtrunProtocol
import NIOCore
import NIOHTTP1

/// `/mcp`: MCP's Streamable HTTP transport (docs/mcp.md, "Over HTTP"). The connection's
/// checks come first, as for `/v1` (its credentials at the head, its size, its byte
/// budgets); the body then goes to the `MCPDispatcher`, which places it in its era and
/// answers through outputs that come back here on the event loop:
///
/// - a final reply alone: one JSON answer with the dispatcher's status and headers;
/// - interim messages first (a call's progress, a handshake session's in-band question),
///   when the client accepts `text/event-stream`: a `200 text/event-stream` answer, one SSE
///   event per message, the final reply its last event.
///
/// A connection closed before the final reply tells the dispatcher (`clientGone`): the run
/// is cancelled (the plugin gets `cancel`, its grace, then a kill).
extension ServeHTTPHandler {
    static func isMCPPath(_ target: String) -> Bool {
        let path = target.prefix { $0 != "?" }
        return path == "/mcp" || path == "/mcp/"
    }

    func dispatchMCP(_ head: HTTPRequestHead, context: ChannelHandlerContext) {
        let keepAlive = head.isKeepAlive
        let bytes = body
        dropBody()
        guard let mcp else {
            let error = HostError(.notFound, "MCP is turned off on this service (serve.json: \"mcp\": {\"enabled\": false})", details: ["field": "mcp.enabled"])
            respond(context: context, status: 404, body: .object(["error": error.json]), close: !keepAlive)
            return
        }
        let headers = MCPHeaders(head.headers.map { ($0.name, $0.value) })
        let request = MCPRequestContext(
            principal: caller.principal.name, scopes: caller.principal.scopes.sorted(), headers: headers, uid: caller.uid,
            caller: engine.callerIdentity(caller, grants: engine.policy.grants))
        switch head.method {
        case .POST:
            break
        case .DELETE:
            // A handshake session's end (Mcp-Session-Id); a modern client has none to end.
            let reply = mcp.endSession(headers["mcp-session-id"], context: request)
            finishMCP(reply, context: context, keepAlive: keepAlive)
            return
        default:
            // No stream is offered apart from a request's own answer: GET (and anything else) is 405.
            var allow = HTTPHeaders()
            allow.add(name: "allow", value: "POST, DELETE")
            let error = HostError(
                .invalidIntent, "/mcp takes POST (a JSON-RPC message) and DELETE (a handshake session's end); \(head.method.rawValue) is not offered",
                details: ["field": "method"])
            respond(context: context, status: 405, body: .object(["error": error.json]), close: !keepAlive, extraHeaders: allow)
            return
        }
        if let type = headers["content-type"], !type.lowercased().hasPrefix("application/json") {
            let error = HostError(
                .invalidIntent, "/mcp takes a JSON-RPC message as 'Content-Type: application/json'; this request sends '\(type.prefix(100))'",
                details: ["field": "content-type"])
            respond(context: context, status: 415, body: .object(["error": error.json]), close: !keepAlive)
            return
        }
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let eventLoop = context.eventLoop
        mcpStreaming = false
        // Every output is queued to this loop (`execute` never runs it inline), so even an
        // answer given before `receive` returns finds `mcpExchange` set.
        mcpExchange = mcp.receive(bytes, context: request) { output in
            eventLoop.execute {
                let (handler, context) = bound.value
                switch output {
                case .interim(let message): handler.sendMCPEvent(message, context: context)
                case .final(let reply): handler.finishMCP(reply, context: context, keepAlive: keepAlive)
                }
            }
        }
    }

    /// One message before the final reply, as an SSE event (the first one sends the answer's head).
    /// Written as an interactive run's events are (`writeStreamed`: progress is lossy).
    func sendMCPEvent(_ message: JSONValue, context: ChannelHandlerContext) {
        guard active, mcpExchange != nil else { return }
        if !mcpStreaming {
            mcpStreaming = true
            var headers = HTTPHeaders()
            headers.add(name: "content-type", value: "text/event-stream")
            headers.add(name: "cache-control", value: "no-store")
            context.writeAndFlush(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: headers))), promise: nil)
        }
        let lossy = message.objectValue?["method"]?.stringValue == "notifications/progress"
        writeStreamed(Self.sseEvent(message), lossy: lossy, context: context)
    }

    /// The exchange's last output: the JSON answer, or the stream's last event and its end.
    func finishMCP(_ reply: MCPReply, context: ChannelHandlerContext, keepAlive: Bool) {
        mcpExchange = nil
        engine.metrics.request(status: reply.status)
        guard active else { return }
        if mcpStreaming {
            mcpStreaming = false
            if let message = reply.message {
                context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: Self.sseEvent(message))))), promise: nil)
            }
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            let timeout = context.eventLoop.scheduleTask(in: .milliseconds(Int64(engine.policy.writeTimeoutSeconds * 1000))) {
                bound.value.1.close(promise: nil)
            }
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
                timeout.cancel()
                let (handler, context) = bound.value
                if keepAlive {
                    handler.armRequestTimer(context: context)
                } else {
                    context.close(promise: nil)
                }
            }
            return
        }
        var headers = HTTPHeaders()
        for (name, value) in reply.headers { headers.add(name: name, value: value) }
        guard let message = reply.message else {
            // 202: a notification or a client's response, taken; no body.
            respond(context: context, status: reply.status, bytes: [], contentType: "", close: !keepAlive, extraHeaders: headers)
            return
        }
        respond(context: context, status: reply.status, body: message, close: !keepAlive, extraHeaders: headers)
    }

    /// `event: message` and the message on one `data:` line (JSON has no raw newline).
    static func sseEvent(_ message: JSONValue) -> [UInt8] {
        var bytes = Array("event: message\ndata: ".utf8)
        bytes += JSONWriter.bytes(message)
        bytes += Array("\n\n".utf8)
        return bytes
    }
}
