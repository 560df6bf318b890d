import Crypto
import ExtrunProtocol
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// An issuer made in the test: a P-256 key, its JWKS, tokens it signs (ES256).
struct ServeTestIssuer {
    let name: String
    let key = P256.Signing.PrivateKey()
    var keyID = "k1"

    static func base64URL(_ bytes: some DataProtocol) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    var jwks: String {
        let raw = key.publicKey.rawRepresentation
        return #"{"keys": [{"kty": "EC", "crv": "P-256", "x": "\#(Self.base64URL(raw.prefix(32)))", "y": "\#(Self.base64URL(raw.suffix(32)))", "kid": "\#(keyID)", "alg": "ES256"}]}"#
    }

    func token(subject: String, audience: String = ServeAuthTests.resource, expiresIn: Double = 300, scope: String? = nil, issuer: String? = nil,
               signer: P256.Signing.PrivateKey? = nil) throws -> String {
        let now = Date().timeIntervalSince1970
        var claims: [String: JSONValue] = [
            "iss": .string(issuer ?? name), "sub": .string(subject), "aud": .string(audience), "exp": .double(now + expiresIn), "iat": .double(now),
        ]
        if let scope { claims["scope"] = .string(scope) }
        let input = "\(Self.base64URL(JSONWriter.bytes(["alg": "ES256", "typ": "JWT", "kid": .string(keyID)]))).\(Self.base64URL(JSONWriter.bytes(.object(claims))))"
        let signature = try (signer ?? key).signature(for: Data(input.utf8)).rawRepresentation
        return "\(input).\(Self.base64URL(signature))"
    }
}

/// `extrun serve`'s authorization with the real service over TCP and the Unix socket, driven
/// by curl: bearer JWTs of a configured issuer (accepted, expired, wrong audience, wrong
/// issuer, bad signature), the 401 challenge and the protected resource metadata, the
/// access rules (403), a principal's rate limit (429 with Retry-After) and the audit log
/// (its lines, their rotation, no argument value in them). Each test stops the service and
/// checks that no process and no file of its run is left.
@Suite("extrun serve: authorization over HTTP", .serialized)
struct ServeAuthTests {
    static let resource = "https://extrun.test/api"
    static let issuerName = "https://auth.extrun.test"
    let cli: CLI

    init() throws {
        cli = try CLI()
    }

    struct Answer {
        var status: Int
        var headers: [String: String]
        var body: JSONValue?
        var text: String
    }

