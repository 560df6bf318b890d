import ExtrunHost
import ExtrunProtocol
import ExtrunStore
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A plugin's owner is proven by its signature, not claimed by its manifest: a
/// plugin that names BANKTEAM gets BANKTEAM's globals, bookmarks and donations only
/// when it is signed with a key BANKTEAM trusts (issue 16).
@Suite("A plugin's owner is proven, not claimed")
struct OwnerProofTests {
    /// Asks the host for BANKTEAM's data in every service and answers what came back
    /// (each result, or each error's `kind`) as JSON in `echo`.
    static let thief = #"""
        def call(method, params):
            call.n = getattr(call, "n", 0) + 1
            rid = "s%d" % call.n
            send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
            while True:
                msg = read_message()
                if msg is not None and msg.get("id") == rid and "method" not in msg:
                    if "error" in msg:
                        return {"error": (msg["error"].get("data") or {}).get("kind", msg["error"]["code"]), "message": msg["error"]["message"]}
                    return msg["result"]

        def handle(msg):
            answers = {
                "globals.get": call("globals.get", {"name": "apiToken"}),
                "globals.set": call("globals.set", {"name": "planted", "value": "x"}),
                "globals.list": call("globals.list", {}),
                "bookmarks.list": call("bookmarks.list", {}),
                "bookmarks.read": call("bookmarks.read", {"bookmark": "container", "path": "statement.txt"}),
                "donations.delete": call("donations.delete", {"all": True}),
                "donations.donate": call("donations.donate", {"intent": "Echo", "parameters": {"text": "planted"}, "identifier": "planted"}),
            }
            reply(msg, {"code": "success", "properties": {"echo": json.dumps(answers, sort_keys=True)}})
        serve({"handle": handle})
        """#

    struct Fixture {
        let tmp: TempDirectory
        let plugin: ScriptPlugin
        let home: URL
        let host: ExtrunHost.Host
        let container: URL

        /// A home where BANKTEAM has a global `apiToken`, a bookmark to its container and a
        /// donation, and a plugin directory with the thief claiming BANKTEAM.
        init(_ name: String = "thief") throws {
            tmp = try TempDirectory("owner-\(name)")
            plugin = try ScriptPlugin(in: tmp.url.appendingPathComponent("plugins"), name: name, script: OwnerProofTests.thief)
            let manifest = #"{"id":"test.\#(name)","version":"1.0.0","owner":"BANKTEAM","protocolVersion":1,"executable":"plugin.py","modes":["extension","in-app"],"intents":[{"name":"Echo","parameters":[{"name":"text","type":"string"}]}]}"#
            try Data(manifest.utf8).write(to: plugin.directory.appendingPathComponent("manifest.json"))
            home = tmp.url.appendingPathComponent("home")
            host = ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [tmp.url.appendingPathComponent("plugins")]))
            let store = try Store(home: home)
            try store.globals(of: "BANKTEAM").set("apiToken", to: "s3cr3t")
            // BANKTEAM's container under the home (docs/store.md, "Containers"), bookmarked.
            container = URL(fileURLWithPath: store.containerDirectory(of: "BANKTEAM"), isDirectory: true)
            try FileManager.default.createDirectory(at: container, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            chmod(container.deletingLastPathComponent().path, 0o700)
            try Data("balance 1000".utf8).write(to: container.appendingPathComponent("statement.txt"))
            try store.bookmarks(of: "BANKTEAM").add("container", path: container.path, readOnly: false)
            try store.donations(of: "BANKTEAM").donate(
                Donation(identifier: "d1", owner: "BANKTEAM", plugin: "bank", intent: "Pay", source: "handle", parameters: [:], response: nil))
        }

        func run() -> HandleReport {
            host.handle(IntentInvocation(intent: "Echo", parameters: ["text": "hi"], source: "test"))
        }

        /// What the thief got back from each service.
        func answers(_ report: HandleReport) throws -> [String: JSONValue] {
            let echo = try #require(report.response?.properties["echo"]?.stringValue, "no answer: \(String(describing: report.error))")
            guard case .object(let answers) = try JSONCoding.parse(json: Data(echo.utf8)) else { throw CancellationError() }
            return answers
        }

        /// BANKTEAM's data is exactly as the fixture made it.
        func expectBankUntouched(sourceLocation: SourceLocation = #_sourceLocation) throws {
            let store = try Store(home: home)
            #expect(try store.globals(of: "BANKTEAM").list().map(\.name) == ["apiToken"], sourceLocation: sourceLocation)
            #expect(try store.globals(of: "BANKTEAM").get("apiToken")?.value == "s3cr3t", sourceLocation: sourceLocation)
            #expect(try store.donations(of: "BANKTEAM").list().map(\.identifier) == ["d1"], sourceLocation: sourceLocation)
            #expect(try store.bookmarks(of: "BANKTEAM").list().map(\.bookmark.name) == ["container"], sourceLocation: sourceLocation)
        }

        func expectNoProcessLeft(sourceLocation: SourceLocation = #_sourceLocation) {
            let left = processes(mentioning: plugin.directory.path)
            #expect(left.isEmpty, "processes still running: \(left)", sourceLocation: sourceLocation)
        }
    }

    static let services = ["globals.get", "globals.set", "globals.list", "bookmarks.list", "bookmarks.read", "donations.delete", "donations.donate"]

    @Test("an unsigned plugin claiming BANKTEAM gets nothing of it, in every service, and is told how to sign")
    func unsignedGetsNothing() throws {
        let f = try Fixture()
        let report = f.run()
        #expect(report.error == nil, "\(String(describing: report.error))")
        let answers = try f.answers(report)
        for service in Self.services {
            #expect(answers[service]?["error"] == "unsignedPlugin", "\(service): \(String(describing: answers[service]))")
        }
        let message = answers["globals.get"]?["message"]?.stringValue ?? ""
        #expect(message.contains("extrun plugins sign '\(f.plugin.directory.path)' --owner BANKTEAM"), "\(message)")
        #expect(!(report.response.map { "\($0)" } ?? "").contains("s3cr3t"))
        // The host's own donation of the run is refused too: nothing of the run lands in BANKTEAM's log.
        #expect(report.donation?.donated == false)
        #expect(report.donation?.error?["kind"] == "unsignedPlugin")
        try f.expectBankUntouched()
        f.expectNoProcessLeft()
    }

    @Test("signed by BANKTEAM's own key, the same plugin gets BANKTEAM's data in every service")
    func signedByTheOwnerGetsIt() throws {
        let f = try Fixture()
        let signature = try f.host.sign(pluginIn: f.plugin.directory)
        #expect(signature.files.map(\.path) == ["manifest.json", "plugin.py"])
        let report = f.run()
        let answers = try f.answers(report)
        #expect(answers["globals.get"]?["value"] == "s3cr3t")
        #expect(answers["globals.set"]?["version"] != nil)
        #expect(answers["bookmarks.list"]?["bookmarks"]?.arrayValue?.first?["name"] == "container")
        #expect(answers["bookmarks.read"]?["error"] == nil, "\(String(describing: answers["bookmarks.read"]))")
        #expect(answers["donations.delete"]?["deleted"] == 1)
        #expect(answers["donations.donate"]?["donated"] == true)
        #expect(report.donation?.donated == true)
        #expect(try Store(home: f.home).globals(of: "BANKTEAM").get("planted")?.value == "x")
        f.expectNoProcessLeft()
    }

    @Test("a key of the attacker's own, even for the name BANKTEAM, is not trusted")
    func selfSignedIsNotTrusted() throws {
        let f = try Fixture()
        let attackerHome = f.tmp.url.appendingPathComponent("attacker-home")
        try ExtrunHost.Host(paths: HostPaths(home: attackerHome, pluginSearchPath: [])).sign(pluginIn: f.plugin.directory)
        let report = f.run()
        let answers = try f.answers(report)
        for service in Self.services {
            #expect(answers[service]?["error"] == "untrustedSigner", "\(service): \(String(describing: answers[service]))")
        }
        #expect(answers["globals.get"]?["message"]?.stringValue?.contains("extrun owners trust BANKTEAM --signing-key") == true)
        try f.expectBankUntouched()
        let status = f.host.signatureStatus(of: try PluginCatalog.plugin(in: f.plugin.directory), store: try Store(home: f.home))
        guard case .untrusted(owner: "BANKTEAM", _, _) = status else { Issue.record("\(status)"); return }
    }

    @Test("one changed byte in the executable or the manifest, or an added file, after signing: not started, the file named", arguments: [
        "plugin.py", "manifest.json", "added.py",
    ])
    func changedAfterSigningIsRefused(file: String) throws {
        let f = try Fixture("changed")
        try f.host.sign(pluginIn: f.plugin.directory)
        #expect(f.run().error == nil)
        let path = f.plugin.directory.appendingPathComponent(file)
        if file == "added.py" {
            try Data("import os\n".utf8).write(to: path)
        } else {
            // The same size and modification time: only the change time tells, and the digest.
            var bytes = try Data(contentsOf: path)
            var times = stat()
            stat(path.path, &times)
            let marker = file == "manifest.json" ? "1.0.0" : "def note"
            let range = try #require(bytes.range(of: Data(marker.utf8)))
            bytes[range.upperBound - 1] ^= 0x01
            try bytes.write(to: path)
            var restore = [times.st_atim, times.st_mtim]
            utimensat(AT_FDCWD, path.path, &restore, 0)
        }
        let report = f.run()
        #expect(report.error?.kind == .signatureInvalid, "\(String(describing: report.error))")
        #expect(report.error?.details["file"] == .string(path.path))
        #expect(report.error?.message.contains(path.path) == true)
        #expect(report.error?.message.contains("extrun plugins sign") == true)
        #expect(report.exitCode == 19)
        #expect(report.metrics?.launchMs == nil, "the plugin was started")
        let status = f.host.signatureStatus(of: try PluginCatalog.plugin(in: f.plugin.directory), store: nil)
        #expect(status == .broken(file: path.path, message: report.error?.message ?? ""))
        f.expectNoProcessLeft()
    }

    @Test("a trusted author's plugin verifies; untrust revokes it")
    func trustedAuthorThenUntrust() throws {
        let f = try Fixture("authored")
        // On the author's machine: their own BANKTEAM identity signs, and they hand over their public key file.
        let authorHome = f.tmp.url.appendingPathComponent("author-home")
        let authorStore = try Store(home: authorHome)
        let signature = try ExtrunHost.Host(paths: HostPaths(home: authorHome, pluginSearchPath: [])).sign(pluginIn: f.plugin.directory, store: authorStore)
        let pubkeyFile = try OwnerPublicKey.decode(try authorStore.publicKey(of: "BANKTEAM").encoded(), file: "author.pub")
        #expect(pubkeyFile.signingFingerprint == signature.signingFingerprint)

        let store = try Store(home: f.home)
        try store.trust("BANKTEAM", author: "alice", signingKey: try #require(pubkeyFile.signingKey))
        #expect(try store.owner("BANKTEAM").trustedSigningKeys.map(\.fingerprint) == [signature.signingFingerprint])
        #expect(try f.answers(f.run())["globals.get"]?["value"] == "s3cr3t")

        try store.untrust("BANKTEAM", fingerprint: String(signature.signingFingerprint.prefix(8)))
        #expect(try store.owner("BANKTEAM").trustedSigningKeys.isEmpty)
        let revoked = try f.answers(f.run())
        #expect(revoked["globals.get"]?["error"] == "untrustedSigner")
        #expect(revoked["globals.set"]?["error"] == "untrustedSigner")
    }

    @Test("a warm pool refuses an unsigned plugin's store requests as Host.handle does, and sees a change after signing")
    func poolProvesToo() throws {
        let f = try Fixture("pooled")
        let pool = PluginPool(host: f.host)
        defer { pool.close() }
        let invocation = IntentInvocation(intent: "Echo", parameters: ["text": "hi"], source: "test")
        #expect(try f.answers(pool.handle(invocation))["globals.get"]?["error"] == "unsignedPlugin")
        // The note the unsigned run wrote belongs to the plugin's user (run as root): signed with
        // it, the plugin would be refused, since that user could rewrite it.
        try? FileManager.default.removeItem(at: f.plugin.pidFile)
        try f.host.sign(pluginIn: f.plugin.directory)
        usleep(20_000)  // past the pool's 10 ms for file checks
        #expect(try f.answers(pool.handle(invocation))["globals.get"]?["value"] == "s3cr3t")
        try Data("# changed\n".utf8).write(to: f.plugin.directory.appendingPathComponent("plugin.py"), options: .atomic)
        // Still executable: a catalog read again (it is at most a second old) would otherwise
        // refuse the script as not executable before its signature is looked at.
        chmod(f.plugin.directory.appendingPathComponent("plugin.py").path, 0o755)
        usleep(20_000)
        #expect(pool.handle(invocation).error?.kind == .signatureInvalid)
        pool.close()
        f.expectNoProcessLeft()
    }

    @Test("the digests are cached by file identity, in the process and in the home, once the file has settled")
    func digestsAreCachedByIdentity() throws {
        let f = try Fixture("cached")
        let script = f.plugin.directory.appendingPathComponent("plugin.py").path
        let cache = f.home.appendingPathComponent("cache/plugin-digests.json")
        func cached() -> Bool { (try? String(contentsOf: cache, encoding: .utf8))?.contains(script) == true }
        // Just written: an identity taken now may be the one of a write later in the same
        // clock tick, so the digest is not kept (the file is read whole at each check).
        try f.host.sign(pluginIn: f.plugin.directory)
        let plugin = try PluginCatalog.plugin(in: f.plugin.directory)
        guard case .verified = f.host.signatureStatus(of: plugin, store: try Store(home: f.home)) else { Issue.record("not verified"); return }
        #expect(!cached(), "a digest of a file changed under 2 s ago was cached")
        // Settled (unchanged for 2 s): kept.
        var info = stat()
        #expect(stat(script, &info) == 0)
        let changed = Double(info.st_ctim.tv_sec) + Double(info.st_ctim.tv_nsec) / 1e9
        let wait = changed + 2.2 - Date().timeIntervalSince1970
        if wait > 0 { usleep(useconds_t(wait * 1_000_000)) }
        guard case .verified = f.host.signatureStatus(of: plugin, store: try Store(home: f.home)) else { Issue.record("not verified"); return }
        #expect(cached())
        #expect(stat(cache.path, &info) == 0 && info.st_mode & 0o777 == 0o600)
        // Changed in place, size kept: seen, whatever the cache holds.
        let text = try String(contentsOfFile: script, encoding: .utf8)
        let fd = open(script, O_WRONLY)
        #expect(fd >= 0)
        _ = Array("#".utf8).withUnsafeBytes { pwrite(fd, $0.baseAddress, 1, off_t(text.utf8.count - 1)) }
        close(fd)
        if case .verified = f.host.signatureStatus(of: plugin, store: try Store(home: f.home)) { Issue.record("a changed file passed") }
    }

    @Test("change of owner: migrate, re-sign for the new owner, every global found; the old signature reaches nothing once the source is removed")
    func changeOfOwner() throws {
        let f = try Fixture("handover")
        try f.host.sign(pluginIn: f.plugin.directory)
        #expect(try f.answers(f.run())["globals.get"]?["value"] == "s3cr3t")

        // Ops move BANKTEAM's data to NEWBANK and remove the source.
        var options = MigrationOptions()
        options.removeSource = true
        let summary = try Store(home: f.home).migrate(from: "BANKTEAM", to: "NEWBANK", options: options)
        #expect(summary.complete, "\(String(describing: summary.stoppedBecause))")

        // The plugin as it was, still signed by BANKTEAM: BANKTEAM has nothing any more.
        let old = try f.answers(f.run())
        #expect(old["globals.get"] == .null, "\(String(describing: old["globals.get"]))")
        #expect(old["bookmarks.list"]?["bookmarks"]?.arrayValue?.isEmpty == true)

        // The manifest names the new owner: the old signature no longer holds...
        let manifestURL = f.plugin.directory.appendingPathComponent("manifest.json")
        let manifest = try String(contentsOf: manifestURL, encoding: .utf8).replacingOccurrences(of: "BANKTEAM", with: "NEWBANK")
        try Data(manifest.utf8).write(to: manifestURL)
        #expect(f.run().error?.kind == .signatureInvalid)
        // ...until the new owner signs it: then it finds every global and bookmark.
        try f.host.sign(pluginIn: f.plugin.directory)
        let new = try f.answers(f.run())
        #expect(new["globals.get"]?["value"] == "s3cr3t")
        #expect(new["bookmarks.list"]?["bookmarks"]?.arrayValue?.first?["name"] == "container")
        // The bookmark now points into NEWBANK's container, where the file was copied.
        #expect(new["bookmarks.read"]?["error"] == nil, "\(String(describing: new["bookmarks.read"]))")
        let moved = try #require(try Store(home: f.home).bookmarks(of: "NEWBANK").list().first)
        #expect(moved.bookmark.path.hasPrefix(try Store(home: f.home).containerDirectory(of: "NEWBANK")))
        f.expectNoProcessLeft()
    }

    @Test("an attacker who changes the script and rewrites its digest in the signature file, or borrows another plugin's signature, is refused")
    func forgedOrBorrowedSignature() throws {
        let f = try Fixture("forged")
        let signed = try f.host.sign(pluginIn: f.plugin.directory)
        let old = try #require(signed.files.first { $0.path == "plugin.py" })
        let script = f.plugin.directory.appendingPathComponent("plugin.py")
        let changed = try Data(contentsOf: script) + Data("\n# changed\n".utf8)
        try changed.write(to: script)
        let sum = Process()
        sum.executableURL = URL(fileURLWithPath: "/usr/bin/sha256sum")
        sum.arguments = [script.path]
        let out = Pipe()
        sum.standardOutput = out
        try sum.run()
        sum.waitUntilExit()
        let newDigest = String(decoding: out.fileHandleForReading.readDataToEndOfFile().prefix(64), as: UTF8.self)
        let signatureFile = f.plugin.directory.appendingPathComponent(PluginSignature.fileName)
        let forged = try String(contentsOf: signatureFile, encoding: .utf8)
            .replacingOccurrences(of: old.sha256, with: newDigest)
            .replacingOccurrences(of: "\"size\" : \(old.size)", with: "\"size\" : \(changed.count)")
        try Data(forged.utf8).write(to: signatureFile)
        let report = f.run()
        #expect(report.error?.kind == .signatureInvalid)
        #expect(report.error?.message.contains("was altered after signing") == true, "\(String(describing: report.error))")

        // Another plugin's valid signature, copied in: it names that plugin.
        let other = try Fixture("other")
        try other.host.sign(pluginIn: other.plugin.directory)
        try FileManager.default.removeItem(at: signatureFile)
        try FileManager.default.copyItem(at: other.plugin.directory.appendingPathComponent(PluginSignature.fileName), to: signatureFile)
        let borrowed = f.run()
        #expect(borrowed.error?.kind == .signatureInvalid)
        #expect(borrowed.error?.message.contains("signed for plugin 'test.other'") == true, "\(String(describing: borrowed.error))")
        try f.expectBankUntouched()
        f.expectNoProcessLeft()
    }
}
