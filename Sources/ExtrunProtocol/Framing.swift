/// Message framing on the protocol channels.
///
/// Every message is a header block followed by a body, exactly as the
/// Language Server Protocol frames its messages:
///
///     Content-Length: 52\r\n
///     \r\n
///     {"jsonrpc":"2.0","id":1,"method":"handle",...}
///
/// `Content-Length` (case-insensitive) is required and counts the body's
/// bytes. Other header fields are allowed and ignored. The body is UTF-8 JSON.
public enum Framing {
    /// A header block longer than this is an error (no real header comes close).
    public static let maxHeaderBytes = 1024

    /// Frames a body for the wire.
    public static func frame(_ body: some Collection<UInt8>) -> [UInt8] {
        var out = Array("Content-Length: \(body.count)\r\n\r\n".utf8)
        out.reserveCapacity(out.count + body.count)
        out.append(contentsOf: body)
        return out
    }
}

public enum FramingError: Error, Equatable, CustomStringConvertible {
    case headerTooLong(limit: Int)
    case headerNotASCII
    case malformedHeaderLine(String)
    case missingContentLength
    case invalidContentLength(String)
    case frameTooLarge(length: Int, limit: Int)

    public var description: String {
        switch self {
        case .headerTooLong(let limit):
            "frame header longer than \(limit) bytes without the blank line that ends it (is something other than framed JSON being written to the protocol channel?)"
        case .headerNotASCII:
            "frame header contains non-ASCII bytes (expected 'Content-Length: N\\r\\n\\r\\n')"
        case .malformedHeaderLine(let line):
            "malformed frame header line '\(line)' (expected 'Name: value')"
        case .missingContentLength:
            "frame header has no Content-Length field"
        case .invalidContentLength(let text):
            "invalid Content-Length '\(text)' (expected a non-negative decimal integer)"
        case .frameTooLarge(let length, let limit):
            "frame of \(length) bytes exceeds the limit of \(limit) bytes"
        }
    }
}

/// Reassembles frames from a byte stream, whatever the read boundaries:
/// a frame split across many reads, or several frames in one read.
public struct FrameDecoder: Sendable {
    public let maxFrameBytes: Int
    private var buffer: [UInt8] = []
    private var start = 0
    /// The body length of the frame whose header has been read, if any.
    private var pendingLength: Int?

    public init(maxFrameBytes: Int = 64 << 20) {
        self.maxFrameBytes = maxFrameBytes
    }

    /// Bytes received but not yet returned as a frame.
    public var bufferedByteCount: Int { buffer.count - start }

    /// Whether bytes were received that no frame returned yet.
    public var hasBufferedBytes: Bool { buffer.count > start }

    public mutating func append(_ bytes: some Sequence<UInt8>) {
        buffer.append(contentsOf: bytes)
    }

    public mutating func append(_ bytes: UnsafeRawBufferPointer) {
        buffer.append(contentsOf: bytes)
    }

    /// Returns the next complete frame's body, or nil if more bytes are needed.
    public mutating func nextFrame() throws(FramingError) -> [UInt8]? {
        if pendingLength == nil {
            guard let length = try parseHeader() else { return nil }
            pendingLength = length
        }
        guard let length = pendingLength, buffer.count - start >= length else { return nil }
        let body = Array(buffer[start..<(start + length)])
        start += length
        pendingLength = nil
        compact()
        return body
    }

    private mutating func compact() {
        if start == buffer.count {
            buffer.removeAll(keepingCapacity: buffer.capacity <= 1 << 20)
            start = 0
        } else if start > 64 << 10 && start > buffer.count / 2 {
            buffer.removeSubrange(0..<start)
            start = 0
        }
    }

