import ExtrunHost
import ExtrunProtocol
import Foundation
import JWTKit
import NIOConcurrencyHelpers

#if canImport(FoundationNetworking)
import FoundationNetworking
#endif

/// serve.json's `authentication` (docs/serve.md, "Authentication"): the issuers whose bearer
/// JWTs the service's TCP listener accepts, besides the `--token-file` token.
///
///     "authentication": {
///       "resource": "https://extrun.example.com",
///       "issuers": [{"issuer": "https://auth.example.com", "audience": "https://extrun.example.com",
///                    "jwksURL": "https://auth.example.com/.well-known/jwks.json"}],
///       "leewaySeconds": 30,
///       "scopesSupported": ["intents"]
///     }
public struct AuthenticationSettings: Sendable, Equatable {
    public struct Issuer: Sendable, Equatable {
        /// The `iss` a token must carry, exactly.
        public var issuer: String
        /// The `aud` values accepted (a token's `aud` must hold one); default: `resource`.
        public var audiences: [String]
        /// Where the issuer's JSON Web Key Set is.
        public var jwks: KeySetSource
    }

    public enum KeySetSource: Sendable, Equatable, CustomStringConvertible {
        /// A file, read at start and on SIGHUP.
        case file(String)
        /// An https URL (http only to a loopback host), fetched at start and on SIGHUP, again
        /// every `jwksRefreshSeconds`, and when a token names a key the set does not hold (at
        /// most once per `jwksMinRefreshSeconds`).
        case url(String)

        public var description: String {
            switch self {
            case .file(let path): path
            case .url(let url): url
            }
        }
    }

    /// This service's resource identifier (RFC 9728 `resource`, RFC 8707): what clients ask
    /// tokens for. Without it: `http://HOST` from the request's Host header.
    public var resource: String?
    public var issuers: [Issuer] = []
    /// Clock skew allowed on `exp` and `nbf`.
    public var leewaySeconds: Double = 30
    /// The metadata's `scopes_supported`; default: the scopes the access rules name.
    public var scopesSupported: [String]?
    /// How often a key set fetched from a URL is fetched again.
    public var jwksRefreshSeconds: Double = 3600
    /// The least time between two fetches made because a token named an unknown key.
    public var jwksMinRefreshSeconds: Double = 10

    public init() {}

