import ExtrunHost
import ExtrunProtocol

/// serve.json's `access` (docs/serve.md, "Access rules"): which principals, or which
/// scopes, may call which intents or plugins. Without it every caller the listener let in
/// may call every intent (as far as `grants` allow its owners); with it, a call no rule
/// allows is refused 403 `notPermitted` naming the principal and the intent: deny by default.
///
///     "access": [
///       {"principals": ["uid:*"], "intents": ["*"]},
///       {"principals": ["jwt:https://auth.example.com#*"], "scopes": ["soup"], "intents": ["OrderSoup"]},
///       {"scopes": ["admin"], "plugins": ["*"]}
///     ]
///
/// A rule allows a call when every "who" it names holds (`principals`: one of the patterns
/// names the caller, see `Principal.matches`; `scopes`: the caller's token holds one of them)
/// and one of its "what" names the call (`intents`: the intent's name or `*`; `plugins`: the
/// plugin's id or `*`). A call whose intent is not known before it runs (a phrase, an activity
/// without an interaction) needs a rule with `intents: ["*"]` or `plugins: ["*"]`.
public struct AccessRules: Sendable, Equatable {
    public struct Rule: Sendable, Equatable {
        public var principals: [String]?
        public var scopes: [String]?
        public var intents: [String]?
        public var plugins: [String]?

        func admits(_ principal: Principal) -> Bool {
            if let principals, !principals.contains(where: principal.matches) { return false }
            if let scopes, !scopes.contains(where: principal.scopes.contains) { return false }
            return true
        }

        func covers(intent: String?, plugin: String?) -> Bool {
            if let intents, intents.contains("*") || (intent.map(intents.contains) ?? false) { return true }
            if let plugins, plugins.contains("*") || (plugin.map(plugins.contains) ?? false) { return true }
            return false
        }
    }

    public var rules: [Rule] = []

    public init(rules: [Rule] = []) { self.rules = rules }

    /// The scopes the rules name (the protected resource metadata's default `scopes_supported`).
    public var scopes: [String] { Array(Set(rules.flatMap { $0.scopes ?? [] })).sorted() }

    /// Whether a rule allows `principal` to call the intent (of `plugin`).
    public func allows(_ principal: Principal, intent: String?, plugin: String?) -> Bool {
        rules.contains { $0.admits(principal) && $0.covers(intent: intent, plugin: plugin) }
    }

    /// The scopes that would allow the call to `principal` (the rules that cover the call and
    /// name it, or name no principal, but ask for scopes it lacks): the `scope` of a 403's
    /// `insufficient_scope` challenge. Empty when no scope would help.
    public func scopesThatWouldAllow(_ principal: Principal, intent: String?, plugin: String?) -> [String] {
        var scopes = Set<String>()
        for rule in rules where rule.covers(intent: intent, plugin: plugin) {
            guard let wanted = rule.scopes, rule.principals?.contains(where: principal.matches) ?? true else { continue }
            scopes.formUnion(wanted)
        }
        return scopes.sorted()
    }

    static func parse(_ value: JSONValue, source: String) throws(HostError) -> AccessRules {
        func fail(_ field: String, _ message: String) -> HostError {
            HostError(.configurationError, "\(source): \(field): \(message)", details: ["file": .string(source), "field": .string(field)])
        }
        let shape =
            "expected an array of rules {\"principals\": [PATTERN], \"scopes\": [SCOPE], \"intents\": [NAME or \"*\"], \"plugins\": [ID or \"*\"]}: principals or scopes (or both), intents or plugins (or both)"
        guard let list = value.arrayValue else { throw fail("access", shape) }
        var rules: [Rule] = []
        for (index, entry) in list.enumerated() {
            let path = "access[\(index)]"
            guard case .object(let fields) = entry else { throw fail(path, shape) }
            func names(_ key: String) throws(HostError) -> [String]? {
                guard let field = fields[key] else { return nil }
                guard let items = field.arrayValue, !items.isEmpty else { throw fail("\(path).\(key)", "expected a non-empty array of strings") }
                var result: [String] = []
                for item in items {
                    guard let text = item.stringValue, !text.isEmpty, text.utf8.count <= 1024 else {
                        throw fail("\(path).\(key)", "expected a non-empty array of strings; got \(item)")
                    }
                    result.append(text)
                }
                return result
            }
            if let unknown = fields.keys.sorted().first(where: { !["principals", "scopes", "intents", "plugins"].contains($0) }) {
                throw fail("\(path).\(unknown)", "unknown field; \(shape)")
            }
            let rule = Rule(principals: try names("principals"), scopes: try names("scopes"), intents: try names("intents"), plugins: try names("plugins"))
            if let bad = rule.principals?.first(where: { !Principal.isValidPattern($0) }) {
                throw fail("\(path).principals", "'\(bad)' is not a principal: uid:N, uid:*, tcp, jwt:ISSUER#SUBJECT, jwt:ISSUER#*, jwt:* or *")
            }
            guard rule.principals != nil || rule.scopes != nil else { throw fail(path, "name principals or scopes (who the rule lets in)") }
            guard rule.intents != nil || rule.plugins != nil else { throw fail(path, "name intents or plugins (what the rule lets them call)") }
            rules.append(rule)
        }
        return AccessRules(rules: rules)
    }
}

/// A call the access rules refuse: the 403's error, and for a JWT's subject the scopes
/// that would have let it in (the `insufficient_scope` challenge, RFC 6750 §3.1).
public struct AccessRefusal: Error, Sendable {
    public var error: HostError
    public var scopes: [String]
}
