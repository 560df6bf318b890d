import ExtrunHost
import ExtrunProtocol
import ExtrunSystem
import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// MCP's stdio transport: one JSON-RPC message per line (UTF-8, no embedded
/// newline), in both directions. The reader hands out whole lines; the writer
/// writes each message as one line, from any thread.
struct LineReader {
    let fd: Int32
    /// The longest line taken; a longer one is skipped up to its newline and reported.
    let maxLineBytes: Int
    private var buffer: [UInt8] = []
    private var start = 0
    /// How far the buffer has been searched for a newline: each byte is looked at once,
    /// however many reads a long line takes (a rescan per read made an 8 MiB line cost
    /// seconds of CPU while nothing else was read).
    private var scanned = 0
    private var skipping = false
    private var chunk = [UInt8](repeating: 0, count: 64 << 10)
    /// Polls before each read that would wait (nil: none).
    var spin: ReadSpin?

    init(fd: Int32, maxLineBytes: Int) {
        self.fd = fd
        self.maxLineBytes = maxLineBytes
    }

    enum Line {
        case message(ArraySlice<UInt8>)
        /// A line longer than `maxLineBytes`: its size so far.
        case tooLong(Int)
        case end
    }

    /// The next non-empty line (without its newline and a trailing carriage return), or the end of input.
    mutating func next() -> Line {
        while true {
            if let line = buffered() { return line }
            fill()
        }
    }

    private var atEnd = false

    /// Whether what was read holds more than the lines taken: a part of a line, another
    /// line, or the end of input.
    var holdsMore: Bool { atEnd || buffer.count > start }

    /// The next line already read (or what the end of input makes of the rest); nil: more must be read (`fill`).
    mutating func buffered() -> Line? {
        while true {
            if let newline = buffer[max(start, scanned)...].firstIndex(of: UInt8(ascii: "\n")) {
                var line = buffer[start..<newline]
                start = newline + 1
                scanned = start
                if skipping {
                    skipping = false
                    continue
                }
                if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
                if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { continue }
                return .message(line)
            }
            scanned = buffer.count
            // Keep only the unfinished line.
            if start > 0 {
                buffer.removeFirst(start)
                scanned -= start
                start = 0
            }
            if buffer.count > maxLineBytes {
                let size = buffer.count
                buffer.removeAll(keepingCapacity: false)
                scanned = 0
                if !skipping {
                    skipping = true
                    return .tooLong(size)
                }
            }
            guard atEnd else { return nil }
            // An unfinished last line is still a message.
            if !skipping && !buffer.isEmpty {
                let line = buffer[...]
                buffer = []
                scanned = 0
                return .message(line)
            }
            return .end
        }
    }

    /// Reads once (waiting for input when there is none, also on a descriptor the client
    /// left non-blocking); the end of input (or a failed read, which ends it as its end does)
    /// is then `buffered`'s `.end`.
    mutating func fill() {
        var count = 0
        spin?.wait(fd: fd)
        while true {
            do {
                count = try SystemCall.read(fd, into: &chunk)
            } catch where error.errno == .resourceTemporarilyUnavailable || error.errno == .wouldBlock {
                // Nothing to read yet on a non-blocking input: wait for some, then read again.
                var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                _ = poll(&ready, 1, -1)
                continue
            } catch {
                count = 0
            }
            break
        }
        if count == 0 {
            atEnd = true
            return
        }
        if skipping {
            if let newline = chunk[0..<count].firstIndex(of: UInt8(ascii: "\n")) {
                skipping = false
                buffer.append(contentsOf: chunk[(newline + 1)..<count])
            }
            return
        }
        buffer.append(contentsOf: chunk[0..<count])
    }
}

/// A reader's short wait without sleeping: a client that sends its next request within
/// microseconds of an answer (a script calling tools one after another) finds the
/// reading thread awake, where a thread asleep on an idle CPU is woken ~20 µs late on a
/// VM (docs/benchmarks.md, "MCP over stdio"). It polls only while `allowed` says a CPU is
/// free for it, and stops after `maxFruitless` waits in a row that found nothing (then
/// polls again only every `probeEvery`th wait, until one finds something): a client that
/// thinks for seconds between calls costs it nothing.
struct ReadSpin {
    static let durationNs: UInt64 = 200_000
    static let maxFruitless = 16
    static let probeEvery = 8
    let allowed: @Sendable () -> Bool
    private var fruitless = 0
    private var waits = 0

    init(allowed: @escaping @Sendable () -> Bool) {
        self.allowed = allowed
    }

    /// Returns when `fd` is readable, or after `durationNs` of polling (yielding the CPU between tries), or at once when it may not poll.
    mutating func wait(fd: Int32) {
        waits &+= 1
        guard fruitless < Self.maxFruitless || waits % Self.probeEvery == 0, allowed() else { return }
        let until = MonotonicClock.now() &+ Self.durationNs
        repeat {
            var ready = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&ready, 1, 0) != 0 {
                fruitless = 0
                return
            }
            sched_yield()
        } while MonotonicClock.now() < until
        fruitless += 1
    }
}

