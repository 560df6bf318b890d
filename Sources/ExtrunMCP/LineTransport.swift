import ExtrunProtocol
import Foundation
import Synchronization

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
    private var skipping = false
    private var chunk = [UInt8](repeating: 0, count: 64 << 10)

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
            if let newline = buffer[start...].firstIndex(of: UInt8(ascii: "\n")) {
                var line = buffer[start..<newline]
                start = newline + 1
                if skipping {
                    skipping = false
                    continue
                }
                if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
                if line.allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { continue }
                return .message(line)
            }
            // Keep only the unfinished line.
            if start > 0 {
                buffer.removeFirst(start)
                start = 0
            }
            if buffer.count > maxLineBytes {
                let size = buffer.count
                buffer.removeAll(keepingCapacity: false)
                if !skipping {
                    skipping = true
                    return .tooLong(size)
                }
            }
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 {
                // An unfinished last line is still a message.
                if !skipping && !buffer.isEmpty {
                    let line = buffer[...]
                    buffer = []
                    return .message(line)
                }
                return .end
            }
            if skipping {
                if let newline = chunk[0..<count].firstIndex(of: UInt8(ascii: "\n")) {
                    skipping = false
                    buffer.append(contentsOf: chunk[(newline + 1)..<count])
                }
                continue
            }
            buffer.append(contentsOf: chunk[0..<count])
        }
    }
}

/// Writes one message per line to a file descriptor; safe from any thread. A write
/// that fails (the client went away) is remembered, and later messages are dropped.
final class LineWriter: Sendable {
    private let fd: Int32
    private let state = Mutex(false)

    init(fd: Int32) {
        self.fd = fd
    }

    /// Whether a write failed (the client closed its end).
    var broken: Bool { state.withLock { $0 } }

    func send(_ message: JSONValue) {
        var bytes = JSONWriter.bytes(message)
        bytes.append(UInt8(ascii: "\n"))
        state.withLock { failed in
            guard !failed else { return }
            var offset = 0
            while offset < bytes.count {
                let written = bytes.withUnsafeBytes { raw -> Int in
                    guard let base = raw.baseAddress else { return 0 }
                    return write(fd, base + offset, raw.count - offset)
                }
                if written < 0 {
                    if errno == EINTR { continue }
                    failed = true
                    return
                }
                offset += written
            }
        }
    }
}
