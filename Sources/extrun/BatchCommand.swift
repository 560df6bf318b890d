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

    @OptionGroup var interaction: InteractionOptions

    @Flag(help: "Stop after the first intent that does not succeed.")
    var stopOnFailure = false

    @Option(name: .shortAndLong, help: "How many intents to handle at once (each in a process of its own); more than 1 implies --no-input.")
    var jobs = 1

    @Option(help: ArgumentHelp("Memory cap for every intent, as `extrun handle --memory-limit` (the process's whole life).", valueName: "size"))
    var memoryLimit: String?

    @Option(help: ArgumentHelp("Deadline for each intent, as `extrun handle --timeout`, e.g. 5s or 2500ms (a unit is required).", valueName: "duration"))
    var timeout: String?

    func validate() throws {
        if intentFiles.isEmpty { throw ValidationError("give at least one intent file") }
        if intentFiles.filter({ $0 == "-" }).count > 1 {
            throw ValidationError("standard input (-) can be read once only")
        }
        if jobs < 1 || jobs > 64 { throw ValidationError("--jobs takes 1 to 64 (got \(jobs))") }
        try ReportOutput.validate(memoryLimit: memoryLimit, timeout: timeout)
    }

    func run() throws {
        var options = HandleOptions()
        options.memoryLimitBytes = memoryLimit.flatMap(ByteCount.parse)
        options.deadlineMs = timeout.flatMap(DurationText.parseMilliseconds)
        interaction.apply(to: &options, mayPrompt: jobs == 1)
        let pool = PluginPool(maxIdleProcesses: max(4, jobs))
        defer { pool.close() }
        let files = intentFiles
        let handleOptions = options
        @Sendable func handle(_ file: String) -> HandleReport {
            do throws(HostError) {
                return pool.handle(try IntentFileParser.read(path: file), options: handleOptions)
            } catch {
                var report = HandleReport(intent: nil)
                report.error = error
                return report
            }
        }
        let reports = BatchReports(count: files.count, jobs: jobs, stopOnFailure: stopOnFailure, handle: { handle(files[$0]) })
        var status: Int32 = 0
        for index in files.indices {
            guard let report = reports.next(index) else { break }
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

/// The reports of a batch, handled on `jobs` threads (or on the caller's, for one job)
/// and handed out in the order of the files.
final class BatchReports: Sendable {
    private let count: Int
    private let handle: @Sendable (Int) -> HandleReport
    private let serial: Bool
    private let stopOnFailure: Bool
    private let state = NSCondition()
    private nonisolated(unsafe) var done: [Int: HandleReport] = [:]
    private nonisolated(unsafe) var nextToStart = 0
    /// The first index that failed when --stop-on-failure stops the batch.
    private nonisolated(unsafe) var stoppedAfter: Int?

    init(count: Int, jobs: Int, stopOnFailure: Bool, handle: @escaping @Sendable (Int) -> HandleReport) {
        self.count = count
        self.handle = handle
        self.serial = jobs == 1
        self.stopOnFailure = stopOnFailure
        guard !serial else { return }
        for _ in 0..<min(jobs, count) {
            Thread { [self] in work() }.start()
        }
    }

    private func work() {
        while true {
            state.lock()
            let index = nextToStart
            if index >= count || stoppedAfter.map({ index > $0 }) == true {
                state.unlock()
                return
            }
            nextToStart += 1
            state.unlock()
            let report = handle(index)
            state.lock()
            done[index] = report
            if stopOnFailure && report.exitCode != 0 { stoppedAfter = min(stoppedAfter ?? index, index) }
            state.broadcast()
            state.unlock()
        }
    }

    /// The report of file `index` (waiting for it), or nil when the batch stopped before it.
    func next(_ index: Int) -> HandleReport? {
        if serial { return handle(index) }
        state.lock()
        defer { state.unlock() }
        while done[index] == nil {
            if let stop = stoppedAfter, index > stop { return nil }
            state.wait()
        }
        return done.removeValue(forKey: index)
    }
}