    /// One request with curl: the status, the headers (names lowercased) and the body.
    func curl(_ arguments: [String], directory: TempDirectory) throws -> Answer {
        let headerFile = directory.url.appendingPathComponent("headers-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: headerFile) }
        let result = try ProgramRun.program(
            "/usr/bin/curl", ["-sS", "--max-time", "30", "-D", headerFile.path, "-w", "\n%{http_code}"] + arguments)
        var lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        let status = Int(lines.popLast() ?? "") ?? 0
        let text = lines.joined(separator: "\n")
        var headers: [String: String] = [:]
        for line in ((try? String(contentsOf: headerFile, encoding: .utf8)) ?? "").split(separator: "\r\n") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return Answer(status: status, headers: headers, body: try? JSONParser.parse(Array(text.utf8)), text: text + result.stderr)
    }

    func handle(port: Int, bearer: String?, intent: String = "MakeUppercase", text: String = "hello", directory: TempDirectory) throws -> Answer {
        var arguments = ["-X", "POST", "http://127.0.0.1:\(port)/v1/handle", "-H", "content-type: application/json"]
        if let bearer { arguments += ["-H", "Authorization: Bearer \(bearer)"] }
        let body: String = intent == "Sleep" ? #"{"intent": "Sleep", "parameters": {"seconds": 0}}"# : #"{"intent": "\#(intent)", "parameters": {"text": "\#(text)"}}"#
        return try curl(arguments + ["--data-binary", body], directory: directory)
    }

    /// A service with a token file, --listen on a free port, and serve.json `policy` (with
    /// `JWKS` replaced by the key set's path and `AUDIT` by the audit log's).
    func start(_ policy: String, issuer: ServeTestIssuer, directory: TempDirectory) throws -> (RunningService, Int, String) {
        let token = "s3cret-token-\(UUID().uuidString)"
        let tokenFile = try directory.write("token", token, mode: 0o600)
        let jwks = try directory.write("jwks.json", issuer.jwks)
        let port = try ServeListenerTests.freePort()
        let text = policy.replacingOccurrences(of: "JWKS", with: jwks.path)
            .replacingOccurrences(of: "AUDIT", with: directory.url.appendingPathComponent("audit.jsonl").path)
        let service = try RunningService(cli: cli, policy: text, arguments: ["--listen", "127.0.0.1:\(port)", "--token-file", tokenFile.path])
        return (service, port, token)
    }

    static let authentication = #""authentication": {"resource": "https://extrun.test/api", "issuers": [{"issuer": "https://auth.extrun.test", "jwksFile": "JWKS"}], "scopesSupported": ["intents"]}"#

    @Test("Bearer JWTs over TCP: accepted; expired, wrong audience, wrong issuer, bad signature refused 401 with their WWW-Authenticate; the metadata document; the token file still works")
    func bearerTokens() throws {
        let directory = try TempDirectory("serve-auth")
        let issuer = ServeTestIssuer(name: Self.issuerName)
        let (service, port, token) = try start("{\(Self.authentication)}", issuer: issuer, directory: directory)
        defer { service.stop() }

        // No credentials: 401 and the challenge naming the metadata, no error.
        let none = try handle(port: port, bearer: nil, directory: directory)
        let metadataURL = "https://extrun.test/.well-known/oauth-protected-resource/api"
        #expect(none.status == 401 && none.body?["error"]?["kind"] == "invalidIntent", "\(none.text)")
        #expect(none.headers["www-authenticate"] == #"Bearer resource_metadata="\#(metadataURL)", scope="intents""#, "\(none.headers)")

        // The metadata, without credentials, at both well-known paths.
        for path in ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/api"] {
            let metadata = try curl(["http://127.0.0.1:\(port)\(path)"], directory: directory)
            #expect(metadata.status == 200, "\(metadata.text)")
            #expect(metadata.body?["resource"] == .string(Self.resource) && metadata.body?["authorization_servers"] == [.string(Self.issuerName)])
            #expect(metadata.body?["bearer_methods_supported"] == ["header"] && metadata.body?["scopes_supported"] == ["intents"])
        }

        // A good token: the report.
        let good = try handle(port: port, bearer: try issuer.token(subject: "alice"), directory: directory)
        #expect(good.status == 200 && good.body?["report"]?["response"]?["properties"]?["result"] == "HELLO", "\(good.text)")
        // The token file's token as before.
        let holder = try handle(port: port, bearer: token, directory: directory)
        #expect(holder.status == 200, "\(holder.text)")

        // Refused tokens: 401, invalid_token and each its own description.
        let refusals: [(String, String)] = [
            (try issuer.token(subject: "alice", expiresIn: -120), "expired"),
            (try issuer.token(subject: "alice", audience: "https://elsewhere.test"), "wrong audience"),
            (try issuer.token(subject: "alice", issuer: "https://evil.test"), "wrong issuer"),
            (try issuer.token(subject: "alice", signer: P256.Signing.PrivateKey()), "bad signature"),
        ]
        for (bad, why) in refusals {
            let answer = try handle(port: port, bearer: bad, directory: directory)
            let challenge = answer.headers["www-authenticate"] ?? ""
            #expect(answer.status == 401, "\(why): \(answer.text)")
            #expect(challenge.hasPrefix(#"Bearer resource_metadata="\#(metadataURL)""#) && challenge.contains(#"error="invalid_token""#), "\(why): \(challenge)")
            #expect(challenge.contains(#"error_description="\#(why)"#), "\(why): \(challenge)")
            #expect(answer.body?["error"]?["message"]?.stringValue?.hasPrefix(why) == true, "\(why): \(answer.text)")
        }
    }

