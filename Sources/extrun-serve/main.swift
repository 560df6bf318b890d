import ArgumentParser
import ExtrunServe
import ExtrunCommandLine

#if canImport(Glibc)
import Glibc
#endif

/// The executable `extrun serve` runs (docs/serve.md): the service, in a program of its
/// own so that SwiftNIO stays out of the `extrun` CLI every `extrun handle` starts.
@main
struct ExtrunServeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "extrun serve", abstract: "Run the host as a service on a Unix socket.", discussion: ServeOptions.discussion)

    @OptionGroup var options: ServeOptions

    func run() throws {
        let status = ServeService.run(options)
        if status != 0 { throw ExitCode(status) }
    }
}
