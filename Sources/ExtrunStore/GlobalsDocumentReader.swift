import ExtrunProtocol
// Scripts/fuzz compiles this file alone, without ExtrunSystem (swift-system is a package,
// not a module swiftc finds); its target reads bytes only.
#if canImport(ExtrunSystem)
import ExtrunSystem
#endif
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Where `Globals.import` reads an export document from.
public struct GlobalsDocumentSource: Sendable {
    enum Kind: Sendable {
        case bytes(Data)
        case fileDescriptor(Int32, name: String)
    }
    let kind: Kind

    /// A document already in memory.
    public static func data(_ data: Data) -> GlobalsDocumentSource { GlobalsDocumentSource(kind: .bytes(data)) }

    /// A document read from an open file descriptor (a file, or a pipe such as standard
    /// input), never held whole: `name` is what errors call it. The descriptor stays open.
    public static func fileDescriptor(_ fd: Int32, name: String) -> GlobalsDocumentSource {
        GlobalsDocumentSource(kind: .fileDescriptor(fd, name: name))
    }

    /// A regular file or bytes can be read twice (a check pass, then the write pass);
    /// a pipe only once.
    var canReadTwice: Bool {
        switch kind {
        case .bytes: return true
        case .fileDescriptor(let fd, _):
            var info = stat()
            return fstat(fd, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG
        }
    }
}

/// A streaming reader of the export document (docs/store.md, "Export documents"): it
/// walks the top-level object a buffer of 64 KiB at a time and hands each global to its
/// caller as the bytes of its value, so what it holds is one value, never the document
/// (issue 14). Each value is then parsed by `JSONParser`; the reader itself only finds
/// where values start and end, and keeps the text of a value without the spaces between
/// its tokens (its line breaks kept, so that a parse error names the document's line).
struct GlobalsDocumentReader {
    /// The document's fields other than `globals` (their values parsed).
    var header: [String: JSONValue] = [:]
    /// How many globals the document held.
    var count = 0
    /// Whether it had a `globals` field (an object: anything else is an error).
    var sawGlobals = false

    private let source: GlobalsDocumentSource
    private var buffer: [UInt8] = []
    private var position = 0
    private var filled = 0  // bytes of `buffer` that hold the document
    private var consumed = 0  // bytes of the document read so far
    private var finished = false
    private var line = 1
    private let describe: (String) -> StoreError

    /// The longest text of one value kept (its spaces dropped): a value may be at most
    /// `StoreLimits.maxValueBytes` as compact JSON, and its line breaks and escapes such
    /// as `\u00e9` may make its text in a document longer.
    static let maxValueTextBytes = 3 * StoreLimits.maxValueBytes
    /// The longest text of a field of the document other than `globals`, and of a name.
    static let maxFieldTextBytes = 64 << 10
    static let chunkBytes = 64 << 10

    init(_ source: GlobalsDocumentSource, invalid: @escaping (String) -> StoreError) {
        self.source = source
        self.describe = invalid
        if case .fileDescriptor(let fd, _) = source.kind, source.canReadTwice {
            _ = lseek(fd, 0, SEEK_SET)
        }
    }

