import ExtrunProtocol
import Foundation

/// Turns what a person typed into a parameter value.
enum PromptedValue {
    struct Problem: Error {
        var message: String
    }

    static func parse(_ text: String, for parameter: ParameterDefinition, baseDirectory: URL) -> Result<JSONValue, Problem> {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if parameter.multiple {
            var items: [JSONValue] = []
            for part in trimmed.split(separator: ",") {
                switch single(String(part).trimmingCharacters(in: .whitespaces), parameter, baseDirectory) {
                case .success(let value): items.append(value)
                case .failure(let problem): return .failure(problem)
                }
            }
            return items.isEmpty ? .failure(Problem(message: "Please enter at least one value.")) : .success(.array(items))
        }
        return single(trimmed, parameter, baseDirectory)
    }

    static func single(_ text: String, _ parameter: ParameterDefinition, _ baseDirectory: URL) -> Result<JSONValue, Problem> {
        switch parameter.type {
        case .string:
            return .success(.string(text))
        case .integer:
            guard let value = Int64(text) else { return .failure(Problem(message: "'\(text)' is not a whole number.")) }
            return .success(.int(value))
        case .number:
            guard let value = Double(text), value.isFinite else { return .failure(Problem(message: "'\(text)' is not a number.")) }
            return .success(.double(value))
        case .boolean:
            switch text.lowercased() {
            case "y", "yes", "true", "1", "on": return .success(.bool(true))
            case "n", "no", "false", "0", "off": return .success(.bool(false))
            default: return .failure(Problem(message: "Please answer yes or no."))
            }
        case .date:
            guard ISODate.parse(text) != nil else { return .failure(Problem(message: "'\(text)' is not a date like 2026-11-22.")) }
            return .success(.string(text))
        case .enum:
            let values = parameter.values ?? []
            let folded = text.folding(options: [.caseInsensitive, .diacriticInsensitive], locale: nil)
            if let match = values.first(where: {
                $0.folding(options: [.caseInsensitive, .diacriticInsensitive], locale: nil) == folded
                    || (parameter.valueTitles?[$0]?.folding(options: [.caseInsensitive, .diacriticInsensitive], locale: nil) == folded)
            }) {
                return .success(.string(match))
            }
            return .failure(Problem(message: "'\(text)' is not one of \(values.map { parameter.valueTitles?[$0] ?? $0 }.joined(separator: ", "))."))
        case .file:
            let invocation = IntentInvocation(intent: "", parameters: [:], source: "prompt", baseDirectory: baseDirectory)
            do {
                return .success(try IntentFileParser.loadFile(.string(text), parameter: parameter, field: parameter.name, invocation: invocation))
            } catch {
                return .failure(Problem(message: error.message))
            }
        case .custom:
            return .success(.object(["identifier": .string(text), "title": .string(text)]))
        }
    }
}
