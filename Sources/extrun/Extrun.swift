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
            Glibc.exit(ServerClient.handle(server: server, intentFile: file, query: [], prompter: TerminalPrompter(), text: false))
        }
        main(nil)
    }
}
