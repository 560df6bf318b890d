import ExtrunSDK

/// MakeUppercase: the first intent of the Shortcuts tutorials.
struct MakeUppercaseHandler: IntentHandler {
    struct Parameters: Decodable, Sendable {
        var text: String?
    }

    static let intentName = "MakeUppercase"

    func resolve(_ parameter: String, _ request: IntentRequest<Parameters>) async throws -> ResolutionResult {
        guard parameter == "text" else { return .notRequired }
        guard let text = request.parameters.text else {
            return .needsValue(prompt: "Which text would you like to make uppercase?")
        }
        if text.isEmpty {
            return .unsupported(reason: "empty", message: "Please enter some text")
        }
        return .success(text)
    }

    func handle(_ request: IntentRequest<Parameters>) async throws -> IntentResponse {
        let text = request.parameters.text ?? ""
        return .success(["result": .string(text.uppercased())])
    }
}

@main
struct MakeUppercasePlugin {
    static func main() async {
        await PluginRuntime.run(id: "com.example.uppercase", version: "1.0.0", handlers: [MakeUppercaseHandler()])
    }
}
