/// How names in a definition file become Swift names.
enum SwiftNames {
    static let keywords: Set<String> = [
        "associatedtype", "class", "deinit", "enum", "extension", "fileprivate", "func", "import", "init", "inout", "internal", "let",
        "open", "operator", "private", "precedencegroup", "protocol", "public", "rethrows", "static", "struct", "subscript", "typealias",
        "var", "break", "case", "catch", "continue", "default", "defer", "do", "else", "fallthrough", "for", "guard", "if", "in",
        "repeat", "return", "throw", "switch", "where", "while", "Any", "as", "await", "false", "is", "nil", "self", "Self", "super",
        "throws", "true", "try", "async", "some", "any", "consume", "copy", "discard", "borrowing", "consuming",
    ]

    /// Names a member may not have, even escaped.
    static let unusableMembers: Set<String> = ["self", "Self", "Type", "Protocol", "init", "super"]

    /// Type names the generated code or the SDK already uses.
    static let reservedTypes: Set<String> = [
        "String", "Int", "Double", "Bool", "Date", "Data", "URL", "Array", "Dictionary", "Set", "Optional", "Error", "Never", "Void",
        "Any", "AnyObject", "Sendable", "Codable", "Decodable", "Encodable", "Hashable", "Equatable", "CaseIterable", "Character",
        "IntentFile", "IntentContext", "IntentRequest", "IntentResponse", "IntentHandler", "ResolutionResult", "JSONValue", "JSONCoding",
        "Dialog", "UserActivity", "OptionItem", "OptionsResult", "OptionsSection", "DisplayRepresentation", "PluginRuntime", "ISODate",
        "Phrase", "Mode", "ResponseCode", "RPCError", "PluginMain", "Foundation", "ExtrunSDK", "ExtrunProtocol",
    ]

    /// `[A-Za-z_][A-Za-z0-9_]*`.
    static func isIdentifier(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, first.isASCIILetter || first == "_" else { return false }
        return name.unicodeScalars.allSatisfy { $0.isASCIILetter || $0.isASCIIDigit || $0 == "_" }
    }

    /// The name as a Swift identifier in a declaration or a use: keywords in backticks.
    static func escaped(_ name: String) -> String {
        keywords.contains(name) ? "`\(name)`" : name
    }

    /// The name as an argument label at a call site: only `inout`, `var` and `let` need backticks there.
    static func argumentLabel(_ name: String) -> String {
        ["inout", "var", "let"].contains(name) ? "`\(name)`" : name
    }

    /// `dateFormat` → `DateFormat`.
    static func upperFirst(_ name: String) -> String {
        guard let first = name.first else { return name }
        return first.uppercased() + name.dropFirst()
    }

    /// `OrderSoup` → `orderSoup`.
    static func lowerFirst(_ name: String) -> String {
        guard let first = name.first else { return name }
        return first.lowercased() + name.dropFirst()
    }

    /// An enum case's Swift name from its value: `red_pepper` → `redPepper`, `in-app` → `inApp`, `2x` → `_2x`.
    static func caseName(_ value: String) -> String? {
        var words: [String] = []
        var current = ""
        for scalar in value.unicodeScalars {
            if scalar.isASCIILetter || scalar.isASCIIDigit {
                current.unicodeScalars.append(scalar)
            } else if !current.isEmpty {
                words.append(current)
                current = ""
            }
        }
        if !current.isEmpty { words.append(current) }
        guard let first = words.first else { return nil }
        var name = lowerFirst(first) + words.dropFirst().map(upperFirst).joined()
        if name.unicodeScalars.first?.isASCIIDigit == true { name = "_" + name }
        return name
    }
}

extension Unicode.Scalar {
    var isASCIILetter: Bool { ("a"..."z").contains(self) || ("A"..."Z").contains(self) }
    var isASCIIDigit: Bool { ("0"..."9").contains(self) }
}

/// `${name}` slots of a template, and its parts for code generation.
enum Template {
    enum Part: Equatable {
        case text(String)
        case slot(String)
    }

    static func parts(_ template: String) -> [Part] {
        var parts: [Part] = []
        var rest = template[...]
        while let open = rest.range(of: "${") {
            guard let close = rest[open.upperBound...].firstIndex(of: "}") else { break }
            if open.lowerBound > rest.startIndex { parts.append(.text(String(rest[..<open.lowerBound]))) }
            parts.append(.slot(String(rest[open.upperBound..<close])))
            rest = rest[rest.index(after: close)...]
        }
        if !rest.isEmpty { parts.append(.text(String(rest))) }
        return parts
    }

    static func slots(_ template: String) -> [String] {
        parts(template).compactMap { if case .slot(let name) = $0 { name } else { nil } }
    }
}