    static func parse(_ value: JSONValue, source: String) throws(HostError) -> AuthenticationSettings {
        func fail(_ field: String, _ message: String) -> HostError {
            HostError(.configurationError, "\(source): \(field): \(message)", details: ["file": .string(source), "field": .string(field)])
        }
        guard case .object(let object) = value else {
            throw fail("authentication", "expected an object {\"resource\", \"issuers\", \"leewaySeconds\", \"scopesSupported\"}")
        }
        var settings = AuthenticationSettings()
        for (key, field) in object {
            switch key {
            case "resource":
                guard let text = field.stringValue, let url = URL(string: text), url.scheme == "https" || url.scheme == "http", url.host != nil,
                    url.fragment == nil
                else { throw fail("authentication.resource", "expected an absolute http(s) URL without a fragment; got \(field)") }
                settings.resource = text
            case "leewaySeconds":
                guard let seconds = field.doubleValue, (0...600).contains(seconds) else {
                    throw fail("authentication.leewaySeconds", "expected seconds from 0 to 600; got \(field)")
                }
                settings.leewaySeconds = seconds
            case "jwksRefreshSeconds", "jwksMinRefreshSeconds":
                guard let seconds = field.doubleValue, (1...86_400).contains(seconds) else {
                    throw fail("authentication.\(key)", "expected seconds from 1 to 86400; got \(field)")
                }
                if key == "jwksRefreshSeconds" { settings.jwksRefreshSeconds = seconds } else { settings.jwksMinRefreshSeconds = seconds }
            case "scopesSupported":
                guard let list = field.arrayValue?.compactMap(\.stringValue), list.count == field.arrayValue?.count else {
                    throw fail("authentication.scopesSupported", "expected an array of scope names")
                }
                settings.scopesSupported = list
            case "issuers":
                guard let list = field.arrayValue else { throw fail("authentication.issuers", "expected an array of issuers") }
                for (index, entry) in list.enumerated() {
                    let path = "authentication.issuers[\(index)]"
                    guard case .object(let fields) = entry else {
                        throw fail(path, "expected {\"issuer\": URL, \"audience\": URL or [URL], \"jwksFile\": PATH or \"jwksURL\": URL}")
                    }
                    if let unknown = fields.keys.sorted().first(where: { !["issuer", "audience", "jwksFile", "jwksURL"].contains($0) }) {
                        throw fail("\(path).\(unknown)", "unknown field (the fields: issuer, audience, jwksFile, jwksURL)")
                    }
                    guard let issuer = fields["issuer"]?.stringValue, !issuer.isEmpty else { throw fail("\(path).issuer", "expected the issuer's identifier (its `iss`)") }
                    let jwks: KeySetSource
                    switch (fields["jwksFile"], fields["jwksURL"]) {
                    case (let file?, nil):
                        guard var path = file.stringValue, !path.isEmpty else { throw fail("\(path).jwksFile", "expected the path of the issuer's JWKS") }
                        if !path.hasPrefix("/") {
                            // Relative to serve.json's folder.
                            path = URL(fileURLWithPath: source).deletingLastPathComponent().appendingPathComponent(path).path
                        }
                        jwks = .file(path)
                    case (nil, let url?):
                        guard let text = url.stringValue, let parsed = URL(string: text), let host = parsed.host,
                            parsed.scheme == "https" || (parsed.scheme == "http" && ["127.0.0.1", "localhost", "::1", "[::1]"].contains(host))
                        else {
                            throw fail("\(path).jwksURL", "expected an https URL (http only to a loopback host); got \(url)")
                        }
                        jwks = .url(text)
                    default:
                        throw fail(path, "name the issuer's key set: jwksFile (a path) or jwksURL (an https URL), one of them")
                    }
                    var audiences: [String] = []
                    switch fields["audience"] {
                    case .string(let one)?: audiences = [one]
                    case .array(let many)?:
                        audiences = many.compactMap(\.stringValue)
                        guard audiences.count == many.count, !audiences.isEmpty else { throw fail("\(path).audience", "expected a string or an array of strings") }
                    case nil: break
                    default: throw fail("\(path).audience", "expected a string or an array of strings")
                    }
                    settings.issuers.append(Issuer(issuer: issuer, audiences: audiences, jwks: jwks))
                }
            default:
                throw fail("authentication.\(key)", "unknown field (the fields: issuers, leewaySeconds, resource, scopesSupported)")
            }
        }
        if let index = settings.issuers.firstIndex(where: { $0.audiences.isEmpty }), settings.resource == nil {
            throw fail(
                "authentication.issuers[\(index)].audience",
                "name the audience the issuer's tokens carry for this service, or authentication.resource (the default audience)")
        }
        return settings
    }
}

/// Why a request's credentials were refused: answered 401 with `WWW-Authenticate`
/// (RFC 6750 §3: `error="invalid_token"` when a token was sent).
public struct AuthenticationFailure: Error, Sendable, Equatable {
    public enum Reason: String, Sendable {
        /// No `Authorization` header (or not a bearer one).
        case missing
        /// A token that is neither the service's token nor a well-formed JWT.
        case malformed
        /// Not the `--token-file` token, and no issuer is configured for JWTs.
        case unknownToken
        case unknownIssuer
        case badSignature
        case expired
        case notYetValid
        case wrongAudience
        /// No `sub`, or no `exp`.
        case missingClaim
    }

    public var reason: Reason
    /// What the caller is told (RFC 6750's error_description, and the error's message).
    public var description: String

    /// The typed error of the answer's body: `invalidIntent` (the kind a 401 has always had
    /// here), with `details.reason` `unauthenticated` or `invalidToken` and `details.token` the reason.
    public var error: HostError {
        HostError(
            .invalidIntent, description,
            details: ["reason": .string(reason == .missing ? "unauthenticated" : "invalidToken"), "token": .string(reason.rawValue)])
    }
}

/// Checks bearer JWTs against the configured issuers (signature with jwt-kit against the
/// issuer's JWKS, then `iss`, `exp`/`nbf` with the leeway, `aud`); built from
/// `AuthenticationSettings` when serve.json is read, so a key set that does not load is an
/// error at start (or on SIGHUP, which keeps the running policy). Verified tokens are
/// remembered (up to 4,096) until they expire: a caller's next request does not verify its
/// signature again.
public final class BearerVerifier: Sendable, Equatable {
    struct Key: Sendable {
        var id: String?
        /// The JWA name the key verifies (`ES256`, `RS256`...).
        var algorithm: String
        var verifier: any JWTAlgorithm
    }

    struct TrustedIssuer: Sendable {
        var issuer: String
        var audiences: Set<String>
        var jwks: AuthenticationSettings.KeySetSource
    }

