import ArgumentParser
import ExtrunCommandLine
import ExtrunSystem
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// `extrun serve`: checks its command line, then execs `extrun-serve` (installed beside
/// `extrun`), which runs the service. The service is its own executable so that SwiftNIO
/// and the metrics stay out of this static CLI, whose start every `extrun handle` pays
/// (docs/serve.md, "Why its own executable").
struct Serve: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run the host as a long-running service on a Unix socket (HTTP; docs/serve.md).", discussion: ServeOptions.discussion)

    @OptionGroup var options: ServeOptions

    func run() throws {
        let own = ProcFS.ownExecutable() ?? CommandLine.arguments[0]
        let executable = URL(fileURLWithPath: own).deletingLastPathComponent().appendingPathComponent("extrun-serve").path
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw ValidationError("\(executable) is missing: `extrun serve` runs the extrun-serve executable installed beside extrun (swift build builds both)")
        }
        let arguments = Array(CommandLine.arguments.drop { $0 != "serve" }.dropFirst())
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        execv(executable, argv)
        throw ValidationError("cannot run \(executable): \(SystemCall.lastReason)")
    }
}
