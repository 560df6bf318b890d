import ArgumentParser

/// `--server SOCKET` of the commands that run an intent (`handle`, `options`, `continue`,
/// `phrase`): the request goes to `extrun serve` on that socket instead of a plugin started
/// here, and the command prints the report the service answers, with the same exit status
/// (docs/serve.md, "The CLI as a client"). `EXTRUN_SERVER` is the default.
struct ServerOptions: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "Send the request to `extrun serve` on this Unix socket instead of starting the plugin here (default: $EXTRUN_SERVER when set): the same report and exit status; files named by path are read here and sent inline.",
            valueName: "socket"))
    var server: String?

    /// `--server`, else `EXTRUN_SERVER`; nil: run here.
    var socket: String? { server ?? ServerClient.environmentServer }

    /// --verbose shows the host's phases, which run in the service: say where they are instead.
    func noteVerbose(_ verbose: Bool) {
        if verbose {
            Output.printError("extrun: --verbose: the run is the service's; its phases are in its log (extrun serve --verbose)")
        }
    }
}
