import ExtrunProtocol
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `extrun handle|options|continue|phrase --server SOCKET` (and `EXTRUN_SERVER`): the CLI as a
/// client of a real `extrun serve`, held against the same command run here on the same
/// input. On a real pseudo-terminal (Fixtures/pty_session.py) a person answers the
/// questions; the questions asked, the report and the exit status must be the local
/// command's. Every test ends the service and checks that no process and no file of it,
/// and no scratch file of the local runs, is left.
@Suite("extrun as a client of extrun serve", .serialized)
struct ServeClientTests {
    let cli: CLI

    init() throws {
        cli = try CLI()
    }

    // MARK: On a terminal

    /// What a command did on a pseudo-terminal: what it wrote there (the questions and the
    /// typed answers, echoed), its report (stdout), its exit status.
    struct TerminalRun: CustomStringConvertible {
        var transcript: String
        var stdout: String
        var status: Int
        var unanswered: [String]
        var killed: Bool

        var description: String {
            "exit \(status)\(killed ? " (killed after 30 s)" : "")\(unanswered.isEmpty ? "" : ", never asked: \(unanswered)")\n--- terminal\n\(transcript)\n--- stdout\n\(stdout)"
        }
    }

    /// `extrun ARGUMENTS` on a new pseudo-terminal (its controlling terminal, stdin and
    /// stderr; stdout to a file); `answers` typed as their questions appear.
    func onATerminal(_ arguments: [String], answers: [(String, String)], environment: [String: String]) throws -> TerminalRun {
        let driver = StagedPlugins.packageRoot.appendingPathComponent("Tests/ExtrunCLITests/Fixtures/pty_session.py").path
        let dir = try TempDirectory("pty")
        let out = dir.url.appendingPathComponent("stdout").path
        let script = String(decoding: JSONWriter.bytes(.array(answers.map { .array([.string($0.0), .string($0.1)]) })), as: UTF8.self)
        let run = try ProgramRun.program(
            "/usr/bin/python3", ["-B", driver, script, out, try ExtrunBinary.url().path] + arguments, environment: environment)
        guard let result = try? JSONParser.parse(Array(run.stdout.utf8)) else {
            Issue.record("the terminal driver failed: \(run)")
            return TerminalRun(transcript: "", stdout: "", status: -1, unanswered: [], killed: false)
        }
        return TerminalRun(
            transcript: result["transcript"]?.stringValue ?? "", stdout: (try? String(contentsOfFile: out, encoding: .utf8)) ?? "",
            status: Int(result["status"]?.intValue ?? -1), unanswered: result["unanswered"]?.arrayValue?.compactMap(\.stringValue) ?? [],
            killed: result["killed"]?.boolValue ?? true)
    }

    /// A report without what depends on which host ran it and when: `id` (made up per run)
    /// and `metrics` (the service's run; docs/serve.md), also in each step.
    static func comparable(_ stdout: String) -> JSONValue? {
        guard case .object(var report) = try? JSONParser.parse(Array(stdout.utf8)) else { return nil }
        report["id"] = nil
        report["metrics"] = nil
        if let steps = report["steps"]?.arrayValue {
            report["steps"] = .array(
                steps.map { step in
                    guard case .object(var fields) = step else { return step }
                    fields["metrics"] = nil
                    return .object(fields)
                })
        }
        return .object(report)
    }

    struct Conversation: CustomStringConvertible {
        var arguments: [String]
        var answers: [(String, String)]
        var status: Int
        /// What the terminal must show (a question with its typed answer, a message).
        var shown: [String]
        var description: String { arguments.joined(separator: " ") }
    }

