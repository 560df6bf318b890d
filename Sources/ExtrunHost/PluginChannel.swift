import ExtrunProtocol
import ExtrunSystem

#if canImport(Glibc)
import Glibc
#endif

/// The two non-blocking descriptors a channel reads and writes, and how each is closed:
/// a plugin's pipes (`PluginProcess`: fd 4's read end, fd 3's write end), or a socket.
protocol ChannelEnds: AnyObject {
    /// The descriptor read, -1 once closed.
    var readFD: Int32 { get }
    /// The descriptor written, -1 once closed.
    var writeFD: Int32 { get }
    func closeRead()
    func closeWrite()
}

extension PluginProcess: ChannelEnds {
    var readFD: Int32 { fromPlugin }
    var writeFD: Int32 { toPlugin }

    func closeRead() {
        if fromPlugin >= 0 {
            close(fromPlugin)
            fromPlugin = -1
        }
    }

    func closeWrite() { closeToPlugin() }
}

/// A framed byte stream each way over two non-blocking descriptors: the frames read
/// and not yet taken (ExtrunProtocol's `FrameDecoder`), and the frames queued to be
/// written, written as the descriptor takes them. It knows nothing of what the
/// frames say (`PluginConversation` does) nor when to wait (`PluginConnection`).
final class PluginChannel {
    let ends: any ChannelEnds
    private var decoder: FrameDecoder
    /// Frames queued to be written, as chunks: a small frame is one chunk (header and
    /// body, written with one `write`), a large one two (its body is not copied). Chunks
    /// before `outboundHead` are written; `outboundOffset` bytes of the head are.
    private var outbound: [[UInt8]] = []
    private var outboundHead = 0
    private var outboundOffset = 0
    /// Bytes queued and not yet written.
    private(set) var pendingBytes = 0
    /// What `read` fills: left uninitialized (zeroing 256 KiB cost a cold run page faults
    /// before the plugin had said a word: docs/benchmarks.md, "Costs the source's comments point to"); bytes are only read back after `read` wrote them.
    private var readBuffer = [UInt8](unsafeUninitializedCapacity: 256 << 10) { _, count in count = 256 << 10 }

    init(ends: any ChannelEnds, maxFrameBytes: Int) {
        self.ends = ends
        self.decoder = FrameDecoder(maxFrameBytes: maxFrameBytes)
    }

    var readFD: Int32 { ends.readFD }
    var writeFD: Int32 { ends.writeFD }

    /// Whether bytes were read that no frame returned yet.
    var hasBufferedBytes: Bool { decoder.hasBufferedBytes }

    enum ReadResult: Equatable {
        /// This many bytes were read.
        case read(Int)
        /// Nothing to read now (EAGAIN).
        case wouldBlock
        /// The end of the stream, or a failed read (the descriptor is closed if it was the channel's).
        case closed
    }

    /// Reads once from the read end into the frame buffer (an interrupted read is retried);
    /// at the end of the stream or on an error the read end is closed.
    func read() -> ReadResult {
        let fd = ends.readFD
        guard fd >= 0 else { return .closed }
        let result = read(from: fd, maxBytes: readBuffer.count) { decoder.append($0) }
        if result == .closed { ends.closeRead() }
        return result
    }

    /// Reads once from `fd` (another of the plugin's pipes, say) into the channel's read
    /// buffer, lent to `consume` for the bytes read. The descriptor is not closed here.
    func read(from fd: Int32, maxBytes: Int, _ consume: (UnsafeRawBufferPointer) -> Void) -> ReadResult {
        // Any failure but EAGAIN (EINTR is retried) ends the stream as its end does: nil.
        let outcome = readBuffer.withUnsafeMutableBytes { raw in
            try? SystemCall.readNonBlocking(fd, into: UnsafeMutableRawBufferPointer(rebasing: raw[0..<min(raw.count, maxBytes)]))
        }
        switch outcome {
        case .completed(let count)? where count > 0:
            readBuffer.withUnsafeBytes { consume(UnsafeRawBufferPointer(rebasing: $0[0..<count])) }
            return .read(count)
        case .wouldBlock?: return .wouldBlock
        case .completed?, nil: return .closed
        }
    }

    /// The next complete frame's body read, or nil if more bytes are needed.
    func nextFrame() throws(FramingError) -> [UInt8]? {
        try decoder.nextFrame()
    }

    /// Queues a frame with `body` (it is written by `writeQueued`).
    func enqueue(body: [UInt8]) {
        if body.count <= 64 << 10 {
            let frame = Framing.frame(body)
            pendingBytes += frame.count
            outbound.append(frame)
        } else {
            let header = Array("Content-Length: \(body.count)\r\n\r\n".utf8)
            pendingBytes += header.count + body.count
            outbound.append(header)
            outbound.append(body)
        }
    }

    struct WriteResult {
        /// The bytes written by this call.
        var written = 0
        /// Whether the write end failed (the reader closed it): it is closed and the queue dropped.
        var closed = false
    }

    /// Writes queued chunks while the write end takes them (it is non-blocking; an
    /// interrupted write is retried).
    func writeQueued() -> WriteResult {
        var result = WriteResult()
        while ends.writeFD >= 0, outboundHead < outbound.count {
            let fd = ends.writeFD
            let offset = outboundOffset
            let left = outbound[outboundHead].count - offset
            // nil: a failure but EAGAIN (EINTR is retried).
            let outcome = outbound[outboundHead].withUnsafeBytes { raw in
                try? SystemCall.writeNonBlocking(fd, UnsafeRawBufferPointer(rebasing: raw[offset...]))
            }
            switch outcome {
            case .completed(let written)? where written > 0:
                result.written += written
                outboundOffset += written
                pendingBytes -= written
                if written < left { return result }
                // A written chunk's bytes go now: the array keeps its slot until compaction,
                // and 64 written 4 MiB answers held there were 90 MiB of the host's memory.
                outbound[outboundHead] = []
                outboundHead += 1
                outboundOffset = 0
                compactOutbound()
            case nil:
                // The reader closed its end: what was queued is lost.
                outbound.removeAll()
                outboundHead = 0
                outboundOffset = 0
                pendingBytes = 0
                ends.closeWrite()
                result.closed = true
                return result
            case .completed?, .wouldBlock?:
                return result
            }
        }
        return result
    }

    /// Closes the write end (the reader sees the end of the stream); what is queued stays counted.
    func closeWrite() {
        ends.closeWrite()
    }

    /// Drops written chunks: all of them once the queue is empty (keeping the array's
    /// small capacity), else the written ones when they are most of the array.
    private func compactOutbound() {
        if outboundHead == outbound.count {
            outbound.removeAll(keepingCapacity: outbound.capacity <= 64)
            outboundHead = 0
        } else if outboundHead >= 64 && outboundHead * 2 >= outbound.count {
            outbound.removeFirst(outboundHead)
            outboundHead = 0
        }
    }
}
