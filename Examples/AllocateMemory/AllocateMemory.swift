import ExtrunSDK

#if canImport(Glibc)
import Glibc
#endif

/// AllocateMemory: allocates and touches `megabytes` MiB, then succeeds.
/// It shows the memory caps: 100 MB is over the extension cap and well
/// within the in-app one.
struct AllocateMemoryHandler: IntentHandler {
    struct Parameters: Decodable, Sendable {
        var megabytes: Int?
    }

    static let intentName = "AllocateMemory"

    func resolve(_ parameter: String, _ request: IntentRequest<Parameters>) async throws -> ResolutionResult {
        guard let megabytes = request.parameters.megabytes else {
            return .needsValue(prompt: "How many megabytes should I allocate?")
        }
        if megabytes < 0 { return .unsupported(reason: "negative", message: "Please enter a positive number of megabytes") }
        return .success(megabytes)
    }

    func handle(_ request: IntentRequest<Parameters>) async throws -> IntentResponse {
        let megabytes = request.parameters.megabytes ?? 0
        var blocks: [UnsafeMutableRawPointer] = []
        blocks.reserveCapacity(megabytes)
        var checksum = 0
        for _ in 0..<megabytes {
            // One MiB at a time, every page written, so that the memory is really used.
            let block = UnsafeMutableRawPointer.allocate(byteCount: 1 << 20, alignment: 16)
            memset(block, 0x5A, 1 << 20)
            checksum &+= Int(block.load(fromByteOffset: 4096, as: UInt8.self))
            blocks.append(block)
        }
        defer { for block in blocks { block.deallocate() } }
        return .success(
            ["allocatedMegabytes": .int(Int64(megabytes)), "checksum": .int(Int64(checksum))],
            dialog: Dialog(full: "Allocated and touched \(megabytes) MB."))
    }
}

@main
struct AllocateMemoryPlugin {
    static func main() async {
        await PluginRuntime.run(id: "com.example.allocatememory", version: "1.0.0", handlers: [AllocateMemoryHandler()])
    }
}
