import ExtrunProtocol
import Foundation

/// A JSON Schema (draft 2020-12) validator for the subset of keywords extrun's own
/// schemas use (docs/schemas/README.md says why it is not a library: none is among the
/// allowed packages). Every problem names the JSON path and the line and column of the
/// value (from `JSONNode`), so `extrun plugins check` can point at it.
///
/// Supported: `type` (a name or a list), `properties`, `patternProperties`, `required`,
/// `additionalProperties` (a boolean or a schema), `enum`, `const`, `items`, `minItems`,
/// `uniqueItems`, `minLength`, `pattern` (unanchored, as JSON Schema says), `minimum`,
/// `maximum`, `$ref` within the document (`#`, `#/$defs/...`), `oneOf`, `anyOf`, and
/// the annotations `$schema`, `$id`, `$comment`, `title`, `description`, `default`,
/// `examples`, `$defs`. A schema that uses any other keyword is refused when it is
/// loaded: a keyword this validator skipped would make it pass what the schema forbids.
/// No I/O: the caller reads the files.
public struct JSONSchema: Sendable {
    public let root: JSONValue

    /// A schema that cannot be used: an unknown keyword, a malformed value, a `$ref` that leads nowhere.
    public struct SchemaError: Error, Sendable, CustomStringConvertible {
        public var path: String
        public var message: String
        public var description: String { "\(path.isEmpty ? "(root)" : path): \(message)" }
    }

    /// One way the document does not fit the schema.
    public struct Violation: Sendable, Hashable, CustomStringConvertible {
        /// The JSON path of the value (`intents[0].parameters[1].type`); empty for the whole document.
        public var path: String
        public var location: FilePosition
        public var message: String
        public var description: String { "\(location): \(path.isEmpty ? "" : "\(path): ")\(message)" }
    }

    static let annotations: Set<String> = ["$schema", "$id", "$comment", "title", "description", "default", "examples", "$defs"]
    static let assertions: Set<String> = [
        "type", "properties", "patternProperties", "required", "additionalProperties", "enum", "const", "items", "minItems",
        "uniqueItems", "minLength", "pattern", "minimum", "maximum", "$ref", "oneOf", "anyOf",
    ]

    /// Checks that every keyword in `root` is one this validator applies, and that every `$ref` and `pattern` works.
    public init(_ root: JSONValue) throws(SchemaError) {
        self.root = root
        try check(root, path: "")
    }

    /// The schema in `data` (a JSON document).
    public init(data: Data) throws(SchemaError) {
        let value: JSONValue
        do {
            value = try JSONNodeParser.parse(data).json
        } catch {
            throw SchemaError(path: "", message: "not JSON: \(error)")
        }
        try self.init(value)
    }

    private func check(_ schema: JSONValue, path: String) throws(SchemaError) {
        if case .bool = schema { return }
        guard case .object(let fields) = schema else { throw SchemaError(path: path, message: "a schema is an object or a boolean") }
        for (key, value) in fields.sorted(by: { $0.key < $1.key }) {
            let here = path + "/" + key
            switch key {
            case _ where Self.annotations.contains(key):
                if key == "$defs", case .object(let definitions) = value {
                    for (name, definition) in definitions { try check(definition, path: here + "/" + name) }
                }
            case "properties", "patternProperties":
                guard case .object(let members) = value else { throw SchemaError(path: here, message: "expected an object of schemas") }
                for (name, member) in members {
                    if key == "patternProperties" { _ = try compile(name, path: here) }
                    try check(member, path: here + "/" + name)
                }
            case "additionalProperties", "items":
                try check(value, path: here)
            case "oneOf", "anyOf":
                guard case .array(let branches) = value, !branches.isEmpty else { throw SchemaError(path: here, message: "expected a list of schemas") }
                for (i, branch) in branches.enumerated() { try check(branch, path: here + "/\(i)") }
            case "$ref":
                guard case .string(let reference) = value else { throw SchemaError(path: here, message: "expected a string") }
                _ = try resolve(reference, path: here)
            case "pattern":
                guard case .string(let pattern) = value else { throw SchemaError(path: here, message: "expected a string") }
                _ = try compile(pattern, path: here)
            case "type":
                let names: [JSONValue]
                if case .array(let list) = value { names = list } else { names = [value] }
                for name in names {
                    guard case .string(let text) = name, Self.typeNames.contains(text) else {
                        throw SchemaError(path: here, message: "not a JSON Schema type: \(name)")
                    }
                }
            case "required":
                guard case .array(let names) = value, names.allSatisfy({ if case .string = $0 { true } else { false } }) else {
                    throw SchemaError(path: here, message: "expected a list of strings")
                }
            case "enum":
                guard case .array = value else { throw SchemaError(path: here, message: "expected a list") }
            case "minItems", "minLength", "minimum", "maximum":
                guard Self.number(value) != nil else { throw SchemaError(path: here, message: "expected a number") }
            case "uniqueItems":
                guard case .bool = value else { throw SchemaError(path: here, message: "expected a boolean") }
            case "const":
                break
            default:
                throw SchemaError(path: here, message: "the keyword '\(key)' is not one this validator applies (docs/schemas/README.md lists them)")
            }
        }
    }

