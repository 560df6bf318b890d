import ArgumentParser
import ExtrunCommandLine
import ExtrunHost
import ExtrunProtocol
import Foundation
import Synchronization

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

            With --jobs N (N > 1), up to N intents are handled at once, each in a process \
            of its own (so up to N warm processes of a plugin); the reports are still \
            printed in the order of the files. Nothing is asked on the terminal then (as \
            with --no-input), and --stop-on-failure stops starting intents after the first \
            failure: the reports up to it are printed.

            Exit status: 0 when every intent succeeded; otherwise that of the first intent \
            that did not (the statuses of `extrun handle`), 64 for a bad command line.
            """)

    @Argument(help: ArgumentHelp("The intent files to handle, in order; - (once) reads standard input.", valueName: "intent.json"))
    var intentFiles: [String]

    @Option(help: "Output format: json (one object per line) or text.")
    var format: OutputFormat = .json

    @OptionGroup var options: RunOptionFlags

    @Flag(name: .shortAndLong, help: "Show on stderr what happens: phases with their times, and the plugins' output.")
    var verbose = false

    @Flag(help: "Stop after the first intent that does not succeed.")
    var stopOnFailure = false

    @Option(name: .shortAndLong, help: "How many intents to handle at once (each in a process of its own); more than 1 implies --no-input.")
    var jobs = 1

    func validate() throws {
        if intentFiles.isEmpty { throw ValidationError("give at least one intent file") }
        if intentFiles.filter({ $0 == "-" }).count > 1 {
            throw ValidationError("standard input (-) can be read once only")
        }
        if jobs < 1 || jobs > 64 { throw ValidationError("--jobs takes 1 to 64 (got \(jobs))") }
    }

    func run() throws {
        let options = HandleOptions.commandLine(self.options.runOptions(mayPrompt: jobs == 1), verbose: verbose)
        // The intents run as the service runs them (warm sessions, worker threads): at most
        // --jobs at once, the others waiting in the order of the files.
        let service = IntentService(
            admission: Admission.Limits(maxConcurrent: jobs, maxQueued: intentFiles.count), warm: PluginPool.WarmLimits(maxIdle: max(4, jobs)))
        defer { service.shutDown(grace: 0, reason: "extrun batch ended") }
        let files = intentFiles
        let stopOnFailure = self.stopOnFailure
        @Sendable func handle(_ file: String) -> HandleReport {
            do throws(HostError) {
                return service.perform(.handle(try IntentFileParser.read(path: file)), options: options)
            } catch {
                var report = HandleReport(intent: nil)
                report.error = error
                return report
            }
        }
        // Each file's report, in the order of the files; nil: not run (--stop-on-failure stopped the batch before it).
        let reports = files.indices.map { _ in Promise<HandleReport?>() }
        if jobs > 1 {
            // The first file that failed, with --stop-on-failure (Int.max: none).
            let stoppedAt = Atomic<Int>(.max)
            for index in files.indices {
                let submitted = service.submit(uid: getuid(), refused: { _ in reports[index].fulfil(nil) }) {
                    if index > stoppedAt.load(ordering: .acquiring) {
                        reports[index].fulfil(nil)
                        return
                    }
                    let report = handle(files[index])
                    if stopOnFailure, report.exitCode != 0 { stoppedAt.min(index, ordering: .acquiringAndReleasing) }
                    reports[index].fulfil(report)
                }
                if case .failure(let error) = submitted {
                    var report = HandleReport(intent: nil)
                    report.error = error
                    reports[index].fulfil(report)
                }
            }
        }
        var status: Int32 = 0
        for index in files.indices {
            // One job: on this thread, where the terminal's prompts are asked.
            guard let report = jobs > 1 ? reports[index].wait() : handle(files[index]) else { break }
            switch format {
            case .json: Output.printLine(String(decoding: JSONWriter.bytes(report.json), as: UTF8.self))
            case .text: Output.printLine((index > 0 ? "\n" : "") + report.text)
            }
            if report.exitCode != 0 {
                if status == 0 { status = report.exitCode }
                if stopOnFailure { break }
            }
        }
        options.log?("[extrun] batch: \(intentFiles.count) intents, \(service.pool.launches) plugin processes started, \(service.pool.reuses) reused")
        if status != 0 { throw ExitCode(status) }
    }
}