    /// Reads the whole document, calling `entry(name, valueText, line)` for every global in
    /// the document's order. Throws `invalidDocument` on the first problem of its structure.
    mutating func read(_ entry: (String, [UInt8], Int) throws -> Void) throws {
        try skipWhitespace()
        guard let first = try peek() else { throw describe("expected a JSON object, found nothing") }
        guard first == UInt8(ascii: "{") else {
            if first == UInt8(ascii: "[") || first == UInt8(ascii: "\"") || first == UInt8(ascii: "-") || (0x30...0x39).contains(first),
                let kind = Self.kindName(first)
            {
                throw describe("expected a JSON object, found \(kind)")
            }
            throw describe("expected a JSON object, found \(Self.describeByte(first)) (line \(line))")
        }
        position += 1
        var firstField = true
        while let key = try nextKey(&firstField) {
            if key == "globals" {
                guard !sawGlobals else { throw describe("\"globals\" appears twice (line \(line))") }
                sawGlobals = true
                try skipWhitespace()
                guard try peek() == UInt8(ascii: "{") else {
                    let found = try peek().flatMap(Self.kindName) ?? "something else"
                    throw describe("\"globals\" must be an object of name: value, found \(found) (line \(line))")
                }
                position += 1
                var firstGlobal = true
                while let name = try nextKey(&firstGlobal) {
                    try skipWhitespace()
                    let at = line
                    let text = try valueText(limit: Self.maxValueTextBytes, what: "global '\(name)'")
                    count += 1
                    try entry(name, text, at)
                }
            } else {
                try skipWhitespace()
                let at = line
                let text = try valueText(limit: Self.maxFieldTextBytes, what: "field \"\(key)\"")
                do throws(JSONParseError) {
                    header[key] = try JSONParser.parse(text)
                } catch {
                    throw describe("field \"\(key)\": \(error.reason) (line \(at + error.line - 1))")
                }
            }
        }
        try skipWhitespace()
        if let byte = try peek() { throw describe("unexpected \(Self.describeByte(byte)) after the document's object (line \(line))") }
    }

    // MARK: - Structure

    /// Inside an object whose `{` was read: the next member's name, read up to and with
    /// its `:`, or nil once the object's `}` is read. `first` is true before its first member.
    private mutating func nextKey(_ first: inout Bool) throws -> String? {
        try skipWhitespace()
        if first {
            first = false
            if try peek() == UInt8(ascii: "}") {
                position += 1
                return nil
            }
        } else {
            switch try peek() {
            case UInt8(ascii: ","): position += 1
            case UInt8(ascii: "}"):
                position += 1
                return nil
            default: throw unexpected("',' or '}'")
            }
            try skipWhitespace()
        }
        guard try peek() == UInt8(ascii: "\"") else { throw unexpected("a name in double quotes") }
        let at = line
        let text = try valueText(limit: Self.maxFieldTextBytes, what: "a name")
        let parsed: JSONValue
        do throws(JSONParseError) {
            parsed = try JSONParser.parse(text)
        } catch {
            throw describe("\(error.reason) (line \(at + error.line - 1))")
        }
        guard case .string(let key) = parsed else { throw describe("a name must be a string (line \(at))") }
        try skipWhitespace()
        guard try peek() == UInt8(ascii: ":") else { throw unexpected("':' after a name") }
        position += 1
        return key
    }

    /// The text of the value that starts here (after whitespace), without the spaces
    /// and tabs between its tokens. Only where the value ends is found here; whether it is
    /// valid JSON is for `JSONParser` to say.
    private mutating func valueText(limit: Int, what: String) throws -> [UInt8] {
        try skipWhitespace()
        var text: [UInt8] = []
        var depth = 0
        var inString = false
        var escaped = false
        var started = false
        func append(_ byte: UInt8) throws {
            guard text.count < limit else {
                throw StoreError(
                    .tooLarge,
                    "the globals document is invalid: \(what) is more than \(limit) bytes of JSON text (line \(line)); a value is at most \(StoreLimits.maxValueBytes) bytes (4 MiB) as compact JSON; nothing was imported",
                    details: ["limit": .int(Int64(limit))])
            }
            text.append(byte)
        }
        // Spaces between two tokens that would run together without them (`1 2`, `tr ue`)
        // become one space: dropping them would turn invalid JSON into valid.
        var separated = false
        func token(_ byte: UInt8) throws {
            if separated, let last = text.last, !Self.endsNothing(last), !Self.startsNothing(byte) { try append(0x20) }
            separated = false
            try append(byte)
        }
        while let byte = try peek() {
            if inString {
                position += 1
                try append(byte)
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                    if depth == 0 { return text }
                } else if byte == 0x0A {
                    line += 1  // invalid in a string: the parser says so
                }
                continue
            }
            switch byte {
            case UInt8(ascii: "\""):
                position += 1
                inString = true
                started = true
                try token(byte)
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                position += 1
                depth += 1
                started = true
                try token(byte)
            case UInt8(ascii: "}"), UInt8(ascii: "]"):
                guard depth > 0 else {
                    if started { return text }
                    throw unexpected("a value")
                }
                position += 1
                depth -= 1
                try token(byte)
                if depth == 0 { return text }
            case UInt8(ascii: ","), UInt8(ascii: ":"):
                guard depth > 0 else {
                    if started { return text }
                    throw unexpected("a value")
                }
                position += 1
                try token(byte)
            case 0x20, 0x09, 0x0D:
                position += 1
                if depth == 0 && started { return text }
                separated = started
            case 0x0A:
                position += 1
                line += 1
                if depth == 0 && started { return text }
                if started {
                    try append(byte)  // kept, so that a parse error names the document's line; it separates tokens too
                    separated = false
                }
            default:
                position += 1
                started = true
                try token(byte)
            }
        }
        if depth == 0 && started { return text }
        throw describe("unexpected end of the document inside \(what) (line \(line))")
    }

