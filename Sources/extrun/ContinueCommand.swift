import ArgumentParser
import ExtrunCommandLine
import ExtrunHost
import ExtrunProtocol
import Foundation

struct ContinueCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "continue",
        abstract: "Continue a user activity in in-app mode with the plugin that declares its type.",
        discussion: """
            The activity file is JSON:
              {"activityType": "com.example.people.viewPerson", "title": "Anne Johnson",
               "userInfo": {"person": "anne"}}
            with an optional "interaction": {"intent", "parameters", "response", \
            "identifier"} — the intent the activity carries on with and the answer an \
            extension gave, as `extrun handle` hands them over when an extension answers \
            continueInApp.

            The plugin is the one whose manifest lists the type in "activityTypes" (or that \
            has an intent of that name). It runs in in-app mode (in-app limits, 10 s from \
            launch) and answers the protocol's `continue` request with a response, printed \
            like `extrun handle`'s output (docs/cli.md). An activity type no plugin \
            declares exits with status 5 (noHandler); the other statuses are `handle`'s.

            With --server SOCKET (or EXTRUN_SERVER) the activity goes to `extrun serve` on \
            that socket (docs/serve.md) instead of a plugin started here: the same report and \
            exit status; file parameters of its interaction given as paths are read here \
            (relative to the current directory, as without --server) and sent inline. A \
            service that cannot be reached is exit 11.
            """)

    @Argument(help: ArgumentHelp("The activity file; - reads standard input.", valueName: "activity.json"))
    var activityFile: String

    @OptionGroup var limits: RunLimitFlags

    @Option(help: "Output format: json (for programs) or text (a summary for people).")
    var format: OutputFormat = .json

    @Flag(name: .shortAndLong, help: "Show on stderr what happens: phases, and the plugin's stdout, stderr and log lines.")
    var verbose = false

    @OptionGroup var service: ServerOptions

    func run() throws {
        var run = RunOptions()
        limits.apply(to: &run)
        if let server = service.socket {
            service.noteVerbose(verbose)
            run.text = format == .text
            let status = ServerClient.continueActivity(server: server, activityFile: activityFile, options: run)
            if status != 0 { throw ExitCode(status) }
            return
        }
        let options = HandleOptions.commandLine(run, verbose: verbose)
        try ReportOutput.printAndExit(format: format) { () throws(HostError) in
            Host().continueActivity(try ActivityFileParser.read(path: activityFile), options: options)
        }
    }
}
