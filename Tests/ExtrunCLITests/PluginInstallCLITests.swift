import ExtrunProtocol
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `extrun plugins install` and `remove`: a plugin folder becomes `$EXTRUN_HOME/plugins/<id>`,
/// found by `extrun handle` with no plugin path; refusals leave everything as it was.
@Suite struct PluginInstallCLITests {
    /// The Python example copied into `folder/name`, as `id` handling `intent` (its code and
    /// manifest both rewritten), with modes an author's umask might leave (0700, 0600).
    static func pythonPlugin(in folder: TempDirectory, name: String, id: String, intent: String, version: String = "1.0.0") throws -> URL {
        let example = StagedPlugins.packageRoot.appendingPathComponent("Examples/python-uppercase")
        let directory = folder.url.appendingPathComponent(name, isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        chmod(directory.path, 0o700)
        func rewrite(_ text: String) -> String {
            text.replacingOccurrences(of: "com.example.python-uppercase", with: id).replacingOccurrences(of: "ShoutText", with: intent)
                .replacingOccurrences(of: "\"1.0.0\"", with: "\"\(version)\"")
        }
        let script = try String(contentsOf: example.appendingPathComponent("plugin.py"), encoding: .utf8)
        let manifest = try String(contentsOf: example.appendingPathComponent("manifest.json"), encoding: .utf8)
        try Data(rewrite(script).utf8).write(to: directory.appendingPathComponent("plugin.py"))
        try Data(rewrite(manifest).utf8).write(to: directory.appendingPathComponent("manifest.json"))
        chmod(directory.appendingPathComponent("plugin.py").path, 0o700)
        chmod(directory.appendingPathComponent("manifest.json").path, 0o600)
        // The example's module for Python plugins, as an author copies it beside the script (plugin-guide.md §5).
        let module = StagedPlugins.packageRoot.appendingPathComponent("SDKs/python/extrun_plugin.py")
        try Data(contentsOf: module).write(to: directory.appendingPathComponent("extrun_plugin.py"))
        chmod(directory.appendingPathComponent("extrun_plugin.py").path, 0o600)
        return directory
    }

    static func mode(_ path: String) -> mode_t {
        var info = stat()
        return lstat(path, &info) == 0 ? info.st_mode & 0o7777 : 0
    }

    /// The entries of `$EXTRUN_HOME/plugins` (the lock file aside): what an install left.
    static func installedEntries(_ cli: CLI) -> [String] {
        let plugins = cli.home.url.appendingPathComponent("plugins").path
        return ((try? FileManager.default.contentsOfDirectory(atPath: plugins)) ?? []).filter { $0 != ".install.lock" }.sorted()
    }

    @Test func installedPluginIsFoundByHandleWithoutAPluginPath() throws {
        let work = try TempDirectory("install")
        let source = try Self.pythonPlugin(in: work, name: "mine", id: "com.test.whisper", intent: "WhisperText")
        var cli = try CLI()
        cli.pluginPath = []
        let installed = try cli.run(["plugins", "install", source.path])
        #expect(installed.status == 0, "\(installed)")
        #expect(installed.stdout.contains("Installed com.test.whisper 1.0.0"), "\(installed)")
        let folder = cli.home.url.appendingPathComponent("plugins/com.test.whisper").path
        #expect(Self.mode(folder) == 0o755)
        #expect(Self.mode(folder + "/plugin.py") == 0o755)
        #expect(Self.mode(folder + "/manifest.json") == 0o644)
        #expect(Self.installedEntries(cli) == ["com.test.whisper"])

        let intent = try work.write("whisper.json", #"{"intent": "WhisperText", "parameters": {"text": "quiet"}}"#)
        let handled = try cli.run(["handle", intent.path])
        #expect(handled.status == 0, "\(handled)")
        #expect(handled.stdout.contains("QUIET!"), "\(handled)")
        let listed = try cli.run(["plugins"])
        #expect(listed.stdout.contains(folder), "\(listed)")
    }

    @Test func whatAKilledInstallLeftIsRemovedByTheNext() throws {
        let work = try TempDirectory("install")
        let source = try Self.pythonPlugin(in: work, name: "mine", id: "com.test.whisper", intent: "WhisperText")
        var cli = try CLI()
        cli.pluginPath = []
        let left = cli.home.url.appendingPathComponent("plugins/.incoming/com.test.whisper.Ab12Cd")
        try FileManager.default.createDirectory(at: left, withIntermediateDirectories: true)
        try Data("{}".utf8).write(to: left.appendingPathComponent("manifest.json"))
        let installed = try cli.run(["plugins", "install", source.path])
        #expect(installed.status == 0, "\(installed)")
        #expect(Self.installedEntries(cli) == ["com.test.whisper"])
    }

    @Test func secondInstallNeedsReplaceAndReplaceUpdates() throws {
        let work = try TempDirectory("install")
        let first = try Self.pythonPlugin(in: work, name: "v1", id: "com.test.whisper", intent: "WhisperText")
        let second = try Self.pythonPlugin(in: work, name: "v2", id: "com.test.whisper", intent: "WhisperText", version: "2.0.0")
        var cli = try CLI()
        cli.pluginPath = []
        #expect(try cli.run(["plugins", "install", first.path]).status == 0)
        let again = try cli.run(["plugins", "install", second.path])
        #expect(again.status == 11, "\(again)")
        #expect(again.stderr.contains("com.test.whisper 1.0.0 is already installed"), "\(again)")
        #expect(again.stderr.contains("--replace"), "\(again)")
        let replaced = try cli.run(["plugins", "install", second.path, "--replace", "--format", "json"])
        #expect(replaced.status == 0, "\(replaced)")
        let json = try replaced.json()
        #expect(json["version"] == .string("2.0.0"))
        #expect(json["replacedVersion"] == .string("1.0.0"))
        #expect(Self.installedEntries(cli) == ["com.test.whisper"])
        let manifest = try String(contentsOfFile: cli.home.url.appendingPathComponent("plugins/com.test.whisper/manifest.json").path, encoding: .utf8)
        #expect(manifest.contains("2.0.0"))
    }

    @Test func anIntentAnotherPluginHandlesIsRefusedNamingBoth() throws {
        let work = try TempDirectory("install")
        // The staged python example handles ShoutText already.
        let source = try Self.pythonPlugin(in: work, name: "copycat", id: "com.test.copycat", intent: "ShoutText")
        let cli = try CLI()
        let refused = try cli.run(["plugins", "install", source.path])
        #expect(refused.status == 11, "\(refused)")
        #expect(refused.stderr.contains("its intent 'ShoutText' is already handled by com.example.python-uppercase"), "\(refused)")
        #expect(refused.stderr.contains("com.test.copycat"), "\(refused)")
        #expect(Self.installedEntries(cli).isEmpty, "\(Self.installedEntries(cli))")
    }

    @Test func signedPluginStaysVerifiedAfterTheCopyWithItsInnerLink() throws {
        let work = try TempDirectory("install")
        let source = try Self.pythonPlugin(in: work, name: "signed", id: "com.test.signed", intent: "SignedShout")
        try FileManager.default.createDirectory(at: source.appendingPathComponent("lib"), withIntermediateDirectories: true)
        #expect(symlink("../plugin.py", source.appendingPathComponent("lib/alias.py").path) == 0)
        var cli = try CLI()
        cli.pluginPath = []
        let signed = try cli.run(["plugins", "sign", source.path, "--owner", "EXAMPLETEAM"])
        #expect(signed.status == 0, "\(signed)")
        let installed = try cli.run(["plugins", "install", source.path])
        #expect(installed.status == 0, "\(installed)")
        #expect(installed.stdout.contains("verified owner EXAMPLETEAM"), "\(installed)")
        let folder = cli.home.url.appendingPathComponent("plugins/com.test.signed")
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: folder.appendingPathComponent("lib/alias.py").path) == "../plugin.py")
        let verified = try cli.run(["plugins", "verify", folder.path])
        #expect(verified.status == 0, "\(verified)")
    }

