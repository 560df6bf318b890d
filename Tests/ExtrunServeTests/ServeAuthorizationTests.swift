import Crypto
import ExtrunHost
import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

@testable import ExtrunServe

/// An issuer made in the test: a P-256 key, its JWKS, and tokens it signs (ES256).
struct TestIssuer {
    let name: String
    let key = P256.Signing.PrivateKey()
    let keyID: String

    init(_ name: String, keyID: String = "k1") {
        self.name = name
        self.keyID = keyID
    }

    static func base64URL(_ bytes: some DataProtocol) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    var jwks: String {
        let raw = key.publicKey.rawRepresentation
        let x = Self.base64URL(raw.prefix(32))
        let y = Self.base64URL(raw.suffix(32))
        return #"{"keys": [{"kty": "EC", "crv": "P-256", "x": "\#(x)", "y": "\#(y)", "kid": "\#(keyID)", "alg": "ES256", "use": "sig"}]}"#
    }

    /// A token with these claims (`iss` this issuer's unless given), signed by `signer` (default: this issuer's key).
    func token(_ claims: [String: JSONValue], signer: P256.Signing.PrivateKey? = nil) throws -> String {
        var claims = claims
        if claims["iss"] == nil { claims["iss"] = .string(name) }
        let header = Self.base64URL(JSONWriter.bytes(["alg": "ES256", "typ": "JWT", "kid": .string(keyID)]))
        let payload = Self.base64URL(JSONWriter.bytes(.object(claims)))
        let input = "\(header).\(payload)"
        let signature = try (signer ?? key).signature(for: Data(input.utf8)).rawRepresentation
        return "\(input).\(Self.base64URL(signature))"
    }
}

/// Principals, bearer JWTs (ServeAuthentication), the access rules, rate limits and the
/// audit log, each on its own (the real service: ExtrunCLITests' ServeAuthTests).
@Suite("extrun serve: authorization", .serialized)
struct ServeAuthorizationTests {
    static func verifier(_ issuer: TestIssuer, audience: String = "https://extrun.test", leeway: Double = 30) async throws -> (BearerVerifier, TempDirectory) {
        let directory = try TempDirectory("jwks")
        let file = directory.url.appendingPathComponent("jwks.json")
        try Data(issuer.jwks.utf8).write(to: file)
        var settings = AuthenticationSettings()
        settings.issuers = [.init(issuer: issuer.name, audiences: [audience], jwks: .file(file.path))]
        settings.leewaySeconds = leeway
        return (try await BearerVerifier.load(settings, source: "serve.json"), directory)
    }

    @Test("Principal: the three forms, their names read back, and the patterns")
    func principals() {
        let peer = Principal.peer(uid: 1000)
        let jwt = Principal.jwt(issuer: "https://auth.example.com", subject: "alice", scopes: ["soup"])
        #expect(peer.name == "uid:1000" && Principal.tokenHolder.name == "tcp" && jwt.name == "jwt:https://auth.example.com#alice")
        #expect(Principal(name: "uid:1000") == peer && Principal(name: "tcp") == .tokenHolder)
        #expect(Principal(name: jwt.name)?.source == jwt.source && Principal(name: "jwt:#x") == nil && Principal(name: "root") == nil)
        #expect(peer.matches("uid:*") && !peer.matches("jwt:*") && peer.matches("*"))
        #expect(jwt.matches("jwt:https://auth.example.com#*") && jwt.matches("jwt:*") && !jwt.matches("jwt:https://other#*") && !jwt.matches("uid:*"))
        #expect(!Principal.tokenHolder.matches("uid:*") && Principal.tokenHolder.matches("tcp"))
    }

    @Test("A JWT of the issuer, for this audience, in its time: its subject with its scopes; remembered until it expires")
    func accepted() async throws {
        let issuer = TestIssuer("https://auth.example.com")
        let (verifier, directory) = try await Self.verifier(issuer)
        let now = Date().timeIntervalSince1970
        let token = try issuer.token([
            "sub": "alice", "aud": "https://extrun.test", "exp": .double(now + 60), "nbf": .double(now - 5), "scope": "soup admin",
        ])
        let principal = try verifier.verify(token, now: now).get()
        #expect(principal.name == "jwt:https://auth.example.com#alice" && principal.scopes == ["soup", "admin"])
        // An array audience holding ours; and the remembered token past its expiry is refused again.
        let array = try issuer.token(["sub": "bob", "aud": ["other", "https://extrun.test"], "exp": .double(now + 60)])
        #expect((try? verifier.verify(array, now: now).get())?.name == "jwt:https://auth.example.com#bob")
        guard case .failure(let late) = verifier.verify(token, now: now + 120) else {
            Issue.record("an expired remembered token was accepted")
            return
        }
        #expect(late.reason == .expired)
        _ = directory
    }

