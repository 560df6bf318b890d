/// How one intent runs, whichever way it came in: `extrun handle`'s flags, `extrun
/// serve`'s query (`POST /v1/handle?mode=in-app&timeout=5s`), a JSON object (the MCP
/// server's settings, a sealed request's state). This file is the one place that names
/// them on the wire; the command line's flags map onto the same fields
/// (`RunOptionFlags` in ExtrunCommandLine) and the host reads them into `HandleOptions`.
public struct RunOptions: Sendable, Equatable {
    /// Overrides the intent file's and the manifest's mode.
    public var mode: Mode?
    /// The memory cap, within the policy's maximum for the mode.
    public var memoryLimitBytes: Int64?
    /// The deadline, counted from the plugin's launch, within the policy's maximum.
    public var deadlineMs: Int?
    /// Accept the confirmations the plugin asks for without asking.
    public var assumeYes = false
    /// Carry on in the app when the extension asks for it (false: `--no-app-launch`).
    public var appLaunch = true
    /// Donate a successful interaction (false: `--no-donate`).
    public var donate = true
    /// Ask the person for missing values, choices and confirmations: on the terminal for
    /// the CLI (unless `--no-input`), as streamed prompts over the service (`interactive=true`).
    /// False: nobody is asked, and what needs an answer ends the run.
    public var interactive = false
    /// The report's text summary as well (`--format text`, `format=text`).
    public var text = false

    public init() {}

    /// The names on the wire: query fields of `extrun serve`'s runs and keys of the JSON form.
    public enum Field: String, CaseIterable, Sendable {
        case mode, memoryLimit, timeout, yes, appLaunch, donate, interactive, format
    }

    /// What went wrong reading a field: its name and a sentence that says what it takes.
    public struct DecodingError: Error, Sendable, Equatable {
        public var field: String
        public var message: String
    }

    // MARK: - Query (`?mode=in-app&timeout=5s`)

    /// The fields that differ from the defaults, in `Field`'s order, as a query's `(name, value)` pairs.
    /// Sizes and durations are written in bytes and milliseconds, which read back exactly.
    public var queryItems: [(String, String)] {
        var items: [(String, String)] = []
        if let mode { items.append((Field.mode.rawValue, mode.rawValue)) }
        if let memoryLimitBytes { items.append((Field.memoryLimit.rawValue, String(memoryLimitBytes))) }
        if let deadlineMs { items.append((Field.timeout.rawValue, "\(deadlineMs)ms")) }
        if assumeYes { items.append((Field.yes.rawValue, "true")) }
        if !appLaunch { items.append((Field.appLaunch.rawValue, "false")) }
        if !donate { items.append((Field.donate.rawValue, "false")) }
        if interactive { items.append((Field.interactive.rawValue, "true")) }
        if text { items.append((Field.format.rawValue, "text")) }
        return items
    }

    /// Reads the run's fields of a decoded query (percent-decoding done); other fields are
    /// the endpoint's (`extra`, e.g. `parameter` and `search` of `/v1/options`), any else is refused.
    public init(query: [String: String], extra: Set<String> = []) throws(DecodingError) {
        let known = Set(Field.allCases.map(\.rawValue)).union(extra)
        if let unknown = query.keys.sorted().first(where: { !known.contains($0) }) {
            throw DecodingError(
                field: unknown, message: "unknown query field '\(unknown.prefix(100))' (the fields: \(known.sorted().joined(separator: ", ")))")
        }
        self.init()
        for field in Field.allCases {
            guard let value = query[field.rawValue] else { continue }
            try set(field, text: value, prefix: "?\(field.rawValue)=")
        }
    }

    // MARK: - JSON (`{"mode": "in-app", "timeout": "5s", "donate": false}`)

    /// The fields that differ from the defaults; sizes in bytes, durations in milliseconds.
    public var json: JSONValue {
        var object: [String: JSONValue] = [:]
        if let mode { object[Field.mode.rawValue] = .string(mode.rawValue) }
        if let memoryLimitBytes { object[Field.memoryLimit.rawValue] = .int(memoryLimitBytes) }
        if let deadlineMs { object[Field.timeout.rawValue] = .string("\(deadlineMs)ms") }
        if assumeYes { object[Field.yes.rawValue] = true }
        if !appLaunch { object[Field.appLaunch.rawValue] = false }
        if !donate { object[Field.donate.rawValue] = false }
        if interactive { object[Field.interactive.rawValue] = true }
        if text { object[Field.format.rawValue] = "text" }
        return .object(object)
    }

    /// Reads the JSON form: strings as in a query, or JSON booleans and (for `memoryLimit`) a number of bytes.
    public init(json: JSONValue) throws(DecodingError) {
        guard case .object(let object) = json else {
            throw DecodingError(field: "", message: "the options must be a JSON object, not \(json.typeNameWithArticle)")
        }
        let known = Set(Field.allCases.map(\.rawValue))
        if let unknown = object.keys.sorted().first(where: { !known.contains($0) }) {
            throw DecodingError(
                field: unknown, message: "unknown option '\(unknown.prefix(100))' (the options: \(known.sorted().joined(separator: ", ")))")
        }
        self.init()
        for field in Field.allCases {
            guard let value = object[field.rawValue] else { continue }
            let text: String
            switch value {
            case .string(let string): text = string
            case .bool(let flag): text = flag ? "true" : "false"
            case .int(let number): text = String(number)
            default:
                throw DecodingError(field: field.rawValue, message: "option \(field.rawValue) is \(value.typeNameWithArticle), not a string")
            }
            try set(field, text: text, prefix: "\(field.rawValue) ")
        }
    }

    // MARK: - One reader for both

    private mutating func set(_ field: Field, text value: String, prefix: String) throws(DecodingError) {
        func fail(_ takes: String) -> DecodingError {
            DecodingError(field: field.rawValue, message: "\(prefix)\(value.prefix(100)) is not \(takes)")
        }
        func flag() throws(DecodingError) -> Bool {
            switch value.lowercased() {
            case "true", "1", "yes": return true
            case "false", "0", "no": return false
            default: throw fail("true or false")
            }
        }
        switch field {
        case .mode:
            guard let mode = Mode(rawValue: value) else { throw fail("extension or in-app") }
            self.mode = mode
        case .memoryLimit:
            guard let bytes = ByteCount.parse(value) else { throw fail("a size; write it like 64MiB or 1GiB") }
            memoryLimitBytes = bytes
        case .timeout:
            guard let ms = DurationText.parseMilliseconds(value) else { throw fail("a duration; write it like 5s, 2500ms or 1m") }
            deadlineMs = ms
        case .yes: assumeYes = try flag()
        case .appLaunch: appLaunch = try flag()
        case .donate: donate = try flag()
        case .interactive: interactive = try flag()
        case .format:
            guard value == "json" || value == "text" else { throw fail("json or text") }
            text = value == "text"
        }
    }
}
