import ExtrunProtocol
import ExtrunStore
import Foundation
import Testing

/// `globals export` streams its document as the rows are read (issue 14): the bytes
/// are exactly those JSONEncoder wrote for the whole document, in pieces.
@Suite("Streamed globals export")
struct ExportStreamingTests {
    /// The document as JSONEncoder (pretty, sorted keys) wrote it before it was streamed.
    func encoded(_ globals: [String: JSONValue], owner: String, exported: String) throws -> [UInt8] {
        let document: JSONValue = .object([
            "format": "extrun-globals", "version": 1, "owner": .string(owner), "exported": .string(exported),
            "globals": .object(globals),
        ])
        return Array(try JSONCoding.encoder(pretty: true).encode(document) + Data("\n".utf8))
    }

    @Test("the streamed document is byte for byte JSONEncoder's, empty or not")
    func sameBytes() throws {
        let test = try TestStore()
        let globals = try test.store.globals(of: "TEAM")
        var pieces: [[UInt8]] = []
        try globals.export { pieces.append($0) }
        var whole = pieces.flatMap { $0 }
        var exported = try #require(try JSONParser.parse(whole)["exported"]?.stringValue)
        #expect(whole == (try encoded([:], owner: "TEAM", exported: exported)), "\(String(decoding: whole, as: UTF8.self))")

        let values: [String: JSONValue] = [
            "text": "hello \"quoted\" / slash\n", "é": "ünïcode", "n": 42, "pi": 3.25, "whole": .double(2), "flag": false,
            "none": .null, "list": [1, [2, 3], [], [:]], "dict": ["k": "v", "nested": ["a": [true]], "empty": [:]],
            "big": .string(String(repeating: "z", count: 200_000)),
        ]
        for (name, value) in values { try globals.set(name, to: value) }
        pieces = []
        try globals.export { pieces.append($0) }
        #expect(pieces.count > 1, "a 200 KB document in one piece")
        whole = pieces.flatMap { $0 }
        exported = try #require(try JSONParser.parse(whole)["exported"]?.stringValue)
        let expected = try encoded(values, owner: "TEAM", exported: exported)
        #expect(whole == expected, "differs from byte \(zip(whole, expected).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? min(whole.count, expected.count))")
        // export() is the same pieces, whole.
        let again = try globals.export()
        #expect(again.count == whole.count)
        #expect(try JSONParser.parse(again)["globals"]?["big"] == values["big"])
    }
}
