// The scanner behind `JSONParser`: RFC 8259 from bytes, one value at a time, handing
// what it reads to a `JSONBuilder` (plain values or located ones).
struct JSONScanner<Builder: JSONBuilder> {
    let bytes: UnsafeBufferPointer<UInt8>
    var index = 0
    let maxNodes: Int
    var nodes = 0
    var builder: Builder

    init(bytes: UnsafeBufferPointer<UInt8>, maxNodes: Int, builder: Builder) {
        self.bytes = bytes
        self.maxNodes = maxNodes
        self.builder = builder
    }

    // MARK: Errors

    /// `problem` says what is wrong for callers with wording of their own; `problemAt` is where
    /// its construct is when that is not `offset` (see `JSONParseError.problemOffset`).
    func error(_ reason: String, at offset: Int, _ problem: JSONParseError.Problem, problemAt: Int? = nil) -> JSONParseError {
        var line = 1
        var column = 1
        var i = 0
        let end = min(offset, bytes.count)
        while i < end {
            let byte = bytes[i]
            if byte == 10 {
                line += 1
                column = 1
            } else if byte & 0xC0 != 0x80 {
                column += 1
            }
            i += 1
        }
        return JSONParseError(reason: reason, offset: offset, line: line, column: column, problem: problem, problemOffset: problemAt ?? offset)
    }

    /// The input ended in the middle of a value: point at its last non-blank character.
    /// (`problemAt`: where the construct the input ended in starts; by default the end of the input.)
    func endOfInput(_ problem: JSONParseError.Problem, at problemAt: Int? = nil) -> JSONParseError {
        var end = bytes.count
        while end > 0, isJSONWhitespace(bytes[end - 1]) { end -= 1 }
        return error("unexpected end of input (truncated, or an unterminated string)", at: max(0, end - 1), problem, problemAt: problemAt ?? bytes.count)
    }

    func describeByte(at offset: Int) -> String {
        let byte = bytes[offset]
        if byte >= 0x20 && byte < 0x7F { return "character '\(Character(Unicode.Scalar(byte)))'" }
        if byte >= 0x80, let text = characterText(at: offset) { return "character '\(text)'" }
        return "byte 0x\(String(byte, radix: 16, uppercase: true))"
    }

    private func characterText(at offset: Int) -> String? {
        var end = offset + 1
        while end < bytes.count, end - offset < 4, bytes[end] & 0xC0 == 0x80 { end += 1 }
        return String(validating: UnsafeBufferPointer(rebasing: bytes[offset..<end]), as: UTF8.self)
    }


    mutating func skipWhitespace() {
        while index < bytes.count, isJSONWhitespace(bytes[index]) { index += 1 }
    }

    // MARK: Values

