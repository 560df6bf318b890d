import ArgumentParser
import ExtrunHost

#if canImport(Glibc)
import Glibc
#endif

@main
struct Extrun: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "extrun",
        abstract: "Run intent plugins in separate, limited processes.",
        discussion: """
            extrun finds the plugin that handles an intent, starts it as a child \
            process, speaks the extrun protocol with it over pipes, and prints the \
            plugin's response as JSON.

            Plugins are found in the directories of EXTRUN_PLUGIN_PATH (colon-separated), \
            then in $EXTRUN_HOME/plugins (EXTRUN_HOME defaults to ~/.local/share/extrun), \
            then in PREFIX/share/extrun/plugins when this is PREFIX/bin/extrun.

            Start with:
              extrun plugins
              extrun handle Examples/intents/make-uppercase.json
            """,
        version: Host.version,
        subcommands: [
            Handle.self, ContinueCommand.self, Batch.self, Plugins.self, Describe.self, Options.self, PhraseCommand.self, Owners.self,
            GlobalsCommand.self, BookmarksCommand.self, DonationsCommand.self, Migrate.self, StoreCommand.self,
            Serve.self,
            MCPCommand.self,
        ]
    )

    /// `extrun handle FILE` skips ArgumentParser (HandleFastPath); everything else is parsed.
    static func main() {
        let arguments = Array(CommandLine.arguments.dropFirst())
        if let file = HandleFastPath.intentFile(in: arguments) {
            Glibc.exit(HandleFastPath.run(intentFile: file))
        }
        if let (server, file) = HandleFastPath.servedIntent(in: arguments) {
            Glibc.exit(ServerClient.handle(server: server, intentFile: file, options: .interactiveDefaults))
        }
        do {
            var command = try parseAsRoot(arguments)
            try command.run()
        } catch {
            if exitCode(for: error) == .success, let help = CommandHelp.reordered(fullMessage(for: error)) {
                print(help)
                Glibc.exit(0)
            }
            if let suggestion = CommandHelp.mistypedSubcommand(in: arguments) {
                Output.printError("Error: \(suggestion)")
                Glibc.exit(ExitStatus.usage)
            }
            exit(withError: error)
        }
    }
}

/// `--help` with USAGE and the options first, and the two subcommand typos ArgumentParser
/// leaves unnamed ("2 unexpected arguments").
enum CommandHelp {
    /// ArgumentParser's help with its overview and discussion moved after USAGE, the arguments,
    /// options and subcommands: what a person looks for first is at the top. Nil when the text
    /// is not a help page (the version).
    static func reordered(_ help: String) -> String? {
        guard let usage = help.range(of: "USAGE:") else { return nil }
        let explanation = help[..<usage.lowerBound].trimmingCharacters(in: .whitespacesAndNewlines)
        let reference = help[usage.lowerBound...].trimmingCharacters(in: .whitespacesAndNewlines)
        return explanation.isEmpty ? reference : reference + "\n\n" + explanation
    }

    /// For `extrun handel x` or `extrun plugins instal x`: "Unknown command 'handel'. Did you
    /// mean 'handle'?", with the command's subcommands; nil when the first word that is not a
    /// command is not where a subcommand goes (an option, or a command's own argument).
    static func mistypedSubcommand(in arguments: [String]) -> String? {
        var subcommands: [any ParsableCommand.Type] = Extrun.configuration.subcommands
        var path = ["extrun"]
        for argument in arguments {
            if argument.hasPrefix("-") || subcommands.isEmpty { return nil }
            if let next = subcommands.first(where: { names(of: $0).contains(argument) }) {
                path.append(name(of: next))
                subcommands = next.configuration.subcommands
                continue
            }
            if argument == "help" { return nil }
            let known = subcommands.map { name(of: $0) }
            let close = Suggestion.closest(to: argument, among: subcommands.flatMap { names(of: $0) })
            let guess = close.map { " Did you mean '\($0)'?" } ?? ""
            let command = path.joined(separator: " ")
            return "Unknown command '\(argument)' for '\(command)'.\(guess) Its commands: \(known.joined(separator: ", ")) (\(command) --help)."
        }
        return nil
    }

    private static func name(of command: any ParsableCommand.Type) -> String {
        command._commandName
    }

    private static func names(of command: any ParsableCommand.Type) -> [String] {
        [name(of: command)] + command.configuration.aliases
    }
}