/// Writes one message per line to a file descriptor, from any thread, without ever
/// blocking the caller: messages are queued and a thread of the writer's own writes
/// them. A client that stops reading stdout therefore stalls neither the reader of
/// stdin nor a call's thread (whose plugin keeps its deadline): progress
/// notifications are dropped once `maxPendingBytes / 8` wait, and past
/// `maxPendingBytes` the client is taken as gone (`broken`), as when a write fails.
///
/// A message that cannot block is written at once on the caller's thread instead (no
/// wake-up of the writer's thread, ~10 µs of a warm call's round trip): when nothing is
/// queued or being written, the descriptor is a pipe with room (`poll` says POLLOUT: a
/// free buffer, so a write of up to PIPE_BUF bytes completes) or a regular file, and the
/// message is that small.
final class LineWriter: Sendable {
    private let fd: Int32
    let maxPendingBytes: Int
    /// The largest message written on the caller's thread (0: none): PIPE_BUF for a pipe.
    private let inlineBytes: Int

    private struct State {
        var queue: [[UInt8]] = []
        var head = 0
        var pendingBytes = 0
        var failed = false
        var closed = false
        var dropped = 0
        /// The writer's thread is writing a message it took from the queue.
        var writing = false
    }
    private let state = NIOLockedValueBox(State())
    private let ready = DispatchSemaphore(value: 0)
    private let drained = DispatchSemaphore(value: 0)

    init(fd: Int32, maxPendingBytes: Int = 64 << 20) {
        self.fd = fd
        self.maxPendingBytes = maxPendingBytes
        var info = stat()
        if fstat(fd, &info) == 0 {
            switch info.st_mode & S_IFMT {
            case S_IFIFO: inlineBytes = Int(PIPE_BUF)
            case S_IFREG: inlineBytes = 64 << 10
            default: inlineBytes = 0
            }
        } else {
            inlineBytes = 0
        }
        let thread = Thread { [self] in self.run() }
        thread.name = "extrun-mcp-writer"
        thread.start()
    }

    /// Whether a write failed (the client closed its end) or the client left too much unread.
    var broken: Bool { state.withLockedValue { $0.failed } }
    /// Progress notifications dropped because the client was not reading.
    var droppedNotifications: Int { state.withLockedValue { $0.dropped } }

    /// Queues one message. `droppable`: a notification that may be lost when the client
    /// is behind (progress).
    func send(_ message: JSONValue, droppable: Bool = false) {
        var bytes = JSONWriter.bytes(message)
        bytes.append(UInt8(ascii: "\n"))
        let queued = state.withLockedValue { state -> Bool in
            guard !state.failed, !state.closed else { return false }
            if droppable && state.pendingBytes > maxPendingBytes / 8 {
                state.dropped += 1
                return false
            }
            if state.pendingBytes + bytes.count > maxPendingBytes {
                state.failed = true
                return false
            }
            if bytes.count <= inlineBytes && !state.writing && state.head >= state.queue.count && hasRoom() {
                // Under the lock, so that no message queued or sent meanwhile overtakes it.
                if !write(bytes) { state.failed = true }
                return false
            }
            state.queue.append(bytes)
            state.pendingBytes += bytes.count
            return true
        }
        if queued { ready.signal() }
    }

    /// Writes what is queued (within `timeout` seconds) and stops the thread.
    func finish(timeout: Double = 2) {
        let wait = state.withLockedValue { state -> Bool in
            guard !state.closed else { return false }
            state.closed = true
            return true
        }
        guard wait else { return }
        ready.signal()
        _ = drained.wait(timeout: .now() + timeout)
    }

    private func run() {
        while true {
            ready.wait()
            while true {
                let next = state.withLockedValue { state -> [UInt8]? in
                    guard state.head < state.queue.count, !state.failed else { return nil }
                    let bytes = state.queue[state.head]
                    state.head += 1
                    state.writing = true
                    if state.head > 64 && state.head * 2 > state.queue.count {
                        state.queue.removeFirst(state.head)
                        state.head = 0
                    }
                    return bytes
                }
                guard let bytes = next else { break }
                let ok = write(bytes)
                state.withLockedValue { state in
                    state.pendingBytes -= bytes.count
                    state.writing = false
                    if !ok { state.failed = true }
                }
            }
            let done = state.withLockedValue { state -> Bool in
                state.closed && (state.head >= state.queue.count || state.failed)
            }
            if done {
                drained.signal()
                return
            }
        }
    }

    /// Whether a write can go without waiting for the client (see the type's comment).
    private func hasRoom() -> Bool {
        var entry = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
        return poll(&entry, 1, 0) == 1 && entry.revents & Int16(POLLOUT) != 0
    }

    private func write(_ bytes: [UInt8]) -> Bool {
        do {
            try SystemCall.writeAll(fd, bytes)
            return true
        } catch {
            return false
        }
    }
}
