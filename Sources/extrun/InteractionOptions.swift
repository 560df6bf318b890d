import ArgumentParser
import ExtrunHost

/// How a command that runs intents talks to the person at the terminal: `--yes`,
/// `--no-input`, `--verbose`. One group for `handle`, `batch` and `phrase`, so the
/// three mean the same everywhere (docs/cli.md).
struct InteractionOptions: ParsableArguments {
    @Flag(name: [.customLong("yes"), .customShort("y")], help: "Accept parameter values and intents the plugin asks to confirm.")
    var assumeYes = false

    @Flag(help: "Never ask on the terminal: a missing value or a needed confirmation ends the intent with an error.")
    var noInput = false

    @Flag(name: .shortAndLong, help: "Show on stderr what happens: phases with their times, each host-service request, and the plugin's stdout, stderr and log lines.")
    var verbose = false

    /// Sets `options` from the flags; `mayPrompt` false when no one can be asked (e.g. `batch --jobs 4`).
    func apply(to options: inout HandleOptions, mayPrompt: Bool = true) {
        options.assumeYes = assumeYes
        if !noInput && mayPrompt { options.prompter = TerminalPrompter() }
        if verbose { options.log = { line in Output.printError(line) } }
    }
}
