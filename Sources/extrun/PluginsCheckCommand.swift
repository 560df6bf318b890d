import ArgumentParser
import ExtrunHost
import ExtrunProtocol
import Foundation

struct PluginsCheck: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Check that a plugin folder follows the protocol, running it as the host does: before you install or ship it.",
        discussion: """
            Runs the plugin in DIR out of process, in the real sandbox and with its mode's \
            limits (extension when it supports it; the manifest's limits and \
            $EXTRUN_HOME/policy.json apply), and checks, in order:
            - manifest: it fits docs/schemas/manifest.schema.json (unknown fields too: \
            the host would ignore a misspelled one) and the host's rules; each problem as \
            manifest.json:LINE:COLUMN
            - intents.json: when DIR holds a definition file, it fits \
            docs/schemas/definitions.schema.json and extrun-intentgen's rules, and manifest.json \
            is the manifest it generates
            - executable: it exists and the plugin's user can run it
            - signature: when signed, the signature holds (an unsigned plugin passes)
            - handshake: initialize is answered with the manifest's id and every intent
            - memory at rest: after the handshake it holds at most half of the private memory \
            its cap leaves it
            - unknown method: a method it does not know is answered with -32601
            - end of input: it exits with 0 when fd 3 ends
            - cancel: after cancel and the end of fd 3 during a handle, it is gone \
            within the cancel grace (500 ms)
            - intent X (M): each intent, in each mode, with values from the manifest (its \
            defaults, an enum's first case, its own first dynamic option): any answer the protocol allows passes (a response, \
            a value asked for, an error of its own); a crash, a protocol error, a timeout, a \
            sandbox violation or the memory cap fails
            - reuse: when the handshake declares reusable (and session), three runs \
            share one process

            Exit status: 0 when every check passed, 1 when one failed (the report names each), \
            11 when DIR holds no plugin at all. --format json gives the same report for CI. \
            docs/plugin-guide.md, "Checking a plugin".

            Example:
              extrun plugins check ./my-plugin
            """)

    @Argument(help: ArgumentHelp("The plugin folder (holding manifest.json).", valueName: "dir")) var directory: String
    @OptionGroup var output: PluginsFormat
    var format: OutputFormat { output.format }
    @Flag(name: [.short, .long], help: "Print the host's log of every run on stderr (phases, the plugin's output).") var verbose = false

    func run() throws {
        let folder = URL(fileURLWithPath: directory, isDirectory: true)
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: folder.path, isDirectory: &isDirectory) else {
            Output.printError("extrun: configurationError: \(folder.path) does not exist; give the plugin's folder (the one holding manifest.json)")
            throw ExitCode(ErrorKind.configurationError.exitCode)
        }
        guard isDirectory.boolValue else {
            Output.printError("extrun: configurationError: \(folder.path) is not a folder; give the plugin's folder (the one holding manifest.json)")
            throw ExitCode(ErrorKind.configurationError.exitCode)
        }
        var check = ConformanceCheck(host: ExtrunHost.Host())
        if verbose { check.log = { line in Output.printError(line) } }
        let report = check.run(directory: folder)
        switch format {
        case .json:
            Output.printJSON(report.json)
        case .text:
            let who = report.plugin.map { "\($0) \(report.version ?? "")" } ?? "(no plugin)"
            let limits = report.limits.map { " in \($0.mode.rawValue) mode (memory \(ByteCount.format($0.memoryBytes)), deadline \($0.deadlineMs) ms)" } ?? ""
            Output.printLine("Checking \(who) from \(report.directory)\(limits)")
            for result in report.results {
                let mark = result.outcome == .pass ? "PASS" : result.outcome == .fail ? "FAIL" : "SKIP"
                Output.printLine("  \(mark)  \(result.name): \(result.summary)")
                for problem in result.problems { Output.printLine("          \(problem)") }
            }
            let failed = report.failed.map(\.name)
            if failed.isEmpty {
                Output.printLine("Passed: \(report.results.filter { $0.outcome == .pass }.count) checks passed, \(report.results.filter { $0.outcome == .skip }.count) skipped.")
            } else {
                Output.printLine("FAILED: \(failed.joined(separator: ", ")) (\(failed.count) of \(report.results.count) checks)")
            }
        }
        if report.plugin == nil && report.results.count == 1 && report.results.first?.problems.isEmpty == true {
            throw ExitCode(ErrorKind.configurationError.exitCode)
        }
        if !report.passed { throw ExitCode(1) }
    }
}
