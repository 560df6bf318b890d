import ArgumentParser
import ExtrunHost
import ExtrunProtocol

/// What `handle`, its fast path, `continue`, `options` and `phrase` share: a report
/// printed as JSON or text, whose exit status is the process's.
enum ReportOutput {
    /// Prints the report as `print(format:_:)` does; a status other than 0 ends the command with it.
    static func printAndExit(format: OutputFormat, _ make: () throws(HostError) -> HandleReport) throws {
        let status = print(format: format, make)
        if status != 0 { throw ExitCode(status) }
    }

    /// Makes the report (an input error becomes the report's error), prints it, and returns its exit status.
    static func print(format: OutputFormat, _ make: () throws(HostError) -> HandleReport) -> Int32 {
        var report: HandleReport
        do {
            report = try make()
        } catch {
            report = HandleReport(intent: nil)
            report.error = error
        }
        // hostPeakRSSBytes covers the report: it is rendered once as it will be written (pretty
        // into its buffer of at most Output.maxPrettyBytes, or streamed compact through a fixed
        // buffer and dropped), the peak read, then rendered again with that figure and written.
        switch format {
        case .json:
            Output.printJSON(report.json, dryRun: true)
            report.updateHostPeakRSS()
            Output.printJSON(report.json)
        case .text:
            _ = report.text
            report.updateHostPeakRSS()
            Output.printLine(report.text)
        }
        return report.exitCode
    }
}