    /// A link leading out is refused, signed or not: install reads nothing from outside the folder
    /// (PluginInstallOwnerTests: root would read what the folder's owner cannot). The file put in its place installs.
    @Test func aLinkLeadingOutIsRefusedSignedOrNot() throws {
        let work = try TempDirectory("install")
        let outside = try work.write("shared/data.txt", "shared\n")
        let source = try Self.pythonPlugin(in: work, name: "linked", id: "com.test.linked", intent: "LinkedShout")
        #expect(symlink(outside.path, source.appendingPathComponent("data.txt").path) == 0)
        var cli = try CLI()
        cli.pluginPath = []
        #expect(try cli.run(["plugins", "sign", source.path, "--owner", "EXAMPLETEAM"]).status == 0)
        let refused = try cli.run(["plugins", "install", source.path])
        #expect(refused.status == 11, "\(refused)")
        #expect(refused.stderr.contains("outside the plugin's folder"), "\(refused)")
        #expect(refused.stderr.contains("sign again"), "\(refused)")
        #expect(Self.installedEntries(cli).isEmpty, "\(Self.installedEntries(cli))")

        try FileManager.default.removeItem(at: source.appendingPathComponent("extrun-signature.json"))
        let unsigned = try cli.run(["plugins", "install", source.path])
        #expect(unsigned.status == 11, "\(unsigned)")
        #expect(unsigned.stderr.contains("data.txt is a symbolic link to \(outside.path), outside the plugin's folder"), "\(unsigned)")
        #expect(unsigned.stderr.contains("cp -RL"), "\(unsigned)")
        #expect(Self.installedEntries(cli).isEmpty, "\(Self.installedEntries(cli))")

        // As the error says: the file itself in place of the link.
        try FileManager.default.removeItem(at: source.appendingPathComponent("data.txt"))
        try FileManager.default.copyItem(at: outside, to: source.appendingPathComponent("data.txt"))
        let copied = try cli.run(["plugins", "install", source.path])
        #expect(copied.status == 0, "\(copied)")
        let installed = cli.home.url.appendingPathComponent("plugins/com.test.linked/data.txt").path
        #expect(Self.mode(installed) == 0o644)
        #expect(try String(contentsOfFile: installed, encoding: .utf8) == "shared\n")
    }

