// libFuzzer target: message decoding (a frame body), and encoding what was decoded.
import ExtrunProtocol

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let message = try? Message.decode(bytes, maxNodes: 100_000) else { return 0 }
    let encoded = message.encoded()
    guard (try? Message.decode(encoded)) != nil else { fatalError("an encoded message does not decode: \(encoded.prefix(200))") }
    switch message {
    case .request(_, _, let params?), .notification(_, let params?):
        _ = try? LogParams(jsonValue: params)
        _ = try? ProgressParams(jsonValue: params)
    case .response(_, let result):
        _ = try? IntentResponse(jsonValue: result)
        _ = try? InitializeResult(jsonValue: result)
        _ = try? ResolutionResult(jsonValue: result)
        _ = try? SessionResult(jsonValue: result)
    default: break
    }
    return 0
}
