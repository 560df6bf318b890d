import ExtrunProtocol
import Foundation
import Testing

/// A plugin in Python (on SDKs/python/extrun_plugin.py, copied beside it) that answers
/// every `handle` with the response code it is given as `code`.
private let codePlugin = #"""
    #!/usr/bin/env python3
    import sys, time
    sys.dont_write_bytecode = True
    import extrun_plugin as extrun


    class AnswerWith(extrun.Intent):
        name = "AnswerWith"

        def handle(self, values, context):
            if values["code"] == "hang":
                while True:
                    time.sleep(1000)
            print("stray output on stdout")
            return extrun.Response.make(values["code"], dialog="Answered.")


    extrun.run("test.codes", "1.0.0", [AnswerWith()], reusable=False)
    """#

private let codeManifest = #"""
    {"id": "test.codes", "version": "1.0.0", "owner": "TESTTEAM", "protocolVersion": 1, "executable": "plugin.py",
     "intents": [{"name": "AnswerWith", "parameters": [{"name": "code", "type": "string", "required": true}],
                  "responses": [{"code": "soldOut"}]}]}
    """#

@Suite("extrun CLI")
struct CLITests {
    let cli: CLI

    init() throws {
        cli = try CLI()
    }

    /// Writes an intent file into a fresh directory and runs `extrun handle` on it.
    func handle(_ intentJSON: String, _ extra: [String] = [], cli: CLI? = nil) throws -> CLIResult {
        let dir = try TempDirectory("intent")
        let file = try dir.write("intent.json", intentJSON)
        return try (cli ?? self.cli).run(["handle", file.path] + extra)
    }

    // MARK: Success and responses

    @Test("handle: success prints one JSON object with id, intent, plugin, mode, response, metrics, limits and donation (no steps for one run); exit 0")
    func success() throws {
        let result = try cli.run(["handle", "Examples/intents/make-uppercase.json"])
        #expect(result.status == 0, "\(result)")
        let json = try result.json()
        #expect(json["intent"] == "MakeUppercase")
        #expect(json["plugin"] == "com.example.uppercase")
        #expect(json["mode"] == "extension")
        #expect(json["response"]?["code"] == "success")
        #expect(json["response"]?["properties"]?["result"] == "HELLO WORLD")
        #expect(json["error"] == nil)
        #expect((json["metrics"]?["wallMs"]?.doubleValue ?? 0) > 0)
        #expect(json["metrics"]?["launchMs"]?.doubleValue != nil)
        #expect(json["metrics"]?["cpuMs"]?.doubleValue != nil)
        #expect((json["metrics"]?["peakMemoryBytes"]?.intValue ?? 0) > 0)
        #expect(json["metrics"]?["peakRSSBytes"]?.intValue != nil)
        #expect(json["limits"]?["deadlineMs"] == 10_000)
        #expect((json["limits"]?["memoryBytes"]?.intValue ?? 0) > 0)
        // One process ran: no `steps`, which would repeat the top-level fields.
        #expect(Set(json.objectValue?.keys.map { $0 } ?? []) == ["id", "intent", "plugin", "mode", "response", "metrics", "limits", "donation"])
        #expect(json["donation"] == ["donated": true])
        #expect(result.stderr.isEmpty, "\(result.stderr)")
    }

    @Test("handle: the id of the intent file is echoed")
    func echoesID() throws {
        let result = try handle(#"{"intent":"MakeUppercase","id":"job-7","parameters":{"text":"x"}}"#)
        #expect(result.status == 0, "\(result)")
        #expect(try result.json()["id"] == "job-7")
    }

    @Test("handle: RenameFiles with the example intent file, files relative to it")
    func renameFiles() throws {
        let result = try cli.run(["handle", "Examples/intents/rename-files.json"])
        #expect(result.status == 0, "\(result)")
        let names = try result.json()["response"]?["properties"]?["files"]?.arrayValue?.compactMap { $0["filename"]?.stringValue } ?? []
        #expect(names.count == 2)
        #expect(names.allSatisfy { $0.range(of: #"^\d{4}-\d{2}-\d{2} "#, options: .regularExpression) != nil }, "\(names)")
        #expect(names.first?.hasSuffix(" meeting notes.txt") == true, "\(names)")
    }

    /// A CLI whose plugin path also holds the Python plugin that answers with the code it is given.
    func codesCLI() throws -> (CLI, TempDirectory) {
        let plugins = try TempDirectory("cli-plugins")
        try plugins.write("codes/manifest.json", codeManifest)
        try plugins.write("codes/plugin.py", codePlugin, mode: 0o755)
        let module = StagedPlugins.packageRoot.appendingPathComponent("SDKs/python/extrun_plugin.py")
        try plugins.write("codes/extrun_plugin.py", String(decoding: try Data(contentsOf: module), as: UTF8.self))
        return (try CLI(extraPluginDirectories: [plugins.url]), plugins)
    }

    @Test("handle: a response other than success exits 1, with the response printed")
    func unsuccessfulResponse() throws {
        let (cli, plugins) = try codesCLI()
        defer { withExtendedLifetime(plugins) {} }
        for code in ["failure", "soldOut"] {
            let result = try handle(#"{"intent":"AnswerWith","parameters":{"code":"\#(code)"}}"#, cli: cli)
            #expect(result.status == 1, "\(result)")
            let json = try result.json()
            #expect(json["response"]?["code"] == .string(code))
            #expect(json["response"]?["dialog"]?["full"] == "Answered.")
            #expect(json["error"] == nil)
            #expect(json["plugin"] == "test.codes")
        }
        let success = try handle(#"{"intent":"AnswerWith","parameters":{"code":"success"}}"#, cli: cli)
        #expect(success.status == 0, "\(success)")
        // The plugin's stray print went to its captured stdout, not into extrun's output.
        #expect(!success.stdout.contains("stray output"))
        let verbose = try handle(#"{"intent":"AnswerWith","parameters":{"code":"success"}}"#, ["--verbose"], cli: cli)
        #expect(verbose.stderr.contains("[test.codes stdout] stray output on stdout"), "\(verbose)")
        #expect(try verbose.json()["response"]?["code"] == "success")
    }

    // MARK: Errors and their exit codes

    @Test("handle: a missing parameter is parameterUnresolved, exit 3")
    func parameterUnresolved() throws {
        let result = try handle(#"{"intent":"MakeUppercase"}"#)
        #expect(result.status == 3, "\(result)")
        let json = try result.json()
        #expect(json["error"]?["kind"] == "parameterUnresolved")
        #expect(json["error"]?["parameter"] == "text")
        #expect(json["error"]?["message"] == "text: Which text would you like to make uppercase?")
        #expect(json["response"] == nil)
        #expect(json["plugin"] == "com.example.uppercase")
    }

    @Test("handle: invalidIntent, exit 4, naming the field", arguments: [
        ("{\"intent\": \"MakeUppercase\",\n \"parameters\": {\"text\": }}", nil as String?, "not valid JSON"),
        (#"{"intent":"MakeUppercase","parameters":{"text":"x"},"extra":1}"#, "extra", "unknown field"),
        (#"{"intent":"MakeUppercase","parameters":{"text":5}}"#, "parameters.text", "expected a string, got integer"),
        (#"{"intent":"MakeUppercase","parameters":{"txt":"x"}}"#, "parameters.txt", "unknown parameter of MakeUppercase"),
        (#"{"intent":["MakeUppercase"]}"#, "intent", "expected a non-empty string, got array"),
        (#"{"intent":"MakeUppercase","mode":"app","parameters":{"text":"x"}}"#, "mode", "'app' is not a mode"),
    ])
    func invalidIntent(intentJSON: String, field: String?, fragment: String) throws {
        let result = try handle(intentJSON)
        #expect(result.status == 4, "\(result)")
        let json = try result.json()
        #expect(json["error"]?["kind"] == "invalidIntent")
        #expect(json["error"]?["field"] == field.map { .string($0) })
        #expect(json["error"]?["message"]?.stringValue?.contains(fragment) == true, "\(result)")
        #expect(json["error"]?["file"]?.stringValue?.hasSuffix("intent.json") == true)
    }

    @Test("handle: an intent file that cannot be read is invalidIntent, exit 4")
    func unreadableIntentFile() throws {
        let dir = try TempDirectory("intent")
        let path = dir.url.appendingPathComponent("missing.json").path
        let result = try cli.run(["handle", path])
        #expect(result.status == 4, "\(result)")
        let json = try result.json()
        #expect(json["error"]?["kind"] == "invalidIntent")
        #expect(json["error"]?["file"] == .string(path))
        #expect(json["error"]?["message"]?.stringValue?.hasPrefix("\(path): cannot read the intent file") == true, "\(result)")
    }

    @Test("handle: a file parameter that cannot be read is invalidIntent, exit 4")
    func unreadableParameterFile() throws {
        let result = try handle(#"{"intent":"RenameFiles","parameters":{"files":["no such file.txt"]}}"#)
        #expect(result.status == 4, "\(result)")
        let json = try result.json()
        #expect(json["error"]?["field"] == "parameters.files[0]")
        #expect(json["error"]?["message"]?.stringValue?.contains("cannot read") == true)
    }

    @Test("handle: no plugin for the intent is noHandler, exit 5")
    func noHandler() throws {
        let result = try handle(#"{"intent":"ExtrunTestNoSuchIntent"}"#)
        #expect(result.status == 5, "\(result)")
        let json = try result.json()
        #expect(json["error"]?["kind"] == "noHandler")
        #expect(json["error"]?["intent"] == "ExtrunTestNoSuchIntent")
        #expect(json["error"]?["message"]?.stringValue?.contains("MakeUppercase") == true)
        #expect(json["intent"] == "ExtrunTestNoSuchIntent")
    }

    @Test("handle: a plugin whose executable is missing is configurationError naming its manifest, exit 11")
    func configurationError() throws {
        let plugins = try TempDirectory("cli-plugins")
        let manifest = try plugins.write(
            "ghost/manifest.json",
            #"{"id":"test.ghost","version":"1","owner":"T","protocolVersion":1,"executable":"gone","intents":[{"name":"ExtrunTestHaunt"}]}"#)
        let cli = try CLI(extraPluginDirectories: [plugins.url])
        let result = try handle(#"{"intent":"ExtrunTestHaunt"}"#, cli: cli)
        #expect(result.status == 11, "\(result)")
        let json = try result.json()
        #expect(json["error"]?["kind"] == "configurationError")
        #expect(json["error"]?["file"] == .string(manifest.path))
        // The other plugins still work.
        let other = try handle(#"{"intent":"MakeUppercase","parameters":{"text":"x"}}"#, cli: cli)
        #expect(other.status == 0, "\(other)")
    }

    @Test("handle: two plugins claiming one intent is configurationError, exit 11")
    func twoClaimants() throws {
        let plugins = try TempDirectory("cli-plugins")
        try plugins.write(
            "copy/manifest.json",
            #"{"id":"test.copy","version":"1","owner":"T","protocolVersion":1,"executable":"run","intents":[{"name":"MakeUppercase","parameters":[{"name":"text","type":"string"}]}]}"#)
        try plugins.write("copy/run", "#!/bin/sh\nexit 1\n", mode: 0o755)
        let cli = try CLI(extraPluginDirectories: [plugins.url])
        let result = try handle(#"{"intent":"MakeUppercase","parameters":{"text":"x"}}"#, cli: cli)
        #expect(result.status == 11, "\(result)")
        let files = try result.json()["error"]?["files"]?.arrayValue ?? []
        #expect(files.count == 2)
    }

    @Test("a broken manifest on the path: plugins reports it (exit 11); handle of another intent still works")
    func brokenManifest() throws {
        let plugins = try TempDirectory("cli-plugins")
        let manifest = try plugins.write("broken/manifest.json", "{\"id\": \"test.broken\",")
        let cli = try CLI(extraPluginDirectories: [plugins.url])

        let list = try cli.run(["plugins", "--format", "json"])
        #expect(list.status == 11, "\(list)")
        let problems = (try list.json()["problems"]?.arrayValue?.compactMap(\.stringValue) ?? []).filter { $0.hasPrefix(plugins.url.path) }
        #expect(problems.count == 1)
        #expect(problems.first?.hasPrefix(manifest.path + ": invalid manifest") == true, "\(problems)")

        let text = try cli.run(["plugins"])
        #expect(text.status == 11)
        #expect(text.stdout.contains("Problems:\n  \(manifest.path): invalid manifest"), "\(text)")

        let ok = try handle(#"{"intent":"MakeUppercase","parameters":{"text":"x"}}"#, cli: cli)
        #expect(ok.status == 0, "\(ok)")
        // An intent nobody readable declares: noHandler, mentioning the manifest that could not be read.
        let missing = try handle(#"{"intent":"ExtrunTestBroken"}"#, cli: cli)
        #expect(missing.status == 5, "\(missing)")
        #expect(try missing.json()["error"]?["message"]?.stringValue?.contains(manifest.path) == true)
    }

    // MARK: Options

    @Test("handle - reads the intent from standard input")
    func standardInput() throws {
        let result = try cli.run(["handle", "-"], stdin: #"{"intent":"MakeUppercase","parameters":{"text":"from stdin"}}"#)
        #expect(result.status == 0, "\(result)")
        #expect(try result.json()["response"]?["properties"]?["result"] == "FROM STDIN")

        let bad = try cli.run(["handle", "-"], stdin: "{")
        #expect(bad.status == 4, "\(bad)")
        #expect(try bad.json()["error"]?["file"] == "<stdin>")
    }

    @Test("handle --format text prints a summary for people")
    func textFormat() throws {
        let result = try cli.run(["handle", "--format", "text", "Examples/intents/make-uppercase.json"])
        #expect(result.status == 0, "\(result)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first == "MakeUppercase by com.example.uppercase (extension): success")
        #expect(lines.contains("  result: HELLO WORLD"))
        #expect(lines.last?.hasPrefix("  [wall ") == true, "\(lines)")

        let error = try cli.run(["handle", "--format", "text", "-"], stdin: #"{"intent":"MakeUppercase"}"#)
        #expect(error.status == 3)
        #expect(error.stdout.contains("MakeUppercase by com.example.uppercase (extension): error parameterUnresolved"), "\(error)")
    }

    @Test("handle --mode in-app overrides the manifest's default mode")
    func inAppMode() throws {
        let result = try cli.run(["handle", "--mode", "in-app", "Examples/intents/make-uppercase.json"])
        #expect(result.status == 0, "\(result)")
        #expect(try result.json()["mode"] == "in-app")
        let fromFile = try handle(#"{"intent":"MakeUppercase","mode":"in-app","parameters":{"text":"x"}}"#)
        #expect(try fromFile.json()["mode"] == "in-app")
        let overridden = try handle(#"{"intent":"MakeUppercase","mode":"in-app","parameters":{"text":"x"}}"#, ["--mode", "extension"])
        #expect(try overridden.json()["mode"] == "extension")
    }

    @Test("handle: bad command lines exit 64", arguments: [
        ["handle"], ["handle", "--mode", "app", "x.json"], ["handle", "--format", "yaml", "x.json"], ["frobnicate"],
        ["handle", "--timeout", "soon", "x.json"], ["handle", "--memory-limit", "lots", "x.json"],
    ])
    func usageErrors(arguments: [String]) throws {
        let result = try cli.run(arguments)
        #expect(result.status == 64, "\(result)")
        #expect(!result.stderr.isEmpty)
    }

    @Test("--timeout without a unit is refused, naming both readings (it was 2 ms)", arguments: ["handle", "batch", "continue"])
    func timeoutNeedsAUnit(command: String) throws {
        let result = try cli.run([command, "--timeout", "2", "x.json"])
        #expect(result.status == 64, "\(result)")
        #expect(result.stderr.contains("--timeout '2' has no unit: write 2s (seconds) or 2ms (milliseconds)"), "\(result.stderr)")
        #expect(result.stdout.isEmpty)
    }

    @Test("--verbose shows each phase with its time, and each host-service request")
    func verbosePhases() throws {
        let result = try cli.run(["handle", "--verbose", "Examples/intents/make-uppercase.json"])
        #expect(result.status == 0, "\(result)")
        for phase in ["initialize: answered in ", "resolve 'text': success in ", "confirm: ready in ", "handle: success in "] {
            #expect(result.stderr.contains("[extrun] com.example.uppercase \(phase)"), "\(phase): \(result.stderr)")
        }
        #expect(result.stderr.contains(" ms from launch)"))
        let counted = try cli.run(["handle", "--verbose", "Examples/intents/increment-global-variable.json"])
        #expect(counted.stderr.contains("[extrun] com.example.globalvariables asked globals.get '"), "\(counted.stderr)")
    }

    @Test("handle --timeout: a plugin that does not answer in time is a timeout, exit 8")
    func timeoutOption() throws {
        let (cli, plugins) = try codesCLI()
        defer { withExtendedLifetime(plugins) {} }
        let started = Date()
        let result = try handle(#"{"intent":"AnswerWith","parameters":{"code":"hang"}}"#, ["--timeout", "500ms"], cli: cli)
        #expect(result.status == 8, "\(result)")
        let json = try result.json()
        #expect(json["error"]?["kind"] == "timeout")
        #expect(json["error"]?["phase"] == "handle")
        #expect(json["error"]?["deadlineMs"] == 500)
        #expect(json["limits"]?["deadlineMs"] == 500)
        #expect(Date().timeIntervalSince(started) < 20)
    }

    @Test("handle --timeout and --memory-limit within the policy are used; beyond it they are invalidIntent, exit 4")
    func limitOptions() throws {
        let ok = try cli.run(["handle", "--timeout", "2.5s", "--memory-limit", "64MiB", "Examples/intents/make-uppercase.json"])
        #expect(ok.status == 0, "\(ok)")
        #expect(try ok.json()["limits"]?["deadlineMs"] == 2_500)
        #expect(try ok.json()["limits"]?["memoryBytes"] == .int(64 << 20))

        let long = try cli.run(["handle", "--timeout", "10m", "Examples/intents/make-uppercase.json"])
        #expect(long.status == 4, "\(long)")
        #expect(try long.json()["error"]?["limit"] == "deadlineMs")
        #expect(try long.json()["error"]?["requested"] == 600_000)

        let big = try cli.run(["handle", "--memory-limit", "2GiB", "Examples/intents/make-uppercase.json"])
        #expect(big.status == 4, "\(big)")
        #expect(try big.json()["error"]?["limit"] == "memoryBytes")
        // The same is allowed in in-app mode.
        let inApp = try cli.run(["handle", "--mode", "in-app", "--memory-limit", "2GiB", "Examples/intents/make-uppercase.json"])
        #expect(inApp.status == 0, "\(inApp)")
    }

    @Test("handle --format text with an unreadable intent file")
    func textFormatUnreadable() throws {
        let result = try cli.run(["handle", "--format", "text", "/nonexistent/intent.json"])
        #expect(result.status == 4, "\(result)")
        #expect(result.stdout.hasPrefix("extrun: error invalidIntent\n  /nonexistent/intent.json: cannot read the intent file"), "\(result)")
    }

    @Test("handle --verbose logs the phases on stderr, and stdout stays one JSON object")
    func verbose() throws {
        let result = try cli.run(["handle", "-v", "Examples/intents/make-uppercase.json"])
        #expect(result.status == 0, "\(result)")
        #expect(result.stderr.contains("[extrun] com.example.uppercase started in extension mode"), "\(result)")
        #expect(try result.json()["response"]?["code"] == "success")
    }

    // MARK: plugins

    @Test("plugins lists the plugins and their intents")
    func pluginsText() throws {
        let result = try cli.run(["plugins"])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.contains("com.example.uppercase 1.0.0  owner EXAMPLETEAM  modes extension,in-app"), "\(result)")
        #expect(result.stdout.contains("  MakeUppercase(text: string)"))
        #expect(result.stdout.contains("  RenameFiles(files: file[], dateFormat: string?, changeCase: boolean?, newCase: enum?, position: enum?)"))
        #expect(!result.stdout.contains("Problems:"))
    }

    @Test("plugins --format json lists the search path, the plugins and no problems")
    func pluginsJSON() throws {
        let result = try cli.run(["plugins", "--format", "json"])
        #expect(result.status == 0, "\(result)")
        let json = try result.json()
        let searchPath = json["searchPath"]?.arrayValue?.compactMap(\.stringValue) ?? []
        // (A PREFIX/share/extrun/plugins next to an installed binary may follow.)
        #expect(Array(searchPath.prefix(cli.pluginPath.count + 1)) == cli.pluginPath.map(\.path) + [cli.home.url.appendingPathComponent("plugins").path])
        let plugins = json["plugins"]?.arrayValue ?? []
        let uppercase = try #require(plugins.first { $0["id"] == "com.example.uppercase" })
        #expect(uppercase["version"] == "1.0.0")
        #expect(uppercase["owner"] == "EXAMPLETEAM")
        #expect(uppercase["modes"] == ["extension", "in-app"])
        #expect(uppercase["intents"] == ["MakeUppercase"])
        #expect(uppercase["directory"]?.stringValue?.hasSuffix("/MakeUppercase") == true)
        #expect(plugins.contains { $0["id"] == "com.example.renamefiles" })
        #expect(json["problems"] == [])
    }

    @Test("plugins with an empty plugin path says where it looked")
    func pluginsEmpty() throws {
        var cli = try CLI()
        cli.pluginPath = []
        let result = try cli.run(["plugins"])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.hasPrefix("No plugins found. Searched: "), "\(result)")
    }

    // MARK: Help

    @Test("--help of each command exits 0 and mentions its options", arguments: [
        (["--help"], ["handle", "plugins", "EXTRUN_PLUGIN_PATH", "--version"]),
        (["handle", "--help"], ["<intent.json>", "--mode", "--memory-limit", "--timeout", "--format", "--yes", "--verbose", "--no-app-launch", "--no-donate", "Exit status"]),
        (["continue", "--help"], ["<activity.json>", "activityTypes", "--memory-limit", "--timeout"]),
        (["donations", "delete", "--help"], ["--owner", "--id", "--group", "--all"]),
        (["plugins", "--help"], ["--format", "EXTRUN_PLUGIN_PATH"]),
        (["help", "handle"], ["--mode"]),
    ])
    func help(arguments: [String], mentions: [String]) throws {
        let result = try cli.run(arguments)
        #expect(result.status == 0, "\(result)")
        for word in mentions {
            #expect(result.stdout.contains(word), "\(arguments.joined(separator: " ")) does not mention \(word)")
        }
    }

    @Test("every subcommand listed in --help has a --help of its own that exits 0")
    func everySubcommandHasHelp() throws {
        let top = try cli.run(["--help"])
        // The overview and its examples follow the subcommands (USAGE first): not part of the list.
        let section = (top.stdout.components(separatedBy: "SUBCOMMANDS:").last ?? "").components(separatedBy: "OVERVIEW:").first ?? ""
        // Subcommand lines are indented by two spaces; their wrapped descriptions by more.
        // Subcommand lines are "  name   description"; wrapped descriptions are indented further,
        // and the closing "  See 'extrun help <subcommand>'..." line is not a subcommand.
        let names = section.split(separator: "\n").compactMap { line -> String? in
            guard line.hasPrefix("  "), !line.hasPrefix("   "), let word = line.split(separator: " ").first,
                word.allSatisfy({ $0.isLowercase || $0.isNumber || $0 == "-" })
            else { return nil }
            return String(word)
        }
        #expect(names.contains("handle") && names.contains("plugins"), "\(names)")
        for name in names {
            let result = try cli.run([name, "--help"])
            #expect(result.status == 0, "\(name) --help: \(result)")
            #expect(result.stdout.contains("USAGE: extrun \(name)"), "\(name) --help: \(result.stdout)")
        }
    }

    @Test("--version prints the host version")
    func version() throws {
        let result = try cli.run(["--version"])
        #expect(result.status == 0)
        #expect(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "0.1.0")
    }
}