    public let settings: AuthenticationSettings
    let issuers: [String: TrustedIssuer]
    /// Each issuer's keys: replaced when a key set fetched from a URL is fetched again.
    private let keys: NIOLockedValueBox<[String: [Key]]>
    /// When each issuer's key set was last fetched because of an unknown key (MonotonicClock).
    private let lastOnDemand = NIOLockedValueBox<[String: UInt64]>([:])
    private let verified = NIOLockedValueBox<[String: (principal: Principal, expires: Double, notBefore: Double?)]>([:])
    static let rememberedTokens = 4096

    public static func == (lhs: BearerVerifier, rhs: BearerVerifier) -> Bool { lhs === rhs || lhs.settings == rhs.settings }

    /// Reads every issuer's key set (blocking: at start and on SIGHUP, never on an event loop
    /// or in Swift's concurrency pool; there, `load(_:source:) async`).
    public static func loadBlocking(_ settings: AuthenticationSettings, source: String) throws(HostError) -> BearerVerifier {
        do {
            return try blocking { try await load(settings, source: source) }
        } catch let error as HostError {
            throw error
        } catch {
            throw HostError(.internalError, "\(source): authentication: \(error)")
        }
    }

    public static func load(_ settings: AuthenticationSettings, source: String) async throws(HostError) -> BearerVerifier {
        var issuers: [String: TrustedIssuer] = [:]
        var keys: [String: [Key]] = [:]
        for (index, issuer) in settings.issuers.enumerated() {
            let field: String
            if case .url = issuer.jwks { field = "authentication.issuers[\(index)].jwksURL" } else { field = "authentication.issuers[\(index)].jwksFile" }
            do {
                keys[issuer.issuer] = try await fetchKeys(issuer.jwks)
            } catch {
                let reason = (error as? HostError)?.message ?? "\(error)"
                throw HostError(.configurationError, "\(source): \(field): \(reason)", details: ["file": .string(source), "field": .string(field)])
            }
            let audiences = issuer.audiences.isEmpty ? [settings.resource ?? ""] : issuer.audiences
            issuers[issuer.issuer] = TrustedIssuer(issuer: issuer.issuer, audiences: Set(audiences), jwks: issuer.jwks)
        }
        let verifier = BearerVerifier(settings: settings, issuers: issuers, keys: keys)
        if issuers.values.contains(where: { if case .url = $0.jwks { true } else { false } }) {
            // Fetched again every jwksRefreshSeconds while this verifier is the policy's
            // (the task holds it weakly: a SIGHUP's new policy ends it at its next wake-up).
            let interval = UInt64(settings.jwksRefreshSeconds * 1e9)
            Task.detached { [weak verifier] in
                while true {
                    try? await Task.sleep(nanoseconds: interval)
                    guard let verifier else { return }
                    for issuer in verifier.issuers.values { await verifier.refresh(issuer) }
                }
            }
        }
        return verifier
    }

    init(settings: AuthenticationSettings, issuers: [String: TrustedIssuer], keys: [String: [Key]]) {
        self.settings = settings
        self.issuers = issuers
        self.keys = NIOLockedValueBox(keys)
    }

    /// A key set's keys, from its file or its URL; throws a description of what went wrong.
    static func fetchKeys(_ source: AuthenticationSettings.KeySetSource) async throws -> [Key] {
        let data: Data
        switch source {
        case .file(let path):
            guard let contents = FileManager.default.contents(atPath: path) else {
                throw HostError(.configurationError, "cannot read \(path)")
            }
            data = contents
        case .url(let text):
            data = try await fetch(text)
        }
        let keys: [Key]
        do {
            keys = try await keysOf(jwks: data)
        } catch {
            throw HostError(.configurationError, "\(source) is not a usable JSON Web Key Set: \(error)")
        }
        guard !keys.isEmpty else { throw HostError(.configurationError, "\(source) holds no signing key") }
        return keys
    }

