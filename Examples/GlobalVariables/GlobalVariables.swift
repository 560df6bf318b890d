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

/// Adds 1 to a numeric global with compare-and-set, so that two runs at once
/// never lose an increment: if another run changed it meanwhile, read and try again.
struct IncrementGlobalVariable: IntentHandler {
    struct Parameters: Decodable, Sendable {
        var name: String?
    }

    static let intentName = "IncrementGlobalVariable"

    func resolve(_ parameter: String, _ request: IntentRequest<Parameters>) async throws -> ResolutionResult {
        guard let name = request.parameters.name, !name.isEmpty else { return .needsValue(prompt: "Which counter should I increment?") }
        return .success(name)
    }

    func handle(_ request: IntentRequest<Parameters>) async throws -> IntentResponse {
        let name = request.parameters.name ?? ""
        let globals = request.context.globals
        for _ in 0..<100 {
            let current = try await globals.entry(name)
            guard current == nil || current?.value.intValue != nil else {
                return .failure("\(name) does not hold a whole number")
            }
            let next = (current?.value.intValue ?? 0) + 1
            do {
                // ifVersion 0: only if it still does not exist.
                let version = try await globals.set(name, to: .int(next), ifVersion: current?.version ?? 0)
                return .success(["name": .string(name), "value": .int(next), "version": .int(version)])
            } catch let error as HostServiceError where error.kind == "versionConflict" {
                continue
            }
        }
        return .failure("\(name) kept changing; gave up after 100 tries")
    }
}

@main
struct GlobalVariablesPlugin {
    static func main() async {
        await PluginRuntime.run(
            id: "com.example.globalvariables", version: "1.0.0", handlers: [SetGlobalVariable(), GetGlobalVariable(), IncrementGlobalVariable()])
    }
}
