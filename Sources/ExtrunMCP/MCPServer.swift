import CExtrunLinux
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
/// dispatcher. A `tools/call` runs on the thread that read it, so that a warm call's round
/// trip wakes no worker thread. The reading passes to another thread (an idle one, or a new
/// one: `ReadRelay`) as soon as input arrives while the call runs, and only then
/// (`InputWatch`); the writer has its own (LineWriter), and a reply that cannot block is
/// written by the call's thread.
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
            runner: { job in relay.runCall(job) })
        relay.start { [weak self] in self?.readTurn() }
    }

    /// Serves until standard input ends; then cancels the calls in flight, waits for
    /// them and ends the warm processes.
    public func run(input: Int32 = STDIN_FILENO) {
        relay.reader = LineReader(fd: input, maxLineBytes: Self.maxLineBytes)
        relay.reader.spin = ReadSpin { PluginPool.hasSpareCPU }
        relay.watchInput(input)
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
/// `tools/call` runs the call itself and keeps the reading when the call ends, unless input
/// arrived meanwhile: then the reading went to an idle thread (or a new one), and the call's
/// thread waits idle for its next turn once the call ends. A warm call's round trip thus
/// wakes no other thread of the server: passing the reading on before every call cost ~30–50
/// µs of its p50 (docs/benchmarks.md, "MCP over stdio"). A cancellation, an answer the call
/// waits for (elicitation), another request or the end of input is read as soon as it
/// arrives, as before: `InputWatch` sees it and passes the reading on.
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

    /// Whether a call runs on the thread whose turn it is (turn number `turns`), the reading
    /// not passed on (`runCall`).
    private var callHoldsTurn = false
    private var watch: InputWatch?

    /// Watches `input` while a call holds the reading (`runCall`); without a watch (input
    /// that epoll cannot watch, such as a regular file), every call passes the reading on first.
    func watchInput(_ input: Int32) {
        watch = InputWatch(input: input) { [weak self] in self?.inputArrived() }
    }

    /// Runs the call the reader read: on this thread, keeping the reading unless input arrives
    /// before the job calls `release` (`InputWatch`), or passing it on first when more input
    /// was read already. The job releases before it writes its answer: a client that sends
    /// its next line at once would otherwise find the watch still armed, and the reading
    /// would pass to another thread at every call (two wake-ups in the round trip).
    func runCall(_ job: (_ release: () -> Void) -> Void) {
        guard let watch, !reader.holdsMore else {
            handOff()
            job {}
            return
        }
        let turn = lock.withLock { () -> Int in
            callHoldsTurn = true
            return turns
        }
        watch.arm()
        var released = false
        // Still holding the turn: the watch saw nothing, and this thread goes on reading. A
        // turn passed on meanwhile (`turns` moved) may belong to another call holding it now,
        // whose watch stays armed.
        func release() {
            guard !released else { return }
            released = true
            let kept = lock.withLock { () -> Bool in
                guard callHoldsTurn, turns == turn else { return false }
                callHoldsTurn = false
                return true
            }
            if kept { watch.disarm() }
        }
        job(release)
        release()
    }

    /// Input arrived while a call held the reading: the reading passes on.
    private func inputArrived() {
        let next = lock.withLock { () -> DispatchSemaphore?? in
            guard callHoldsTurn, !ended else { return .none }
            callHoldsTurn = false
            turns += 1
            return .some(idle.popLast())
        }
        guard let next else { return }
        wakeOrStart(next)
    }

    /// The reader passes its turn on (and runs the call it read, after this returns).
    func handOff() {
        let next = lock.withLock { () -> DispatchSemaphore? in
            turns += 1
            return idle.popLast()
        }
        wakeOrStart(next)
    }

    private func wakeOrStart(_ next: DispatchSemaphore?) {
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
        watch?.stop()
        for wake in waiting { wake.signal() }
        finished.signal()
    }
}

/// Wakes a thread of its own when the input becomes readable (or ends) while it is armed:
/// an epoll set holding the input, one-shot, re-armed for each call that keeps the reading
/// (`ReadRelay.runCall`), and an eventfd that stops the thread. Armed and disarmed, it costs
/// a call two `epoll_ctl`s and wakes nothing.
final class InputWatch: @unchecked Sendable {
    private let input: Int32
    private let poller: Int32
    private let stopper: Int32
    private let stopped = DispatchSemaphore(value: 0)
    private static let inputTag: UInt64 = 1
    private static let stopTag: UInt64 = 2

    /// nil when epoll cannot watch `input` (a regular file, say), or a descriptor could not be made.
    init?(input: Int32, onInput: @escaping @Sendable () -> Void) {
        #if os(Linux)
        let poller = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard poller >= 0 else { return nil }
        let stopper = eventfd(0, Int32(EFD_CLOEXEC))
        guard stopper >= 0 else {
            close(poller)
            return nil
        }
        var stopEvent = epoll_event(events: EPOLLIN.rawValue, data: epoll_data_t(u64: Self.stopTag))
        // Disarmed (one-shot, no event asked): epoll still reports a hang-up once, which the
        // relay ignores while no call holds the reading.
        var inputEvent = epoll_event(events: EPOLLONESHOT.rawValue, data: epoll_data_t(u64: Self.inputTag))
        guard epoll_ctl(poller, EPOLL_CTL_ADD, stopper, &stopEvent) == 0, epoll_ctl(poller, EPOLL_CTL_ADD, input, &inputEvent) == 0 else {
            close(stopper)
            close(poller)
            return nil
        }
        self.input = input
        self.poller = poller
        self.stopper = stopper
        let thread = Thread { [poller, stopped] in
            var events = [epoll_event](repeating: epoll_event(), count: 2)
            loop: while true {
                let count = epoll_wait(poller, &events, 2, -1)
                if count < 0 {
                    if errno == EINTR { continue }
                    break
                }
                for event in events.prefix(Int(count)) {
                    if event.data.u64 == Self.stopTag { break loop }
                    onInput()
                }
            }
            stopped.signal()
        }
        thread.name = "extrun-mcp-input-watch"
        thread.start()
        #else
        return nil
        #endif
    }

    /// Wakes the watch's thread when the input is readable, or at once if it is now.
    func arm() { modify(EPOLLIN.rawValue | EPOLLRDHUP.rawValue) }

    func disarm() { modify(0) }

    private func modify(_ events: UInt32) {
        #if os(Linux)
        var event = epoll_event(events: events | EPOLLONESHOT.rawValue, data: epoll_data_t(u64: Self.inputTag))
        _ = epoll_ctl(poller, EPOLL_CTL_MOD, input, &event)
        #endif
    }

    /// Ends the watch's thread, waits for it, and closes its descriptors.
    func stop() {
        #if os(Linux)
        var one: UInt64 = 1
        _ = write(stopper, &one, 8)
        stopped.wait()
        close(stopper)
        close(poller)
        #endif
    }
}