    /// GET of a key set's URL: 200, at most 1 MiB, within 10 s.
    static func fetch(_ text: String) async throws -> Data {
        guard let url = URL(string: text) else { throw HostError(.configurationError, "\(text) is not a URL") }
        var request = URLRequest(url: url, timeoutInterval: 10)
        request.setValue("application/json", forHTTPHeaderField: "accept")
        let (data, response): (Data, URLResponse)
        do {
            (data, response) = try await withCheckedThrowingContinuation { continuation in
                URLSession.shared.dataTask(with: request) { data, response, error in
                    if let data, let response {
                        continuation.resume(returning: (data, response))
                    } else {
                        continuation.resume(throwing: error ?? HostError(.configurationError, "no answer"))
                    }
                }.resume()
            }
        } catch {
            throw HostError(.configurationError, "cannot fetch \(text): \(error.localizedDescription)")
        }
        let status = (response as? HTTPURLResponse)?.statusCode ?? 0
        guard status == 200 else { throw HostError(.configurationError, "fetching \(text) answered HTTP \(status)") }
        guard data.count <= 1 << 20 else { throw HostError(.configurationError, "\(text) answered \(data.count) bytes, over 1 MiB") }
        return data
    }

    /// Fetches an issuer's key set from its URL again; keeps the keys it had when that fails.
    func refresh(_ issuer: TrustedIssuer) async {
        guard case .url = issuer.jwks, let fresh = try? await Self.fetchKeys(issuer.jwks) else { return }
        keys.withLockedValue { $0[issuer.issuer] = fresh }
    }

    /// A token named a key its issuer's set does not hold: the set is fetched again in the
    /// background (at most once per jwksMinRefreshSeconds); true when a fetch was started.
    private func refreshOnDemand(_ issuer: TrustedIssuer) -> Bool {
        guard case .url = issuer.jwks else { return false }
        let now = MonotonicClock.now()
        let due = lastOnDemand.withLockedValue { last in
            if let previous = last[issuer.issuer], Double(now &- previous) / 1e9 < settings.jwksMinRefreshSeconds { return false }
            last[issuer.issuer] = now
            return true
        }
        guard due else { return false }
        Task.detached { [weak self] in await self?.refresh(issuer) }
        return true
    }

    /// The verifying keys of a JWKS document, through jwt-kit: each key's algorithm is its
    /// `alg`, else ES256/ES384/ES512 for an EC key by its curve, RS256 for an RSA key.
    static func keysOf(jwks data: Data) async throws -> [Key] {
        let set = try JSONDecoder().decode(JWKS.self, from: data)
        var keys: [Key] = []
        for jwk in set.keys {
            let algorithm: JWK.Algorithm
            if let declared = jwk.algorithm {
                algorithm = declared
            } else if jwk.keyType == .ecdsa {
                switch jwk.curve {
                case .ecdsa(.p384)?: algorithm = .es384
                case .ecdsa(.p521)?: algorithm = .es512
                default: algorithm = .es256
                }
            } else if jwk.keyType == .rsa {
                algorithm = .rs256
            } else {
                continue
            }
            let collection = JWTKeyCollection()
            // Added as the default key: looked up with no kid, so that a JWK without `kid` works too.
            try await collection.add(jwk: jwk, isDefault: true)
            let verifier = try await collection.getKey(for: nil, alg: algorithm.rawValue)
            keys.append(Key(id: jwk.keyIdentifier?.string, algorithm: algorithm.rawValue, verifier: verifier))
        }
        return keys
    }

