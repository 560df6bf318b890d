// libFuzzer target: the decoder of `extrun serve`'s requests (Sources/ExtrunServe/ServeRequest.swift):
// the input is "METHOD TARGET\n" then the body, as the HTTP decoder hands them over.
import ExtrunHostInputs
import ExtrunProtocol
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    let newline = bytes.firstIndex(of: 0x0A) ?? bytes.count
    let line = String(decoding: bytes[..<newline], as: UTF8.self).split(separator: " ", maxSplits: 1)
    let method = line.first.map(String.init) ?? ""
    let target = line.count > 1 ? String(line[1]) : "/"
    let body = newline < bytes.count ? Array(bytes[(newline + 1)...]) : []
    do {
        let call = try ServeRequestDecoder.decode(method: method, target: target, body: body)
        if case .handle(let invocation, _) = call, invocation.intent.isEmpty { fatalError("a handle without an intent was accepted") }
        if case .phrase(let text, _) = call, text.isEmpty { fatalError("an empty phrase was accepted") }
    } catch {
        // Every refusal is a 4xx with a typed error and a message.
        if !(400...499).contains(error.status) || error.error.message.isEmpty {
            fatalError("refused with \(error.status) \(error.error.kind.rawValue): \(error.error.message.prefix(200))")
        }
    }
    return 0
}
