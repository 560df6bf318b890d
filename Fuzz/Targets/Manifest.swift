// libFuzzer target: the manifest reader (JSONParser, then PluginManifest(jsonValue:)), and its Codable twin.
import ExtrunProtocol
import Foundation

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Data(UnsafeBufferPointer(start: data, count: size))
    guard let value = try? JSONParser.parse(bytes, maxNodes: 100_000) else { return 0 }
    let manifest = try? PluginManifest(jsonValue: value)
    let codable = try? JSONCoding.decode(PluginManifest.self, fromJSON: bytes)
    if (manifest == nil) != (codable == nil) { fatalError("the two manifest readers disagree on whether this is a manifest") }
    if let manifest {
        for intent in manifest.intents {
            for parameter in intent.parameters { _ = ParameterValueCheck.problem(.string("x"), for: parameter) }
        }
    }
    return 0
}
