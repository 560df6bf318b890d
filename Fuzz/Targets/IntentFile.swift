// libFuzzer target: the intent file decoder (`extrun handle FILE`), its errors included.
import ExtrunHostInputs
import ExtrunProtocol
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Data(UnsafeBufferPointer(start: data, count: size))
    do {
        let invocation = try IntentFileParser.parse(bytes, source: "fuzz.json", baseDirectory: URL(fileURLWithPath: "/fuzz"))
        if invocation.intent.isEmpty { fatalError("an intent file without an intent was accepted") }
        _ = JSONWriter.bytes(.object(invocation.parameters))
    } catch {
        // Every refusal is invalidIntent, naming the file.
        if error.kind != .invalidIntent || !error.message.hasPrefix("fuzz.json: ") {
            fatalError("an intent file refused with \(error.kind.rawValue): \(error.message.prefix(200))")
        }
    }
    return 0
}
