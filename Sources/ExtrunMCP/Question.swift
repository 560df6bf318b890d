import Crypto
import ExtrunHost
import ExtrunProtocol
import Foundation

/// One of the host's questions (a `Prompter` call) as an MCP form elicitation: the
/// message, the one property asked and its schema (MCP's restricted schema: one flat
/// object of primitive properties), and how an answer becomes what the prompter returns.
/// The legacy era sends it as an `elicitation/create` request (ElicitingPrompter), the
/// modern one as an input request of an `input_required` result (ReplayingPrompter).
struct Question: Sendable {
    enum Kind: String, Sendable {
        /// A free answer to a question about no parameter.
        case ask
        /// A value of a parameter (its type, enum values, whether it takes a list).
        case value
        /// One of the options (a disambiguation's candidates, a plugin's dynamic options).
        case choose
        /// Yes or no.
        case confirm
    }

    var kind: Kind
    /// The question, after what `tell` said before it.
    var message: String
    var property: String
    var schema: JSONValue
    /// `choose`: the options' values, in their order (the enum's consts).
    var choices: [String] = []
    /// What identifies the question across runs of the same call: its kind, its parameter
    /// and a digest of what it offers (the options; for `confirm` and `ask`, the question's
    /// words), hex. A recorded answer is replayed only for a question with the same fingerprint.
    var fingerprint: String

    /// `elicitation/create`'s params (`mode` is added by the modern era).
    var elicitation: JSONValue {
        ["message": .string(message), "requestedSchema": ["type": "object", "properties": [property: schema], "required": [.string(property)]]]
    }

    // MARK: - Making questions

    static func ask(_ question: String, told: [String]) -> Question {
        make(.ask, question, told: told, property: "value", ["type": "string", "title": "Answer"], digesting: [question])
    }

    static func value(_ question: String, for parameter: ParameterDefinition, told: [String]) -> Question {
        var schema: [String: JSONValue]
        switch parameter.type {
        case .integer: schema = ["type": "integer"]
        case .number: schema = ["type": "number"]
        case .boolean: schema = ["type": "boolean"]
        case .enum:
            let values = parameter.values ?? []
            let options: JSONValue = .array(values.map { ["const": .string($0), "title": .string(parameter.valueTitles?[$0] ?? $0)] })
            schema = parameter.multiple ? ["type": "array", "items": ["anyOf": options]] : ["type": "string", "oneOf": options]
        case .date: schema = ["type": "string", "description": "A date, e.g. 2026-11-22"]
        case .file: schema = ["type": "string", "description": "A path to a file"]
        case .string, .custom: schema = ["type": "string"]
        }
        if parameter.multiple && parameter.type != .enum {
            // One text field, the values separated by commas (as at a terminal).
            schema = ["type": "string", "description": "Separate values with commas"]
        }
        schema["title"] = .string(parameter.title ?? parameter.name)
        let digested = [parameter.name, parameter.type.rawValue, parameter.multiple ? "multiple" : "single"] + (parameter.values ?? [])
        return make(.value, question, told: told, property: parameter.name, .object(schema), digesting: digested)
    }

    static func choose(_ question: String, among options: [PromptOption], for parameter: ParameterDefinition?, told: [String]) -> Question {
        // The identifiers as the enum's values when they tell the options apart, else their positions.
        let unique = Set(options.map(\.identifier)).count == options.count && !options.contains { $0.identifier.isEmpty }
        let values = unique ? options.map(\.identifier) : options.indices.map { String($0 + 1) }
        let titles = options.map { $0.title ?? $0.label }
        let schema: JSONValue = [
            "type": "string", "title": .string(parameter.map { $0.title ?? $0.name } ?? "Choice"),
            "oneOf": .array(zip(values, titles).map { ["const": .string($0), "title": .string($1)] }),
        ]
        var question = make(
            .choose, question, told: told, property: parameter?.name ?? "choice", schema,
            digesting: [parameter?.name ?? ""] + zip(values, titles).map { "\($0)\u{1F}\($1)" })
        question.choices = values
        return question
    }

