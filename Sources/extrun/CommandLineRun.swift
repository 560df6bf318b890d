import ExtrunHost
import ExtrunProtocol

extension HandleOptions {
    /// What a command runs an intent with here: the run's options (`RunOptionFlags`,
    /// `RunLimitFlags`), the terminal as the prompter when `interactive` (not with
    /// `--no-input`), and `--verbose`'s lines on stderr.
    static func commandLine(_ run: RunOptions, verbose: Bool) -> HandleOptions {
        var options = HandleOptions(run)
        if run.interactive { options.prompter = TerminalPrompter() }
        if verbose { options.log = { line in Output.printError(line) } }
        return options
    }
}

extension RunOptions {
    /// The defaults of `extrun handle FILE`: the terminal is asked.
    static var interactiveDefaults: RunOptions {
        var options = RunOptions()
        options.interactive = true
        return options
    }
}