    @Test func anExecutableOutsideTheFolderIsRefused() throws {
        let work = try TempDirectory("install")
        try work.write("bin/tool", "#!/bin/sh\n", mode: 0o755)
        try work.write(
            "outside/manifest.json",
            #"{"id": "com.test.outside", "version": "1", "owner": "EXAMPLETEAM", "protocolVersion": 1, "executable": "../bin/tool", "intents": [{"name": "Outside"}]}"#)
        var cli = try CLI()
        cli.pluginPath = []
        let refused = try cli.run(["plugins", "install", work.url.appendingPathComponent("outside").path])
        #expect(refused.status == 11, "\(refused)")
        #expect(refused.stderr.contains("executable '../bin/tool' lies outside the plugin's folder"), "\(refused)")
        #expect(Self.installedEntries(cli).isEmpty)
    }

    @Test func aFailedReplaceLeavesTheInstalledPluginWorking() throws {
        let work = try TempDirectory("install")
        let first = try Self.pythonPlugin(in: work, name: "v1", id: "com.test.whisper", intent: "WhisperText")
        let second = try Self.pythonPlugin(in: work, name: "v2", id: "com.test.whisper", intent: "WhisperText", version: "2.0.0")
        var cli = try CLI()
        cli.pluginPath = []
        #expect(try cli.run(["plugins", "install", first.path]).status == 0)
        #expect(try cli.run(["plugins", "sign", second.path, "--owner", "EXAMPLETEAM"]).status == 0)
        try Data("# changed after signing\n".utf8).write(to: second.appendingPathComponent("notes.txt"))
        let refused = try cli.run(["plugins", "install", second.path, "--replace"])
        #expect(refused.status == 19, "\(refused)")
        #expect(refused.stderr.contains("notes.txt"), "\(refused)")
        #expect(Self.installedEntries(cli) == ["com.test.whisper"])
        let intent = try work.write("whisper.json", #"{"intent": "WhisperText", "parameters": {"text": "still"}}"#)
        let handled = try cli.run(["handle", intent.path])
        #expect(handled.status == 0, "\(handled)")
        let manifest = try String(contentsOfFile: cli.home.url.appendingPathComponent("plugins/com.test.whisper/manifest.json").path, encoding: .utf8)
        #expect(manifest.contains("\"1.0.0\""))
    }

    @Test func removeTakesThePluginOffAndSaysWhatIsInstalledOtherwise() throws {
        let work = try TempDirectory("install")
        let source = try Self.pythonPlugin(in: work, name: "mine", id: "com.test.whisper", intent: "WhisperText")
        var cli = try CLI()
        cli.pluginPath = []
        #expect(try cli.run(["plugins", "install", source.path]).status == 0)
        let removed = try cli.run(["plugins", "remove", "com.test.whisper"])
        #expect(removed.status == 0, "\(removed)")
        #expect(Self.installedEntries(cli).isEmpty, "\(Self.installedEntries(cli))")
        let intent = try work.write("whisper.json", #"{"intent": "WhisperText", "parameters": {"text": "gone"}}"#)
        #expect(try cli.run(["handle", intent.path]).status == 5)
        let again = try cli.run(["plugins", "remove", "com.test.whisper"])
        #expect(again.status == 11, "\(again)")
        #expect(again.stderr.contains("com.test.whisper is not installed"), "\(again)")

        cli.pluginPath = [source]
        let elsewhere = try cli.run(["plugins", "remove", "com.test.whisper"])
        #expect(elsewhere.status == 11, "\(elsewhere)")
        #expect(elsewhere.stderr.contains("on the plugin path, which extrun does not manage"), "\(elsewhere)")
        #expect(FileManager.default.fileExists(atPath: source.appendingPathComponent("plugin.py").path))
    }
}
