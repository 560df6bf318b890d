import ExtrunSDK

/// SetGlobalVariable and GetGlobalVariable: state that lives between runs,
/// kept by the host in the owner's sealed store (as Toolbox Pro's global
/// variables do for Shortcuts users).
struct SetGlobalVariable: IntentHandler {
    struct Parameters: Decodable, Sendable {
        var name: String?
        var value: String?
    }

    static let intentName = "SetGlobalVariable"

    func resolve(_ parameter: String, _ request: IntentRequest<Parameters>) async throws -> ResolutionResult {
        switch parameter {
        case "name":
            guard let name = request.parameters.name else { return .needsValue(prompt: "Which variable should I set?") }
            if name.isEmpty { return .unsupported(reason: "empty", message: "Please enter a variable name") }
            return .success(name)
        case "value":
            guard let value = request.parameters.value else { return .needsValue(prompt: "What should the variable hold?") }
            return .success(value)
        default:
            return .notRequired
        }
    }

    func handle(_ request: IntentRequest<Parameters>) async throws -> IntentResponse {
        let name = request.parameters.name ?? ""
        let value = request.parameters.value ?? ""
        do {
            let version = try await request.context.globals.set(name, to: .string(value))
            return .success(["name": .string(name), "value": .string(value), "version": .int(version)],
                            dialog: Dialog(full: "\(name) is now \"\(value)\"."))
        } catch let error as HostServiceError {
            return .failure("Could not set \(name): \(error.message)")
        }
    }
}

struct GetGlobalVariable: IntentHandler {
    struct Parameters: Decodable, Sendable {
        var name: String?
    }

    static let intentName = "GetGlobalVariable"

    func resolve(_ parameter: String, _ request: IntentRequest<Parameters>) async throws -> ResolutionResult {
        guard let name = request.parameters.name else { return .needsValue(prompt: "Which variable should I read?") }
        if name.isEmpty { return .unsupported(reason: "empty", message: "Please enter a variable name") }
        return .success(name)
    }

    func handle(_ request: IntentRequest<Parameters>) async throws -> IntentResponse {
        let name = request.parameters.name ?? ""
        do {
            guard let entry = try await request.context.globals.entry(name) else {
                return .custom("notSet", properties: ["name": .string(name)], dialog: Dialog(full: "\(name) is not set."))
            }
            return .success(["name": .string(name), "value": entry.value, "version": .int(entry.version)])
        } catch let error as HostServiceError {
            return .failure("Could not read \(name): \(error.message)")
        }
    }
}

@main
struct GlobalVariablesPlugin {
    static func main() async {
        await PluginRuntime.run(
            id: "com.example.globalvariables", version: "1.0.0", handlers: [SetGlobalVariable(), GetGlobalVariable()])
    }
}
