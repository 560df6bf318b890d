import ArgumentParser
import ExtrunCommandLine
import ExtrunHost
import ExtrunProtocol
import Foundation

struct PhraseCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "phrase",
        abstract: "Handle what a person says: match it against the plugins' phrases and run the intent.",
        discussion: """
            Plugins declare phrases with their app's name and at most one parameter, e.g. \
            "Order ${soup} in Soup Chef". The match ignores case and accents; the words in the \
            parameter's place are matched against the plugin's suggested options (or taken as \
            the value). No match, or several, lists the closest phrases. Example:
              extrun phrase "Order clam chowder in Soup Chef"
            Exit statuses as for `handle` (no match: 5, noHandler).

            With --server SOCKET (or EXTRUN_SERVER) the phrase goes to `extrun serve` on that \
            socket (docs/serve.md), which matches it against its own plugins and runs the \
            intent: the same report and exit status, the prompts asked here on the terminal \
            and answered over the connection (--no-input: none). The service reads no file for \
            a caller, so a phrase whose words fill a file parameter ends parameterUnresolved \
            there. A service that cannot be reached is exit 11.
            """)

    @Argument(help: "What the person said.") var text: String
    @Option(help: "Output format: json or text.") var format: OutputFormat = .json
    @OptionGroup var options: RunOptionFlags
    @Flag(name: .shortAndLong, help: "Show on stderr what happens: the phrase matched, phases, and the plugin's output.") var verbose = false
    @OptionGroup var service: ServerOptions

    func validate() throws {
        if text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty {
            throw ValidationError("the phrase is empty: give what the person said, e.g. extrun phrase \"Order clam chowder in Soup Chef\"")
        }
    }

    func run() throws {
        var run = options.runOptions()
        if let server = service.socket {
            service.noteVerbose(verbose)
            run.text = format == .text
            let status = ServerClient.phrase(server: server, said: text, options: run)
            if status != 0 { throw ExitCode(status) }
            return
        }
        let options = HandleOptions.commandLine(run, verbose: verbose)
        try ReportOutput.printAndExit(format: format) { () throws(HostError) in Host().phrase(text, options: options) }
    }
}
