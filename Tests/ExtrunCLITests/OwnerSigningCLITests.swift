import ExtrunProtocol
import Foundation
import Testing

/// `extrun plugins sign | verify`, the listing's signature column, `extrun owners
/// pubkey | trust | untrust | show | quota` (issue 16), through the real binary.
@Suite("Signing plugins and owners' quotas from the command line")
struct OwnerSigningCLITests {
    /// A copy of the staged python-uppercase plugin in a folder of its own.
    func pluginCopy(_ cli: CLI) throws -> URL {
        let source = try StagedPlugins.directory().appendingPathComponent("python-uppercase")
        let target = cli.home.url.appendingPathComponent("plugins/python-uppercase")
        try FileManager.default.createDirectory(at: target, withIntermediateDirectories: true)
        for name in ["manifest.json", "plugin.py", "extrun_plugin.py"] {
            try FileManager.default.copyItem(at: source.appendingPathComponent(name), to: target.appendingPathComponent(name))
        }
        return target
    }

    @Test("sign, verify (holds / file named / unsigned), and the listing says which")
    func signAndVerify() throws {
        var cli = try CLI()
        let plugin = try pluginCopy(cli)
        cli.pluginPath = [plugin.deletingLastPathComponent()]
        let unsigned = try cli.run(["plugins", "verify", plugin.path])
        #expect(unsigned.status == 19, "\(unsigned)")
        #expect(unsigned.stdout.contains("extrun plugins sign '\(plugin.path)' --owner EXAMPLETEAM"))
        #expect(try cli.run(["plugins"]).stdout.contains("  unsigned"))

        let wrongOwner = try cli.run(["plugins", "sign", plugin.path, "--owner", "BANKTEAM"])
        #expect(wrongOwner.status == 11 && wrongOwner.stderr.contains("names owner 'EXAMPLETEAM'"), "\(wrongOwner)")
        let signed = try cli.run(["plugins", "sign", plugin.path, "--owner", "EXAMPLETEAM"])
        #expect(signed.status == 0, "\(signed)")
        let holds = try cli.run(["plugins", "verify", plugin.path])
        #expect(holds.status == 0 && holds.stdout.contains("the signature holds: verified owner EXAMPLETEAM (its own key"), "\(holds)")
        #expect(try cli.run(["plugins"]).stdout.contains("verified owner EXAMPLETEAM (its own key"))
        let listed = try cli.run(["plugins", "--format", "json"]).json()
        let signature = listed["plugins"]?.arrayValue?.first?["signature"]
        #expect(signature?["status"] == "verified" && signature?["owner"] == "EXAMPLETEAM" && signature?["signedBy"] == "owner")

        let script = plugin.appendingPathComponent("plugin.py")
        try (try Data(contentsOf: script) + Data("\n# one more line\n".utf8)).write(to: script)
        let broken = try cli.run(["plugins", "verify", plugin.path])
        #expect(broken.status == 19 && broken.stdout.contains(script.path), "\(broken)")
        #expect(try cli.run(["plugins"]).stdout.contains("signature broken: \(script.path)"))
        let handled = try cli.run(["handle", "-"], stdin: #"{"intent": "ShoutText", "parameters": {"text": "hi"}}"#)
        #expect(handled.status == 19, "\(handled)")
        #expect(try handled.json()["error"]?["kind"] == "signatureInvalid")
        #expect(try handled.json()["error"]?["file"] == .string(script.path))
    }

    @Test("an author's key: pubkey carries it, trust lists it in owners show, the author's plugin verifies, untrust revokes")
    func trustAnAuthor() throws {
        let author = try CLI()
        let plugin = try pluginCopy(author)
        #expect(try author.run(["plugins", "sign", plugin.path, "--owner", "EXAMPLETEAM"]).status == 0)
        let pub = author.home.url.appendingPathComponent("author.pub")
        #expect(try author.run(["owners", "pubkey", "EXAMPLETEAM", "-o", pub.path]).status == 0)
        let pubJSON = try JSONCoding.parse(json: Data(contentsOf: pub))
        let fingerprint = try #require(pubJSON["signingFingerprint"]?.stringValue)
        #expect(pubJSON["signingKey"]?.stringValue?.isEmpty == false)

        var host = try CLI()
        host.pluginPath = [plugin.deletingLastPathComponent()]
        #expect(try host.run(["plugins", "verify", plugin.path]).status == 15)
        let trust = try host.run(["owners", "trust", "EXAMPLETEAM", "--signing-key", pub.path])
        #expect(trust.status == 0 && trust.stdout.contains(fingerprint), "\(trust)")
        #expect(try host.run(["plugins", "verify", plugin.path]).status == 0)
        let show = try host.run(["owners", "show", "EXAMPLETEAM"]).json()
        let trusted = try #require(show["trustedSigningKeys"]?.arrayValue)
        #expect(trusted.contains { $0["fingerprint"] == .string(fingerprint) })
        #expect(show["signingFingerprint"]?.stringValue?.isEmpty == false)
        #expect(show["quota"]?["globals"]?["limit"] == 100_000)

        #expect(try host.run(["owners", "untrust", "EXAMPLETEAM", "--signing-key", String(fingerprint.prefix(8))]).status == 0)
        #expect(try host.run(["plugins", "verify", plugin.path]).status == 15)
        let unknown = try host.run(["owners", "untrust", "EXAMPLETEAM", "--signing-key", String(fingerprint.prefix(8))])
        #expect(unknown.status == 2, "\(unknown)")
    }

    @Test("owners quota sets limits; a CLI write over one is quotaExceeded (exit 14) with the numbers; show prints usage")
    func quotaFromTheCLI() throws {
        let cli = try CLI()
        let set = try cli.run(["owners", "quota", "TEAM", "--globals", "1", "--bytes", "1MiB"])
        #expect(set.status == 0 && set.stdout.contains("TEAM globals: 0 of 1 (set for TEAM)"), "\(set)")
        #expect(try cli.run(["globals", "set", "a", "1", "--owner", "TEAM"]).status == 0)
        let over = try cli.run(["globals", "set", "b", "1", "--owner", "TEAM"])
        #expect(over.status == 14, "\(over)")
        #expect(over.stderr.contains("quotaExceeded") && over.stderr.contains("its quota is 1 globals (it has 1)"))
        #expect(try cli.run(["globals", "get", "b", "--owner", "TEAM"]).status == 2)
        let report = try cli.run(["owners", "quota", "TEAM", "--format", "json"]).json()
        #expect(report["quota"]?["globals"]?["usage"] == 1)
        #expect(report["quota"]?["bytes"]?["limit"] == .int(1 << 20))
        let bad = try cli.run(["owners", "quota", "TEAM", "--globals", "-3"])
        #expect(bad.status == 64, "\(bad)")
    }
}
