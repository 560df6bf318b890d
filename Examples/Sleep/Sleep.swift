import ExtrunSDK

/// Sleep: waits `seconds`, then succeeds. It shows the deadline: 30 s is
/// past the 10 s a plugin gets from launch. With `busy`, it computes instead of
/// sleeping (it never suspends) and checks `Task.isCancelled`: the host's
/// `cancel` reaches a handler that keeps its thread busy too. With `progress`, it
/// reports its progress ten times on the way (`extrun mcp` passes it on as MCP
/// progress; in extension mode each report also extends the deadline).
struct SleepHandler: IntentHandler {
    struct Parameters: Decodable, Sendable {
        var seconds: Double?
        var busy: Bool?
        var progress: Bool?
    }

    static let intentName = "Sleep"

    func resolve(_ parameter: String, _ request: IntentRequest<Parameters>) async throws -> ResolutionResult {
        switch parameter {
        case "busy": return request.parameters.busy.map { .success($0) } ?? .notRequired
        case "progress": return request.parameters.progress.map { .success($0) } ?? .notRequired
        case "seconds": break
        default: return .notRequired
        }
        guard let seconds = request.parameters.seconds else { return .needsValue(prompt: "How many seconds should I sleep?") }
        if seconds < 0 || !seconds.isFinite { return .unsupported(reason: "invalid", message: "Please enter a positive number of seconds") }
        return .success(seconds)
    }

    func handle(_ request: IntentRequest<Parameters>) async throws -> IntentResponse {
        let seconds = request.parameters.seconds ?? 0
        if request.parameters.busy == true {
            let end = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
            while ContinuousClock.now < end {
                if Task.isCancelled { throw CancellationError() }
            }
        } else if request.parameters.progress == true {
            for step in 1...10 {
                try await Task.sleep(for: .milliseconds(Int64(seconds * 100)))
                request.context.reportProgress(Double(step) / 10, message: "\(step * 10)% of \(seconds) seconds")
            }
        } else {
            // Task.sleep ends early with CancellationError when the host sends cancel.
            try await Task.sleep(for: .milliseconds(Int64(seconds * 1000)))
        }
        return .success(["sleptSeconds": .double(seconds)], dialog: Dialog(full: "Slept \(seconds) seconds."))
    }
}

@main
struct SleepPlugin {
    static func main() async {
        await PluginRuntime.run(id: "com.example.sleep", version: "1.0.0", handlers: [SleepHandler()])
    }
}