    static func confirm(_ question: String, told: [String]) -> Question {
        make(.confirm, question, told: told, property: "confirm", ["type": "boolean", "title": "Confirm", "default": true], digesting: [question])
    }

    private static func make(_ kind: Kind, _ question: String, told: [String], property: String, _ schema: JSONValue, digesting parts: [String]) -> Question {
        var hasher = SHA256()
        hasher.update(data: Array(kind.rawValue.utf8))
        for part in parts {
            // Each part length-prefixed: ["ab", "c"] and ["a", "bc"] differ.
            hasher.update(data: Array("\(part.utf8.count):".utf8))
            hasher.update(data: Array(part.utf8))
        }
        let fingerprint = hasher.finalize().map { String(format: "%02x", $0) }.joined()
        return Question(kind: kind, message: (told + [question]).joined(separator: "\n"), property: property, schema: schema, fingerprint: fingerprint)
    }

    // MARK: - Answers

    /// The accepted value of an `ElicitResult` (`{"action": "accept", "content": {property: value}}`),
    /// or nil when the person declined or cancelled, or the content lacks the property.
    func acceptedValue(of result: JSONValue?) -> JSONValue? {
        guard let result, result["action"]?.stringValue == "accept" else { return nil }
        return result["content"]?[property]
    }

    /// What the schema asked for, when `value` is not that; nil when it is. Nothing is coerced.
    func mismatch(_ value: JSONValue) -> String? {
        Self.mismatch(value, schema)
    }

    /// The error a mistyped answer ends a legacy call with.
    func refusal(of value: JSONValue, expected: String) -> HostError {
        let answer = String(decoding: JSONWriter.bytes(value), as: UTF8.self)
        return HostError(
            .parameterUnresolved,
            "the client answered the question for '\(property)' with \(value.typeNameWithArticle) (\(answer.prefix(200))), but it asked for \(expected): nothing is coerced; call again and answer with \(expected)",
            details: ["parameter": .string(property), "expected": .string(expected), "answer": value])
    }

    /// An answer as a person would have typed it (`ask`, `value`).
    func text(_ value: JSONValue) -> String? {
        Self.text(value)
    }

    /// The index of the option chosen (`choose`).
    func index(_ value: JSONValue) -> Int? {
        value.stringValue.flatMap { choices.firstIndex(of: $0) }
    }

    static func mismatch(_ value: JSONValue, _ schema: JSONValue) -> String? {
        let type = schema["type"]?.stringValue ?? "string"
        switch (type, value) {
        case ("integer", .int): return nil
        case ("integer", .double(let d)) where d.isFinite && d.rounded() == d: return nil
        case ("integer", _): return "an integer"
        case ("number", .int), ("number", .double): return nil
        case ("number", _): return "a number"
        case ("boolean", .bool): return nil
        case ("boolean", _): return "a boolean (true or false)"
        case ("array", .array(let items)):
            let allowed = schema["items"]?["anyOf"]?.arrayValue?.compactMap { $0["const"]?.stringValue }
            for item in items {
                guard let text = item.stringValue else { return "an array of strings" }
                if let allowed, !allowed.contains(text) { return "an array of the options' values (\(allowed.joined(separator: ", ")))" }
            }
            return nil
        case ("array", _): return "an array of strings"
        case (_, .string(let text)):
            if let allowed = schema["oneOf"]?.arrayValue?.compactMap({ $0["const"]?.stringValue }), !allowed.contains(text) {
                return "one of the options' values (\(allowed.joined(separator: ", ")))"
            }
            return nil
        default: return "a string"
        }
    }

    static func text(_ value: JSONValue) -> String? {
        switch value {
        case .string(let s): s
        case .int(let i): String(i)
        case .double(let d): String(d)
        case .bool(let b): b ? "yes" : "no"
        case .array(let items): items.compactMap(text).joined(separator: ",")
        default: nil
        }
    }
}
