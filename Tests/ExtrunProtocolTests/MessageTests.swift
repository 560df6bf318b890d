import ExtrunProtocol
import Foundation
import Testing

private func decode(_ text: String) throws -> Message {
    try Message.decode(Array(text.utf8))
}

/// The error `Message.decode` throws for `text`, or nil (recording an issue) if it does not throw.
private func decodeError(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) -> String? {
    do {
        let message = try decode(text)
        Issue.record("decoded \(text) as \(message), expected an error", sourceLocation: sourceLocation)
        return nil
    } catch let error as MessageError {
        return error.description
    } catch {
        Issue.record("unexpected error type \(type(of: error)): \(error)", sourceLocation: sourceLocation)
        return nil
    }
}

/// Parses encoded bytes as a generic JSON object, to look at the wire shape.
private func wireObject(_ message: Message) throws -> [String: JSONValue] {
    let value = try JSONDecoder().decode(JSONValue.self, from: Data(message.encoded()))
    return try #require(value.objectValue)
}

@Suite("JSON-RPC messages")
struct MessageTests {
    static let roundTripCases: [Message] = [
        .request(id: .int(1), method: "initialize", params: ["protocolVersion": 1, "mode": "extension"]),
        .request(id: .int(Int64.max), method: "handle", params: nil),
        .request(id: .string("abc-1"), method: "resolve", params: ["list": [1, 2.5, "x", nil, true]]),
        .notification(method: "cancel", params: ["reason": "timeout"]),
        .notification(method: "log", params: nil),
        .response(id: .int(3), result: ["code": "success", "properties": ["result": "HELLO"]]),
        .response(id: .string("s"), result: .null),
        .response(id: .int(0), result: [1, [2, [3]]]),
        .errorResponse(id: .int(4), error: RPCError(code: RPCError.methodNotFound, message: "no such method")),
        .errorResponse(id: .string("x"), error: RPCError(code: -32000, message: "boom", data: ["trace": ["a", "b"]])),
        .errorResponse(id: nil, error: RPCError(code: RPCError.parseError, message: "parse error")),
    ]

    @Test("encode then decode gives the same message", arguments: roundTripCases)
    func roundTrip(message: Message) throws {
        let bytes = message.encoded()
        #expect(try Message.decode(bytes) == message)
        #expect(String(validating: bytes, as: UTF8.self) != nil)
    }

    @Test("a request's wire shape")
    func requestShape() throws {
        let object = try wireObject(.request(id: .int(7), method: "handle", params: ["intent": "X"]))
        #expect(object == ["jsonrpc": "2.0", "id": 7, "method": "handle", "params": ["intent": "X"]])
        let noParams = try wireObject(.request(id: .string("a"), method: "shutdown", params: nil))
        #expect(noParams == ["jsonrpc": "2.0", "id": "a", "method": "shutdown"])
    }

    @Test("a notification has no id")
    func notificationShape() throws {
        let object = try wireObject(.notification(method: "cancel", params: ["reason": "timeout"]))
        #expect(object == ["jsonrpc": "2.0", "method": "cancel", "params": ["reason": "timeout"]])
    }

    @Test("an error response's wire shape; a missing id is written as null")
    func errorShape() throws {
        let object = try wireObject(.errorResponse(id: nil, error: RPCError(code: -32600, message: "bad", data: 5)))
        #expect(object == ["jsonrpc": "2.0", "id": nil, "error": ["code": -32600, "message": "bad", "data": 5]])
    }

    @Test("non-finite numbers, which JSON cannot carry, are sent as null")
    func nonFiniteNumbers() throws {
        let message = Message.response(id: .int(1), result: ["nan": .double(.nan), "inf": [.double(.infinity)], "ok": 1.5])
        #expect(try Message.decode(message.encoded()) == .response(id: .int(1), result: ["nan": nil, "inf": [nil], "ok": 1.5]))
    }

    @Test("slashes are not escaped on the wire")
    func slashes() {
        let text = String(decoding: Message.notification(method: "a/b", params: nil).encoded(), as: UTF8.self)
        #expect(text.contains("\"a/b\""))
    }