    /// Runs async work to its end from a thread outside Swift's concurrency pool (the
    /// service's start, its SIGHUP thread).
    static func blocking<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
        let result = NIOLockedValueBox<Result<T, any Error>?>(nil)
        let done = DispatchSemaphore(value: 0)
        Task.detached {
            let outcome: Result<T, any Error>
            do { outcome = .success(try await body()) } catch let error { outcome = .failure(error) }
            result.withLockedValue { $0 = outcome }
            done.signal()
        }
        done.wait()
        switch result.withLockedValue({ $0 }) {
        case .success(let value)?: return value
        case .failure(let error)?: throw error
        case nil: throw HostError(.internalError, "the key set's task ended without a result")
        }
    }

    /// The principal of a bearer JWT, or why it is refused. `now` in seconds since 1970.
    public func verify(_ token: String, now: Double = Date().timeIntervalSince1970) -> Result<Principal, AuthenticationFailure> {
        let leeway = settings.leewaySeconds
        if let known = verified.withLockedValue({ $0[token] }) {
            if now - leeway < known.expires, (known.notBefore ?? 0) <= now + leeway { return .success(known.principal) }
        }
        func refuse(_ reason: AuthenticationFailure.Reason, _ text: String) -> Result<Principal, AuthenticationFailure> {
            .failure(AuthenticationFailure(reason: reason, description: text))
        }
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerBytes = Self.base64URL(parts[0]), let payloadBytes = Self.base64URL(parts[1]),
            let signature = Self.base64URL(parts[2]), let header = try? JSONParser.parse(headerBytes), let claims = try? JSONParser.parse(payloadBytes),
            claims.objectValue != nil
        else {
            return refuse(.malformed, "the bearer token is neither this service's token nor a JWT (three base64url parts: header.payload.signature, JSON header and claims)")
        }
        guard let issuerName = claims["iss"]?.stringValue else { return refuse(.unknownIssuer, "the token has no issuer (iss); this service trusts \(trustedList)") }
        guard let issuer = issuers[issuerName] else {
            return refuse(.unknownIssuer, "wrong issuer: the token's issuer '\(issuerName.prefix(200))' is not one this service trusts (\(trustedList))")
        }
        let algorithm = header["alg"]?.stringValue ?? ""
        let keyID = header["kid"]?.stringValue
        let candidates = (keys.withLockedValue { $0[issuerName] } ?? []).filter {
            $0.algorithm == algorithm && (keyID == nil || $0.id == nil || $0.id == keyID)
        }
        guard !candidates.isEmpty else {
            let refreshing = refreshOnDemand(issuer) ? " (its key set is being fetched again: retry in a moment)" : ""
            return refuse(
                .badSignature,
                "bad signature: the issuer '\(issuerName)' has no \(algorithm.isEmpty ? "" : "\(algorithm.prefix(20)) ")key\(keyID.map { " with kid '\($0.prefix(100))'" } ?? "") in its key set\(refreshing)")
        }
        let signingInput = Array(token.utf8.prefix(parts[0].utf8.count + 1 + parts[1].utf8.count))
        let verifies = candidates.contains { key in (try? key.verifier.verify(signature, signs: signingInput)) == true }
        guard verifies else {
            return refuse(.badSignature, "bad signature: the token's signature does not verify with the key set of its issuer '\(issuerName)'")
        }
        guard let expires = claims["exp"]?.doubleValue else { return refuse(.missingClaim, "the token has no expiry (exp); this service takes only tokens that expire") }
        if now - leeway >= expires {
            return refuse(.expired, "expired: the token expired at \(Self.timestamp(expires)) (\(Int((now - expires).rounded())) s ago; leeway \(Int(leeway)) s)")
        }
        let notBefore = claims["nbf"]?.doubleValue
        if let notBefore, notBefore > now + leeway {
            return refuse(.notYetValid, "not yet valid: the token is not valid before \(Self.timestamp(notBefore)) (in \(Int((notBefore - now).rounded())) s; leeway \(Int(leeway)) s)")
        }
        let audiences: [String] = claims["aud"]?.stringValue.map { [$0] } ?? claims["aud"]?.arrayValue?.compactMap(\.stringValue) ?? []
        guard audiences.contains(where: issuer.audiences.contains) else {
            let sent = audiences.isEmpty ? "no audience (aud)" : "audience \(audiences.prefix(4).map { "'\($0.prefix(200))'" }.joined(separator: ", "))"
            return refuse(.wrongAudience, "wrong audience: the token has \(sent), not this service (\(issuer.audiences.sorted().joined(separator: ", ")))")
        }
        guard let subject = claims["sub"]?.stringValue, !subject.isEmpty else { return refuse(.missingClaim, "the token has no subject (sub)") }
        var scopes = Set<String>()
        if let scope = claims["scope"]?.stringValue { scopes.formUnion(scope.split(separator: " ").map(String.init)) }
        if let list = claims["scp"]?.arrayValue { scopes.formUnion(list.compactMap(\.stringValue)) } else if let one = claims["scp"]?.stringValue {
            scopes.formUnion(one.split(separator: " ").map(String.init))
        }
        let principal = Principal.jwt(issuer: issuerName, subject: subject, scopes: scopes)
        verified.withLockedValue { remembered in
            if remembered.count >= Self.rememberedTokens { remembered.removeAll(keepingCapacity: true) }
            remembered[token] = (principal, expires, notBefore)
        }
        return .success(principal)
    }

    private var trustedList: String {
        issuers.isEmpty ? "no issuer is configured (serve.json authentication.issuers)" : "trusted: \(issuers.keys.sorted().joined(separator: ", "))"
    }

    static func timestamp(_ seconds: Double) -> String {
        Date(timeIntervalSince1970: seconds).formatted(.iso8601)
    }

    static func base64URL(_ text: Substring) -> [UInt8]? {
        guard !text.isEmpty, text.utf8.count <= 64 << 10 else { return nil }
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.utf8.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64).map(Array.init)
    }
}
