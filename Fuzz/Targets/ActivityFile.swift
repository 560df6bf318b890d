// libFuzzer target: the activity file decoder (`extrun continue FILE`), its errors included.
import ExtrunHostInputs
import ExtrunProtocol
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Data(UnsafeBufferPointer(start: data, count: size))
    do {
        let invocation = try ActivityFileParser.parse(bytes, source: "fuzz.json")
        if invocation.activity.activityType.isEmpty { fatalError("an activity file without an activity type was accepted") }
        if let interaction = invocation.interaction, interaction.intent.isEmpty { fatalError("an interaction without an intent was accepted") }
    } catch {
        if error.kind != .invalidIntent || !error.message.hasPrefix("fuzz.json: ") {
            fatalError("an activity file refused with \(error.kind.rawValue): \(error.message.prefix(200))")
        }
    }
    return 0
}
