import ExtrunProtocol
import Foundation

/// Values as a person reads them in text output and at prompts: a string bare, a file
/// by its name, type and size, anything else as JSON; durations and sizes as text.
public enum ValueText {
    public static func describe(_ value: JSONValue) -> String {
        switch value {
        case .string(let s): s
        case .object(let fields) where fields["filename"] != nil && fields["data"] != nil:
            "file \(fields["filename"]?.stringValue ?? "") (\(fields["typeIdentifier"]?.stringValue ?? "public.data"), \((fields["data"]?.stringValue.flatMap { Data(base64Encoded: $0) }?.count) ?? 0) bytes)"
        case .array(let items): "[" + items.map(describe(_:)).joined(separator: ", ") + "]"
        default: String(decoding: (try? JSONCoding.encoder().encode(value)) ?? Data(), as: UTF8.self)
        }
    }

    /// A candidate value: a custom type's title and identifier, else the value itself (as JSON when not a string).
    public static func describeChoice(_ value: JSONValue) -> String {
        if case .object(let fields) = value, let title = fields["title"]?.stringValue {
            return fields["identifier"] != nil ? "\(title)  \(describe(value))" : title
        }
        return describe(value)
    }

    public static func ms(_ value: Double) -> String { String(format: "%.1f ms", value) }

    public static func bytes(_ value: Int64) -> String {
        value >= 1 << 20 ? String(format: "%.1f MiB", Double(value) / 1_048_576) : String(format: "%.0f KiB", Double(value) / 1024)
    }

    /// A value as written in a manifest or a definition file: a string in quotes, anything else as JSON
    /// (`extrun describe`: defaults, and the parent value a parameter depends on).
    public static func literal(_ value: JSONValue) -> String {
        switch value {
        case .string(let s): "\"\(s)\""
        default: String(decoding: (try? JSONCoding.encoder().encode(value)) ?? Data(), as: UTF8.self)
        }
    }
}
