import ExtrunHost
import ExtrunProtocol
import Foundation
import NIOConcurrencyHelpers

/// `extrun mcp`: the MCP server over stdio (newline-delimited JSON-RPC 2.0), one transport
/// over `MCPDispatcher`, whose tools are the installed intents (docs/mcp.md documents the
/// mapping; docs/architecture.md where it sits). The connection is one legacy session for
/// the handshake eras (`initialize`, in-band elicitation, `notifications/tools/list_changed`)
/// and serves modern (2026-07-28) requests beside it, each on its own.
///
/// Threads: the caller's reads standard input and hands each line to the dispatcher;
/// the calls run on the service's worker threads; the writer has its own (LineWriter).
public final class MCPServer: Sendable {
    public typealias Configuration = MCPDispatcher.Configuration

    public let dispatcher: MCPDispatcher
    let configuration: Configuration
    let writer: LineWriter
    let peer: Peer
    let context = MCPRequestContext.stdio

    /// The longest message line read; a longer one is answered with a parse error and skipped.
    public static let maxLineBytes = 8 << 20

    /// Refused when the request-state key file is unsafe (`RequestStateKey.load`).
    public init(host: ExtrunHost.Host = ExtrunHost.Host(), configuration: Configuration = Configuration(), output: Int32 = STDOUT_FILENO)
        throws(RequestStateKey.Refused)
    {
        self.configuration = configuration
        dispatcher = try MCPDispatcher(host: host, configuration: configuration)
        let writer = LineWriter(fd: output)
        self.writer = writer
        peer = Peer(sessionID: nil, principal: MCPRequestContext.stdio.principal, notify: { message in writer.send(message) })
    }

    /// Serves until standard input ends; then cancels the calls in flight, waits for
    /// them and ends the warm processes.
    public func run(input: Int32 = STDIN_FILENO) {
        var reader = LineReader(fd: input, maxLineBytes: Self.maxLineBytes)
        loop: while true {
            switch reader.next() {
            case .end: break loop
            case .tooLong(let size):
                send(["jsonrpc": "2.0", "id": .null, "error": ["code": -32700, "message": .string("a message line is over \(Self.maxLineBytes) bytes (\(size) so far); it was skipped")]])
            case .message(let line):
                _ = dispatcher.receive(line, context: context, peer: peer) { [self] output in
                    switch output {
                    case .interim(let message):
                        // Progress may be dropped for a client that is behind.
                        send(message, droppable: message["method"] == "notifications/progress")
                    case .final(let reply):
                        if let message = reply.message { send(message) }
                    }
                }
            }
        }
        shutDown(reason: "the client closed the connection")
    }

    /// Queues a message for the client (never blocks: LineWriter). A client that left
    /// `LineWriter.maxPendingBytes` unread is taken as gone: the calls in flight are
    /// cancelled, as at the end of input.
    func send(_ message: JSONValue, droppable: Bool = false) {
        writer.send(message, droppable: droppable)
        if writer.broken && peer.hasWork {
            configuration.log?("[extrun mcp] the client is not reading (or closed) its input: the calls in flight are cancelled")
            peer.abandon(reason: "the client stopped reading the server's output")
        }
    }

    /// Ends the server as the end of its input does (from another thread: a signal).
    public func stop(reason: String) {
        shutDown(reason: reason)
    }

    func shutDown(reason: String) {
        peer.end(reason: reason)
        dispatcher.shutDown(reason: reason)
        writer.finish()
    }
}
