import Foundation

/// A JSON-RPC 2.0 request id: a number or a string.
public enum RequestID: Sendable, Hashable, CustomStringConvertible {
    case int(Int64)
    case string(String)

    public var json: JSONValue {
        switch self {
        case .int(let v): .int(v)
        case .string(let v): .string(v)
        }
    }

    public var description: String {
        switch self {
        case .int(let v): String(v)
        case .string(let v): "\"\(v)\""
        }
    }
}

/// A JSON-RPC 2.0 error object.
public struct RPCError: Error, Sendable, Hashable, Codable {
    public var code: Int
    public var message: String
    public var data: JSONValue?

    public init(code: Int, message: String, data: JSONValue? = nil) {
        self.code = code
        self.message = message
        self.data = data
    }

    // JSON-RPC 2.0's own codes.
    public static let parseError = -32700
    public static let invalidRequest = -32600
    public static let methodNotFound = -32601
    public static let invalidParams = -32602
    public static let internalError = -32603
    // extrun's codes (the range -32000...-32099 is for implementations).
    /// The plugin does not handle the intent it was asked about.
    public static let unknownIntent = -32001
    /// The request was cancelled by a `cancel` notification.
    public static let cancelled = -32002
    /// A host service (globals, bookmarks) refused the request.
    public static let serviceError = -32003
}

/// One message on a protocol channel.
public enum Message: Sendable, Hashable {
    case request(id: RequestID, method: String, params: JSONValue?)
    case notification(method: String, params: JSONValue?)
    case response(id: RequestID, result: JSONValue)
    case errorResponse(id: RequestID?, error: RPCError)
}

public struct MessageError: Error, CustomStringConvertible, Equatable {
    public var description: String
    public init(_ description: String) { self.description = description }
}

extension Message {
    /// Encodes the message as a JSON-RPC 2.0 object (the frame body): compact,
    /// `jsonrpc` first, then `id`, then the rest; non-finite numbers as null.
    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        out.append(contentsOf: #"{"jsonrpc":"2.0""#.utf8)
        func field(_ name: StaticString, _ value: JSONValue) {
            out.append(UInt8(ascii: ","))
            out.append(UInt8(ascii: "\""))
            out.append(contentsOf: UnsafeBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
            out.append(contentsOf: #"":"#.utf8)
            JSONWriter.write(value, into: &out)
        }
        switch self {
        case .request(let id, let method, let params):
            field("id", id.json)
            field("method", .string(method))
            if let params { field("params", params) }
        case .notification(let method, let params):
            field("method", .string(method))
            if let params { field("params", params) }
        case .response(let id, let result):
            field("id", id.json)
            field("result", result)
        case .errorResponse(let id, let error):
            field("id", id?.json ?? .null)
            var errorObject: [String: JSONValue] = ["code": .int(Int64(error.code)), "message": .string(error.message)]
            if let data = error.data { errorObject["data"] = data }
            field("error", .object(errorObject))
        }
        out.append(UInt8(ascii: "}"))
        return out
    }

    /// Decodes a frame body. Throws a `MessageError` that says what is wrong.
    public static func decode(_ body: some Collection<UInt8>) throws -> Message {
        try decode(body, maxNodes: JSONParser.maxNodes)
    }

    /// Decodes a frame body holding at most `maxNodes` JSON values; past them the
    /// error is the parser's (`JSONParseError.exceedsNodeLimit`), not a `MessageError`.
    public static func decode(_ body: some Collection<UInt8>, maxNodes: Int) throws -> Message {
        let bytes = body as? [UInt8] ?? Array(body)
        // ASCII (most bodies) is valid UTF-8; only other bodies are validated as a whole.
        let ascii = bytes.withUnsafeBufferPointer { buffer in buffer.allSatisfy { $0 < 0x80 } }
        guard ascii || String(validating: bytes, as: UTF8.self) != nil else {
            throw MessageError("message body is not valid UTF-8")
        }
        let value: JSONValue
        do {
            value = try JSONParser.parse(bytes, maxNodes: maxNodes)
        } catch {
            if error.exceedsNodeLimit { throw error }
            throw MessageError("message body is not valid JSON: \(error)")
        }
        return try decode(value)
    }

    public static func decode(_ value: JSONValue) throws -> Message {
        guard case .object(let object) = value else {
            throw MessageError("message is a JSON \(value.typeName), expected an object")
        }
        guard object["jsonrpc"] == "2.0" else {
            throw MessageError("message lacks \"jsonrpc\": \"2.0\"")
        }
        let id: RequestID?
        switch object["id"] {
        case nil, .null?: id = nil
        case .int(let v)?: id = .int(v)
        case .string(let v)?: id = .string(v)
        case let other?: throw MessageError("message id must be an integer or a string, not \(other.typeNameWithArticle)")
        }
        if let methodValue = object["method"] {
            guard case .string(let method) = methodValue else { throw MessageError("\"method\" must be a string") }
            let params = object["params"]
            if let id { return .request(id: id, method: method, params: params) }
            return .notification(method: method, params: params)
        }
        if let error = object["error"] {
            guard case .object(let e) = error, let code = e["code"]?.intValue, let message = e["message"]?.stringValue else {
                throw MessageError("\"error\" must be an object with an integer \"code\" and a string \"message\"")
            }
            return .errorResponse(id: id, error: RPCError(code: Int(code), message: message, data: e["data"]))
        }
        if let result = object["result"] {
            guard let id else { throw MessageError("a response must carry the id of its request") }
            return .response(id: id, result: result)
        }
        throw MessageError("message has neither \"method\", \"result\" nor \"error\"")
    }
}