    @Test("access rules: a JWT subject may call only its intents (403 notPermitted naming it and the intent, insufficient_scope); a uid peer as its rule says")
    func accessRules() throws {
        let directory = try TempDirectory("serve-auth")
        let issuer = ServeTestIssuer(name: Self.issuerName)
        let policy = """
            {\(Self.authentication),
             "access": [{"principals": ["jwt:\(Self.issuerName)#*"], "intents": ["MakeUppercase"]},
                        {"principals": ["jwt:\(Self.issuerName)#*"], "scopes": ["sleep"], "intents": ["Sleep"]},
                        {"principals": ["uid:*"], "intents": ["Sleep"]}]}
            """
        let (service, port, token) = try start(policy, issuer: issuer, directory: directory)
        defer { service.stop() }
        let alice = try issuer.token(subject: "alice")
        #expect(try handle(port: port, bearer: alice, directory: directory).status == 200)
        let denied = try handle(port: port, bearer: alice, intent: "Sleep", directory: directory)
        let error = denied.body?["report"]?["error"]
        #expect(denied.status == 403 && error?["kind"] == "notPermitted", "\(denied.text)")
        #expect(error?["principal"] == .string("jwt:\(Self.issuerName)#alice") && error?["intent"] == "Sleep", "\(denied.text)")
        #expect(denied.headers["www-authenticate"]?.contains(#"error="insufficient_scope", scope="sleep""#) == true, "\(denied.headers)")
        let scoped = try handle(port: port, bearer: try issuer.token(subject: "alice", scope: "sleep"), intent: "Sleep", directory: directory)
        #expect(scoped.status == 200, "\(scoped.text)")
        // The token file's holders are named by no rule: denied.
        let holder = try handle(port: port, bearer: token, directory: directory)
        #expect(holder.status == 403 && holder.body?["report"]?["error"]?["principal"] == "tcp", "\(holder.text)")
        // The Unix socket's peer: uid:N, allowed Sleep only.
        let socketArguments = ["--unix-socket", service.socket, "-X", "POST", "http://x/v1/handle", "-H", "content-type: application/json", "--data-binary"]
        let peerSleep = try curl(socketArguments + [#"{"intent": "Sleep", "parameters": {"seconds": 0}}"#], directory: directory)
        #expect(peerSleep.status == 200, "\(peerSleep.text)")
        let peerUpper = try curl(socketArguments + [#"{"intent": "MakeUppercase", "parameters": {"text": "x"}}"#], directory: directory)
        #expect(peerUpper.status == 403 && peerUpper.body?["report"]?["error"]?["principal"] == .string("uid:\(getuid())"), "\(peerUpper.text)")
    }

    @Test("rate limits: a principal over its bucket gets 429 with Retry-After and the numbers; another principal is not held; audit lines for all, rotated, without argument values")
    func rateLimitsAndAudit() throws {
        let directory = try TempDirectory("serve-auth")
        let issuer = ServeTestIssuer(name: Self.issuerName)
        let policy = """
            {\(Self.authentication),
             "rateLimits": {"principals": {"jwt:\(Self.issuerName)#bot": {"perSecond": 0.05, "burst": 2}}},
             "audit": {"path": "AUDIT", "maxBytes": 4096, "keep": 2}}
            """
        let (service, port, _) = try start(policy, issuer: issuer, directory: directory)
        let bot = try issuer.token(subject: "bot")
        let secret = "argument-value-\(UUID().uuidString.prefix(8))"
        for _ in 0..<2 { #expect(try handle(port: port, bearer: bot, text: secret, directory: directory).status == 200) }
        let limited = try handle(port: port, bearer: bot, text: secret, directory: directory)
        let error = limited.body?["report"]?["error"]
        #expect(limited.status == 429 && error?["kind"] == "overloaded" && error?["reason"] == "rateLimit", "\(limited.text)")
        #expect(error?["perSecond"]?.doubleValue == 0.05 && error?["burst"] == 2, "\(limited.text)")
        // 20 s a call: the wait, rounded up, is at most 20 s (less when the calls before took long).
        let retry = Int(limited.headers["retry-after"] ?? "") ?? 0
        let retryMs = error?["retryAfterMs"]?.intValue ?? 0
        #expect((1...20).contains(retry) && Int64(retry - 1) * 1000 < retryMs && retryMs <= Int64(retry) * 1000, "Retry-After: \(limited.headers), \(limited.text)")
        // Another principal is not held by bot's bucket.
        #expect(try handle(port: port, bearer: try issuer.token(subject: "alice"), text: secret, directory: directory).status == 200)
        // Enough refused requests to rotate the 4 KiB log twice.
        for _ in 0..<40 { _ = try handle(port: port, bearer: nil, text: secret, directory: directory) }
        service.stop()

        let files = try FileManager.default.contentsOfDirectory(atPath: directory.url.path).filter { $0.hasPrefix("audit.jsonl") }.sorted()
        #expect(files == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"], "\(files)")
        var lines: [JSONValue] = []
        for file in files {
            let data = try #require(FileManager.default.contents(atPath: directory.url.appendingPathComponent(file).path))
            #expect(data.count <= 4096 && !String(decoding: data, as: UTF8.self).contains(secret), "\(file)")
            for line in data.split(separator: 0x0A) { lines.append(try JSONParser.parse(Array(line))) }
        }
        #expect(lines.allSatisfy { $0["time"]?.stringValue != nil && $0["principal"]?.stringValue != nil && $0["durationMs"]?.doubleValue != nil })
        #expect(lines.contains { $0["principal"] == "none" && $0["status"] == 401 && $0["reason"] == "missing" })
        let log = service.logText
        #expect(!log.contains(secret), "the service's log holds an argument value")
    }

    @Test("A key set from a URL: fetched at start (a start fails when it cannot be), its tokens accepted; a key rotated in is fetched again when a token names it")
    func keySetFromURL() throws {
        let directory = try TempDirectory("serve-auth")
        let web = try directory.directory("web")
        let first = ServeTestIssuer(name: Self.issuerName)
        try Data(first.jwks.utf8).write(to: web.appendingPathComponent("jwks.json"))
        let webPort = try ServeListenerTests.freePort()
        let policy = #"{"authentication": {"resource": "\#(Self.resource)", "issuers": [{"issuer": "\#(Self.issuerName)", "jwksURL": "http://127.0.0.1:\#(webPort)/jwks.json"}]}}"#

        // Nobody serves the URL yet: the start fails, naming the field.
        let config = try directory.write("serve.json", policy, mode: 0o600)
        let failed = try cli.run(["serve", "--socket", directory.url.appendingPathComponent("x.sock").path, "--config", config.path])
        #expect(failed.status == 11 && failed.stderr.contains("jwksURL"), "\(failed)")

        let server = Process()
        server.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        // python3 -m http.server, ending itself when this process goes (its parent changes):
        // a test runner killed mid-test leaves no web server behind.
        let serveUntilOrphaned = """
            import os, runpy, sys, threading, time
            parent = os.getppid()
            def watch():
                while os.getppid() == parent:
                    time.sleep(0.2)
                os._exit(0)
            threading.Thread(target=watch, daemon=True).start()
            sys.argv = ["http.server"] + sys.argv[1:]
            runpy.run_module("http.server", run_name="__main__")
            """
        server.arguments = ["-c", serveUntilOrphaned, String(webPort), "--bind", "127.0.0.1", "--directory", web.path]
        server.standardOutput = FileHandle.nullDevice
        server.standardError = FileHandle.nullDevice
        try server.run()
        defer {
            // SIGKILL: the test runner's children may inherit SIGTERM ignored.
            kill(server.processIdentifier, SIGKILL)
            server.waitUntilExit()
            #expect(!ServeProcesses.isAlive(server.processIdentifier), "the key set's web server is left")
        }
        var up = false
        for _ in 0..<100 where !up {
            up = (try? curl(["http://127.0.0.1:\(webPort)/jwks.json"], directory: directory))?.status == 200
            if !up { usleep(50_000) }
        }
        #expect(up, "python3 -m http.server did not answer")

        let (service, port, _) = try start(policy, issuer: first, directory: directory)
        defer { service.stop() }
        #expect(try handle(port: port, bearer: try first.token(subject: "alice"), directory: directory).status == 200)

        // The issuer rotates to a new key (kid k2): its first token makes the service fetch the set again.
        var second = ServeTestIssuer(name: Self.issuerName)
        second.keyID = "k2"
        try Data(second.jwks.utf8).write(to: web.appendingPathComponent("jwks.json"))
        let rotated = try second.token(subject: "alice")
        var answer = try handle(port: port, bearer: rotated, directory: directory)
        let deadline = Date().addingTimeInterval(10)
        while answer.status != 200, Date() < deadline {
            #expect(answer.status == 401 && answer.headers["www-authenticate"]?.contains("being fetched again") == true, "\(answer.text)")
            usleep(100_000)
            answer = try handle(port: port, bearer: rotated, directory: directory)
        }
        #expect(answer.status == 200, "the rotated key was not fetched: \(answer.text)")
    }

    @Test("SIGHUP re-reads a key set file: the rotated key's tokens are accepted after it, the old key's refused; a key set that does not load keeps the running one")
    func keySetFileReloaded() throws {
        let directory = try TempDirectory("serve-auth")
        let first = ServeTestIssuer(name: Self.issuerName)
        let (service, port, _) = try start("{\(Self.authentication)}", issuer: first, directory: directory)
        defer { service.stop() }
        #expect(try handle(port: port, bearer: try first.token(subject: "alice"), directory: directory).status == 200)
        var second = ServeTestIssuer(name: Self.issuerName)
        second.keyID = "k2"
        #expect(try handle(port: port, bearer: try second.token(subject: "alice"), directory: directory).status == 401)

        // A broken file and SIGHUP: logged, the running keys kept.
        let jwks = directory.url.appendingPathComponent("jwks.json")
        try Data("not json".utf8).write(to: jwks)
        kill(service.process.processIdentifier, SIGHUP)
        var logged = false
        for _ in 0..<100 where !logged {
            logged = service.logText.contains("SIGHUP: the policy was not changed")
            if !logged { usleep(50_000) }
        }
        #expect(logged, "\(service.logText.suffix(2000))")
        #expect(try handle(port: port, bearer: try first.token(subject: "alice"), directory: directory).status == 200)

        // The rotated set and SIGHUP: the new key's tokens in, the old one's out.
        try Data(second.jwks.utf8).write(to: jwks)
        kill(service.process.processIdentifier, SIGHUP)
        let rotated = try second.token(subject: "alice")
        var status = 0
        let deadline = Date().addingTimeInterval(10)
        while status != 200, Date() < deadline {
            status = try handle(port: port, bearer: rotated, directory: directory).status
            if status != 200 { usleep(100_000) }
        }
        #expect(status == 200)
        let old = try handle(port: port, bearer: try first.token(subject: "bob"), directory: directory)
        #expect(old.status == 401 && old.headers["www-authenticate"]?.contains("bad signature") == true, "\(old.text)")
    }

    @Test("An interactive run over TCP answers only its principal: another JWT subject and the token's holders get 404 as for an unknown run")
    func promptsAnswerTheirPrincipal() throws {
        let directory = try TempDirectory("serve-auth")
        let issuer = ServeTestIssuer(name: Self.issuerName)
        let (service, port, token) = try start("{\(Self.authentication)}", issuer: issuer, directory: directory)
        defer { service.stop() }
        let alice = try issuer.token(subject: "alice")
        let events = directory.url.appendingPathComponent("events")
        let stream = Process()
        stream.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        stream.arguments = [
            "-sS", "-N", "--max-time", "60", "-o", events.path, "-X", "POST", "http://127.0.0.1:\(port)/v1/handle?interactive=true",
            "-H", "Authorization: Bearer \(alice)", "--data-binary", #"{"intent": "MakeUppercase", "parameters": {}}"#,
        ]
        stream.standardOutput = FileHandle.nullDevice
        stream.standardError = FileHandle.nullDevice
        try stream.run()
        defer {
            if stream.isRunning { kill(stream.processIdentifier, SIGKILL) }
            stream.waitUntilExit()
        }
        var prompt: JSONValue?
        var text = ""
        // As long as curl's --max-time: a loaded machine may take long to start the plugin.
        let deadline = Date().addingTimeInterval(60)
        while prompt == nil, Date() < deadline {
            let running = stream.isRunning
            text = (try? String(contentsOf: events, encoding: .utf8)) ?? ""
            prompt = text.split(separator: "\n").compactMap { try? JSONParser.parse(Array($0.utf8)) }.first { $0["event"] == "prompt" }
            if prompt == nil {
                if !running { break }  // curl has ended: what it wrote is all there is.
                usleep(50_000)
            }
        }
        let event = try #require(prompt, "no prompt event; the stream said: \(text.prefix(2000)); the service's log: \(service.logText.suffix(2000))")
        let run = try #require(event["run"]?.stringValue)
        let body = JSONWriter.bytes(["prompt": event["prompt"] ?? .null, "answer": "mine"])
        func answer(_ bearer: String) throws -> Answer {
            try curl(
                ["-X", "POST", "http://127.0.0.1:\(port)/v1/runs/\(run)/answers", "-H", "Authorization: Bearer \(bearer)", "--data-binary", String(decoding: body, as: UTF8.self)],
                directory: directory)
        }
        let bob = try answer(try issuer.token(subject: "bob"))
        #expect(bob.status == 404 && bob.body?["error"]?["kind"] == "notFound", "another subject answered: \(bob.text)")
        let holder = try answer(token)
        #expect(holder.status == 404, "the token's holder answered: \(holder.text)")
        let own = try answer(alice)
        #expect(own.status == 200, "\(own.text)")
        stream.waitUntilExit()
        let report = ((try? String(contentsOf: events, encoding: .utf8)) ?? "").split(separator: "\n").compactMap { try? JSONParser.parse(Array($0.utf8)) }
            .first { $0["event"] == "report" }
        #expect(report?["report"]?["response"]?["properties"]?["result"] == "MINE", "\(String(describing: report))")
    }

    @Test("The audit log keeps a run's principal, intent, plugin, outcome, status and run id")
    func auditFields() throws {
        let directory = try TempDirectory("serve-auth")
        let issuer = ServeTestIssuer(name: Self.issuerName)
        let policy = """
            {\(Self.authentication),
             "access": [{"principals": ["jwt:*"], "intents": ["MakeUppercase"]}],
             "rateLimits": {"principals": {"jwt:\(Self.issuerName)#bot": {"perSecond": 0.01, "burst": 1}}},
             "audit": {"path": "AUDIT"}}
            """
        let (service, port, _) = try start(policy, issuer: issuer, directory: directory)
        let secret = "argument-value-\(UUID().uuidString.prefix(8))"
        let alice = try issuer.token(subject: "alice")
        let bot = try issuer.token(subject: "bot")
        #expect(try handle(port: port, bearer: alice, text: secret, directory: directory).status == 200)
        #expect(try handle(port: port, bearer: alice, intent: "Sleep", directory: directory).status == 403)
        #expect(try handle(port: port, bearer: bot, text: secret, directory: directory).status == 200)
        #expect(try handle(port: port, bearer: bot, text: secret, directory: directory).status == 429)
        service.stop()
        let data = try #require(FileManager.default.contents(atPath: directory.url.appendingPathComponent("audit.jsonl").path))
        #expect(!String(decoding: data, as: UTF8.self).contains(secret))
        let lines = try data.split(separator: 0x0A).map { try JSONParser.parse(Array($0)) }
        #expect(lines.count == 4, "\(String(decoding: data, as: UTF8.self))")
        let alicePrincipal = JSONValue.string("jwt:\(Self.issuerName)#alice")
        #expect(
            lines.contains {
                $0["principal"] == alicePrincipal && $0["intent"] == "MakeUppercase" && $0["plugin"] == "com.example.uppercase" && $0["outcome"] == "success"
                    && $0["status"] == 200 && $0["run"]?.stringValue?.isEmpty == false && $0["transport"] == "tcp" && $0["call"] == "handle"
            }, "\(lines)")
        #expect(lines.contains { $0["principal"] == alicePrincipal && $0["intent"] == "Sleep" && $0["error"] == "notPermitted" && $0["reason"] == "access" && $0["status"] == 403 })
        #expect(lines.contains { $0["principal"] == .string("jwt:\(Self.issuerName)#bot") && $0["reason"] == "rateLimit" && $0["status"] == 429 && $0["outcome"] == "refused" })
    }
}
