/// Writes a `JSONValue` as compact JSON bytes, without Codable.
///
/// Object keys are sorted (byte order of their UTF-8), `/` is not escaped,
/// non-ASCII characters are written as they are, control characters as escapes.
/// An integer is written as digits; a double always with a fraction or an
/// exponent (`3.0`, `1e+300`), so that `JSONParser` reads it back as a double.
/// Non-finite doubles, which JSON cannot carry, are written as `null`.
public enum JSONWriter {
    public static func bytes(_ value: JSONValue) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(value, into: &out)
        return out
    }

    public static func write(_ value: JSONValue, into out: inout [UInt8]) {
        switch value {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let b): out.append(contentsOf: b ? "true".utf8 : "false".utf8)
        case .int(let i): out.append(contentsOf: String(i).utf8)
        case .double(let d): writeDouble(d, into: &out)
        case .string(let s): writeString(s, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            var first = true
            for item in items {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                write(item, into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            writeObject(sortedMembers(members), into: &out)
        }
    }

    /// An object given as its members (keys distinct), written as `bytes(.object(...))` would
    /// write it, without building the dictionary first (`extrun serve`'s log lines).
    public static func objectBytes(_ members: [(key: String, value: JSONValue)]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        writeObject(members.sorted(by: { utf8Precedes($0.key, $1.key) }), into: &out)
        return out
    }

    /// An object's members, already in order.
    private static func writeObject(_ sorted: [(key: String, value: JSONValue)], into out: inout [UInt8]) {
        out.append(UInt8(ascii: "{"))
        var first = true
        for (key, member) in sorted {
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            writeString(key, into: &out)
            out.append(UInt8(ascii: ":"))
            write(member, into: &out)
        }
        out.append(UInt8(ascii: "}"))
    }

    /// An object's members in the byte order of their keys' UTF-8, each with its value (one
    /// pass: sorting the keys and then looking each up again hashed every key twice, and the
    /// generic `utf8.lexicographicallyPrecedes` was the writer's own largest cost).
    static func sortedMembers(_ members: [String: JSONValue]) -> [(key: String, value: JSONValue)] {
        var pairs: [(key: String, value: JSONValue)] = []
        pairs.reserveCapacity(members.count)
        for (key, value) in members { pairs.append((key, value)) }
        pairs.sort { utf8Precedes($0.key, $1.key) }
        return pairs
    }

    /// Whether `a`'s UTF-8 bytes sort before `b`'s (memcmp order; a prefix first).
    @inline(__always)
    static func utf8Precedes(_ a: String, _ b: String) -> Bool {
        // Native strings are contiguous UTF-8: compared in place, without copies (a copy
        // to call `withUTF8` cost a retain and a release per comparison).
        let compared = a.utf8.withContiguousStorageIfAvailable { x in
            b.utf8.withContiguousStorageIfAvailable { y -> Bool in
                let count = min(x.count, y.count)
                var index = 0
                while index < count {
                    if x[index] != y[index] { return x[index] < y[index] }
                    index += 1
                }
                return x.count < y.count
            }
        }
        if let compared, let result = compared { return result }
        return a.utf8.lexicographicallyPrecedes(b.utf8)
    }

    /// Writes `value` as compact JSON (as `bytes` does) to `sink` in pieces of about
    /// `chunkBytes` (a single long string is one piece): the whole text is never held.
    public static func stream(_ value: JSONValue, chunkBytes: Int = 64 << 10, to sink: ([UInt8]) -> Void) {
        var out: [UInt8] = []
        out.reserveCapacity(chunkBytes + 1024)
        func flushIfFull() {
            if out.count >= chunkBytes {
                sink(out)
                out.removeAll(keepingCapacity: true)
            }
        }
        func walk(_ value: JSONValue) {
            switch value {
            case .array(let items):
                out.append(UInt8(ascii: "["))
                for (index, item) in items.enumerated() {
                    if index > 0 { out.append(UInt8(ascii: ",")) }
                    walk(item)
                    flushIfFull()
                }
                out.append(UInt8(ascii: "]"))
            case .object(let members):
                out.append(UInt8(ascii: "{"))
                var first = true
                for (key, member) in sortedMembers(members) {
                    if !first { out.append(UInt8(ascii: ",")) }
                    first = false
                    writeString(key, into: &out)
                    out.append(UInt8(ascii: ":"))
                    walk(member)
                    flushIfFull()
                }
                out.append(UInt8(ascii: "}"))
            default:
                write(value, into: &out)
            }
        }
        walk(value)
        if !out.isEmpty { sink(out) }
    }

    /// Pretty JSON exactly as `JSONCoding.encoder(pretty: true)` writes it (Foundation's
    /// layout: two-space indents, `"key" : value`, sorted keys, empty containers as
    /// `[\n\n]`, a double that is a whole number without its `.0`), without Codable:
    /// `extrun handle` prints its report this way, without paying for JSONEncoder's
    /// first use in a process (docs/benchmarks.md, "Costs the source's comments point to").
    public static func prettyBytes(_ value: JSONValue) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(1024)
        writePretty(value, indent: 0, into: &out)
        return out
    }

    /// Pretty JSON if it takes at most `limit` bytes, else nil (its size is counted
    /// first, without writing it), so that indentation cannot amplify a deeply nested
    /// value: a million zeros 500 arrays deep is 2 MB compact and 2 GB pretty.
    public static func prettyBytes(_ value: JSONValue, limit: Int) -> [UInt8]? {
        guard prettyCount(value, indent: 0, limit: limit) <= limit else { return nil }
        return prettyBytes(value)
    }

    /// The size of `value` written pretty, counted without writing it: at least the real
    /// size (a byte more per container, a whole double's `.0`). Counting stops once it
    /// passes `limit` (the result is then some number above it).
    static func prettyCount(_ value: JSONValue, indent: Int, limit: Int) -> Int {
        switch value {
        case .array(let items):
            if items.isEmpty { return 4 + 2 * indent }  // "[\n\n", the indent, "]"
            var count = 2 + 1 + 2 * indent  // "[", "]", the newline and indent before "]"
            for item in items {
                count += 2 + 2 * (indent + 1)  // "," (or not), newline, indent
                count += prettyCount(item, indent: indent + 1, limit: limit)
                if count > limit { return count }
            }
            return count
        case .object(let members):
            if members.isEmpty { return 4 + 2 * indent }
            var count = 2 + 1 + 2 * indent
            for (key, member) in members {
                count += 2 + 2 * (indent + 1) + stringCount(key) + 3
                count += prettyCount(member, indent: indent + 1, limit: limit)
                if count > limit { return count }
            }
            return count
        case .string(let text): return stringCount(text)
        case .int(let number): return String(number).utf8.count
        case .double(let number): return number.isFinite ? number.description.utf8.count : 4
        case .bool(let flag): return flag ? 4 : 5
        case .null: return 4
        }
    }

    /// The size of a string written by `writeString`.
    static func stringCount(_ text: String) -> Int {
        var count = 2
        var text = text
        // Indexes into the buffer, not a for-in over the view: in a debug build the generic
        // iterator costs a metadata lookup a byte (seconds for a 4 MiB value, served while a
        // run's deadline runs).
        text.withUTF8 { utf8 in
            var i = 0
            while i < utf8.count {
                switch utf8[i] {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), 0x0A, 0x0D, 0x09, 0x08, 0x0C: count += 2
                case 0..<0x20: count += 6
                default: count += 1
                }
                i += 1
            }
        }
        return count
    }

    static func writePretty(_ value: JSONValue, indent: Int, into out: inout [UInt8]) {
        func newline(_ level: Int) {
            out.append(0x0A)
            out.append(contentsOf: repeatElement(UInt8(ascii: " "), count: level * 2))
        }
        switch value {
        case .double(let d):
            guard d.isFinite else {
                out.append(contentsOf: "null".utf8)
                return
            }
            var text = d.description
            if text.hasSuffix(".0") { text.removeLast(2) }
            out.append(contentsOf: text.utf8)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            if items.isEmpty { out.append(0x0A) }
            for (index, item) in items.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                newline(indent + 1)
                writePretty(item, indent: indent + 1, into: &out)
            }
            newline(indent)
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            if members.isEmpty { out.append(0x0A) }
            var first = true
            for (key, member) in sortedMembers(members) {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                newline(indent + 1)
                writeString(key, into: &out)
                out.append(contentsOf: " : ".utf8)
                writePretty(member, indent: indent + 1, into: &out)
            }
            newline(indent)
            out.append(UInt8(ascii: "}"))
        default:
            write(value, into: &out)
        }
    }

    static func writeDouble(_ d: Double, into out: inout [UInt8]) {
        guard d.isFinite else {
            out.append(contentsOf: "null".utf8)
            return
        }
        // Swift's shortest round-trip form: "3.0", "0.1", "1e+300", "5e-324": all valid JSON.
        out.append(contentsOf: d.description.utf8)
    }

    static func writeString(_ s: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var s = s
        s.withUTF8 { utf8 in
            var runStart = 0
            var i = -1
            while true {
                i += 1
                guard i < utf8.count else { break }
                let byte = utf8[i]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                out.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<i]))
                runStart = i + 1
                switch byte {
                case UInt8(ascii: "\""): out.append(contentsOf: #"\""#.utf8)
                case UInt8(ascii: "\\"): out.append(contentsOf: #"\\"#.utf8)
                case 0x0A: out.append(contentsOf: #"\n"#.utf8)
                case 0x0D: out.append(contentsOf: #"\r"#.utf8)
                case 0x09: out.append(contentsOf: #"\t"#.utf8)
                case 0x08: out.append(contentsOf: #"\b"#.utf8)
                case 0x0C: out.append(contentsOf: #"\f"#.utf8)
                default:
                    let hex = Array("0123456789abcdef".utf8)
                    out.append(contentsOf: #"\u00"#.utf8)
                    out.append(hex[Int(byte >> 4)])
                    out.append(hex[Int(byte & 0xF)])
                }
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[runStart..<utf8.count]))
        }
        out.append(UInt8(ascii: "\""))
    }
}
