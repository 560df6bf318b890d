import ExtrunHost
import ExtrunProtocol
import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

// The transport-agnostic surface of the MCP server (docs/mcp.md): one `MCPDispatcher`
// takes one JSON-RPC message at a time, with the context it came in (who sent it, over
// which transport, with which HTTP headers), and answers through an output closure that
// may send messages before the final one. `extrun mcp` (MCPServer, stdio) is one
// transport over it; `extrun serve`'s `POST /mcp` (Streamable HTTP) is the other.
//
// An HTTP front end does, per request:
//
//     let exchange = dispatcher.receive(body, context: MCPRequestContext(
//         principal: "token:ci", scopes: [], headers: MCPHeaders(request.headers))) { output in
//         switch output {
//         case .interim(let message): // first one: answer 200 text/event-stream, then one SSE event each
//         case .final(let reply):     // reply.status, reply.headers, reply.message (nil: no body)
//         }
//     }
//     // connection closed before the final output: exchange.clientGone()
//
// and `dispatcher.endSession(id, context:)` for `DELETE /mcp` (a legacy session).

/// Who sent a message and how: the principal the transport authenticated, its scopes,
/// and the HTTP request's headers (nil on stdio).
public struct MCPRequestContext: Sendable {
    /// The authenticated caller, e.g. `uid:0` (stdio, a Unix socket's peer), `token:NAME`,
    /// `jwt:ISSUER#SUB`. A sealed `requestState` is bound to it: another principal's state is refused.
    public var principal: String
    /// The scopes the credential carries (a policy's input; the dispatcher does not read them).
    public var scopes: [String]
    /// The HTTP request's headers; nil on stdio. When present: `Mcp-Method`, `Mcp-Name` and
    /// `MCP-Protocol-Version` are checked against the body (a mismatch: 400, -32020),
    /// `Mcp-Session-Id` names a legacy session, and `Accept: text/event-stream` allows
    /// interim messages (without it none is sent: no progress, no in-band elicitation).
    public var headers: MCPHeaders?
    /// The uid whose admission share a run takes (a Unix socket's peer; the server's own otherwise).
    public var uid: UInt32
    /// The identity a run is made for (its bookmarks' caller); nil: this process's uid, principal `mcp`.
    public var caller: CallerIdentity?

    public init(principal: String, scopes: [String] = [], headers: MCPHeaders? = nil, uid: UInt32 = getuid(), caller: CallerIdentity? = nil) {
        self.principal = principal
        self.scopes = scopes
        self.headers = headers
        self.uid = uid
        self.caller = caller
    }

    /// stdio: the principal is this process's uid.
    public static var stdio: MCPRequestContext { MCPRequestContext(principal: "uid:\(getuid())") }

    /// Messages before the final one may be sent (stdio always; HTTP when the client accepts an SSE stream).
    var canStream: Bool { headers?.acceptsEventStream ?? true }
    var isHTTP: Bool { headers != nil }
}

/// An HTTP request's headers, looked up without regard to case.
public struct MCPHeaders: Sendable {
    private var fields: [String: String] = [:]

    /// Repeated names are joined with ", " (RFC 9110).
    public init(_ pairs: [(String, String)]) {
        for (name, value) in pairs {
            let key = name.lowercased()
            if let known = fields[key] { fields[key] = known + ", " + value } else { fields[key] = value }
        }
    }

    public subscript(_ name: String) -> String? { fields[name.lowercased()] }

    /// `Accept` lists `text/event-stream` (or `*/*`).
    public var acceptsEventStream: Bool {
        guard let accept = self["accept"]?.lowercased() else { return false }
        return accept.contains("text/event-stream") || accept.contains("*/*")
    }
}

/// The protocol era a message was served in (docs/mcp.md, "Two eras").
public enum MCPEra: Sendable, Equatable {
    /// 2026-07-28 and later: the version in the request's `_meta`, no session.
    case modern(version: String)
    /// 2025-11-25 … 2024-11-05: an `initialize` handshake; over HTTP, the session it made
    /// (`Mcp-Session-Id`), nil on stdio and before the handshake.
    case legacy(session: String?)
    /// Not a message the dispatcher could place (not JSON, not JSON-RPC): answered with an error.
    case unknown
}

