import ExtrunProtocol
import Foundation
import Testing

/// What parsing and writing may cost is bounded (issue 14): a node count beside the
/// depth limit, pretty output that cannot amplify, compact output streamed.
@Suite("Parsing and writing cost")
struct ParsingCostTests {
    @Test("the node limit counts every value and stops the parse there, with a flag")
    func nodeLimit() throws {
        // [[0],[0],[0]]: 1 + 3 arrays + 3 zeros = 7 values.
        let text = Array("[[0],[0],[0]]".utf8)
        #expect(try JSONParser.parse(text, maxNodes: 7) == .array([.array([.int(0)]), .array([.int(0)]), .array([.int(0)])]))
        do {
            _ = try JSONParser.parse(text, maxNodes: 6)
            Issue.record("parsed 7 values with a limit of 6")
        } catch {
            #expect(error.exceedsNodeLimit)
            #expect(error.reason.contains("more than 6 values"), "\(error.reason)")
        }
        // A syntax error is not a node-limit error.
        do {
            _ = try JSONParser.parse(Array("[1,".utf8), maxNodes: 6)
        } catch {
            #expect(!error.exceedsNodeLimit)
        }
    }

    @Test("Message.decode passes the node limit through as the parser's error")
    func messageNodeLimit() throws {
        let body = Array(#"{"jsonrpc":"2.0","method":"log","params":{"level":"info","message":"x","extra":[1,2,3,4,5,6,7,8]}}"#.utf8)
        #expect(throws: Never.self) { _ = try Message.decode(body, maxNodes: 100) }
        #expect { _ = try Message.decode(body, maxNodes: 10) } throws: { error in
            (error as? JSONParseError)?.exceedsNodeLimit == true
        }
    }

    @Test("pretty output within its limit is exactly prettyBytes; over it, nil, whatever the nesting")
    func prettyLimit() throws {
        let small: JSONValue = .object(["a": .array([.int(1), .double(2.5), .string("q\"\n")]), "b": .object([:]), "c": .array([])])
        #expect(JSONWriter.prettyBytes(small, limit: 1 << 20) == JSONWriter.prettyBytes(small))
        // 20,000 zeros 300 arrays deep: 40 KB compact, ~12 MB pretty.
        var deep: JSONValue = .array(Array(repeating: .int(0), count: 20_000))
        for _ in 0..<300 { deep = .array([deep]) }
        #expect(JSONWriter.prettyBytes(deep, limit: 4 << 20) == nil)
        #expect(JSONWriter.bytes(deep).count < 50_000)
    }

    @Test("the counted pretty size is never below the real one")
    func prettyCountIsAnUpperBound() throws {
        let values: [JSONValue] = [
            .null, .bool(true), .int(-12), .double(1.0), .double(0.1), .string("\u{1}é\t"), .array([]), .object([:]),
            .array([.array([]), .object(["k": .array([.int(1), .object([:])])])]),
        ]
        for value in values {
            let real = JSONWriter.prettyBytes(value).count
            // Counted at least as large: refused one byte under its real size...
            #expect(JSONWriter.prettyBytes(value, limit: real - 1) == nil, "\(value): pretty is \(real) bytes")
            // ...and the count is close (a byte or so per value over).
            #expect(JSONWriter.prettyBytes(value, limit: real + 16) != nil, "\(value): pretty is \(real) bytes")
        }
    }

    @Test("streamed compact output is the compact output, in pieces")
    func streamed() throws {
        var nested: JSONValue = .object(["z": .string(String(repeating: "x", count: 1000)), "a": .array((0..<500).map { .int($0) })])
        for i in 0..<20 { nested = .object(["level\(i)": nested, "n": .double(Double(i) + 0.5)]) }
        var pieces: [[UInt8]] = []
        JSONWriter.stream(nested, chunkBytes: 256) { pieces.append($0) }
        #expect(pieces.count >= 5)
        #expect(pieces.flatMap { $0 } == JSONWriter.bytes(nested))
        #expect(pieces.dropLast().allSatisfy { $0.count < 256 + 1200 })
    }

    @Test("the frame decoder says when bytes wait that no frame returned yet")
    func bufferedBytes() throws {
        var decoder = FrameDecoder(maxFrameBytes: 1 << 10)
        #expect(!decoder.hasBufferedBytes)
        decoder.append(Array("Content-Length: 2\r\n\r\n{}Content-Le".utf8))
        #expect(try decoder.nextFrame() == Array("{}".utf8))
        #expect(decoder.hasBufferedBytes)
        #expect(try decoder.nextFrame() == nil)
        #expect(throws: FramingError.frameTooLarge(length: 4096, limit: 1024)) {
            var big = FrameDecoder(maxFrameBytes: 1 << 10)
            big.append(Array("Content-Length: 4096\r\n\r\n".utf8))
            _ = try big.nextFrame()
        }
    }
}
