import ExtrunProtocol
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// README's "Your own plugin" recipe (docs/plugin-guide.md §6), followed as written: the
/// example copied with `cp -R` is a working plugin, which passes `plugins check`, installs and runs.
@Suite struct PluginRecipeTests {
    static let example = StagedPlugins.packageRoot.appendingPathComponent("Examples/python-uppercase")

    /// The recipe's shell lines in README (with `Scripts/extrun` for `extrun`): the test runs
    /// the same lines, so the two cannot drift apart.
    static let recipe = [
        "cp -R Examples/python-uppercase /tmp/whisper",
        "rm /tmp/whisper/test_plugin.py",
        "sed -i 's/com\\.example\\.python-uppercase/com.me.whisper/g; s/ShoutText/WhisperText/g' /tmp/whisper/plugin.py /tmp/whisper/manifest.json",
        "Scripts/extrun plugins check /tmp/whisper",
        "Scripts/extrun plugins install /tmp/whisper",
        #"echo '{"intent": "WhisperText", "parameters": {"text": "psst"}}' | Scripts/extrun handle --format text -"#,
    ]

    @Test("The example's extrun_plugin.py is a file (not a link) identical to SDKs/python/extrun_plugin.py")
    func theExampleCarriesTheSDKItself() throws {
        let module = Self.example.appendingPathComponent("extrun_plugin.py").path
        var info = stat()
        #expect(lstat(module, &info) == 0 && info.st_mode & S_IFMT == S_IFREG, "\(module) must be a file: a copied link leads nowhere")
        let sdk = try Data(contentsOf: StagedPlugins.packageRoot.appendingPathComponent("SDKs/python/extrun_plugin.py"))
        let copy = try Data(contentsOf: URL(fileURLWithPath: module))
        #expect(copy == sdk, "Examples/python-uppercase/extrun_plugin.py differs from SDKs/python/extrun_plugin.py: cp SDKs/python/extrun_plugin.py Examples/python-uppercase/")
    }

    @Test("README's recipe, line by line in a fresh folder: check passes, install works, the intent runs")
    func theRecipeAsWritten() throws {
        let readme = try String(contentsOf: StagedPlugins.packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        for line in Self.recipe {
            #expect(readme.contains(line), "README's recipe no longer has: \(line)")
        }
        let work = try TempDirectory("recipe")
        let folder = work.url.appendingPathComponent("whisper").path
        var cli = try CLI()
        cli.environment["EXTRUN_COMMAND"] = "Scripts/extrun"
        for line in Self.recipe {
            let line = line.replacingOccurrences(of: "/tmp/whisper", with: folder)
            if line.hasPrefix("Scripts/extrun ") || line.contains("| Scripts/extrun ") {
                let stdin = line.hasPrefix("echo '") ? String(line.split(separator: "'")[1]) : nil
                let arguments = line.components(separatedBy: "Scripts/extrun ")[1].split(separator: " ").map(String.init)
                let result = try cli.run(arguments, stdin: stdin)
                #expect(result.status == 0, "\(line)\n\(result)")
                if arguments.first == "plugins", arguments.dropFirst().first == "check" {
                    #expect(result.stdout.contains("PASS  files:"), "\(result)")
                    #expect(!result.stdout.contains("FAIL"), "\(result)")
                }
                if arguments.dropFirst().first == "install" {
                    #expect(result.stdout.contains("Try it: Scripts/extrun describe WhisperText"), "\(result)")
                }
                if arguments.first == "handle" {
                    #expect(result.stdout.contains("WhisperText by com.me.whisper (extension): success"), "\(result)")
                    #expect(result.stdout.contains("PSST!"), "\(result)")
                }
            } else {
                let shell = Process()
                shell.executableURL = URL(fileURLWithPath: "/bin/sh")
                shell.arguments = ["-c", line]
                shell.currentDirectoryURL = StagedPlugins.packageRoot
                try shell.run()
                shell.waitUntilExit()
                #expect(shell.terminationStatus == 0, "\(line)")
            }
        }
        let installed = cli.home.url.appendingPathComponent("plugins/com.me.whisper")
        let files = try FileManager.default.contentsOfDirectory(atPath: installed.path).sorted()
        #expect(files == ["extrun_plugin.py", "manifest.json", "plugin.py"], "\(files)")
    }

    @Test("plugins check of a copy whose extrun_plugin.py is a link to nothing fails files, in install's words")
    func aDanglingLinkFailsTheFilesCheck() throws {
        let work = try TempDirectory("recipe")
        let folder = work.url.appendingPathComponent("dangling")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        for name in ["plugin.py", "manifest.json"] {
            try FileManager.default.copyItem(at: Self.example.appendingPathComponent(name), to: folder.appendingPathComponent(name))
        }
        #expect(symlink("../../SDKs/python/extrun_plugin.py", folder.appendingPathComponent("extrun_plugin.py").path) == 0)
        var cli = try CLI()
        cli.pluginPath = []  // the staged example claims ShoutText: install would refuse that first
        let checked = try cli.run(["plugins", "check", folder.path])
        #expect(checked.status == 1, "\(checked)")
        let words = "\(folder.path)/extrun_plugin.py is a symbolic link to nothing; remove it or point it at the file"
        #expect(checked.stdout.contains("FAIL  files: 1 broken (a link to nothing)"), "\(checked)")
        #expect(checked.stdout.contains(words), "\(checked)")
        let installed = try cli.run(["plugins", "install", folder.path])
        #expect(installed.status == 11, "\(installed)")
        #expect(installed.stderr.contains(words), "\(installed)")
    }

    @Test("plugins check of a missing folder says that it does not exist")
    func aMissingFolderDoesNotExist() throws {
        let work = try TempDirectory("recipe")
        let cli = try CLI()
        let checked = try cli.run(["plugins", "check", work.url.appendingPathComponent("nowhere").path])
        #expect(checked.status == 11, "\(checked)")
        #expect(checked.stderr.contains("nowhere does not exist"), "\(checked)")
    }
}