/// What the dispatcher sends back for one message.
public enum MCPOutput: Sendable {
    /// A message before the final one: a request's progress, a legacy call's
    /// `elicitation/create`, a `subscriptions/listen` stream's notifications. Over HTTP
    /// the first one starts a `200 text/event-stream` answer; each is one SSE event.
    case interim(JSONValue)
    /// The last output of the exchange: nothing follows it.
    case final(MCPReply)
}

/// The final answer to one message, with what an HTTP transport makes of it.
public struct MCPReply: Sendable {
    /// 200 (a JSON-RPC response), 202 (a notification or a response accepted: no body),
    /// 400 (malformed; a header that disagrees with the body, -32020; an unsupported
    /// version, -32022; a legacy request without its session), 404 (an unknown legacy
    /// session; a modern request for a method not served, -32601). An SSE stream already
    /// started is 200 whatever this says: the message goes as its last event.
    public var status: Int
    /// Headers for the HTTP answer: `Mcp-Session-Id` on a legacy `initialize`.
    public var headers: [(String, String)]
    /// The JSON-RPC message; nil with 202.
    public var message: JSONValue?

    public init(status: Int, headers: [(String, String)] = [], message: JSONValue?) {
        self.status = status
        self.headers = headers
        self.message = message
    }
}

/// One message in the dispatcher's hands, from `receive` until its final output.
public final class MCPExchange: Sendable {
    /// The era the message was served in (known when `receive` returns).
    public let era: MCPEra
    /// The JSON-RPC method (nil for a response or an unreadable message).
    public let method: String?
    /// A request, which gets a response; false for a notification or a client's response (HTTP: 202).
    public let isRequest: Bool
    let control: RunControl
    private let responder = NIOLockedValueBox<Responder?>(nil)

    init(era: MCPEra, method: String?, isRequest: Bool, control: RunControl = RunControl()) {
        self.era = era
        self.method = method
        self.isRequest = isRequest
        self.control = control
    }

    /// The exchange's outputs go through `responder` (silenced when the client goes).
    func attach(_ responder: Responder) {
        self.responder.withLockedValue { $0 = responder }
    }

    /// The client went away before the final output (an HTTP connection closed): no
    /// further output is sent; the run is cancelled (the plugin gets `cancel`, its grace,
    /// then a kill), a question it waits on is given up, a subscription ends.
    public func clientGone() {
        responder.withLockedValue { $0 }?.silence()
        control.cancel("the client went away")
    }
}

// MARK: - Hooks for a front end's policy and audit

/// A `tools/call` about to run (or a tool about to be listed), for the front end's policy.
public struct MCPToolAccess: Sendable {
    public var principal: String
    public var scopes: [String]
    /// The MCP tool's name, and the intent and plugin (manifest id) behind it.
    public var tool: String
    public var intent: String
    public var plugin: String
    public var era: MCPEra
}

/// Why a front end refuses a `tools/call`: the JSON-RPC error it is answered with, and
/// the HTTP status and headers of that answer (403, 429 with `Retry-After`...).
public struct MCPToolRefusal: Error, Sendable {
    public var code: Int
    public var message: String
    public var data: JSONValue?
    public var status: Int
    public var headers: [(String, String)]

    public init(code: Int, message: String, data: JSONValue? = nil, status: Int, headers: [(String, String)] = []) {
        self.code = code
        self.message = message
        self.data = data
        self.status = status
        self.headers = headers
    }
}

/// One `tools/call` answered (each round of an `input_required` sequence is one), for an
/// audit log. Never the arguments' values.
public struct MCPCallRecord: Sendable {
    public var principal: String
    public var tool: String
    /// Nil when the tool is unknown.
    public var intent: String?
    public var plugin: String?
    public var era: MCPEra
    /// The plugin's response code, when it answered (`success`, `failureOutOfStock`...).
    public var responseCode: String?
    /// Whether that code counts as success.
    public var succeeded: Bool
    /// The error's kind, when the call ended in one: a host error's (`timeout`,
    /// `parameterUnresolved`...), `invalidRequestState`, `refused` (the front end's
    /// `authorizeTool`), `invalidParams`.
    public var errorKind: String?
    /// The call answered `input_required` (a question for the person).
    public var inputRequired: Bool
    /// The round of a modern call: 1 for a first call, N+1 after N answers; nil in the handshake eras.
    public var round: Int?
    public var durationMs: Int
    /// The run's id (the report's), when an intent ran.
    public var runID: String?
}
