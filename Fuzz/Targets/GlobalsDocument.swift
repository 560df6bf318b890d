// libFuzzer target: the streaming reader of globals export documents (`extrun globals import`),
// checked against JSONParser on the whole text: what the one reads, the other must read the same.
@testable import ExtrunStoreDocument
import ExtrunProtocol
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Data(UnsafeBufferPointer(start: data, count: size))
    var reader = GlobalsDocumentReader(.data(bytes), invalid: { StoreError(.invalidDocument, $0) })
    var entries: [(String, JSONValue)] = []
    var streamed = true
    var refusal = ""
    do {
        try reader.read { name, text, _ in entries.append((name, try JSONParser.parse(text))) }
    } catch {
        streamed = false
        refusal = "\(error)"
    }
    let whole = try? JSONParser.parse(bytes)
    if case .object(let object)? = whole, case .object(let globals)? = object["globals"] {
        // A valid document is read, with the same globals (the last of a name given twice) and fields;
        // but "globals" given twice, which the reader refuses (JSONParser keeps the last).
        if !streamed {
            if refusal.contains("\"globals\" appears twice") { return 0 }
            fatalError("a valid document was refused by the streaming reader: \(refusal.prefix(300))")
        }
        var last: [String: JSONValue] = [:]
        for (name, value) in entries { last[name] = value }
        if last != globals { fatalError("the streaming reader read other globals than JSONParser") }
        for (key, value) in object where key != "globals" && reader.header[key] != value {
            fatalError("the streaming reader read field \(key) otherwise")
        }
        if reader.count != entries.count { fatalError("count \(reader.count) for \(entries.count) entries") }
    } else if streamed && reader.sawGlobals {
        // The reader accepted text JSONParser refuses: only nesting deeper than a value may have is allowed.
        if case .object? = whole { fatalError("accepted a document whose globals is not an object") }
        let deep = bytes.filter { $0 == UInt8(ascii: "[") || $0 == UInt8(ascii: "{") }.count >= JSONParser.maxDepth - 2
        if !deep { fatalError("the streaming reader accepted text that is not JSON") }
    }
    return 0
}
