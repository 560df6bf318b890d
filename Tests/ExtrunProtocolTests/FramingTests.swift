import ExtrunProtocol
import Testing

/// Builds a raw frame from a header text and a body, for headers `Framing.frame` would never write.
private func raw(_ header: String, _ body: String = "") -> [UInt8] {
    Array(header.utf8) + Array(body.utf8)
}

/// Drains every complete frame the decoder holds.
private func drain(_ decoder: inout FrameDecoder) throws -> [[UInt8]] {
    var frames: [[UInt8]] = []
    while let frame = try decoder.nextFrame() { frames.append(frame) }
    return frames
}

@Suite("Framing")
struct FramingTests {
    @Test("frame() writes the LSP header and the body")
    func frameLayout() {
        let body = Array(#"{"jsonrpc":"2.0"}"#.utf8)
        let framed = Framing.frame(body)
        #expect(framed == Array("Content-Length: 17\r\n\r\n".utf8) + body)
        #expect(Framing.frame([UInt8]()) == Array("Content-Length: 0\r\n\r\n".utf8))
    }

    @Test("one frame, appended at once")
    func oneFrame() throws {
        var decoder = FrameDecoder()
        let body = Array(#"{"a":1}"#.utf8)
        decoder.append(Framing.frame(body))
        #expect(try decoder.nextFrame() == body)
        #expect(try decoder.nextFrame() == nil)
        #expect(decoder.bufferedByteCount == 0)
    }

    @Test("nothing, or a partial header, is not a frame yet")
    func needsMoreBytes() throws {
        var decoder = FrameDecoder()
        #expect(try decoder.nextFrame() == nil)
        decoder.append(Array("Content-Len".utf8))
        #expect(try decoder.nextFrame() == nil)
        decoder.append(Array("gth: 3\r\n\r\nab".utf8))
        #expect(try decoder.nextFrame() == nil)
        #expect(decoder.bufferedByteCount == 2)
        decoder.append(Array("c".utf8))
        #expect(try decoder.nextFrame() == Array("abc".utf8))
    }

    @Test("a frame split into 1-byte chunks comes out whole, and only at its last byte")
    func oneByteChunks() throws {
        let body = Array(#"{"jsonrpc":"2.0","id":7,"method":"handle","params":{"text":"héllo wörld"}}"#.utf8)
        let framed = Framing.frame(body)
        var decoder = FrameDecoder()
        var frames: [[UInt8]] = []
        for (index, byte) in framed.enumerated() {
            decoder.append([byte])
            if let frame = try decoder.nextFrame() {
                #expect(index == framed.count - 1, "frame completed early, at byte \(index) of \(framed.count)")
                frames.append(frame)
            }
        }
        #expect(frames == [body])
        #expect(decoder.bufferedByteCount == 0)
    }

    @Test("several frames merged into one append come out in order, including an empty body")
    func mergedFrames() throws {
        let bodies: [[UInt8]] = [Array("first".utf8), [], Array(#"{"third":[1,2,3]}"#.utf8), Array("4".utf8)]
        var decoder = FrameDecoder()
        decoder.append(bodies.flatMap { Framing.frame($0) } + Array("Content-Length: 10\r\n\r\npart".utf8))
        #expect(try drain(&decoder) == bodies)
        // The fifth frame is incomplete: its header is consumed, its six missing bytes are awaited.
        #expect(decoder.bufferedByteCount == 4)
        decoder.append(Array("ial!!".utf8))
        #expect(try decoder.nextFrame() == nil)
        decoder.append(Array("!".utf8))
        #expect(try decoder.nextFrame() == Array("partial!!!".utf8))
    }

    @Test("many frames in one buffer (the decoder compacts as it goes)")
    func manyFramesCompaction() throws {
        var decoder = FrameDecoder()
        let bodies = (0..<2000).map { i in Array("{\"n\":\(i),\"pad\":\"\(String(repeating: "x", count: i % 97))\"}".utf8) }
        var stream: [UInt8] = []
        for body in bodies { stream += Framing.frame(body) }
        // Feed in uneven chunks so that frames straddle appends.
        var decoded: [[UInt8]] = []
        var offset = 0
        var chunk = 1
        while offset < stream.count {
            let end = min(stream.count, offset + chunk)
            decoder.append(stream[offset..<end])
            decoded += try drain(&decoder)
            offset = end
            chunk = chunk * 3 % 70_001 + 1
        }
        #expect(decoded.count == bodies.count)
        #expect(decoded == bodies)
        #expect(decoder.bufferedByteCount == 0)
    }

    @Test("a multi-megabyte frame, arriving in 64 KiB reads")
    func largeFrame() throws {
        // Every byte value, in a pattern that does not repeat with the read size.
        let body = (0..<(6 << 20)).map { i in UInt8(truncatingIfNeeded: i &* 7 &+ i >> 11) }
        let framed = Framing.frame(body)
        var decoder = FrameDecoder()
        var result: [UInt8]?
        var offset = 0
        while offset < framed.count {
            let end = min(framed.count, offset + (64 << 10))
            decoder.append(framed[offset..<end])
            if let frame = try decoder.nextFrame() {
                #expect(result == nil)
                result = frame
            }
            offset = end
        }
        #expect(result?.count == body.count)
        #expect(result == body)
    }

    @Test(
        "header fields other than Content-Length are ignored; the name is case-insensitive; spaces around the value are trimmed",
        arguments: [
            "content-length: 5\r\n\r\n",
            "CONTENT-LENGTH:5\r\n\r\n",
            "Content-Type: application/vscode-jsonrpc; charset=utf-8\r\nContent-Length: 5\r\n\r\n",
            "Content-Length: 5\r\nX-Extra: whatever: with colons\r\n\r\n",
            "Content-Length: \t 5 \t\r\n\r\n",
        ])
    func headerVariants(header: String) throws {
        var decoder = FrameDecoder()
        decoder.append(raw(header, "hello"))
        #expect(try decoder.nextFrame() == Array("hello".utf8))
        #expect(decoder.bufferedByteCount == 0)
    }

    @Test("a header block of exactly maxHeaderBytes is accepted")
    func headerAtLimit() throws {
        let base = "Content-Length: 2\r\nX-Pad: "
        let header = base + String(repeating: "p", count: Framing.maxHeaderBytes - base.utf8.count)
        #expect(header.utf8.count == Framing.maxHeaderBytes)
        var decoder = FrameDecoder()
        decoder.append(raw(header + "\r\n\r\n", "ok"))
        #expect(try decoder.nextFrame() == Array("ok".utf8))
    }

    @Test("a header block one byte over maxHeaderBytes is refused")
    func headerOverLimit() {
        let base = "Content-Length: 2\r\nX-Pad: "
        let header = base + String(repeating: "p", count: Framing.maxHeaderBytes + 1 - base.utf8.count)
        var decoder = FrameDecoder()
        decoder.append(raw(header + "\r\n\r\n", "ok"))
        #expect(throws: FramingError.headerTooLong(limit: Framing.maxHeaderBytes)) { try decoder.nextFrame() }
    }

    @Test("a header without its terminating blank line is refused once it is too long to be one")
    func headerTooLongWithoutTerminator() throws {
        var decoder = FrameDecoder()
        // Up to the limit, the decoder waits for more.
        decoder.append(Array(repeating: UInt8(ascii: "a"), count: Framing.maxHeaderBytes + 3))
        #expect(try decoder.nextFrame() == nil)
        decoder.append([UInt8(ascii: "a")])
        let error = #expect(throws: FramingError.self) { try decoder.nextFrame() }
        #expect(error == .headerTooLong(limit: Framing.maxHeaderBytes))
        #expect(error?.description.contains("\(Framing.maxHeaderBytes) bytes") == true)
    }

    @Test("stray text such as a print() on the protocol channel is refused")
    func strayTextIsTooLong() {
        var decoder = FrameDecoder()
        decoder.append(Array(String(repeating: "Hello from the plugin!\n", count: 100).utf8))
        #expect(throws: FramingError.headerTooLong(limit: Framing.maxHeaderBytes)) { try decoder.nextFrame() }
    }

    @Test(
        "unframed output fails fast, before a whole header's worth has arrived",
        arguments: [
            ("Hello from the plugin!\n", "Hello from the plugin!"),
            (#"{"jsonrpc":"2.0","id":1,"result":{}}"#, #"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            ("Content-Length: 5\n\nhello", "Content-Length: 5"),
        ])
    func unframedFailsFast(text: String, line: String) {
        var decoder = FrameDecoder()
        decoder.append(Array(text.utf8))
        #expect(throws: FramingError.malformedHeaderLine(line)) { try decoder.nextFrame() }
    }

    @Test("a control byte in a partial header fails fast")
    func controlByte() {
        var decoder = FrameDecoder()
        decoder.append(Array("Content-Length: 5".utf8) + [0x00])
        let error = #expect(throws: FramingError.self) { try decoder.nextFrame() }
        #expect(error?.description.contains("control byte 0") == true, "\(String(describing: error))")
    }

    @Test("a header without Content-Length is refused")
    func missingContentLength() {
        var decoder = FrameDecoder()
        decoder.append(raw("Content-Type: application/json\r\n\r\n", "{}"))
        let error = #expect(throws: FramingError.self) { try decoder.nextFrame() }
        #expect(error == .missingContentLength)
        #expect(error?.description.contains("Content-Length") == true)
    }

    @Test(
        "a Content-Length that is not a non-negative decimal integer is refused",
        arguments: ["abc", "-5", "+5", "5.0", "0x10", "1e3", "", "5 5", "99999999999999999999"])
    func invalidContentLength(value: String) {
        var decoder = FrameDecoder()
        decoder.append(raw("Content-Length: \(value)\r\n\r\n", "hello"))
        let error = #expect(throws: FramingError.self) { try decoder.nextFrame() }
        #expect(error == .invalidContentLength(value))
        #expect(error?.description.contains("'\(value)'") == true)
    }

    @Test("a header line without a colon is refused, naming the line")
    func malformedHeaderLine() {
        var decoder = FrameDecoder()
        decoder.append(raw("Content-Length 5\r\n\r\n", "hello"))
        #expect(throws: FramingError.malformedHeaderLine("Content-Length 5")) { try decoder.nextFrame() }
    }

    @Test("non-ASCII bytes in a complete header are refused")
    func nonASCIIHeader() {
        var decoder = FrameDecoder()
        decoder.append(raw("Content-Length: 5\r\nX-Name: héllo\r\n\r\n", "hello"))
        #expect(throws: FramingError.headerNotASCII) { try decoder.nextFrame() }
    }

    @Test("non-ASCII bytes fail fast, before the header is complete")
    func nonASCIIFailsFast() {
        var decoder = FrameDecoder()
        decoder.append([0xEF, 0xBB, 0xBF] + Array("Content-".utf8))  // a UTF-8 byte order mark
        #expect(throws: FramingError.headerNotASCII) { try decoder.nextFrame() }
    }

    @Test("a body is not checked for ASCII: UTF-8 and binary bodies pass through")
    func binaryBody() throws {
        let body: [UInt8] = [0x00, 0xFF, 0x0D, 0x0A, 0x0D, 0x0A, 0xC3, 0xA9]
        var decoder = FrameDecoder()
        decoder.append(Framing.frame(body) + Framing.frame(body))
        #expect(try drain(&decoder) == [body, body])
    }

    @Test("a frame over maxFrameBytes is refused from its header, before its body arrives")
    func frameTooLarge() throws {
        var decoder = FrameDecoder(maxFrameBytes: 100)
        decoder.append(Array("Content-Length: 101\r\n\r\n".utf8))
        let error = #expect(throws: FramingError.self) { try decoder.nextFrame() }
        #expect(error == .frameTooLarge(length: 101, limit: 100))
        #expect(error?.description.contains("101") == true)

        var atLimit = FrameDecoder(maxFrameBytes: 100)
        atLimit.append(Framing.frame(Array(repeating: UInt8(ascii: "x"), count: 100)))
        #expect(try atLimit.nextFrame()?.count == 100)
    }

    @Test("the default frame limit is 64 MiB")
    func defaultLimit() {
        #expect(FrameDecoder().maxFrameBytes == 64 << 20)
    }
}