    private func unexpected(_ expected: String) -> StoreError {
        let found = (position < filled) ? Self.describeByte(buffer[position]) : "the end of the document"
        return describe("expected \(expected), found \(found) (line \(line))")
    }

    /// After these, a token needs no space before it.
    static func endsNothing(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: "[") || byte == UInt8(ascii: "{") || byte == UInt8(ascii: ",") || byte == UInt8(ascii: ":") || byte == 0x0A
    }

    /// Before these, no space is needed.
    static func startsNothing(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: "]") || byte == UInt8(ascii: "}") || byte == UInt8(ascii: ",") || byte == UInt8(ascii: ":")
    }

    static func describeByte(_ byte: UInt8) -> String {
        if byte >= 0x21 && byte < 0x7F { return "'\(Character(Unicode.Scalar(byte)))'" }
        return "byte 0x\(String(byte, radix: 16, uppercase: true))"
    }

    static func kindName(_ byte: UInt8) -> String? {
        switch byte {
        case UInt8(ascii: "{"): "an object"
        case UInt8(ascii: "["): "an array"
        case UInt8(ascii: "\""): "a string"
        case UInt8(ascii: "t"), UInt8(ascii: "f"): "a boolean"
        case UInt8(ascii: "n"): "null"
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): "a number"
        default: nil
        }
    }

    // MARK: - Bytes

    private mutating func skipWhitespace() throws {
        while let byte = try peek() {
            switch byte {
            case 0x20, 0x09, 0x0D: position += 1
            case 0x0A:
                position += 1
                line += 1
            default: return
            }
        }
    }

    /// The next byte, reading another piece of the document when the buffer is used up; nil at its end.
    private mutating func peek() throws -> UInt8? {
        if position < filled { return buffer[position] }
        try refill()
        return position < filled ? buffer[position] : nil
    }

    private mutating func refill() throws {
        guard !finished else { return }
        position = 0
        filled = 0
        switch source.kind {
        case .bytes(let data):
            let start = data.startIndex + consumed
            let end = min(data.endIndex, start + Self.chunkBytes)
            buffer = start < end ? Array(data[start..<end]) : []
            filled = buffer.count
        case .fileDescriptor(let fd, let name):
            if buffer.count != Self.chunkBytes { buffer = [UInt8](repeating: 0, count: Self.chunkBytes) }
            #if canImport(ExtrunSystem)
            do {
                filled = try SystemCall.read(fd, into: &buffer)
            } catch {
                throw StoreError(.ioError, "cannot read \(name): \(error.reason); nothing was imported", details: ["file": .string(name)])
            }
            #else
            throw StoreError(.ioError, "cannot read \(name): this build reads documents from memory only", details: ["file": .string(name)])
            #endif
        }
        consumed += filled
        if filled == 0 { finished = true }
    }
}
