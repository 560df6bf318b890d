import ArgumentParser
import ExtrunHost
import ExtrunProtocol
import Foundation

struct Handle: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Handle an intent with the plugin that declares it, and print the response.",
        discussion: """
            The intent file is JSON:
              {"intent": "MakeUppercase", "parameters": {"text": "hello world"}}
            with optional "id" (echoed in the output) and "mode" ("extension" or "in-app").

            The host checks the file against the plugin's manifest before starting \
            anything; then it starts the plugin, resolves each parameter, confirms and \
            handles the intent. The output (stdout) is one JSON object with intent, plugin, \
            mode, response or error, and metrics; docs/cli.md describes every field.

            Exit status: 0 the plugin answered success; 1 it answered another code; \
            3 parameterUnresolved; 4 invalidIntent; 5 noHandler; 6 pluginCrashed; \
            7 protocolError; 8 timeout; 9 memoryLimitExceeded; 10 sandboxViolation; \
            11 configurationError; 12 pluginError; 64 bad command line; 70 internal error.
            """
    )

    @Argument(help: ArgumentHelp("The intent file to handle; - reads standard input.", valueName: "intent.json"))
    var intentFile: String

    @Option(help: "Run the plugin in this mode (extension or in-app), overriding the intent file and the manifest.")
    var mode: Mode?

    @Option(help: "Output format: json (for programs) or text (a summary for people).")
    var format: OutputFormat = .json

    @Flag(name: [.customLong("yes"), .customShort("y")], help: "Accept parameter values the plugin asks to confirm.")
    var assumeYes = false

    @Flag(name: .shortAndLong, help: "Show on stderr what happens: phases, and the plugin's stdout, stderr and log lines.")
    var verbose = false

    func run() throws {
        var options = HandleOptions()
        options.mode = mode
        options.assumeYes = assumeYes
        if verbose { options.log = { line in Output.printError(line) } }

        var report: HandleReport
        do {
            let invocation = try IntentFileParser.read(path: intentFile)
            report = Host().handle(invocation, options: options)
        } catch {
            report = HandleReport(intent: nil)
            report.error = error
        }
        switch format {
        case .json: Output.printJSON(report.json)
        case .text: Output.printLine(report.text)
        }
        if report.exitCode != 0 { throw ExitCode(report.exitCode) }
    }
}

extension Mode: ExpressibleByArgument {}