    static let typeNames: Set<String> = ["null", "boolean", "object", "array", "number", "integer", "string"]

    private func resolve(_ reference: String, path: String) throws(SchemaError) -> JSONValue {
        guard reference.hasPrefix("#") else { throw SchemaError(path: path, message: "only references within the document (#...) are supported: \(reference)") }
        var value = root
        for token in reference.dropFirst().split(separator: "/", omittingEmptySubsequences: true) {
            let key = token.replacingOccurrences(of: "~1", with: "/").replacingOccurrences(of: "~0", with: "~")
            guard case .object(let fields) = value, let next = fields[key] else {
                throw SchemaError(path: path, message: "\(reference) leads nowhere")
            }
            value = next
        }
        return value
    }

    private func compile(_ pattern: String, path: String) throws(SchemaError) -> Regex<AnyRegexOutput> {
        do {
            return try Regex(pattern)
        } catch {
            throw SchemaError(path: path, message: "'\(pattern)' is not a regular expression: \(error)")
        }
    }

    static func number(_ value: JSONValue) -> Double? {
        switch value {
        case .int(let i): Double(i)
        case .double(let d): d
        default: nil
        }
    }

    // MARK: Validation

    /// Every way `document` does not fit the schema, in document order (empty: it fits).
    public func validate(_ document: JSONNode) -> [Violation] {
        var violations: [Violation] = []
        validate(document, root, path: "", into: &violations)
        return violations
    }

