import ExtrunHost
import ExtrunProtocol
import Foundation
import NIOConcurrencyHelpers

/// The host's questions as MCP `elicitation/create` requests (docs/mcp.md, "Resolution
/// as elicitation"). Each question blocks the intent's thread (its deadline's clock
/// stopped, as for a person at a terminal) until the client answers:
/// - accept: the answer, as text a person would have typed (`PromptedValue` reads it);
/// - decline, cancel, an error, the call cancelled, the input ended: nil, which the
///   lifecycle turns into `parameterUnresolved` or `confirmationDeclined` (`cancelled`
///   when the call was cancelled).
///
/// The schema is MCP's restricted one: one flat object of primitive properties.
final class ElicitingPrompter: Prompter, Sendable {
    let server: MCPServer
    let call: Call
    /// What `tell` said since the last question: put before the next one.
    private let told = NIOLockedValueBox<[String]>([])

    init(server: MCPServer, call: Call) {
        self.server = server
        self.call = call
    }

    func tell(_ message: String) {
        told.withLockedValue { $0.append(message) }
    }

    func ask(_ question: String) -> String? {
        elicit(question, property: "value", ["type": "string", "title": "Answer"]).flatMap(Self.text)
    }

    func ask(_ question: String, for parameter: ParameterDefinition) -> String? {
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
        return elicit(question, property: parameter.name, .object(schema)).flatMap(Self.text)
    }

    func choose(_ question: String, among options: [String]) -> Int? {
        choose(question, among: options.enumerated().map { PromptOption(identifier: String($0.offset + 1), label: $0.element) }, for: nil)
    }

    func choose(_ question: String, among options: [PromptOption], for parameter: ParameterDefinition?) -> Int? {
        // The identifiers as the enum's values when they tell the options apart, else their positions.
        let unique = Set(options.map(\.identifier)).count == options.count && !options.contains { $0.identifier.isEmpty }
        let values = unique ? options.map(\.identifier) : options.indices.map { String($0 + 1) }
        let schema: JSONValue = [
            "type": "string", "title": .string(parameter.map { $0.title ?? $0.name } ?? "Choice"),
            "oneOf": .array(zip(values, options).map { ["const": .string($0), "title": .string($1.title ?? $1.label)] }),
        ]
        guard let answer = elicit(question, property: parameter?.name ?? "choice", schema)?.stringValue else { return nil }
        return values.firstIndex(of: answer)
    }

    func confirm(_ question: String) -> Bool? {
        elicit(question, property: "confirm", ["type": "boolean", "title": "Confirm", "default": true])?.boolValue
    }

    /// One elicitation with one property; the accepted value, or nil.
    func elicit(_ question: String, property: String, _ schema: JSONValue) -> JSONValue? {
        let before = told.withLockedValue { said in
            defer { said.removeAll() }
            return said
        }
        let message = (before + [question]).joined(separator: "\n")
        let params: JSONValue = [
            "message": .string(message),
            "requestedSchema": ["type": "object", "properties": [property: schema], "required": [.string(property)]],
        ]
        guard let result = server.ask("elicitation/create", params, for: call), result["action"]?.stringValue == "accept" else { return nil }
        guard let value = result["content"]?[property] else { return nil }
        if let expected = Self.mismatch(value, schema) {
            // Nothing is coerced: an answer of another type than the one asked ends the run with an error that says so.
            let answer = String(decoding: JSONWriter.bytes(value), as: UTF8.self)
            call.refuse(
                HostError(
                    .parameterUnresolved,
                    "the client answered the question for '\(property)' with \(value.typeNameWithArticle) (\(answer.prefix(200))), but it asked for \(expected): nothing is coerced; call again and answer with \(expected)",
                    details: ["parameter": .string(property), "expected": .string(expected), "answer": value]))
            return nil
        }
        return value
    }

    /// What `schema` (one property of MCP's restricted elicitation schema) asked for, when
    /// `value` is not that; nil when it is.
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

    /// An answer as a person would have typed it.
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
