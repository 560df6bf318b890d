// libFuzzer target: the JSON parser (both modes agree); what it accepts, JSONWriter writes back to the same value (compact and pretty).
import ExtrunProtocol

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    // The position-recording mode shares the scanner: the same value, or the same error.
    let plain = Result { () throws(JSONParseError) in try JSONParser.parse(bytes, maxNodes: 100_000) }
    let located = Result { () throws(JSONParseError) in try JSONParser.parseLocated(bytes, maxNodes: 100_000, duplicateKeys: .lastWins) }
    switch (plain, located) {
    case (.success(let a), .success(let b)): if a != b.json { fatalError("parseLocated read another value than parse") }
    case (.failure(let a), .failure(let b)): if a != b { fatalError("parseLocated failed otherwise than parse: \(a) / \(b)") }
    default: fatalError("parse and parseLocated disagree on whether the text is JSON")
    }
    guard let value = try? plain.get() else { return 0 }
    let compact = JSONWriter.bytes(value)
    guard let again = try? JSONParser.parse(compact) else { fatalError("JSONWriter wrote JSON the parser refuses: \(compact.prefix(200))") }
    guard again.isSameJSON(as: value) else { fatalError("compact round trip changed the value") }
    if let pretty = JSONWriter.prettyBytes(value, limit: 1 << 20) {
        guard let back = try? JSONParser.parse(pretty), back.isSameJSON(as: value) else { fatalError("pretty round trip changed the value") }
    } else if JSONWriter.prettyBytes(value).count <= (1 << 20) - (256 << 10) {
        // (Counting may overestimate by a few bytes per value, never underestimate.)
        fatalError("prettyBytes(limit:) refused a value whose pretty form is within the limit")
    }
    var streamed: [UInt8] = []
    JSONWriter.stream(value, chunkBytes: 16) { streamed += $0 }
    guard streamed == compact else { fatalError("streamed JSON differs from compact JSON") }
    return 0
}

extension JSONValue {
    /// Equal as JSON: a double written without a fraction may come back as an integer (pretty JSON drops `.0`).
    func isSameJSON(as other: JSONValue) -> Bool {
        switch (self, other) {
        case (.array(let a), .array(let b)): return a.count == b.count && zip(a, b).allSatisfy { $0.isSameJSON(as: $1) }
        case (.object(let a), .object(let b)):
            return a.count == b.count && a.allSatisfy { key, value in b[key].map { value.isSameJSON(as: $0) } ?? false }
        case (.int(let a), .double(let b)), (.double(let b), .int(let a)): return Double(a) == b
        case (.double(let a), .double(let b)): return a == b || (!a.isFinite && !b.isFinite)
        default: return self == other
        }
    }
}