    mutating func value(depth: Int) throws(JSONParseError) -> Builder.Value {
        guard index < bytes.count else { throw endOfInput(.valueMissing) }
        nodes += 1
        if nodes > maxNodes {
            var failure = error("more than \(maxNodes) values (the limit on values in one text)", at: index, .tooManyValues)
            failure.exceedsNodeLimit = true
            throw failure
        }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try object(depth: depth + 1)
        case UInt8(ascii: "["): return try array(depth: depth + 1)
        case UInt8(ascii: "\""):
            let start = index
            return builder.string(try string(), at: start)
        case UInt8(ascii: "t"):
            let start = index
            try literal("true")
            return builder.bool(true, at: start)
        case UInt8(ascii: "f"):
            let start = index
            try literal("false")
            return builder.bool(false, at: start)
        case UInt8(ascii: "n"):
            let start = index
            try literal("null")
            return builder.null(at: start)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw error("unexpected \(describeByte(at: index)) where a value should start", at: index, .notAValue)
        }
    }

    mutating func literal(_ word: StaticString) throws(JSONParseError) {
        let start = index
        var offset = 0
        while offset < word.utf8CodeUnitCount {
            guard index < bytes.count else { throw endOfInput(.misspelledLiteral, at: start) }
            guard bytes[index] == word.utf8Start[offset] else {
                throw error("misspelled literal: expected '\(word)' (true, false and null are lowercase)", at: start, .misspelledLiteral)
            }
            index += 1
            offset += 1
        }
    }

    mutating func object(depth: Int) throws(JSONParseError) -> Builder.Value {
        if depth > JSONParser.maxDepth {
            throw error("arrays and objects nested more than \(JSONParser.maxDepth) deep", at: index, .tooDeep)
        }
        var members = builder.beginObject(at: index)
        index += 1  // {
        skipWhitespace()
        guard index < bytes.count else { throw endOfInput(.objectEnded) }
        if bytes[index] == UInt8(ascii: "}") {
            index += 1
            return builder.end(members)
        }
        while true {
            guard index < bytes.count else { throw endOfInput(.objectEnded) }
            guard bytes[index] == UInt8(ascii: "\"") else {
                throw error("unexpected \(describeByte(at: index)) where a key (a string in double quotes) should be", at: index, bytes[index] == UInt8(ascii: "}") ? .trailingCommaInObject : .notAKey)
            }
            let keyStart = index
            let key = try string()
            if let first = builder.key(key, at: keyStart, in: &members) {
                let earlier = error("", at: first, .notAValue)
                throw error("the key \"\(key)\" appears twice in this object (first at line \(earlier.line), column \(earlier.column))", at: keyStart, .duplicateKey(key, firstOffset: first))
            }
            skipWhitespace()
            guard index < bytes.count else { throw endOfInput(.colonMissing(key: key)) }
            guard bytes[index] == UInt8(ascii: ":") else {
                throw error("unexpected \(describeByte(at: index)) after the key \"\(key)\" (expected ':')", at: index, .colonMissing(key: key))
            }
            index += 1
            skipWhitespace()
            let member = try value(depth: depth)
            builder.add(key, member, to: &members)
            skipWhitespace()
            guard index < bytes.count else { throw endOfInput(.objectUnterminated) }
            switch bytes[index] {
            case UInt8(ascii: ","):
                index += 1
                skipWhitespace()
            case UInt8(ascii: "}"):
                index += 1
                return builder.end(members)
            default:
                throw error("unexpected \(describeByte(at: index)) in an object (expected ',' or '}')", at: index, .notCommaOrBrace)
            }
        }
    }

    mutating func array(depth: Int) throws(JSONParseError) -> Builder.Value {
        if depth > JSONParser.maxDepth {
            throw error("arrays and objects nested more than \(JSONParser.maxDepth) deep", at: index, .tooDeep)
        }
        var items = builder.beginList(at: index)
        index += 1  // [
        skipWhitespace()
        guard index < bytes.count else { throw endOfInput(.valueMissing) }
        if bytes[index] == UInt8(ascii: "]") {
            index += 1
            return builder.end(items)
        }
        while true {
            let item = try value(depth: depth)
            builder.append(item, to: &items)
            skipWhitespace()
            guard index < bytes.count else { throw endOfInput(.listUnterminated) }
            switch bytes[index] {
            case UInt8(ascii: ","):
                index += 1
                skipWhitespace()
                if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                    throw error("a trailing ',' before ']'", at: index - 1, .trailingCommaInList, problemAt: index)
                }
            case UInt8(ascii: "]"):
                index += 1
                return builder.end(items)
            default:
                throw error("unexpected \(describeByte(at: index)) in an array (expected ',' or ']')", at: index, .notCommaOrBracket)
            }
        }
    }

    // MARK: Strings

    mutating func string() throws(JSONParseError) -> String {
        let open = index
        index += 1  // "
        let start = index
        // Fast path: no escapes.
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let text = try decodeUTF8(start..<index)
                index += 1
                return text
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw error("a control character (byte 0x\(String(byte, radix: 16, uppercase: true))) in a string: write it as an escape such as \\n", at: index, .controlCharacter) }
            index += 1
        }
        guard index < bytes.count else { throw endOfInput(.stringUnterminated, at: open) }
        // Slow path: escapes. Each run of raw bytes is checked to be UTF-8 when an escape or
        // the closing quote ends it (what escapes write is), so the first problem is reported.
        var scratch: [UInt8] = Array(UnsafeBufferPointer(rebasing: bytes[start..<index]))
        var run = start
        while true {
            guard index < bytes.count else { throw endOfInput(.stringUnterminated, at: open) }
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                try validateUTF8(run..<index, open: open)
                index += 1
                return String(decoding: scratch, as: UTF8.self)
            case UInt8(ascii: "\\"):
                try validateUTF8(run..<index, open: open)
                let escape = index
                index += 1
                guard index < bytes.count else { throw endOfInput(.stringUnterminated, at: open) }
                switch bytes[index] {
                case UInt8(ascii: "\""): scratch.append(0x22)
                case UInt8(ascii: "\\"): scratch.append(0x5C)
                case UInt8(ascii: "/"): scratch.append(0x2F)
                case UInt8(ascii: "b"): scratch.append(0x08)
                case UInt8(ascii: "f"): scratch.append(0x0C)
                case UInt8(ascii: "n"): scratch.append(0x0A)
                case UInt8(ascii: "r"): scratch.append(0x0D)
                case UInt8(ascii: "t"): scratch.append(0x09)
                case UInt8(ascii: "u"):
                    index += 1
                    var scalar = try hex4(escapeAt: escape, first: escape)
                    if scalar >= 0xD800 && scalar < 0xDC00 {
                        // A high surrogate must be followed by \u and a low surrogate.
                        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                            throw error("a \\u escape of a high surrogate (\\u\(String(scalar, radix: 16, uppercase: true))) not followed by a low surrogate", at: escape, .loneSurrogate)
                        }
                        index += 2
                        let low = try hex4(escapeAt: index - 2, first: escape)
                        guard low >= 0xDC00 && low < 0xE000 else {
                            throw error("a \\u escape of a high surrogate (\\u\(String(scalar, radix: 16, uppercase: true))) followed by \\u\(String(low, radix: 16, uppercase: true)), which is not a low surrogate", at: escape, .badSurrogatePair)
                        }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if scalar >= 0xDC00 && scalar < 0xE000 {
                        throw error("a \\u escape of a lone low surrogate (\\u\(String(scalar, radix: 16, uppercase: true)))", at: escape, .loneSurrogate)
                    }
                    guard let unicode = Unicode.Scalar(scalar) else {
                        throw error("a \\u escape that is not a Unicode scalar", at: escape, .loneSurrogate)
                    }
                    scratch.append(contentsOf: String(Character(unicode)).utf8)
                    run = index
                    continue
                default:
                    throw error("an unknown escape '\\\(describeEscape(bytes[index]))' in a string (known: \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)", at: escape, .unknownEscape)
                }
                index += 1
                run = index
            default:
                if byte < 0x20 { throw error("a control character (byte 0x\(String(byte, radix: 16, uppercase: true))) in a string: write it as an escape such as \\n", at: index, .controlCharacter) }
                scratch.append(byte)
                index += 1
            }
        }
    }

    private func describeEscape(_ byte: UInt8) -> String {
        byte >= 0x20 && byte < 0x7F ? String(Character(Unicode.Scalar(byte))) : "0x\(String(byte, radix: 16, uppercase: true))"
    }

    /// Four hex digits at `index` (after `\u`).
    private mutating func hex4(escapeAt escape: Int, first: Int) throws(JSONParseError) -> UInt32 {
        var value: UInt32 = 0
        for _ in 0..<4 {
            guard index < bytes.count else { throw endOfInput(.incompleteUnicodeEscape, at: first) }
            let byte = bytes[index]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw error("a \\u escape needs four hexadecimal digits", at: escape, .badUnicodeEscape, problemAt: first)
            }
            value = value << 4 | UInt32(digit)
            index += 1
        }
        return value
    }

    private func validateUTF8(_ range: Range<Int>, open: Int) throws(JSONParseError) {
        let slice = UnsafeBufferPointer(rebasing: bytes[range])
        for byte in slice where byte >= 0x80 {
            guard String(validating: slice, as: UTF8.self) != nil else {
                throw error("a string that is not valid UTF-8", at: open, .invalidUTF8)
            }
            return
        }
    }

    private func decodeUTF8(_ range: Range<Int>) throws(JSONParseError) -> String {
        let slice = UnsafeBufferPointer(rebasing: bytes[range])
        // ASCII is always valid; otherwise validate.
        var ascii = true
        for byte in slice where byte >= 0x80 {
            ascii = false
            break
        }
        if ascii { return String(decoding: slice, as: UTF8.self) }
        guard let text = String(validating: slice, as: UTF8.self) else {
            throw error("a string that is not valid UTF-8", at: range.lowerBound - 1, .invalidUTF8)
        }
        return text
    }

    // MARK: Numbers

    mutating func number() throws(JSONParseError) -> Builder.Value {
        let start = index
        var integral = true
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count else { throw endOfInput(.numberIncomplete, at: start) }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            if index < bytes.count, isDigit(bytes[index]) {
                throw error("a number with a leading zero", at: start, .leadingZero)
            }
        } else if isDigit(bytes[index]) {
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        } else {
            throw error("a '-' not followed by a digit", at: start, .notANumber)
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            integral = false
            index += 1
            guard index < bytes.count else { throw endOfInput(.fractionDigitsMissing, at: start) }
            guard isDigit(bytes[index]) else { throw error("a '.' not followed by a digit in a number", at: index, .fractionDigitsMissing, problemAt: start) }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            integral = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            guard index < bytes.count else { throw endOfInput(.exponentDigitsMissing, at: start) }
            guard isDigit(bytes[index]) else { throw error("an exponent without digits in a number", at: index, .exponentDigitsMissing, problemAt: start) }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        let text = UnsafeBufferPointer(rebasing: bytes[start..<index])
        if integral, let value = jsonInt64(text) { return builder.int(value, at: start) }
        let string = String(decoding: text, as: UTF8.self)
        guard let value = Double(string), value.isFinite else {
            throw error("the number \(string) is out of range", at: start, .numberOutOfRange)
        }
        return builder.double(value, at: start)
    }

    private func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

}

@inline(__always) private func isJSONWhitespace(_ byte: UInt8) -> Bool { byte == 0x20 || byte == 0x0A || byte == 0x0D || byte == 0x09 }

/// An integer's digits (with an optional '-') as an Int64, or nil when it does not fit.
private func jsonInt64(_ text: UnsafeBufferPointer<UInt8>) -> Int64? {
    var i = 0
    let negative = text[0] == UInt8(ascii: "-")
    if negative { i = 1 }
    var value: Int64 = 0
    while i < text.count {
        let digit = Int64(text[i] &- UInt8(ascii: "0"))
        let (times10, overflow1) = value.multipliedReportingOverflow(by: 10)
        // Accumulate negatively so that Int64.min fits.
        let (next, overflow2) = times10.subtractingReportingOverflow(digit)
        if overflow1 || overflow2 { return nil }
        value = next
        i += 1
    }
    if negative { return value }
    return value == Int64.min ? nil : -value
}