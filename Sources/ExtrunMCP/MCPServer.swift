import ExtrunHost
import ExtrunProtocol
import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// `extrun mcp`: the MCP server over stdio (newline-delimited JSON-RPC 2.0), one transport
/// over `MCPDispatcher`, whose tools are the installed intents (docs/mcp.md documents the
/// mapping; docs/architecture.md where it sits). The connection is one legacy session for
/// the handshake eras (`initialize`, in-band elicitation, `notifications/tools/list_changed`)
/// and serves modern (2026-07-28) requests beside it, each on its own.
///
/// Threads: one thread at a time reads standard input and hands each line to the
/// dispatcher. A `tools/call` runs on the thread that read it, which first passes the
/// reading to another (an idle one, or a new one: `ReadRelay`), so that a warm call's round
/// trip wakes no worker thread; the writer has its own (LineWriter), and a reply that
/// cannot block is written by the call's thread.
public final class MCPServer: Sendable {
    public typealias Configuration = MCPDispatcher.Configuration

    public let dispatcher: MCPDispatcher
    let configuration: Configuration
    let writer: LineWriter
    let peer: Peer
    let context = MCPRequestContext.stdio
    let relay: ReadRelay

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
        let relay = ReadRelay()
        self.relay = relay
        peer = Peer(
            sessionID: nil, principal: MCPRequestContext.stdio.principal, notify: { message in writer.send(message) },
            runner: { job in
                relay.handOff()
                job()
            })
        relay.start { [weak self] in self?.readTurn() }
    }

    /// Serves until standard input ends; then cancels the calls in flight, waits for
    /// them and ends the warm processes.
    public func run(input: Int32 = STDIN_FILENO) {
        relay.reader = LineReader(fd: input, maxLineBytes: Self.maxLineBytes)
        relay.serve()
        relay.finished.wait()
    }

    /// Reads and dispatches lines until this thread passes the reading on (it then runs the
    /// call it read) or the input ends (then it ends the server).
    func readTurn() {
        while true {
            switch relay.reader.next() {
            case .end:
                shutDown(reason: "the client closed the connection")
                relay.end()
                return
            case .tooLong(let size):
                send(["jsonrpc": "2.0", "id": .null, "error": ["code": -32700, "message": .string("a message line is over \(Self.maxLineBytes) bytes (\(size) so far); it was skipped")]])
            case .message(let line):
                let turn = relay.turn
                _ = dispatcher.receive(line, context: context, peer: peer) { [self] output in
                    switch output {
                    case .interim(let message):
                        // Progress may be dropped for a client that is behind.
                        send(message, droppable: message["method"] == "notifications/progress")
                    case .final(let reply):
                        if let message = reply.message { send(message) }
                    }
                }
                // Another thread reads now: this one ran a call.
                if relay.turn != turn { return }
            }
        }
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

/// stdio's reading, passed from thread to thread (leader/follower): the thread that reads a
/// `tools/call` hands the reading to an idle thread (or a new one) and runs the call itself,
/// then waits idle for its next turn. The call does not wait for the next reader (which only
/// goes on to wait in read(2)), where it waited for a worker's wake-up.
final class ReadRelay: @unchecked Sendable {
    /// Read only by the thread whose turn it is: `handOff`, under `lock`, orders the turns.
    var reader = LineReader(fd: -1, maxLineBytes: 0)
    /// Given when the input ended and the server has shut down.
    let finished = DispatchSemaphore(value: 0)
    private let lock = NIOLock()
    /// Counts the hand-overs: a reader whose call handed its turn on sees it change.
    private var turns = 0
    private var idle: [DispatchSemaphore] = []
    private var ended = false
    private var body: (@Sendable () -> Void)?

    /// `body`: one turn of reading (returns when the turn was handed on or the input ended).
    func start(_ body: @escaping @Sendable () -> Void) {
        lock.withLock { self.body = body }
    }

    var turn: Int { lock.withLock { turns } }

    /// Takes turns until the input ends (the first one now).
    func serve() {
        let wake = DispatchSemaphore(value: 0)
        while true {
            lock.withLock { body }?()
            let over = lock.withLock { () -> Bool in
                if ended { return true }
                idle.append(wake)
                return false
            }
            if over { return }
            wake.wait()
            if lock.withLock({ ended }) { return }
        }
    }

    /// The reader passes its turn on (and runs the call it read, after this returns).
    func handOff() {
        let next = lock.withLock { () -> DispatchSemaphore? in
            turns += 1
            return idle.popLast()
        }
        if let next {
            next.signal()
        } else {
            let thread = Thread { [self] in serve() }
            thread.name = "extrun-mcp-reader"
            thread.start()
        }
    }

    /// The input ended and the server shut down: the idle threads end, and `run` returns.
    func end() {
        let waiting = lock.withLock { () -> [DispatchSemaphore] in
            ended = true
            defer { idle = [] }
            return idle
        }
        for wake in waiting { wake.signal() }
        finished.signal()
    }
}
