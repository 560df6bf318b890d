import ExtrunSDK

/// MakeUppercase: the first intent of the Shortcuts tutorials.
///
/// intents.json declares it; MakeUppercaseIntent, MakeUppercaseResponse,
/// MakeUppercaseHandling and PluginMain are generated from it. A missing text
/// gets the declared prompt (the default resolution of a required parameter).
struct MakeUppercaseHandler: MakeUppercaseHandling {
    func resolveText(for intent: MakeUppercaseIntent, context: IntentContext) async throws -> MakeUppercaseIntent.TextResolution {
        guard let text = intent.text else { return .needsValue }
        return text.isEmpty ? .unsupported(.empty) : .success(text)
    }

    func handle(intent: MakeUppercaseIntent, context: IntentContext) async throws -> MakeUppercaseResponse {
        .success(result: (intent.text ?? "").uppercased())
    }
}

@main
struct MakeUppercasePlugin {
    static func main() async {
        await PluginMain.run(makeUppercase: MakeUppercaseHandler())
    }
}
