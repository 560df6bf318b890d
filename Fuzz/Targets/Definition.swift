// libFuzzer target: the intent definition reader (intents.json), and what is generated from a valid one.
import ExtrunDefinitions
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Data(UnsafeBufferPointer(start: data, count: size))
    guard let file = try? DefinitionFile.parse(bytes, path: "fuzz/intents.json") else { return 0 }
    _ = file.manifest()
    _ = try? file.manifestJSON()
    _ = file.swiftSource()
    return 0
}
