import ExtrunHost
import ExtrunProtocol
import Foundation

/// A `HandleReport` as an MCP `tools/call` result (docs/mcp.md, "Mapping"):
/// - a success code: `structuredContent` = the response's properties (what the
///   `outputSchema` describes), text = the dialog, then the same properties as JSON;
/// - another response code: `isError`, `structuredContent` = `{"response": {code, properties, dialog}}`;
/// - a host error (a limit, a crash, a missing value...): `isError`,
///   `structuredContent` = `{"error": {kind, message, and the error's numbers}}`, and a
///   text that says it in words (what is missing and the options, for a resolution).
enum ToolResult {
    static func result(of report: HandleReport, structured: Bool, missingOptions: [OptionItem]? = nil) -> JSONValue {
        var content: [JSONValue] = []
        var object: [String: JSONValue] = [:]
        var structuredContent: JSONValue
        if let error = report.error {
            object["isError"] = true
            var lines = ["\(error.kind.rawValue): \(error.message)"]
            if let hint = hint(for: error, options: missingOptions) { lines.append(hint) }
            content.append(text(lines.joined(separator: "\n")))
            var detail = error.json
            if let missingOptions, case .object(var fields) = detail {
                fields["options"] = .array(missingOptions.map(optionJSON))
                detail = .object(fields)
            }
            structuredContent = ["error": detail]
        } else if let response = report.response {
            let dialog = [response.dialog?.full, response.dialog?.supporting].compactMap { $0 }.joined(separator: "\n")
            if report.responseIsSuccess {
                structuredContent = .object(response.properties)
                content.append(text(dialog.isEmpty ? "\(report.intent ?? "The intent") answered \(response.code)." : dialog))
            } else {
                object["isError"] = true
                var fields: [String: JSONValue] = ["code": .string(response.code), "properties": .object(response.properties)]
                if !dialog.isEmpty { fields["dialog"] = .string(dialog) }
                structuredContent = ["response": .object(fields)]
                content.append(text("\(report.intent ?? "The intent") answered \(response.code)" + (dialog.isEmpty ? "." : ": \(dialog)")))
            }
        } else {
            object["isError"] = true
            structuredContent = ["error": ["kind": "internalError", "message": "the run ended without a response or an error"]]
            content.append(text("internalError: the run ended without a response or an error"))
        }
        // The structured content as JSON text too, for clients before 2025-06-18 (the spec's advice).
        content.append(text(String(decoding: JSONWriter.bytes(structuredContent), as: UTF8.self)))
        object["content"] = .array(content)
        if structured { object["structuredContent"] = structuredContent }
        return .object(object)
    }

    static func text(_ value: String) -> JSONValue {
        ["type": "text", "text": .string(value)]
    }

    static func optionJSON(_ item: OptionItem) -> JSONValue {
        var fields: [String: JSONValue] = ["identifier": .string(item.identifier), "title": .string(item.title), "value": item.value]
        if let subtitle = item.subtitle { fields["subtitle"] = .string(subtitle) }
        return .object(fields)
    }

    /// What the model can do about an error, in words.
    static func hint(for error: HostError, options: [OptionItem]?) -> String? {
        switch error.kind {
        case .parameterUnresolved:
            let parameter = error.details["parameter"]?.stringValue ?? "the parameter"
            var lines: [String] = []
            if let value = error.details["value"], let prompt = error.details["prompt"]?.stringValue {
                // A resolution asked to confirm the value it found.
                return "The app asks the user to confirm \(parameter) = \(String(decoding: JSONWriter.bytes(value), as: UTF8.self)): \(prompt) "
                    + "If they agree, call again with the same arguments and \"\(ToolCatalog.confirmedArgument)\": true; otherwise with another \(parameter)."
            }
            if let prompt = error.details["prompt"]?.stringValue { lines.append("Missing: \(parameter) (\(prompt))") }
            let candidates = error.details["options"]?.arrayValue ?? []
            if !candidates.isEmpty {
                lines.append("Call again with \(parameter) set to one of:")
                lines += candidates.map { "- " + String(decoding: JSONWriter.bytes($0), as: UTF8.self) }
            } else if let options, !options.isEmpty {
                lines.append("Ask the user which one, then call again with \(parameter) set to the chosen value:")
                lines += options.map { "- \($0.title)\($0.subtitle.map { " (\($0))" } ?? ""): " + String(decoding: JSONWriter.bytes($0.value), as: UTF8.self) }
            } else if lines.isEmpty {
                return nil
            } else {
                lines.append("Ask the user, then call again with \(parameter) set.")
            }
            return lines.joined(separator: "\n")
        case .confirmationDeclined:
            if let prompt = error.details["prompt"]?.stringValue, error.message.contains("needs a confirmation") {
                return "Ask the user: \(prompt) If they agree, call again with the same arguments and \"\(ToolCatalog.confirmedArgument)\": true."
            }
            return nil
        case .memoryLimitExceeded, .timeout, .diskLimitExceeded:
            return "A limit of extrun's sandbox stopped the intent; the numbers are in structuredContent.error. Calling again with the same arguments will likely end the same way."
        case .cancelled:
            return nil
        default:
            return nil
        }
    }
}