    @Test("Expired, not yet valid, wrong audience, wrong issuer, bad signature, no exp: each refused with its own description")
    func refused() async throws {
        let issuer = TestIssuer("https://auth.example.com")
        let (verifier, directory) = try await Self.verifier(issuer, leeway: 10)
        let now = Date().timeIntervalSince1970
        func failure(_ token: String) -> AuthenticationFailure? {
            if case .failure(let failure) = verifier.verify(token, now: now) { return failure }
            return nil
        }
        let aud: JSONValue = "https://extrun.test"
        let expired = failure(try issuer.token(["sub": "a", "aud": aud, "exp": .double(now - 11)]))
        #expect(expired?.reason == .expired && expired?.description.contains("expired") == true, "\(String(describing: expired))")
        // Within the leeway: accepted.
        #expect(failure(try issuer.token(["sub": "a", "aud": aud, "exp": .double(now - 5)])) == nil)
        let early = failure(try issuer.token(["sub": "a", "aud": aud, "exp": .double(now + 100), "nbf": .double(now + 60)]))
        #expect(early?.reason == .notYetValid)
        let audience = failure(try issuer.token(["sub": "a", "aud": "https://elsewhere", "exp": .double(now + 60)]))
        #expect(audience?.reason == .wrongAudience && audience?.description.contains("wrong audience") == true && audience?.description.contains("https://elsewhere") == true)
        let stranger = TestIssuer("https://evil.example.com")
        let foreign = failure(try stranger.token(["sub": "a", "aud": aud, "exp": .double(now + 60)]))
        #expect(foreign?.reason == .unknownIssuer && foreign?.description.contains("wrong issuer") == true)
        // The right iss and kid, signed by another key.
        let forged = failure(try issuer.token(["sub": "a", "aud": aud, "exp": .double(now + 60)], signer: P256.Signing.PrivateKey()))
        #expect(forged?.reason == .badSignature && forged?.description.contains("bad signature") == true)
        // A flipped claim after signing.
        let good = try issuer.token(["sub": "a", "aud": aud, "exp": .double(now + 60)])
        let parts = good.split(separator: ".")
        let tampered = "\(parts[0]).\(TestIssuer.base64URL(JSONWriter.bytes(["iss": .string(issuer.name), "sub": "root", "aud": aud, "exp": .double(now + 60)]))).\(parts[2])"
        #expect(failure(tampered)?.reason == .badSignature)
        #expect(failure(try issuer.token(["sub": "a", "aud": aud]))?.reason == .missingClaim)
        #expect(failure("not-a-jwt")?.reason == .malformed)
        // alg none is never a key's algorithm.
        let none = "\(TestIssuer.base64URL(Array(#"{"alg":"none"}"#.utf8))).\(parts[1])."
        #expect(failure(none) != nil)
        _ = directory
    }

    @Test("ServeGate: the token file's token, a JWT, none; the 401 challenge and the metadata document")
    func gate() async throws {
        let issuer = TestIssuer("https://auth.example.com")
        let (verifier, directory) = try await Self.verifier(issuer, audience: "https://extrun.test/api")
        var policy = ServePolicy()
        policy.verifier = verifier
        let gate = ServeGate(policy: policy, logger: .init(label: "test"))
        let token = Array("s3cret-token-0123456789".utf8)
        #expect((try? gate.authenticate(authorization: "Bearer s3cret-token-0123456789", token: token).get()) == .tokenHolder)
        #expect((try? gate.authenticate(authorization: "bearer s3cret-token-0123456789", token: token).get()) == .tokenHolder)
        let now = Date().timeIntervalSince1970
        let jwt = try issuer.token(["sub": "alice", "aud": "https://extrun.test/api", "exp": .double(now + 60)])
        #expect((try? gate.authenticate(authorization: "Bearer \(jwt)", token: token).get())?.name == "jwt:https://auth.example.com#alice")
        guard case .failure(let missing) = gate.authenticate(authorization: nil, token: token) else {
            Issue.record("no credentials were accepted")
            return
        }
        #expect(missing.reason == .missing && missing.error.kind == .invalidIntent)
        #expect(gate.challenge(missing, host: "127.0.0.1:8080") == #"Bearer resource_metadata="http://127.0.0.1:8080/.well-known/oauth-protected-resource""#)
        guard case .failure(let wrong) = gate.authenticate(authorization: "Bearer \(jwt)x", token: token) else {
            Issue.record("a broken JWT was accepted")
            return
        }
        let challenge = gate.challenge(wrong, host: "h")
        #expect(challenge.contains(#"error="invalid_token""#) && challenge.contains("error_description=\"bad signature"), "\(challenge)")
        let metadata = gate.resourceMetadata(host: "h")
        #expect(metadata["authorization_servers"] == ["https://auth.example.com"] && metadata["bearer_methods_supported"] == ["header"])
        #expect(ServeGate.isMetadataPath("/.well-known/oauth-protected-resource") && ServeGate.isMetadataPath("/.well-known/oauth-protected-resource/api"))
        #expect(!ServeGate.isMetadataPath("/.well-known/oauth-protected-resourcex"))
        gate.close()
        _ = directory
    }

