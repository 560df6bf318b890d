import ArgumentParser
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
            """)

    @Argument(help: "What the person said.") var text: String
    @Option(help: "Output format: json or text.") var format: OutputFormat = .json
    @OptionGroup var interaction: InteractionOptions

    func run() throws {
        var options = HandleOptions()
        interaction.apply(to: &options)
        try ReportOutput.printAndExit(format: format) { () throws(HostError) in Host().phrase(text, options: options) }
    }
}
