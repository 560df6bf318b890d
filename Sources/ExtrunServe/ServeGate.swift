import ExtrunHost
import ExtrunProtocol
import Foundation
import Logging
import NIOConcurrencyHelpers

/// What every HTTP front end of `extrun serve` (the `/v1` API, `POST /mcp`) asks of a call,
/// in this order (docs/serve.md, "Security model"):
///
/// 1. `authenticate`: over TCP, the request's `Authorization` header to a `Principal` (the
///    `--token-file` token, or a bearer JWT of a configured issuer), or a 401 whose
///    `WWW-Authenticate` is `challenge(...)`; on the Unix socket the principal is the peer's
///    uid (`Principal.peer(uid:)`) and nothing is asked;
/// 2. `checkRate`: the principal's token bucket (serve.json `rateLimits`): nil, or a
///    refusal with its retry-after (HTTP 429 with `Retry-After`; over MCP a JSON-RPC error);
/// 3. `authorize`: serve.json's `access` rules for the intent and its plugin (per MCP tool):
///    nil, or the 403 `notPermitted` refusal;
/// 4. `audit`: one record when the call ends, refused or run (serve.json `audit`).
///
/// The settings follow serve.json: SIGHUP's new policy applies to the next call; the rate
/// buckets are kept across it.
public final class ServeGate: Sendable {
    private struct State {
        var verifier: BearerVerifier?
        var authentication: AuthenticationSettings?
        var access: AccessRules?
        var rateLimits: RateLimitSettings?
        var audit: AuditLog?
    }

    private let state: NIOLockedValueBox<State>
    private let limiter = RateLimiter()
    private let logger: Logger

    public init(policy: ServePolicy, logger: Logger) {
        self.logger = logger
        state = NIOLockedValueBox(State())
        update(policy)
    }

    /// A new policy (SIGHUP): a changed audit path closes the old log (its queued lines written first).
    public func update(_ policy: ServePolicy) {
        let logger = self.logger
        let previous: AuditLog? = state.withLockedValue { state in
            state.verifier = policy.verifier
            state.authentication = policy.verifier?.settings
            state.access = policy.access
            state.rateLimits = policy.rateLimits
            guard state.audit?.settings != policy.audit else { return nil }
            let old = state.audit
            state.audit = policy.audit.map { settings in
                AuditLog(settings: settings) { message in logger.error("\(message)") }
            }
            return old
        }
        previous?.close()
    }

    /// Writes the audit lines still queued (the service stopping).
    public func close() {
        let log = state.withLockedValue { state in
            defer { state.audit = nil }
            return state.audit
        }
        log?.close()
    }

    // MARK: 1. Authentication

    /// The principal of a TCP request from its one `Authorization` header (nil: none sent):
    /// `Bearer TOKEN` with the `--token-file` token (compared in constant time) is
    /// `Principal.tokenHolder`; any other bearer token is checked as a JWT against the
    /// configured issuers.
    public func authenticate(authorization: String?, token: [UInt8]?) -> Result<Principal, AuthenticationFailure> {
        guard let authorization, authorization.count > 7, authorization.prefix(7).lowercased() == "bearer " else {
            return .failure(
                AuthenticationFailure(
                    reason: .missing,
                    description: "this TCP listener needs 'Authorization: Bearer TOKEN' with the token of the service's --token-file\(verifierNote)"))
        }
        let credentials = authorization.dropFirst(7).drop { $0 == " " }
        if let token, ServeService.constantTimeEqual(Array(credentials.utf8), token) { return .success(.tokenHolder) }
        guard let verifier = state.withLockedValue({ $0.verifier }) else {
            return .failure(AuthenticationFailure(reason: .unknownToken, description: "the bearer token is not the token of the service's --token-file"))
        }
        return verifier.verify(String(credentials))
    }

    private var verifierNote: String {
        state.withLockedValue { $0.verifier == nil } ? "" : " or a JWT of one of its issuers (the protected resource metadata names them)"
    }

    /// This service's resource identifier: serve.json's `authentication.resource`, else
    /// `http://HOST` from the request's Host header.
    public func resource(host: String?) -> String {
        if let configured = state.withLockedValue({ $0.authentication?.resource }) { return configured }
        return "http://\(host.flatMap { $0.isEmpty ? nil : $0 } ?? "localhost")"
    }

    /// Where the protected resource metadata is (RFC 9728 §3.1: the well-known path between
    /// the resource's host and its path).
    public func metadataURL(host: String?) -> String {
        let resource = resource(host: host)
        guard let url = URLComponents(string: resource), let scheme = url.scheme, let name = url.host else {
            return resource + Self.metadataPath
        }
        let port = url.port.map { ":\($0)" } ?? ""
        let path = url.path == "/" ? "" : url.path
        return "\(scheme)://\(name)\(port)\(Self.metadataPath)\(path)"
    }

    public static let metadataPath = "/.well-known/oauth-protected-resource"

    /// Whether a request's path is the metadata's (with or without the resource's path): served without credentials.
    public static func isMetadataPath(_ target: String) -> Bool {
        let path = target.prefix { $0 != "?" }
        return path == metadataPath || path.hasPrefix(metadataPath + "/")
    }