    @Test("a request with params, and a notification with a null id")
    func decodeVariants() throws {
        #expect(
            try decode(#"{"jsonrpc":"2.0","id":"q","method":"resolve","params":[1]}"#)
                == .request(id: .string("q"), method: "resolve", params: [1]))
        #expect(try decode(#"{"jsonrpc":"2.0","id":null,"method":"log"}"#) == .notification(method: "log", params: nil))
        #expect(
            try decode(#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#)
                == .errorResponse(id: nil, error: RPCError(code: -32700, message: "x")))
        // A response whose result is null is still a response.
        #expect(try decode(#"{"jsonrpc":"2.0","id":2,"result":null}"#) == .response(id: .int(2), result: .null))
    }

    @Test("a body that is not UTF-8 is refused")
    func invalidUTF8() {
        let error = #expect(throws: MessageError.self) { try Message.decode([0x7B, 0x22, 0xC3, 0x28, 0x22, 0x7D] as [UInt8]) }
        #expect(error?.description == "message body is not valid UTF-8")
    }

    @Test("a body that is not JSON is refused")
    func invalidJSON() {
        let description = decodeError(#"{"jsonrpc":"2.0","id":1,"result":"#)
        #expect(description?.hasPrefix("message body is not valid JSON") == true)
    }

    @Test("a body that is JSON but not an object is refused, naming what it is", arguments: [
        ("[1,2]", "array"), ("\"text\"", "string"), ("42", "integer"), ("null", "null"), ("true", "boolean"),
    ])
    func notAnObject(body: String, typeName: String) {
        #expect(decodeError(body) == "message is a JSON \(typeName), expected an object")
    }

    @Test("jsonrpc must be \"2.0\"", arguments: [
        #"{"id":1,"result":2}"#, #"{"jsonrpc":"1.0","id":1,"result":2}"#, #"{"jsonrpc":2.0,"id":1,"result":2}"#,
    ])
    func missingVersion(body: String) {
        #expect(decodeError(body) == #"message lacks "jsonrpc": "2.0""#)
    }

    @Test("an id must be an integer or a string, naming what it is", arguments: [
        (#"{"jsonrpc":"2.0","id":true,"result":1}"#, "boolean"),
        (#"{"jsonrpc":"2.0","id":[1],"result":1}"#, "array"),
        (#"{"jsonrpc":"2.0","id":{"n":1},"method":"x"}"#, "object"),
        // JSON-RPC: ids "SHOULD NOT contain fractional parts"; the host cannot match them to its integer ids.
        (#"{"jsonrpc":"2.0","id":1.5,"result":1}"#, "number"),
    ])
    func badIDType(body: String, typeName: String) throws {
        let description = try #require(decodeError(body))
        #expect(description.hasPrefix("message id must be an integer or a string, not a"), "\(description)")
        #expect(description.hasSuffix(" \(typeName)"), "\(description)")
    }

    @Test("other malformed messages say what is wrong")
    func otherMalformed() {
        #expect(decodeError(#"{"jsonrpc":"2.0","id":1,"method":5}"#) == #""method" must be a string"#)
        #expect(decodeError(#"{"jsonrpc":"2.0","result":1}"#) == "a response must carry the id of its request")
        #expect(decodeError(#"{"jsonrpc":"2.0","id":1}"#) == #"message has neither "method", "result" nor "error""#)
        let errorShape = #""error" must be an object with an integer "code" and a string "message""#
        #expect(decodeError(#"{"jsonrpc":"2.0","id":1,"error":"bad"}"#) == errorShape)
        #expect(decodeError(#"{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"m"}}"#) == errorShape)
        #expect(decodeError(#"{"jsonrpc":"2.0","id":1,"error":{"code":1}}"#) == errorShape)
    }

    @Test("RequestID descriptions quote strings only")
    func requestIDDescription() {
        #expect(RequestID.int(12).description == "12")
        #expect(RequestID.string("12").description == "\"12\"")
        #expect(RequestID.string("a").json == "a")
        #expect(RequestID.int(3).json == 3)
    }
}