    @Test("The metadata URL puts the resource's path after the well-known one (RFC 9728 §3.1)")
    func metadataURL() throws {
        let policy = try ServePolicy.parse(Array(#"{"authentication": {"resource": "https://extrun.example.com:8443/api"}}"#.utf8), source: "serve.json")
        let gate = ServeGate(policy: policy, logger: .init(label: "test"))
        #expect(gate.metadataURL(host: "ignored") == "https://extrun.example.com:8443/.well-known/oauth-protected-resource/api")
        #expect(gate.resourceMetadata(host: nil)["resource"] == "https://extrun.example.com:8443/api")
        gate.close()
    }

    @Test("access rules: deny by default once there are any; principals, patterns, scopes, intents and plugins; the scopes that would allow")
    func access() throws {
        let policy = try ServePolicy.parse(
            Array(
                #"""
                {"access": [
                  {"principals": ["uid:*"], "intents": ["MakeUppercase"]},
                  {"principals": ["jwt:https://auth.example.com#*"], "scopes": ["soup"], "intents": ["OrderSoup"]},
                  {"principals": ["jwt:https://auth.example.com#admin"], "plugins": ["*"]},
                  {"scopes": ["files"], "plugins": ["com.example.renamefiles"]}
                ]}
                """#.utf8), source: "serve.json")
        let gate = ServeGate(policy: policy, logger: .init(label: "test"))
        let peer = Principal.peer(uid: 1000)
        #expect(gate.authorize(peer, intent: "MakeUppercase", plugin: "p") == nil)
        let denied = gate.authorize(peer, intent: "OrderSoup", plugin: "com.example.soupchef")
        #expect(denied?.error.kind == .notPermitted && denied?.error.details["principal"] == "uid:1000" && denied?.error.details["intent"] == "OrderSoup")
        #expect(denied?.error.message.contains("uid:1000") == true && denied?.error.message.contains("OrderSoup") == true)
        let alice = Principal.jwt(issuer: "https://auth.example.com", subject: "alice", scopes: ["soup"])
        let bob = Principal.jwt(issuer: "https://auth.example.com", subject: "bob")
        #expect(gate.authorize(alice, intent: "OrderSoup", plugin: nil) == nil)
        let bobDenied = gate.authorize(bob, intent: "OrderSoup", plugin: nil)
        #expect(bobDenied?.scopes == ["soup"])
        #expect(gate.insufficientScopeChallenge(try #require(bobDenied), host: "h")?.contains(#"error="insufficient_scope", scope="soup""#) == true)
        #expect(gate.authorize(.jwt(issuer: "https://auth.example.com", subject: "admin"), intent: nil, plugin: nil) == nil)
        #expect(gate.authorize(alice, intent: nil, plugin: nil) != nil)
        #expect(gate.authorize(.tokenHolder, intent: "MakeUppercase", plugin: nil) != nil)
        #expect(gate.authorize(.jwt(issuer: "x", subject: "y", scopes: ["files"]), intent: "Rename", plugin: "com.example.renamefiles") == nil)
        // Without rules: every call.
        #expect(ServeGate(policy: ServePolicy(), logger: .init(label: "t")).authorize(bob, intent: "OrderSoup", plugin: nil) == nil)
        for bad in [#"{"access": [{"intents": ["*"]}]}"#, #"{"access": [{"principals": ["alice"], "intents": ["*"]}]}"#, #"{"access": [{"principals": ["*"]}]}"#] {
            #expect(throws: HostError.self, "\(bad)") { try ServePolicy.parse(Array(bad.utf8), source: "serve.json") }
        }
        gate.close()
    }

    @Test("rate limits: a bucket per principal (burst, then perSecond), the retry-after rounded up; off by default")
    func rateLimits() throws {
        let settings = try ServePolicy.parse(
            Array(#"{"rateLimits": {"perSecond": 2, "burst": 3, "principals": {"uid:7": {"perSecond": 0.25, "burst": 1}}}}"#.utf8), source: "s"
        ).rateLimits
        let limits = try #require(settings)
        let limiter = RateLimiter()
        let start: UInt64 = 1_000_000_000
        let peer = Principal.peer(uid: 1000)
        for _ in 0..<3 { #expect(limiter.take(peer, settings: limits, now: start) == nil) }
        let over = try #require(limiter.take(peer, settings: limits, now: start))
        #expect(over.retryAfterSeconds == 1 && over.error.kind == .overloaded && over.error.details["reason"] == "rateLimit")
        #expect(over.error.details["perSecond"]?.doubleValue == 2 && over.error.details["burst"] == 3 && over.error.details["retryAfterMs"] == 500)
        // Half a second later one call came back.
        #expect(limiter.take(peer, settings: limits, now: start + 500_000_000) == nil)
        // Another principal has its own bucket; uid:7 its own limit (1 call per 4 s).
        #expect(limiter.take(.peer(uid: 1001), settings: limits, now: start) == nil)
        #expect(limiter.take(.peer(uid: 7), settings: limits, now: start) == nil)
        #expect(limiter.take(.peer(uid: 7), settings: limits, now: start)?.retryAfterSeconds == 4)
        #expect(limiter.take(.peer(uid: 7), settings: limits, now: start + 1_500_000_000)?.retryAfterSeconds == 3)
        #expect(ServePolicy().rateLimits == nil)
        #expect(throws: HostError.self) { try ServePolicy.parse(Array(#"{"rateLimits": {"perSecond": 0}}"#.utf8), source: "s") }
        #expect(ServeResponse.status(refusal: over.error, exitStatus: ErrorKind.overloaded.exitCode) == 429)
    }

    @Test("The audit log: a line per record, no argument value, rotated by size keeping N files; nothing left after close")
    func auditRotation() throws {
        let directory = try TempDirectory("audit")
        let path = directory.url.appendingPathComponent("audit.jsonl").path
        let log = AuditLog(settings: AuditSettings(path: path, maxBytes: 4096, keep: 2)) { message in Issue.record("\(message)") }
        for index in 0..<100 {
            log.record(
                AuditRecord(
                    principal: "uid:\(index)", transport: "unix", call: "handle", intent: "MakeUppercase", plugin: "com.example.uppercase", outcome: "success",
                    status: 200, durationMs: 1.5, run: "run-\(index)"))
        }
        log.close()
        let files = try FileManager.default.contentsOfDirectory(atPath: directory.url.path).sorted()
        #expect(files == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"], "\(files)")
        var lines: [JSONValue] = []
        for file in files {
            let data = try #require(FileManager.default.contents(atPath: directory.url.appendingPathComponent(file).path))
            #expect(data.count <= 4096, "\(file): \(data.count) bytes")
            for line in data.split(separator: 0x0A) { lines.append(try JSONParser.parse(Array(line))) }
        }
        // The newest lines are kept, in order, each whole.
        #expect(lines.contains { $0["principal"] == "uid:99" && $0["run"] == "run-99" && $0["intent"] == "MakeUppercase" && $0["durationMs"] == 1.5 })
        #expect(!lines.contains { $0["principal"] == "uid:0" })
        let info = try FileManager.default.attributesOfItem(atPath: path)
        #expect((info[.posixPermissions] as? Int) == 0o600)
    }
}

extension AccessRefusal: Equatable {
    public static func == (lhs: AccessRefusal, rhs: AccessRefusal) -> Bool { lhs.error == rhs.error && lhs.scopes == rhs.scopes }
}

extension RateLimitRefusal: Equatable {
    public static func == (lhs: RateLimitRefusal, rhs: RateLimitRefusal) -> Bool { lhs.error == rhs.error && lhs.retryAfterSeconds == rhs.retryAfterSeconds }
}
