/// Keeps the last bytes a plugin wrote to stdout or stderr in a fixed ring
/// (so the host's memory stays flat however much it writes), and, when asked,
/// hands complete lines to an observer as they arrive.
struct OutputCapture {
    let limit: Int
    /// The bytes kept: filled in order up to `limit`, then overwritten from `next` on.
    private var ring: [UInt8]
    private var next = 0
    /// Whether lines are collected (for `--verbose`); otherwise only the tail is kept.
    var collectsLines = false
    private var partialLine: [UInt8] = []
    private let maxLineBytes = 4096

    init(limit: Int) {
        self.limit = max(1, limit)
        // Grown as bytes arrive, up to `limit`: a plugin that writes nothing costs no pages
        // (two zeroed rings of the limit were ~30 page faults of every cold run).
        self.ring = []
    }

    /// Appends bytes; returns the complete lines they finish (none unless `collectsLines`).
    mutating func append(_ bytes: UnsafeRawBufferPointer) -> [String] {
        let kept = bytes.count > limit ? UnsafeRawBufferPointer(rebasing: bytes[(bytes.count - limit)...]) : bytes
        for byte in kept {
            if ring.count < limit { ring.append(byte) } else { ring[next] = byte }
            next = next + 1 == limit ? 0 : next + 1
        }
        guard collectsLines else { return [] }
        var lines: [String] = []
        for byte in bytes {
            if byte == 10 {
                lines.append(String(decoding: partialLine, as: UTF8.self))
                partialLine.removeAll(keepingCapacity: true)
            } else if partialLine.count < maxLineBytes {
                partialLine.append(byte)
            }
        }
        return lines
    }

    /// The rest of a line not ended by a newline, at end of output.
    mutating func flush() -> String? {
        guard !partialLine.isEmpty else { return nil }
        defer { partialLine.removeAll() }
        return String(decoding: partialLine, as: UTF8.self)
    }

    /// The bytes kept, oldest first.
    var tail: [UInt8] {
        if ring.count < limit { return ring }
        return Array(ring[next..<limit]) + Array(ring[0..<next])
    }

    /// The last `count` lines kept.
    func lastLines(_ count: Int) -> [String] {
        let text = String(decoding: tail, as: UTF8.self)
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        if lines.last == "" { lines.removeLast() }
        return Array(lines.suffix(count))
    }
}