    /// The protected resource metadata (RFC 9728 §2): the resource, its authorization
    /// servers (the configured issuers), bearer tokens in the header only, the scopes.
    public func resourceMetadata(host: String?) -> JSONValue {
        let (issuers, scopes) = state.withLockedValue { state in
            (state.authentication?.issuers.map(\.issuer) ?? [], state.authentication?.scopesSupported ?? state.access?.scopes ?? [])
        }
        var document: [String: JSONValue] = [
            "resource": .string(resource(host: host)),
            "authorization_servers": .array(issuers.map(JSONValue.string)),
            "bearer_methods_supported": ["header"],
            "resource_name": "extrun serve",
        ]
        if !scopes.isEmpty { document["scopes_supported"] = .array(scopes.map(JSONValue.string)) }
        return .object(document)
    }

    /// The `WWW-Authenticate` value of a 401 (RFC 6750 §3, RFC 9728 §5.1): the metadata's URL,
    /// and for a token that was sent and refused `error="invalid_token"` with why.
    public func challenge(_ failure: AuthenticationFailure?, host: String?) -> String {
        var value = "Bearer resource_metadata=\"\(Self.quoted(metadataURL(host: host)))\""
        if let scopes = state.withLockedValue({ $0.authentication?.scopesSupported }), !scopes.isEmpty {
            value += ", scope=\"\(Self.quoted(scopes.joined(separator: " ")))\""
        }
        if let failure, failure.reason != .missing {
            value += ", error=\"invalid_token\", error_description=\"\(Self.quoted(failure.description))\""
        }
        return value
    }

    /// The `WWW-Authenticate` of a 403 a scope would have avoided (RFC 6750 §3.1): only the scopes this call needs.
    public func insufficientScopeChallenge(_ refusal: AccessRefusal, host: String?) -> String? {
        guard !refusal.scopes.isEmpty else { return nil }
        return "Bearer error=\"insufficient_scope\", scope=\"\(Self.quoted(refusal.scopes.joined(separator: " ")))\", resource_metadata=\"\(Self.quoted(metadataURL(host: host)))\", error_description=\"\(Self.quoted(refusal.error.message))\""
    }

    /// A quoted-string's content (RFC 9110 §5.6.4) with no quote, backslash or control character.
    static func quoted(_ text: String) -> String {
        String(String.UnicodeScalarView(text.unicodeScalars.prefix(400).map { $0 == "\"" || $0 == "\\" ? "'" : ($0.value < 0x20 || $0.value > 0x7E ? "?" : $0) }))
    }

    // MARK: 2. Rate

    /// Takes one call from the principal's bucket: nil when it may go on, else the refusal
    /// (`retryAfterSeconds`, and the `overloaded` error with reason `rateLimit` and the numbers).
    public func checkRate(_ principal: Principal) -> RateLimitRefusal? {
        guard let settings = state.withLockedValue({ $0.rateLimits }) else { return nil }
        return limiter.take(principal, settings: settings)
    }

    // MARK: 3. Access

    /// Whether serve.json's `access` rules let `principal` call `intent` (of `plugin`; nil
    /// when not known before the call runs): nil when they do (or there are none), else the
    /// refusal, `notPermitted` with reason `access`, naming the principal and the intent.
    public func authorize(_ principal: Principal, intent: String?, plugin: String?) -> AccessRefusal? {
        guard let rules = state.withLockedValue({ $0.access }) else { return nil }
        if rules.allows(principal, intent: intent, plugin: plugin) { return nil }
        let what = intent.map { "the intent \($0)" + (plugin.map { " (plugin \($0))" } ?? "") } ?? "a call whose intent is known only once it runs (it needs a rule with intents [\"*\"])"
        var details: [String: JSONValue] = ["reason": "access", "principal": .string(principal.name)]
        if let intent { details["intent"] = .string(intent) }
        if let plugin { details["plugin"] = .string(plugin) }
        let scopes = rules.scopesThatWouldAllow(principal, intent: intent, plugin: plugin)
        if !scopes.isEmpty { details["scopes"] = .array(scopes.map(JSONValue.string)) }
        let hint = scopes.isEmpty ? "" : "; a token with the scope \(scopes.joined(separator: " or ")) would be"
        return AccessRefusal(
            error: HostError(
                .notPermitted, "\(principal.name) may not call \(what): no rule of serve.json's access allows it\(hint); nothing ran", details: details),
            scopes: principal.scopes.isEmpty && !principal.isRemote ? [] : scopes)
    }

    /// Whether access rules are configured (then a call's plugin is looked up before it runs).
    public var hasAccessRules: Bool { state.withLockedValue { $0.access != nil } }

    // MARK: 4. Audit

    /// Queues one record (formatted and written by the audit log's own thread); nothing when the audit log is off.
    public func audit(_ record: @autoclosure () -> AuditRecord) {
        guard let log = state.withLockedValue({ $0.audit }) else { return }
        log.record(record())
    }

    public var isAuditing: Bool { state.withLockedValue { $0.audit != nil } }
}
