/// Keeps the last bytes a plugin wrote to stdout or stderr, within a fixed
/// budget, and hands complete lines to an observer as they arrive.
struct OutputCapture {
    let limit: Int
    private(set) var tail: [UInt8] = []
    private(set) var totalBytes = 0
    private var partialLine: [UInt8] = []
    private let maxLineBytes = 4096

    init(limit: Int) {
        self.limit = limit
    }

    /// Appends bytes; returns the complete lines they finish.
    mutating func append(_ bytes: UnsafeRawBufferPointer) -> [String] {
        totalBytes += bytes.count
        tail.append(contentsOf: bytes.suffix(limit))
        if tail.count > limit { tail.removeFirst(tail.count - limit) }
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

    /// The last `count` lines kept.
    func lastLines(_ count: Int) -> [String] {
        let text = String(decoding: tail, as: UTF8.self)
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        if lines.last == "" { lines.removeLast() }
        return Array(lines.suffix(count))
    }
}
