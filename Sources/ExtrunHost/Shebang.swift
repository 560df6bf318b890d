import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Script plugins whose first line is `#!/usr/bin/env NAME` would make `env`
/// exec NAME: a second exec, which the sandbox forbids. The host reads such a
/// line itself and starts the interpreter directly, found in the plugin's PATH.
/// Other `#!` lines need nothing: the kernel runs their interpreter within the one exec.
enum Shebang {
    /// The program to exec and the arguments before the plugin's own.
    static func resolve(executable: URL, arguments: [String], searchPath: String) throws(HostError) -> (URL, [String]) {
        guard let line = firstLine(of: executable), line.hasPrefix("#!") else { return (executable, arguments) }
        var words = line.dropFirst(2).split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        guard let interpreter = words.first, interpreter == "/usr/bin/env" || interpreter == "/bin/env" else {
            return (executable, arguments)
        }
        words.removeFirst()
        if words.first == "-S" { words.removeFirst() }
        guard let name = words.first, !name.contains("=") else { return (executable, arguments) }
        let found = searchPath.split(separator: ":").lazy
            .map { URL(fileURLWithPath: String($0)).appendingPathComponent(name) }
            .first { access($0.path, X_OK) == 0 }
        guard let program = found else {
            throw HostError(
                .configurationError,
                "\(executable.path) starts with '\(line)', but '\(name)' is not in the plugin's PATH (\(searchPath)); install it or name the interpreter by its full path",
                details: ["file": .string(executable.path)])
        }
        return (program, Array(words.dropFirst()) + [executable.path] + arguments)
    }

    static func firstLine(of url: URL) -> String? {
        guard let handle = try? FileHandle(forReadingFrom: url) else { return nil }
        defer { try? handle.close() }
        guard let data = try? handle.read(upToCount: 256), data.starts(with: Array("#!".utf8)) else { return nil }
        let line = data.prefix { $0 != 10 }
        return String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
