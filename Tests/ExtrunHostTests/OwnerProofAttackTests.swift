import ExtrunHost
import ExtrunProtocol
import ExtrunStore
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Attacks on the owner proof of issue 16, as a hostile plugin author would make them:
/// each test is one that worked before its fix.
@Suite("Attacks on a plugin's owner proof")
struct OwnerProofAttackTests {
    /// A folder outside `$TMPDIR` (which the sandbox hides from plugins), readable by
    /// every user, as an attacker's world-readable folder would be.
    final class OutsideDirectory {
        let url: URL
        init(_ label: String) throws {
            var template = Array("/var/tmp/extrun-attack-\(label)-XXXXXX".utf8CString)
            guard let made = mkdtemp(&template) else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
            chmod(made, 0o755)
            url = URL(fileURLWithPath: String(cString: made), isDirectory: true)
        }
        deinit { try? FileManager.default.removeItem(at: url) }
    }

    /// BANKTEAM's published plugin: it echoes its text and never asks for the owner's
    /// `apiToken`. Signed with BANKTEAM's own key in `home`, where BANKTEAM has that token.
    struct Published {
        let tmp: TempDirectory
        let home: URL
        let directory: URL
        let pluginPath: URL

        init(_ name: String, script: String = "serve()\n") throws {
            tmp = try TempDirectory("attack-\(name)")
            let plugin = try ScriptPlugin(
                in: tmp.url.appendingPathComponent("published"), name: "bank",
                script: script + String(repeating: "# BANKTEAM's echo plugin: it never asks for the owner's data.\n", count: 40))
            directory = plugin.directory
            let manifest = #"{"id":"com.bank.echo","version":"1.0.0","owner":"BANKTEAM","protocolVersion":1,"executable":"plugin.py","modes":["extension","in-app"],"intents":[{"name":"Echo","parameters":[{"name":"text","type":"string"}]}]}"#
            try Data(manifest.utf8).write(to: directory.appendingPathComponent("manifest.json"))
            chmod(directory.path, 0o755)
            home = tmp.url.appendingPathComponent("home")
            try Store(home: home).globals(of: "BANKTEAM").set("apiToken", to: "s3cr3t")
            try ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [])).sign(pluginIn: directory)
            pluginPath = tmp.url.appendingPathComponent("plugins")
            try FileManager.default.createDirectory(at: pluginPath, withIntermediateDirectories: true)
            chmod(pluginPath.path, 0o755)
        }

        func run() -> HandleReport {
            ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [pluginPath]))
                .handle(IntentInvocation(intent: "Echo", parameters: ["text": "hi"], source: "test"))
        }
    }

    /// Python module the attacker puts beside the script: it stands in for the standard
    /// library's `json`, and before the plugin's answer goes out asks the host for
    /// BANKTEAM's `apiToken` and puts the answer in the `echo`.
    static let hijackedJSON = #"""
        import os, sys
        _here = os.path.dirname(os.path.realpath(__file__))
        sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != _here]
        del sys.modules["json"]
        import json as _real
        sys.modules["json"] = _real
        _dumps, _loads = _real.dumps, _real.loads

        def _read():
            header = b""
            while not header.endswith(b"\r\n\r\n"):
                c = os.read(3, 1)
                if not c:
                    return None
                header += c
            n = 0
            for line in header.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    n = int(line.split(b":")[1])
            body = b""
            while len(body) < n:
                body += os.read(3, n - len(body))
            return _loads(body)

        def dumps(obj, *a, **k):
            if isinstance(obj, dict) and isinstance(obj.get("result"), dict) and "properties" in obj["result"]:
                body = _dumps({"jsonrpc": "2.0", "id": "stolen", "method": "globals.get", "params": {"name": "apiToken"}}).encode()
                os.write(4, b"Content-Length: %d\r\n\r\n" % len(body) + body)
                while True:
                    m = _read()
                    if m is None or (m.get("id") == "stolen" and "method" not in m):
                        break
                obj["result"]["properties"]["echo"] = "HIJACKED " + _dumps(m)
            return _dumps(obj, *a, **k)

        _real.dumps = dumps
        """#

    @Test("a copy of a signed folder whose script is a symbolic link to a copy elsewhere does not run the attacker's modules with the owner's data")
    func symlinkedScriptMovesPythonsSearchPath() throws {
        let published = try Published("symlink")
        let outside = try OutsideDirectory("symlink")
        // The attacker's folder elsewhere: the signed script, byte for byte, and their own json.py beside it.
        let script = outside.url.appendingPathComponent("plugin.py")
        try FileManager.default.copyItem(at: published.directory.appendingPathComponent("plugin.py"), to: script)
        chmod(script.path, 0o755)
        try Data(Self.hijackedJSON.utf8).write(to: outside.url.appendingPathComponent("json.py"))
        chmod(outside.url.appendingPathComponent("json.py").path, 0o644)
        // On the plugin path: the signed manifest and signature, and the script as a link to the copy.
        let folder = published.pluginPath.appendingPathComponent("bank")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        chmod(folder.path, 0o755)
        for name in ["manifest.json", PluginSignature.fileName] {
            try FileManager.default.copyItem(at: published.directory.appendingPathComponent(name), to: folder.appendingPathComponent(name))
        }
        try FileManager.default.createSymbolicLink(at: folder.appendingPathComponent("plugin.py"), withDestinationURL: script)

        let report = published.run()
        let echo = report.response?.properties["echo"]?.stringValue ?? ""
        #expect(!echo.contains("s3cr3t"), "the attacker's json.py read BANKTEAM's apiToken: \(echo)")
        #expect(report.error?.kind == .signatureInvalid, "\(String(describing: report.error)) \(echo)")
        #expect(report.error?.details["file"] == .string(folder.appendingPathComponent("plugin.py").path))
        #expect(report.error?.message.contains("symbolic link") == true, "\(String(describing: report.error?.message))")
        // The published folder itself, and a plain copy of it, still run.
        try FileManager.default.removeItem(at: folder.appendingPathComponent("plugin.py"))
        try FileManager.default.copyItem(at: published.directory.appendingPathComponent("plugin.py"), to: folder.appendingPathComponent("plugin.py"))
        let copied = published.run()
        #expect(copied.error == nil, "\(String(describing: copied.error))")
        #expect(copied.response?.properties["echo"] == "hi")
    }

    @Test("a manifest whose executable is reached through '..' has that executable signed: a copy beside another program is refused")
    func executableThroughDotDotIsSigned() throws {
        let published = try Published("dotdot")
        // BANKTEAM's suite: suite/echo/manifest.json runs ../bin/echo.py, a script that only echoes.
        let suite = published.tmp.url.appendingPathComponent("suite")
        let echo = suite.appendingPathComponent("echo")
        let bin = suite.appendingPathComponent("bin")
        for folder in [suite, echo, bin] {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            chmod(folder.path, 0o755)
        }
        let manifest = #"{"id":"com.bank.suite-echo","version":"1.0.0","owner":"BANKTEAM","protocolVersion":1,"executable":"../bin/echo.py","modes":["extension","in-app"],"intents":[{"name":"Echo","parameters":[{"name":"text","type":"string"}]}]}"#
        try Data(manifest.utf8).write(to: echo.appendingPathComponent("manifest.json"))
        try Data((pythonPluginKit + "serve()\n").utf8).write(to: bin.appendingPathComponent("echo.py"))
        chmod(bin.appendingPathComponent("echo.py").path, 0o755)
        let host = ExtrunHost.Host(paths: HostPaths(home: published.home, pluginSearchPath: []))
        let signature = try host.sign(pluginIn: echo)
        #expect(signature.files.count == 2, "the executable is not among the signed files: \(signature.files.map(\.path))")
        let status = host.signatureStatus(of: try PluginCatalog.plugin(in: echo), store: try Store(home: published.home))
        guard case .verified(owner: "BANKTEAM", _, _) = status else { Issue.record("\(status)"); return }

        // The attacker's copy, outside $TMPDIR so that the sandbox shows it: the signed manifest and
        // signature, and their own ../bin/echo.py, which asks for BANKTEAM's apiToken.
        let outside = try OutsideDirectory("dotdot")
        let plugins = outside.url.appendingPathComponent("plugins")
        let copy = plugins.appendingPathComponent("echo")
        let theirBin = plugins.appendingPathComponent("bin")
        for folder in [plugins, copy, theirBin] {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            chmod(folder.path, 0o755)
        }
        for name in ["manifest.json", PluginSignature.fileName] {
            try FileManager.default.copyItem(at: echo.appendingPathComponent(name), to: copy.appendingPathComponent(name))
        }
        let thief = theirBin.appendingPathComponent("echo.py")
        try Data((pythonPluginKit + OwnerProofTests.thief + "\n").utf8).write(to: thief)
        chmod(thief.path, 0o755)
        let report = ExtrunHost.Host(paths: HostPaths(home: published.home, pluginSearchPath: [plugins]))
            .handle(IntentInvocation(intent: "Echo", parameters: ["text": "hi"], source: "test"))
        let echoed = report.response?.properties["echo"]?.stringValue ?? ""
        #expect(!echoed.contains("s3cr3t"), "another program, beside a copy of the signed manifest, read BANKTEAM's apiToken: \(echoed)")
        #expect(report.error?.kind == .signatureInvalid, "\(String(describing: report.error))")
        #expect(report.error?.message.contains("echo.py") == true, "\(String(describing: report.error?.message))")
    }

    @Test("a file added after signing under a name that Swift's String equality takes for a signed one (NFD for NFC) is refused")
    func canonicallyEquivalentNameIsAnAddedFile() throws {
        let published = try Published("nfd")
        // BANKTEAM's plugin has a resource named in NFC, and is signed with it.
        let composed = "caf\u{E9}.txt"
        let decomposed = "cafe\u{301}.txt"
        #expect(composed == decomposed && !composed.utf8.elementsEqual(decomposed.utf8))
        func create(_ name: String, _ text: String) throws {
            let path = published.directory.path + "/" + name
            let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
            guard fd >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
            defer { close(fd) }
            _ = Array(text.utf8).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        }
        try create(composed, "menu")
        try ExtrunHost.Host(paths: HostPaths(home: published.home, pluginSearchPath: [])).sign(pluginIn: published.directory)
        let plugin = try PluginCatalog.plugin(in: published.directory)
        let host = ExtrunHost.Host(paths: HostPaths(home: published.home, pluginSearchPath: []))
        guard case .verified = host.signatureStatus(of: plugin, store: try Store(home: published.home)) else { Issue.record("not verified"); return }
        // Another file, whose name differs in its bytes: the signature never covered it.
        try create(decomposed, "import os  # anything")
        let status = host.signatureStatus(of: plugin, store: try Store(home: published.home))
        guard case .broken(let file, let message) = status else { Issue.record("an unsigned file was accepted: \(status)"); return }
        #expect(file.utf8.elementsEqual((published.directory.path + "/" + decomposed).utf8), "\(file)")
        #expect(message.contains("added after signing"), "\(message)")
    }

    @Test("a warm process started unsigned is not reused once the folder holds a signature: its code is not the code signed")
    func warmProcessStartedUnsignedIsNotReusedSigned() throws {
        let published = try Published("warm")
        let genuine = try Data(contentsOf: published.directory.appendingPathComponent("plugin.py"))
        // The attacker's folder: BANKTEAM's manifest, and their own script, reusable, padded to the genuine one's size.
        let folder = published.pluginPath.appendingPathComponent("bank")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        chmod(folder.path, 0o777)  // the kit writes its pid note there while unsigned
        try FileManager.default.copyItem(at: published.directory.appendingPathComponent("manifest.json"), to: folder.appendingPathComponent("manifest.json"))
        let evil = pythonPluginKit + #"""
            def reusable_handshake(msg):
                reply(msg, {"protocolVersion": 1, "plugin": {"id": os.environ["EXTRUN_PLUGIN_ID"], "version": "1.0.0"},
                            "intents": [msg["params"]["intent"]], "reusable": True})
            def steal(msg):
                send({"jsonrpc": "2.0", "id": "stolen", "method": "globals.get", "params": {"name": "apiToken"}})
                while True:
                    m = read_message()
                    if m is None or (m.get("id") == "stolen" and "method" not in m):
                        break
                reply(msg, {"code": "success", "properties": {"echo": "STOLEN " + json.dumps(m)}})
            serve({"initialize": reusable_handshake, "handle": steal})
            """# + "\n"
        var evilBytes = Data(evil.utf8)
        try #require(evilBytes.count + 2 <= genuine.count, "the attacker's script is longer than the genuine one")
        evilBytes += Data("#".utf8) + Data(repeating: 0x20, count: genuine.count - evilBytes.count - 2) + Data("\n".utf8)
        let script = folder.appendingPathComponent("plugin.py")
        try evilBytes.write(to: script)
        chmod(script.path, 0o755)

        let pool = PluginPool(host: ExtrunHost.Host(paths: HostPaths(home: published.home, pluginSearchPath: [published.pluginPath])))
        defer { pool.close() }
        let invocation = IntentInvocation(intent: "Echo", parameters: ["text": "hi"], source: "test")
        let first = pool.handle(invocation)
        #expect(first.response?.properties["echo"]?.stringValue?.contains("unsignedPlugin") == true, "\(String(describing: first.error))")
        #expect(pool.launches == 1 && pool.idleProcessCount == 1)

        try? FileManager.default.removeItem(at: folder.appendingPathComponent("pid"))
        // The genuine script written over the attacker's, in place, its modification time set back,
        // and BANKTEAM's signature beside it: the folder now is the signed plugin, file for file.
        var times = stat()
        stat(script.path, &times)
        let fd = open(script.path, O_WRONLY | O_CLOEXEC)
        try #require(fd >= 0)
        _ = genuine.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        close(fd)
        var restore = [times.st_atim, times.st_mtim]
        utimensat(AT_FDCWD, script.path, &restore, 0)
        try FileManager.default.copyItem(
            at: published.directory.appendingPathComponent(PluginSignature.fileName), to: folder.appendingPathComponent(PluginSignature.fileName))
        // Writable by others, the signed folder would be refused before any process is looked up.
        chmod(folder.path, 0o755)
        usleep(30_000)  // past the pool's 10 ms for file checks

        let second = pool.handle(invocation)
        let echo = second.response?.properties["echo"]?.stringValue ?? ""
        #expect(!echo.contains("s3cr3t"), "the process started unsigned got BANKTEAM's apiToken: \(echo)")
        #expect(second.error == nil && echo == "hi", "\(String(describing: second.error)) \(echo)")
        #expect(pool.launches == 2, "the warm process was reused")
    }

    @Test("the app's step after the extension's is proven again: a script rewritten while the extension ran is not started with the owner's data")
    func appStepIsProvenAgain() throws {
        // BANKTEAM's plugin: its extension takes a while, then asks for the app, which only echoes.
        let published = try Published("relaunch", script: #"""
            def handle(msg):
                if os.environ["EXTRUN_MODE"] == "extension":
                    time.sleep(1.0)
                    reply(msg, {"code": "failureRequiringAppLaunch"})
                else:
                    reply(msg, {"code": "success", "properties": {"echo": "handled in the app"}})
            def cont(msg):
                reply(msg, {"code": "success", "properties": {"echo": "continued in the app"}})
            serve({"handle": handle, "continue": cont})
            """# + "\n")
        // While the extension runs, someone who may write the folder puts their own script in.
        let script = published.directory.appendingPathComponent("plugin.py")
        let evil = pythonPluginKit + #"""
            def cont(msg):
                send({"jsonrpc": "2.0", "id": "stolen", "method": "globals.get", "params": {"name": "apiToken"}})
                while True:
                    m = read_message()
                    if m is None or (m.get("id") == "stolen" and "method" not in m):
                        break
                reply(msg, {"code": "success", "properties": {"echo": "STOLEN " + json.dumps(m)}})
            serve({"continue": cont, "handle": cont})
            """# + "\n"
        let writer = Thread {
            usleep(400_000)
            try? Data(evil.utf8).write(to: script)
        }
        writer.start()
        let report = ExtrunHost.Host(paths: HostPaths(home: published.home, pluginSearchPath: [published.directory.deletingLastPathComponent()]))
            .handle(IntentInvocation(intent: "Echo", parameters: ["text": "hi"], source: "test"))
        let echo = report.response?.properties["echo"]?.stringValue ?? ""
        #expect(!echo.contains("s3cr3t"), "the script written during the extension's step got BANKTEAM's apiToken: \(echo)")
        #expect(report.steps.first?.response?.code == "failureRequiringAppLaunch", "\(report.steps)")
        #expect(report.error?.kind == .signatureInvalid, "\(String(describing: report.error)) \(echo)")
        #expect(report.error?.details["file"] == .string(script.path))
    }

    @Test("a file added after signing under a name that is not UTF-8 is not overlooked")
    func nonUTF8NameIsNotOverlooked() throws {
        let published = try Published("utf8")
        let host = ExtrunHost.Host(paths: HostPaths(home: published.home, pluginSearchPath: []))
        let plugin = try PluginCatalog.plugin(in: published.directory)
        guard case .verified = host.signatureStatus(of: plugin, store: try Store(home: published.home)) else { Issue.record("not verified"); return }
        // A plugin that loads every file of its folder (templates, say) would load this one.
        let name: [UInt8] = Array(published.directory.path.utf8) + [0x2F, 0xFF, 0x2E, 0x6A, 0x73, 0x6F, 0x6E, 0]  // "/\xff.json"
        let fd = name.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { chars -> Int32 in
                guard let base = chars.baseAddress else { return -1 }
                return open(base, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
            }
        }
        try #require(fd >= 0)
        _ = Array("{}".utf8).withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        let status = host.signatureStatus(of: plugin, store: try Store(home: published.home))
        guard case .broken(_, let message) = status else { Issue.record("a file the signature does not cover was accepted: \(status)"); return }
        #expect(message.contains("not UTF-8"), "\(message)")
    }

    @Test("a named pipe added after signing is not overlooked: whoever writes into it feeds the plugin unsigned bytes")
    func namedPipeIsNotOverlooked() throws {
        let published = try Published("fifo")
        let host = ExtrunHost.Host(paths: HostPaths(home: published.home, pluginSearchPath: []))
        let plugin = try PluginCatalog.plugin(in: published.directory)
        guard case .verified = host.signatureStatus(of: plugin, store: try Store(home: published.home)) else { Issue.record("not verified"); return }
        let pipe = published.directory.appendingPathComponent("settings.json")
        try #require(mkfifo(pipe.path, 0o644) == 0)
        let status = host.signatureStatus(of: plugin, store: try Store(home: published.home))
        guard case .broken(let file, let message) = status else { Issue.record("a file the signature does not cover was accepted: \(status)"); return }
        #expect(file == pipe.path || message.contains(pipe.path), "\(file) \(message)")
        #expect(message.contains("not a regular file"), "\(message)")
    }
}
