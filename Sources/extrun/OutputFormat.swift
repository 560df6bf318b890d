import ArgumentParser
import ExtrunProtocol
import ExtrunSystem
import Foundation

#if canImport(Glibc)
import Glibc
#endif

enum OutputFormat: String, ExpressibleByArgument, CaseIterable {
    case json, text
}

/// stdout and stderr. Writes with write(2): a reader that went away (`| head`)
/// must not crash extrun (FileHandle.write traps on EPIPE); SIGPIPE is ignored
/// from the first write on, and what could not be written is dropped.
enum Output {
    /// The largest output printed pretty; a larger one is streamed compact (one line),
    /// so that indentation cannot multiply what a plugin answered and the whole text is
    /// never held (docs/cli.md).
    static let maxPrettyBytes = 4 << 20

    /// `dryRun`: renders it the same way and writes nothing (what it costs is then counted in the peak RSS).
    static func printJSON(_ value: JSONValue, dryRun: Bool = false) {
        if var bytes = JSONWriter.prettyBytes(value, limit: maxPrettyBytes) {
            bytes.append(0x0A)
            if !dryRun { write(bytes, to: STDOUT_FILENO) }
        } else {
            JSONWriter.stream(value) { if !dryRun { write($0, to: STDOUT_FILENO) } }
            if !dryRun { write([0x0A], to: STDOUT_FILENO) }
        }
    }

    static func printLine(_ text: String) {
        write(Data((text + "\n").utf8), to: STDOUT_FILENO)
    }

    static func printError(_ text: String) {
        write(Data((text + "\n").utf8), to: STDERR_FILENO)
    }

    /// How extrun is named in the commands it suggests ("Try it: …"): `EXTRUN_COMMAND`, which
    /// `Scripts/extrun` sets to the path it was run by (`Scripts/extrun` in a checkout), else `extrun`.
    static var commandName: String {
        let named = ProcessInfo.processInfo.environment["EXTRUN_COMMAND"] ?? ""
        let plain = !named.isEmpty && named.count <= 256 && named.allSatisfy { !$0.isWhitespace && $0 != "'" && $0 != "\"" && !$0.isNewline }
        return plain ? named : "extrun"
    }

    private static let ignoreSIGPIPE: Void = { _ = signal(SIGPIPE, SIG_IGN) }()

    static func write(_ data: some ContiguousBytes, to fd: Int32) {
        _ = ignoreSIGPIPE
        // What could not be written (a reader gone) is dropped.
        try? SystemCall.writeAll(fd, data)
    }
}
