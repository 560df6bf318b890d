import ArgumentParser
import ExtrunHost
import ExtrunProtocol
import Foundation

/// `extrun batch`: several intents in one call, with warm plugin reuse.
struct Batch: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Handle several intents in order, reusing warm plugin processes, and print one report per line.",
        discussion: """
            Each intent file is handled as `extrun handle` would, in the order given, but \
            a plugin that allows it (the Swift SDK's do) runs every intent for it in one \
            process, one session after another (docs/protocol.md §15): after the first \
            intent, no process start. Each intent keeps its own checks, deadline and \
            report; the memory cap counts the whole life of the process; a failure \
            ends that process and the next intent gets a new one.

            Output: with --format json (the default), one JSON object per intent and line \
            (JSON Lines), with the fields of `extrun handle`'s output; with --format text, \
            the text summaries separated by blank lines. Every intent is handled, even \
            after a failure, unless --stop-on-failure.

            Exit status: 0 when every intent succeeded; otherwise that of the first intent \
            that did not (the statuses of `extrun handle`), 64 for a bad command line.
            """)

    @Argument(help: ArgumentHelp("The intent files to handle, in order; - (once) reads standard input.", valueName: "intent.json"))
    var intentFiles: [String]

    @Option(help: "Output format: json (one object per line) or text.")
    var format: OutputFormat = .json

    @Flag(help: "Stop after the first intent that does not succeed.")
    var stopOnFailure = false

    @Flag(name: [.customLong("yes"), .customShort("y")], help: "Accept parameter values the plugins ask to confirm.")
    var assumeYes = false

    @Flag(help: "Never ask on the terminal: a missing value or a needed confirmation ends that intent with an error.")
    var noInput = false

    @Flag(name: .shortAndLong, help: "Show on stderr what happens, the reuse of processes included.")
    var verbose = false

    func validate() throws {
        if intentFiles.isEmpty { throw ValidationError("give at least one intent file") }
        if intentFiles.filter({ $0 == "-" }).count > 1 {
            throw ValidationError("standard input (-) can be read once only")
        }
    }

    func run() throws {
        var options = HandleOptions()
        options.assumeYes = assumeYes
        if !noInput { options.prompter = TerminalPrompter() }
        if verbose { options.log = { line in Output.printError(line) } }
        let pool = PluginPool()
        defer { pool.close() }
        var status: Int32 = 0
        for (index, file) in intentFiles.enumerated() {
            var report: HandleReport
            do {
                report = pool.handle(try IntentFileParser.read(path: file), options: options)
            } catch {
                report = HandleReport(intent: nil)
                report.error = error
            }
            switch format {
            case .json: Output.printLine(String(decoding: JSONWriter.bytes(report.json), as: UTF8.self))
            case .text: Output.printLine((index > 0 ? "\n" : "") + report.text)
            }
            if report.exitCode != 0 {
                if status == 0 { status = report.exitCode }
                if stopOnFailure { break }
            }
        }
        options.log?("[extrun] batch: \(intentFiles.count) intents, \(pool.launches) plugin processes started, \(pool.reuses) reused")
        if status != 0 { throw ExitCode(status) }
    }
}