    private func validate(_ node: JSONNode, _ schema: JSONValue, path: String, into violations: inout [Violation]) {
        func fail(_ message: String, at location: FilePosition? = nil, path subpath: String? = nil) {
            violations.append(Violation(path: subpath ?? path, location: location ?? node.location, message: message))
        }
        switch schema {
        case .bool(let allowed):
            if !allowed { fail("not allowed here") }
            return
        case .object(let fields):
            if case .string(let reference)? = fields["$ref"], let target = try? resolve(reference, path: path) {
                validate(node, target, path: path, into: &violations)
            }
            if let type = fields["type"], !Self.matches(node, type: type) {
                fail("expected \(Self.describe(type: type)), got \(node.typeName)")
                return
            }
            if let allowed = fields["enum"], case .array(let values) = allowed, !values.contains(node.json) {
                fail("\(Self.show(node.json)) is not one of \(values.map(Self.show).joined(separator: ", "))")
            }
            if let constant = fields["const"], constant != node.json {
                fail("expected \(Self.show(constant)), got \(Self.show(node.json))")
            }
            switch node.value {
            case .string(let text):
                if let minimum = fields["minLength"].flatMap(Self.number), Double(text.count) < minimum {
                    fail(minimum == 1 ? "must not be empty" : "must be at least \(Int(minimum)) characters long")
                }
                if case .string(let pattern)? = fields["pattern"], let regex = try? compile(pattern, path: path), (try? regex.firstMatch(in: text)) == nil {
                    fail("\(Self.show(node.json)) does not match the pattern \(pattern)")
                }
            case .int, .double:
                let value = Self.number(node.json) ?? 0
                if let minimum = fields["minimum"].flatMap(Self.number), value < minimum { fail("\(Self.show(node.json)) is less than the minimum \(Self.show(fields["minimum"] ?? .null))") }
                if let maximum = fields["maximum"].flatMap(Self.number), value > maximum { fail("\(Self.show(node.json)) is more than the maximum \(Self.show(fields["maximum"] ?? .null))") }
            case .array(let items):
                if let minimum = fields["minItems"].flatMap(Self.number), Double(items.count) < minimum {
                    fail(minimum == 1 ? "must not be empty" : "must hold at least \(Int(minimum)) items")
                }
                if fields["uniqueItems"] == .bool(true) {
                    var seen = Set<JSONValue>()
                    for (i, item) in items.enumerated() where !seen.insert(item.json).inserted {
                        fail("\(Self.show(item.json)) is listed twice", at: item.location, path: path + "[\(i)]")
                    }
                }
                if let itemSchema = fields["items"] {
                    for (i, item) in items.enumerated() { validate(item, itemSchema, path: path + "[\(i)]", into: &violations) }
                }
            case .object(let members):
                let present = Set(members.map(\.key))
                if case .array(let required)? = fields["required"] {
                    for case .string(let name) in required where !present.contains(name) {
                        fail("the required field '\(name)' is missing")
                    }
                }
                let properties: [String: JSONValue]
                if case .object(let declared)? = fields["properties"] { properties = declared } else { properties = [:] }
                var patterns: [(Regex<AnyRegexOutput>, JSONValue)] = []
                if case .object(let declared)? = fields["patternProperties"] {
                    for (pattern, schema) in declared.sorted(by: { $0.key < $1.key }) {
                        if let regex = try? compile(pattern, path: path) { patterns.append((regex, schema)) }
                    }
                }
                for member in members {
                    let memberPath = path.isEmpty ? member.key : "\(path).\(member.key)"
                    var matched = false
                    if let property = properties[member.key] {
                        matched = true
                        validate(member.value, property, path: memberPath, into: &violations)
                    }
                    for (regex, schema) in patterns where (try? regex.firstMatch(in: member.key)) != nil {
                        matched = true
                        validate(member.value, schema, path: memberPath, into: &violations)
                    }
                    if !matched, let additional = fields["additionalProperties"] {
                        if additional == .bool(false) {
                            var message = "unknown field '\(member.key)'"
                            if let near = closest(to: member.key, in: properties.keys.sorted()) { message += " (did you mean '\(near)'?)" }
                            fail(message, at: member.keyLocation, path: memberPath)
                        } else {
                            validate(member.value, additional, path: memberPath, into: &violations)
                        }
                    }
                }
            case .null, .bool:
                break
            }
            if case .array(let branches)? = fields["oneOf"] { combine(node, branches, path: path, exactlyOne: true, into: &violations) }
            if case .array(let branches)? = fields["anyOf"] { combine(node, branches, path: path, exactlyOne: false, into: &violations) }
        default:
            break
        }
    }

    /// `oneOf` / `anyOf`: when no branch fits, the problems of the branch that came closest
    /// (the fewest), which is most likely the one meant.
    private func combine(_ node: JSONNode, _ branches: [JSONValue], path: String, exactlyOne: Bool, into violations: inout [Violation]) {
        var results: [[Violation]] = []
        for branch in branches {
            var found: [Violation] = []
            validate(node, branch, path: path, into: &found)
            results.append(found)
        }
        let fitting = results.filter(\.isEmpty).count
        if fitting == 0, let closest = results.min(by: { $0.count < $1.count }) {
            violations += closest
        } else if exactlyOne && fitting > 1 {
            violations.append(Violation(path: path, location: node.location, message: "fits more than one of the allowed forms"))
        }
    }

    static func matches(_ node: JSONNode, type: JSONValue) -> Bool {
        if case .array(let names) = type { return names.contains { matches(node, type: $0) } }
        guard case .string(let name) = type else { return false }
        switch (name, node.value) {
        case ("null", .null), ("boolean", .bool), ("object", .object), ("array", .array), ("string", .string), ("integer", .int),
            ("number", .int), ("number", .double):
            return true
        case ("integer", .double(let d)):
            return d.rounded() == d
        default:
            return false
        }
    }

    static func describe(type: JSONValue) -> String {
        func one(_ name: String) -> String {
            switch name {
            case "null": "null"
            case "boolean": "a boolean"
            case "object": "an object"
            case "array": "a list"
            case "number": "a number"
            case "integer": "an integer"
            default: "a string"
            }
        }
        if case .array(let names) = type { return names.compactMap(\.stringValue).map(one).joined(separator: " or ") }
        return type.stringValue.map(one) ?? "\(type)"
    }

    static func show(_ value: JSONValue) -> String {
        String(decoding: JSONWriter.bytes(value), as: UTF8.self)
    }
}
