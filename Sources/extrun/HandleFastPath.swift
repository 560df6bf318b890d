import ExtrunHost
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// `extrun handle FILE` without ArgumentParser.
///
/// A workflow app calls `extrun handle` once per action, so the CLI's own start
/// matters: ArgumentParser's reflection costs every process (docs/benchmarks.md,
/// "Costs the source's comments point to"). The commonest form, `extrun handle FILE` with no option,
/// is recognized here and runs exactly what `Handle.run` runs with its defaults
/// (JSON output, prompts on a terminal, the same exit statuses); every other
/// command line, `--help` included, goes to ArgumentParser.
enum HandleFastPath {
    /// The intent file when `arguments` (without argv[0]) is `handle FILE` and FILE
    /// is not an option; nil otherwise.
    static func intentFile(in arguments: [String]) -> String? {
        guard arguments.count == 2, arguments[0] == "handle" else { return nil }
        let file = arguments[1]
        // "-" (standard input) is a value; "-x", "--x" are options for the parser.
        if file.isEmpty || (file.hasPrefix("-") && file != "-") { return nil }
        return file
    }

    /// The socket and the intent file when `arguments` is `handle --server SOCKET FILE`
    /// (the service's client: its whole command is a bench row, docs/serve.md); nil otherwise.
    static func servedIntent(in arguments: [String]) -> (server: String, file: String)? {
        guard arguments.count == 4, arguments[0] == "handle", arguments[1] == "--server", !arguments[2].hasPrefix("-") else { return nil }
        let file = arguments[3]
        if file.isEmpty || (file.hasPrefix("-") && file != "-") { return nil }
        return (arguments[2], file)
    }

    /// Handles the intent, prints the report as JSON and returns the exit status.
    static func run(intentFile: String) -> Int32 {
        if let server = ServerClient.environmentServer {
            return ServerClient.handle(server: server, intentFile: intentFile, options: .interactiveDefaults)
        }
        let options = HandleOptions.commandLine(.interactiveDefaults, verbose: false)
        return ReportOutput.print(format: .json) { () throws(HostError) in
            Host().handle(try IntentFileParser.read(path: intentFile), options: options)
        }
    }
}