    @Test("On a terminal, handle --server and phrase --server ask what the local command asks (a missing value, a choice, a value to confirm, the intent's confirmation, a refusal and the question again, a declined confirmation) and print its report with its exit status")
    func promptsOverTheConnection() throws {
        let service = try RunningService(cli: cli)
        defer { service.stop() }
        let localTmp = try TempDirectory("client-local-tmp")
        let intents = try TempDirectory("client-intents")
        let missingText = try intents.write("missing-text.json", #"{"intent": "MakeUppercase"}"#).path
        let missingSoup = try intents.write("missing-soup.json", #"{"intent": "OrderSoup"}"#).path
        let ambiguous = try intents.write("ambiguous.json", #"{"intent": "OrderSoup", "parameters": {"soup": {"identifier": "x", "title": "soup"}}}"#).path
        let chowder = try intents.write("chowder.json", #"{"intent": "OrderSoup", "parameters": {"soup": {"identifier": "x", "title": "chowder"}, "toppings": ["cheese"]}}"#).path
        let refused = try intents.write("refused.json", #"{"intent": "OrderSoup", "parameters": {"soup": {"identifier": "x", "title": "pizza"}, "quantity": 20}}"#).path
        let menu = "Which soup would you like?\n  1. Clam Chowder — $6.95\n  2. Tomato Soup — $4.95\n  3. Chicken Noodle Soup — $5.95\nChoose 1-3: "
        let conversations = [
            Conversation(
                arguments: ["handle", missingText], answers: [("Which text would you like to make uppercase? ", "hello there")], status: 0,
                shown: ["Which text would you like to make uppercase? hello there\n"]),
            Conversation(
                arguments: ["handle", missingSoup], answers: [("Choose 1-3: ", "2"), ("Order 1 Tomato Soup? [y/n] ", "y")], status: 0,
                shown: [menu + "2\n", "Order 1 Tomato Soup? [y/n] y\n"]),
            // A disambiguation among the plugin's candidates.
            Conversation(
                arguments: ["handle", ambiguous], answers: [("Choose 1-2: ", "2"), ("Order 1 Chicken Noodle Soup? [y/n] ", "yes")],
                status: 0, shown: ["Which one would you like?\n", "Order 1 Chicken Noodle Soup? [y/n] yes\n"]),
            Conversation(
                arguments: ["handle", chowder], answers: [("Did you mean Clam Chowder? [y/n] ", "y"), ("Order 1 Clam Chowder? [y/n] ", "y")], status: 0,
                shown: ["Did you mean Clam Chowder? [y/n] y\n", "Order 1 Clam Chowder? [y/n] y\n"]),
            // The intent's confirmation declined: confirmationDeclined, nothing ordered.
            Conversation(
                arguments: ["handle", chowder], answers: [("Did you mean Clam Chowder? [y/n] ", "y"), ("Order 1 Clam Chowder? [y/n] ", "n")], status: 13,
                shown: ["Order 1 Clam Chowder? [y/n] n\n"]),
            // A value to confirm, declined: the question for the value comes again.
            Conversation(
                arguments: ["handle", chowder], answers: [("Did you mean Clam Chowder? [y/n] ", "no"), ("Choose 1-3: ", "2"), ("Order 1 Tomato Soup? [y/n] ", "y")],
                status: 0, shown: ["Did you mean Clam Chowder? [y/n] no\n" + menu + "2\n"]),
            // Refused values: the plugin's message is told, and the question asked again.
            Conversation(
                arguments: ["handle", refused], answers: [("Choose 1-3: ", "1"), ("How many would you like? ", "3"), ("Order 3 Clam Chowder? [y/n] ", "y")],
                status: 0,
                shown: ["Sorry, that soup is not on the menu.\n" + menu + "1\n", "You can order at most 10 at a time.\nHow many would you like? 3\n"]),
            Conversation(arguments: ["handle", missingText, "--no-input"], answers: [], status: 3, shown: []),
            Conversation(
                arguments: ["phrase", "Order clam chowder in Soup Chef"], answers: [("Order 1 Clam Chowder? [y/n] ", "y")], status: 0,
                shown: ["Order 1 Clam Chowder? [y/n] y\n"]),
            Conversation(
                arguments: ["phrase", "Order clam chowder in Soup Chef"], answers: [("Order 1 Clam Chowder? [y/n] ", "n")], status: 13,
                shown: ["Order 1 Clam Chowder? [y/n] n\n"]),
        ]
        let localEnvironment = cli.environmentForRun(["TMPDIR": localTmp.path])
        for conversation in conversations {
            let local = try onATerminal(conversation.arguments, answers: conversation.answers, environment: localEnvironment)
            #expect(local.status == conversation.status && !local.killed && local.unanswered.isEmpty, "\(conversation): local: \(local)")
            for shown in conversation.shown {
                #expect(local.transcript.contains(shown), "\(conversation): local: the terminal should show \(shown.debugDescription): \(local)")
            }
            let expected = Self.comparable(local.stdout)
            #expect(expected != nil, "\(conversation): local: no report: \(local)")
            // Through ArgumentParser (--server after the file), EXTRUN_SERVER (for `handle FILE`,
            // the fast path), and `handle --server SOCKET FILE` (its own fast path).
            var remotes: [(String, [String], [String: String])] = [
                ("--server", conversation.arguments + ["--server", service.socket], cli.environmentForRun()),
                ("EXTRUN_SERVER", conversation.arguments, cli.environmentForRun(["EXTRUN_SERVER": service.socket])),
            ]
            if conversation.arguments.count == 2, conversation.arguments[0] == "handle" {
                remotes.append(("handle --server SOCKET FILE", ["handle", "--server", service.socket, conversation.arguments[1]], cli.environmentForRun()))
            }
            for (form, arguments, environment) in remotes {
                let remote = try onATerminal(arguments, answers: conversation.answers, environment: environment)
                #expect(remote.status == conversation.status && !remote.killed && remote.unanswered.isEmpty, "\(conversation) (\(form)): \(remote)")
                #expect(remote.transcript == local.transcript, "\(conversation) (\(form)): asked otherwise than the local command:\n\(remote)\n--- local\n\(local)")
                #expect(Self.comparable(remote.stdout) == expected, "\(conversation) (\(form)): another report than the local command's:\n\(remote)\n--- local\n\(local)")
            }
        }
        let scratch = try FileManager.default.contentsOfDirectory(atPath: localTmp.path)
        #expect(scratch.isEmpty, "the local runs left files in their TMPDIR: \(scratch)")
    }

    // MARK: options, continue, phrase

    /// A report's JSON without `id` and `metrics` (also in steps); a `noHandler` message
    /// without the plugin path, which the service keeps to its log (docs/serve.md, "Callers").
    static func essentials(_ result: CLIResult) -> JSONValue? {
        guard case .object(var report)? = comparable(result.stdout) else { return nil }
        if case .object(var error) = report["error"] ?? .null, error["kind"] == "noHandler", let message = error["message"]?.stringValue,
            let range = message.range(of: " (plugin path: ")
        {
            error["message"] = .string(String(message[..<range.lowerBound]) + String(message[range.lowerBound...].drop { $0 != ")" }.dropFirst()))
            report["error"] = .object(error)
        }
        return .object(report)
    }

    /// The text summary without its metrics line (`[wall ..., ...]`: the service's run).
    static func textWithoutMetrics(_ text: String) -> String {
        text.split(separator: "\n", omittingEmptySubsequences: false).filter { !$0.hasPrefix("  [wall ") }.joined(separator: "\n")
    }

    /// `arguments` run here, with `--server`, and with `EXTRUN_SERVER`: the same exit status
    /// (`status`), and the same report (JSON, or text with `--format text`).
    static func expectSameAsLocal(
        _ arguments: [String], status: Int32, local cli: CLI, service: RunningService, sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let local = try cli.run(arguments)
        let remote = try service.client(arguments + ["--server", service.socket])
        let environment = try service.client(arguments, environment: ["EXTRUN_SERVER": service.socket])
        #expect(local.status == status, "local \(arguments): \(local)", sourceLocation: sourceLocation)
        for (form, result) in [("--server", remote), ("EXTRUN_SERVER", environment)] {
            #expect(result.status == status, "\(form) \(arguments): \(result)\n--- local\n\(local)", sourceLocation: sourceLocation)
            if arguments.contains("text") {
                #expect(
                    Self.textWithoutMetrics(result.stdout) == Self.textWithoutMetrics(local.stdout), "\(form) \(arguments): \(result)\n--- local\n\(local)",
                    sourceLocation: sourceLocation)
            } else {
                let expected = Self.essentials(local)
                #expect(expected != nil, "local \(arguments): no report: \(local)", sourceLocation: sourceLocation)
                #expect(Self.essentials(result) == expected, "\(form) \(arguments): \(result)\n--- local\n\(local)", sourceLocation: sourceLocation)
            }
            #expect(result.stderr == local.stderr, "\(form) \(arguments): \(result)\n--- local\n\(local)", sourceLocation: sourceLocation)
        }
    }

    @Test("options, continue and phrase with --server or EXTRUN_SERVER: the local command's report (JSON and text) and exit status, errors included")
    func optionsContinueAndPhrase() throws {
        let service = try RunningService(cli: cli)
        defer { service.stop() }
        var local = cli
        let localTmp = try TempDirectory("client-local-tmp")
        local.environment["TMPDIR"] = localTmp.path
        let files = try TempDirectory("client-inputs")
        let notJSON = try files.write("not-json.json", #"{"intent": "#).path
        let unknownIntent = try files.write("unknown.json", #"{"intent": "NoSuchIntent"}"#).path
        let badActivity = try files.write("bad-activity.json", #"{"activityType": 3}"#).path
        let unknownActivity = try files.write("unknown-activity.json", #"{"activityType": "com.example.nobody"}"#).path
        let missing = files.sub("missing.json")
        let soup = StagedPlugins.packageRoot.appendingPathComponent("Examples/intents/order-soup.json").path
        let person = StagedPlugins.packageRoot.appendingPathComponent("Examples/activities/view-person.json").path
        let checks: [([String], Int32)] = [
            (["options", soup, "soup", "--search", "chow"], 0),
            (["options", soup, "soup", "--search", "chow", "--format", "text"], 0),
            (["options", soup, "soup", "--mode", "in-app"], 0),
            (["options", soup, "quantity"], 4),  // not dynamicOptions
            (["options", soup, "nosuch", "--format", "text"], 4),
            (["options", notJSON, "soup"], 4),
            (["options", notJSON, "soup", "--format", "text"], 4),
            (["options", missing, "soup"], 4),
            (["options", unknownIntent, "soup"], 5),
            (["continue", person], 0),
            (["continue", person, "--format", "text"], 0),
            (["continue", person, "--no-donate", "--timeout", "5s", "--memory-limit", "512MiB"], 0),
            (["continue", badActivity], 4),
            (["continue", badActivity, "--format", "text"], 4),
            (["continue", unknownActivity], 5),
            (["continue", missing], 4),
            (["phrase", "Order clam chowder in Soup Chef", "--yes"], 0),
            (["phrase", "Order clam chowder in Soup Chef", "--yes", "--format", "text"], 0),
            (["phrase", "Order clam chowder in Soup Chef", "--no-input"], 13),
            (["phrase", "Order soup in Soup Chef", "--no-input"], 3),  // "soup": two soups
            (["phrase", "Sing me a song", "--no-input"], 5),
        ]
        for (arguments, status) in checks {
            try Self.expectSameAsLocal(arguments, status: status, local: local, service: service)
        }
        // An empty phrase is a bad command line, here as over the service.
        for arguments in [["phrase", ""], ["phrase", "  ", "--server", service.socket]] {
            let result = try cli.run(arguments)
            #expect(result.status == 64 && result.stderr.contains("the phrase is empty"), "\(arguments): \(result)")
        }
        // Each command's --help says what --server does.
        for command in ["handle", "options", "continue", "phrase"] {
            let help = try cli.run([command, "--help"])
            #expect(help.status == 0 && help.stdout.contains("--server <socket>") && help.stdout.contains("EXTRUN_SERVER"), "\(command): \(help)")
            #expect(help.stdout.contains("With --server SOCKET (or EXTRUN_SERVER)"), "\(command): \(help)")
        }
        // --verbose cannot show the service's phases: it says where they are.
        let verbose = try service.client(["options", soup, "soup", "--verbose", "--server", service.socket])
        #expect(verbose.status == 0 && verbose.stderr.contains("its phases are in its log"), "\(verbose)")
        // A service that is not there: configurationError naming the socket, exit 11.
        let nowhere = files.sub("none.sock")
        for arguments in [["options", soup, "soup"], ["continue", person], ["phrase", "Order clam chowder in Soup Chef"]] {
            let result = try cli.run(arguments + ["--server", nowhere])
            #expect(result.status == 11, "\(arguments): \(result)")
            #expect(try result.json()["error"]?["message"]?.stringValue?.contains(nowhere) == true, "\(arguments): \(result)")
        }
        let scratch = try FileManager.default.contentsOfDirectory(atPath: localTmp.path)
        #expect(scratch.isEmpty, "the local runs left files in their TMPDIR: \(scratch)")
    }

    @Test("describe with --server or EXTRUN_SERVER prints what the local command prints (text and JSON: modes, app name, custom types), an unknown intent is exit 5 without the service's plugin path, no service is exit 11; GET /v1/intents/NAME names no folder")
    func describeOverTheService() throws {
        let service = try RunningService(cli: cli)
        defer { service.stop() }
        for intent in ["MakeUppercase", "OrderSoup", "GetPeople", "ViewPerson"] {
            for format in ["text", "json"] {
                let arguments = ["describe", intent, "--format", format]
                let local = try cli.run(arguments)
                #expect(local.status == 0, "\(arguments): \(local)")
                for (form, result) in [
                    ("--server", try service.client(arguments + ["--server", service.socket])),
                    ("EXTRUN_SERVER", try service.client(arguments, environment: ["EXTRUN_SERVER": service.socket])),
                ] {
                    #expect(result.status == 0 && result.stdout == local.stdout && result.stderr == local.stderr, "\(form) \(arguments): \(result)\n--- local\n\(local)")
                }
            }
        }
        // The JSON names the plugin, its version, modes and app name, and the custom types the intent uses.
        let soup = try service.client(["describe", "OrderSoup", "--format", "json", "--server", service.socket]).json()
        #expect(soup["plugin"] == "com.example.soupchef" && soup["version"]?.stringValue != nil, "\(soup)")
        #expect(soup["appName"] == "Soup Chef" && soup["modes"]?.arrayValue?.isEmpty == false, "\(soup)")
        #expect(soup["types"]?.arrayValue?.contains { $0["name"] == "Soup" } == true, "\(soup)")
        #expect(soup["directory"] == nil, "\(soup)")
        // An unknown intent: exit 5, the intents named, not the service's plugin path.
        let local = try cli.run(["describe", "NoSuchIntent"])
        let remote = try service.client(["describe", "NoSuchIntent", "--server", service.socket])
        #expect(local.status == 5 && remote.status == 5, "\(local)\n\(remote)")
        #expect(local.stderr.contains("(plugin path: "), "\(local)")
        #expect(remote.stderr.contains("MakeUppercase") && !remote.stderr.contains("plugin path"), "\(remote)")
        // No service there: configurationError naming the socket, exit 11.
        let files = try TempDirectory("describe-client")
        let nowhere = files.sub("none.sock")
        let absent = try cli.run(["describe", "MakeUppercase", "--server", nowhere])
        #expect(absent.status == 11 && absent.stderr.contains(nowhere), "\(absent)")
        let help = try cli.run(["describe", "--help"])
        #expect(help.status == 0 && help.stdout.contains("--server <socket>") && help.stdout.contains("EXTRUN_SERVER"), "\(help)")
    }

    @Test("Files named by path are read by the client and sent inline: an intent's for options, an activity's interaction's for continue; a phrase's file slot is refused by the service")
    func filesGoInline() throws {
        let plugins = try TempDirectory("client-tagger")
        try plugins.write("tagger/manifest.json", taggerManifest)
        try plugins.write("tagger/plugin.py", taggerPlugin, mode: 0o755)
        try StagedPlugins.copyPythonModule(into: plugins.url.appendingPathComponent("tagger"))
        chmod(plugins.url.path, 0o755)
        var cli = try CLI(extraPluginDirectories: [plugins.url])
        let localTmp = try TempDirectory("client-local-tmp")
        cli.environment["TMPDIR"] = localTmp.path
        // After the service's stop (defers run last first): no process of this plugin is left, the local runs' included.
        defer {
            let left = PluginCheckCLITests.processes(containing: "tagger/plugin.py")
            #expect(left.isEmpty, "processes of the test plugin left: \(left)")
        }
        let service = try RunningService(cli: cli)
        defer { service.stop() }
        let inputs = try TempDirectory("client-files")
        try inputs.write("notes/first.txt", "alpha beta\nthe second line\n")
        try inputs.write("notes/second.txt", "gamma\n")
        // Relative to the intent file's folder (as `extrun handle` reads them).
        let intent = try inputs.write("tag.json", #"{"intent": "Tag", "parameters": {"f": "notes/first.txt"}}"#).path
        let both = try inputs.write("tag-both.json", #"{"intent": "Tag", "parameters": {"f": {"path": "notes/first.txt"}, "more": ["notes/second.txt", {"path": "notes/first.txt", "filename": "renamed.txt"}]}}"#).path
        // Relative to the current directory (as `extrun continue` reads them).
        let activity = try inputs.write(
            "activity.json",
            #"{"activityType": "test.tagger.note", "interaction": {"intent": "Tag", "parameters": {"f": "notes/second.txt", "more": [{"path": "notes/first.txt"}]}}}"#
        ).path
        for arguments in [
            ["options", intent, "tag"], ["options", both, "tag", "--format", "text"], ["handle", both], ["continue", activity],
            ["continue", activity, "--format", "text"],
        ] {
            let local = try cli.run(arguments, currentDirectory: inputs.url)
            let remote = try cli.run(arguments + ["--server", service.socket], currentDirectory: inputs.url)
            #expect(local.status == 0, "\(arguments): \(local)")
            #expect(remote.status == local.status, "\(arguments): \(remote)\n--- local\n\(local)")
            if arguments.contains("text") {
                #expect(Self.textWithoutMetrics(remote.stdout) == Self.textWithoutMetrics(local.stdout), "\(arguments): \(remote)\n--- local\n\(local)")
            } else {
                #expect(Self.essentials(remote) == Self.essentials(local), "\(arguments): \(remote)\n--- local\n\(local)")
            }
        }
        // What the plugin saw: the files' bytes, from the client.
        let options = try cli.run(["options", intent, "tag", "--server", service.socket], currentDirectory: inputs.url)
        let titles = try options.json()["options"]?["sections"]?.arrayValue?.first?["items"]?.arrayValue?.compactMap { $0["title"]?.stringValue }
        #expect(titles == ["alpha", "beta"], "\(options)")
        let continued = try cli.run(["continue", activity, "--server", service.socket], currentDirectory: inputs.url)
        #expect(try continued.json()["response"]?["properties"]?["head"] == "gamma | alpha beta", "\(continued)")
        // A file the client cannot read: invalidIntent naming it, nothing sent.
        let gone = try inputs.write("gone.json", #"{"intent": "Tag", "parameters": {"f": "notes/none.txt"}}"#).path
        let unreadable = try cli.run(["options", gone, "tag", "--server", service.socket])
        #expect(unreadable.status == 4 && unreadable.stdout.contains("notes/none.txt"), "\(unreadable)")
        // The words of a phrase's file slot would be a path the service reads: refused
        // (docs/serve.md, "Files"), where the local command reads the file.
        let phrase = try cli.run(["phrase", "Tag notes/first.txt now", "--no-input", "--server", service.socket], currentDirectory: inputs.url)
        #expect(phrase.status == 3, "\(phrase)")
        let scratch = try FileManager.default.contentsOfDirectory(atPath: localTmp.path)
        #expect(scratch.isEmpty, "the local runs left files in their TMPDIR: \(scratch)")
    }
}

/// A Python plugin with file parameters: its options for `tag` are the words of the first
/// line of `f`; its answer and its activity's are the first lines of `f` and `more`.
private let taggerPlugin = #"""
    #!/usr/bin/env python3
    import sys
    sys.dont_write_bytecode = True
    import extrun_plugin as extrun


    def first_line(value):
        return extrun.file_bytes(value).decode("utf-8").split("\n")[0]


    def heads(values):
        more = values.get("more") or []
        return " | ".join(first_line(f) for f in [values["f"]] + (more if isinstance(more, list) else [more]))


    class Tag(extrun.Intent):
        name = "Tag"

        def options(self, parameter, values, search, context):
            words = first_line(values["f"]).split()
            return [extrun.section([extrun.option(w, w, w) for w in words])]

        def handle(self, values, context):
            return extrun.Response.success({"head": heads(values)})


    class Note(extrun.Activity):
        activity_type = "test.tagger.note"

        def continue_activity(self, activity, interaction, context):
            return extrun.Response.success({"head": heads((interaction or {}).get("parameters") or {})})


    extrun.run("test.tagger", "1.0.0", [Tag()], [Note()])
    """#

private let taggerManifest = #"""
    {"id": "test.tagger", "version": "1.0.0", "owner": "TESTTEAM", "protocolVersion": 1, "executable": "plugin.py",
     "modes": ["extension", "in-app"], "activityTypes": ["test.tagger.note"],
     "intents": [{"name": "Tag", "parameters": [{"name": "f", "type": "file", "required": true, "prompt": "Which file?"},
                                                {"name": "more", "type": "file", "multiple": true},
                                                {"name": "tag", "type": "string", "dynamicOptions": true}],
                  "phrases": ["Tag ${f} now"], "outputs": [{"name": "head", "type": "string"}]}]}
    """#
