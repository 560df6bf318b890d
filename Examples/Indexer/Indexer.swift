import ExtrunSDK

#if canImport(Glibc)
import Glibc
#endif

/// Indexer: builds an index over `megabytes` MiB of generated text, held in
/// memory. That is the kind of heavy action that does not fit an extension's
/// memory cap: its manifest says `retryInAppOnMemoryLimit`, so when the
/// extension-mode run goes over the cap, the host runs the intent again in
/// in-app mode, and the output's `steps` shows both runs.
struct BuildIndexHandler: IntentHandler {
    struct Parameters: Decodable, Sendable {
        var megabytes: Int?
    }

    static let intentName = "BuildIndex"

    func resolve(_ parameter: String, _ request: IntentRequest<Parameters>) async throws -> ResolutionResult {
        guard let megabytes = request.parameters.megabytes else {
            return .needsValue(prompt: "How many megabytes of text should I index?")
        }
        if megabytes < 1 || megabytes > 4096 {
            return .unsupported(reason: "outOfRange", message: "Please choose between 1 and 4096 megabytes")
        }
        return .success(megabytes)
    }

    func handle(_ request: IntentRequest<Parameters>) async throws -> IntentResponse {
        let megabytes = request.parameters.megabytes ?? 1
        request.context.log("building an index of \(megabytes) MiB in \(request.context.mode.rawValue) mode")
        // The corpus: one MiB chunk at a time, every page written, kept for the index.
        var chunks: [UnsafeMutableRawPointer] = []
        chunks.reserveCapacity(megabytes)
        defer { for chunk in chunks { chunk.deallocate() } }
        var words = 0
        for index in 0..<megabytes {
            let chunk = UnsafeMutableRawPointer.allocate(byteCount: 1 << 20, alignment: 16)
            let bytes = chunk.assumingMemoryBound(to: UInt8.self)
            for offset in 0..<(1 << 20) {
                // Words of 1 to 8 letters separated by spaces.
                bytes[offset] = (offset &+ index) % 9 == 8 ? 0x20 : UInt8(0x61 + (offset &* 7 &+ index) % 26)
                if bytes[offset] == 0x20 { words += 1 }
            }
            chunks.append(chunk)
        }
        return .success(
            ["megabytes": .int(Int64(megabytes)), "words": .int(Int64(words)), "mode": .string(request.context.mode.rawValue)],
            dialog: Dialog(full: "Indexed \(words) words in \(megabytes) MB (\(request.context.mode.rawValue) mode)."))
    }
}

@main
struct IndexerPlugin {
    static func main() async {
        await PluginRuntime.run(id: "com.example.indexer", version: "1.0.0", handlers: [BuildIndexHandler()])
    }
}
