import ExtrunProtocol
@_exported import ExtrunTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What one run of `extrun` produced.
struct CLIResult: CustomStringConvertible {
    var status: Int32
    var stdout: String
    var stderr: String

    /// Standard output parsed as one JSON object (recording an issue if it is not).
    func json(sourceLocation: SourceLocation = #_sourceLocation) throws -> JSONValue {
        let value = try JSONDecoder().decode(JSONValue.self, from: Data(stdout.utf8))
        guard case .object = value else {
            Issue.record("stdout is not a JSON object: \(stdout)", sourceLocation: sourceLocation)
            return value
        }
        return value
    }

    var description: String { "exit \(status)\n--- stdout\n\(stdout)\n--- stderr\n\(stderr)" }
}

/// Runs `extrun` with the staged plugins (and `extraPluginDirectories` first) on its plugin path,
/// and a fresh EXTRUN_HOME.
struct CLI {
    let home: TempDirectory
    var pluginPath: [URL]
    /// More environment variables for every run (TMPDIR, say).
    var environment: [String: String] = [:]

    init(extraPluginDirectories: [URL] = []) throws {
        home = try TempDirectory("cli-home")
        pluginPath = extraPluginDirectories + [try StagedPlugins.directory()]
        // The examples are signed by the key staging made (Scripts/stage-plugins); this home's EXAMPLETEAM trusts it.
        let trusted = try run([
            "owners", "trust", "EXAMPLETEAM", "--signing-key", try StagedPlugins.directory().appendingPathComponent("EXAMPLETEAM.pub").path,
        ])
        guard trusted.status == 0 else { throw StagedPlugins.NotStaged(description: "cannot trust the staged examples' key: \(trusted)") }
    }

    /// The environment of a run: PATH, HOME and EXTRUN_HOME (the test home), the plugin path, `environment`, then `extra`.
    func environmentForRun(_ extra: [String: String] = [:]) -> [String: String] {
        var environment = ["PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home.url.path]
        environment["EXTRUN_HOME"] = home.url.path
        environment["EXTRUN_PLUGIN_PATH"] = pluginPath.map(\.path).joined(separator: ":")
        environment.merge(self.environment) { _, extra in extra }
        environment.merge(extra) { _, extra in extra }
        return environment
    }

    func run(_ arguments: [String], stdin: String? = nil, currentDirectory: URL? = nil) throws -> CLIResult {
        let process = Process()
        process.executableURL = try ExtrunBinary.url()
        process.arguments = arguments
        process.environment = environmentForRun()
        process.currentDirectoryURL = currentDirectory ?? StagedPlugins.packageRoot

        // Files, not pipes: nothing can fill up and block while we wait.
        let out = home.url.appendingPathComponent("stdout-\(UUID().uuidString)")
        let err = home.url.appendingPathComponent("stderr-\(UUID().uuidString)")
        _ = FileManager.default.createFile(atPath: out.path, contents: nil)
        _ = FileManager.default.createFile(atPath: err.path, contents: nil)
        let outHandle = try FileHandle(forWritingTo: out)
        let errHandle = try FileHandle(forWritingTo: err)
        process.standardOutput = outHandle
        process.standardError = errHandle
        let input = Pipe()
        process.standardInput = stdin == nil ? FileHandle.nullDevice : input
        try process.run()
        if let stdin {
            input.fileHandleForWriting.write(Data(stdin.utf8))
            try input.fileHandleForWriting.close()
        }
        process.waitUntilExit()
        try outHandle.close()
        try errHandle.close()
        defer {
            try? FileManager.default.removeItem(at: out)
            try? FileManager.default.removeItem(at: err)
        }
        return CLIResult(
            status: process.terminationStatus, stdout: try String(contentsOf: out, encoding: .utf8),
            stderr: try String(contentsOf: err, encoding: .utf8))
    }
}
