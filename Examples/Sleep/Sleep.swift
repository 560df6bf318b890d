import ExtrunSDK

/// Sleep: waits `seconds`, then succeeds. It shows the deadline: 30 s is
/// past the 10 s a plugin gets from launch.
struct SleepHandler: IntentHandler {
    struct Parameters: Decodable, Sendable {
        var seconds: Double?
    }

    static let intentName = "Sleep"

    func resolve(_ parameter: String, _ request: IntentRequest<Parameters>) async throws -> ResolutionResult {
        guard let seconds = request.parameters.seconds else { return .needsValue(prompt: "How many seconds should I sleep?") }
        if seconds < 0 || !seconds.isFinite { return .unsupported(reason: "invalid", message: "Please enter a positive number of seconds") }
        return .success(seconds)
    }

    func handle(_ request: IntentRequest<Parameters>) async throws -> IntentResponse {
        let seconds = request.parameters.seconds ?? 0
        // Task.sleep ends early with CancellationError when the host sends cancel.
        try await Task.sleep(for: .milliseconds(Int64(seconds * 1000)))
        return .success(["sleptSeconds": .double(seconds)], dialog: Dialog(full: "Slept \(seconds) seconds."))
    }
}

@main
struct SleepPlugin {
    static func main() async {
        await PluginRuntime.run(id: "com.example.sleep", version: "1.0.0", handlers: [SleepHandler()])
    }
}
