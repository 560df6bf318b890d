import ExtrunHost
import ExtrunProtocol
import Foundation
import JWTKit
import NIOConcurrencyHelpers

/// serve.json's `authentication` (docs/serve.md, "Authentication"): the issuers whose bearer
/// JWTs the service's TCP listener accepts, besides the `--token-file` token.
///
///     "authentication": {
///       "resource": "https://extrun.example.com",
///       "issuers": [{"issuer": "https://auth.example.com", "audience": "https://extrun.example.com",
///                    "jwksFile": "/etc/extrun/auth-example-jwks.json"}],
///       "leewaySeconds": 30,
///       "scopesSupported": ["intents"]
///     }
public struct AuthenticationSettings: Sendable, Equatable {
    public struct Issuer: Sendable, Equatable {
        /// The `iss` a token must carry, exactly.
        public var issuer: String
        /// The `aud` values accepted (a token's `aud` must hold one); default: `resource`.
        public var audiences: [String]
        /// The issuer's JSON Web Key Set, a file (re-read on SIGHUP).
        public var jwksFile: String
    }

    /// This service's resource identifier (RFC 9728 `resource`, RFC 8707): what clients ask
    /// tokens for. Without it: `http://HOST` from the request's Host header.
    public var resource: String?
    public var issuers: [Issuer] = []
    /// Clock skew allowed on `exp` and `nbf`.
    public var leewaySeconds: Double = 30
    /// The metadata's `scopes_supported`; default: the scopes the access rules name.
    public var scopesSupported: [String]?

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
                        throw fail(path, "expected {\"issuer\": URL, \"audience\": URL or [URL], \"jwksFile\": PATH}")
                    }
                    if let unknown = fields.keys.sorted().first(where: { !["issuer", "audience", "jwksFile", "jwksURL"].contains($0) }) {
                        throw fail("\(path).\(unknown)", "unknown field (the fields: issuer, audience, jwksFile)")
                    }
                    guard let issuer = fields["issuer"]?.stringValue, !issuer.isEmpty else { throw fail("\(path).issuer", "expected the issuer's identifier (its `iss`)") }
                    if fields["jwksURL"] != nil {
                        throw fail(
                            "\(path).jwksURL",
                            "the service does not fetch key sets over the network; save the issuer's JWKS in a file (e.g. curl -o FILE URL from a timer), name it in jwksFile and send SIGHUP when it changes")
                    }
                    guard var file = fields["jwksFile"]?.stringValue, !file.isEmpty else { throw fail("\(path).jwksFile", "expected the path of the issuer's JWKS (a file)") }
                    if !file.hasPrefix("/") {
                        // Relative to serve.json's folder.
                        file = URL(fileURLWithPath: source).deletingLastPathComponent().appendingPathComponent(file).path
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
                    settings.issuers.append(Issuer(issuer: issuer, audiences: audiences, jwksFile: file))
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
        var keys: [Key]
    }

    public let settings: AuthenticationSettings
    let issuers: [String: TrustedIssuer]
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
        for (index, issuer) in settings.issuers.enumerated() {
            let field = "authentication.issuers[\(index)].jwksFile"
            guard let data = FileManager.default.contents(atPath: issuer.jwksFile) else {
                throw HostError(
                    .configurationError, "\(source): \(field): cannot read \(issuer.jwksFile)",
                    details: ["file": .string(source), "field": .string(field)])
            }
            let keys: [Key]
            do {
                keys = try await keysOf(jwks: data)
            } catch {
                throw HostError(
                    .configurationError, "\(source): \(field): \(issuer.jwksFile) is not a usable JSON Web Key Set: \(error)",
                    details: ["file": .string(source), "field": .string(field)])
            }
            guard !keys.isEmpty else {
                throw HostError(
                    .configurationError, "\(source): \(field): \(issuer.jwksFile) holds no signing key", details: ["file": .string(source), "field": .string(field)])
            }
            let audiences = issuer.audiences.isEmpty ? [settings.resource ?? ""] : issuer.audiences
            issuers[issuer.issuer] = TrustedIssuer(issuer: issuer.issuer, audiences: Set(audiences), keys: keys)
        }
        return BearerVerifier(settings: settings, issuers: issuers)
    }

    init(settings: AuthenticationSettings, issuers: [String: TrustedIssuer]) {
        self.settings = settings
        self.issuers = issuers
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
        let candidates = issuer.keys.filter { $0.algorithm == algorithm && (keyID == nil || $0.id == nil || $0.id == keyID) }
        guard !candidates.isEmpty else {
            return refuse(
                .badSignature,
                "bad signature: the issuer '\(issuerName)' has no \(algorithm.isEmpty ? "" : "\(algorithm.prefix(20)) ")key\(keyID.map { " with kid '\($0.prefix(100))'" } ?? "") in its key set")
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