    /// A header starts with a field name (a letter) and holds printable ASCII and CRLFs only:
    /// anything else (a bare JSON line, binary) is an error as soon as it is seen.
    private func checkPartialHeader() throws(FramingError) {
        guard start < buffer.count else { return }
        let first = buffer[start]
        let isLetter = (first >= 65 && first <= 90) || (first >= 97 && first <= 122)
        if !isLetter {
            let preview = String(decoding: buffer[start..<min(buffer.count, start + 40)], as: UTF8.self)
            if buffer[start..<buffer.count].contains(where: { $0 >= 0x80 }) { throw .headerNotASCII }
            throw .malformedHeaderLine(preview.split(separator: "\n").first.map(String.init) ?? preview)
        }
        var previous: UInt8 = 0
        for byte in buffer[start..<buffer.count] {
            if byte >= 0x80 { throw .headerNotASCII }
            if byte == 10 && previous != 13 {
                let line = String(decoding: buffer[start..<min(buffer.count, start + 60)], as: UTF8.self)
                throw .malformedHeaderLine(line.split(separator: "\n").first.map(String.init) ?? line)
            }
            if byte < 32 && byte != 13 && byte != 10 && byte != 9 { throw .malformedHeaderLine("control byte \(byte) in the header") }
            previous = byte
        }
    }

    /// Parses a header block if a complete one is buffered; consumes it and returns the body length.
    private mutating func parseHeader() throws(FramingError) -> Int? {
        if let length = try parseCanonicalHeader() { return length }
        let available = buffer.count - start
        let searchLimit = min(buffer.count, start + Framing.maxHeaderBytes + 4)
        var terminator: Int?
        var index = start
        while index + 4 <= searchLimit {
            if buffer[index] == 13 && buffer[index + 1] == 10 && buffer[index + 2] == 13 && buffer[index + 3] == 10 {
                terminator = index
                break
            }
            index += 1
        }
        guard let end = terminator else {
            if available >= Framing.maxHeaderBytes + 4 { throw .headerTooLong(limit: Framing.maxHeaderBytes) }
            // Fail fast on bytes that can never be part of a header, rather than wait for more.
            try checkPartialHeader()
            return nil
        }
        let headerBytes = buffer[start..<end]
        for byte in headerBytes where byte >= 0x80 { throw .headerNotASCII }
        let header = String(decoding: headerBytes, as: UTF8.self)
        var length: Int?
        for line in header.split(separator: "\r\n", omittingEmptySubsequences: false) {
            guard let colon = line.firstIndex(of: ":") else { throw .malformedHeaderLine(String(line)) }
            let name = line[..<colon].trimmingSpaces()
            let value = line[line.index(after: colon)...].trimmingSpaces()
            if name.lowercased() == "content-length" {
                guard !value.isEmpty, value.allSatisfy({ $0.isASCII && $0.isNumber }), value.count <= 18,
                    let parsed = Int(value)
                else { throw .invalidContentLength(value) }
                length = parsed
            }
        }
        guard let length else { throw .missingContentLength }
        guard length <= maxFrameBytes else { throw .frameTooLarge(length: length, limit: maxFrameBytes) }
        start = end + 4
        buffer.reserveCapacity(start + length)
        return length
    }
}

extension FrameDecoder {
    /// The header every extrun implementation writes, `Content-Length: N\r\n\r\n`,
    /// read byte by byte; nil for anything else (which `parseHeader` reads the general way).
    private mutating func parseCanonicalHeader() throws(FramingError) -> Int? {
        let prefix: StaticString = "Content-Length: "
        let prefixCount = prefix.utf8CodeUnitCount
        guard buffer.count - start > prefixCount + 4 else { return nil }
        let matches = buffer.withUnsafeBufferPointer { bytes in
            prefix.withUTF8Buffer { expected in
                for index in 0..<prefixCount where bytes[start + index] != expected[index] { return false }
                return true
            }
        }
        guard matches else { return nil }
        var index = start + prefixCount
        var length = 0
        var digits = 0
        while index < buffer.count, buffer[index] >= 48, buffer[index] <= 57, digits < 18 {
            length = length * 10 + Int(buffer[index] - 48)
            digits += 1
            index += 1
        }
        guard digits > 0, index + 4 <= buffer.count, buffer[index] == 13, buffer[index + 1] == 10, buffer[index + 2] == 13,
            buffer[index + 3] == 10
        else { return nil }
        guard length <= maxFrameBytes else { throw .frameTooLarge(length: length, limit: maxFrameBytes) }
        start = index + 4
        buffer.reserveCapacity(start + length)
        return length
    }
}

extension Substring {
    fileprivate func trimmingSpaces() -> String {
        var slice = self[...]
        while let first = slice.first, first == " " || first == "\t" { slice = slice.dropFirst() }
        while let last = slice.last, last == " " || last == "\t" { slice = slice.dropLast() }
        return String(slice)
    }
}
