import ExtrunHost
import ExtrunStore
import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A temporary plugin directory holding the hostile fixture, named with a
/// unique marker so that its processes can be found in /proc.
struct HostilePlugin {
    let root: URL
    let marker: String
    let home: URL

    init(policy: String? = nil) throws {
        marker = "hostile-\(UUID().uuidString.prefix(8))"
        // Its own folder in the temporary directory (no shared parent, which nothing would remove).
        root = FileManager.default.temporaryDirectory.appendingPathComponent("extrun-sandbox-\(marker)")
        home = root.appendingPathComponent("home")
        let plugin = root.appendingPathComponent("plugins/\(marker)")
        try FileManager.default.createDirectory(at: plugin, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
        let fixture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/hostile.py")
        let script = plugin.appendingPathComponent("hostile.py")
        try FileManager.default.copyItem(at: fixture, to: script)
        chmod(script.path, 0o755)
        // Its framing is SDKs/python/extrun_plugin.py's, vendored beside it as an author does.
        try StagedPlugins.copyPythonModule(into: plugin)
        let intents = [
            "NeverAnswer", "Spin", "ForkBomb", "OpenSocket", "ExecShell", "Ptrace", "Unshare", "FloodStdout", "FloodStderr",
            "HugeResponse", "Daemonize", "WriteBigFile", "ProgressThenAnswer", "ReadSecrets", "WriteHome", "ReadContainer",
            "PtraceAttach", "SignalHost", "EscapeScratch", "WhoAmI", "RewriteOwnManifest", "Terminal", "SignalOwner", "OtherABI",
            "HoldMemory", "FillFolder", "AllocateOnce", "DeepScratch", "ManyFiles", "Reach", "NamedSockets", "AllocateSmall",
            "ProcessControl", "KernelBudgets", "ForkMemory", "PageTables", "HoldUnlinked", "Inotify",
        ]
        let manifest = PluginManifest(
            id: "test.hostile", version: "1", owner: "TESTTEAM", executable: "hostile.py",
            intents: intents.map { name in
                IntentDefinition(name: name, parameters: [
                    ParameterDefinition(name: "megabytes", type: .integer),
                    ParameterDefinition(name: "steps", type: .integer),
                    ParameterDefinition(name: "path", type: .string),
                    ParameterDefinition(name: "pid", type: .integer),
                ])
            })
        try JSONCoding.encoder(pretty: true).encode(manifest).write(to: plugin.appendingPathComponent("manifest.json"))
        if let policy { try writePolicy(policy, home: home) }
    }

    var pluginPath: URL { root.appendingPathComponent("plugins") }

    var host: ExtrunHost.Host { ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [pluginPath])) }

    func handle(_ intent: String, _ parameters: [String: JSONValue] = [:], configure: (inout HandleOptions) -> Void = { _ in })
        -> HandleReport
    {
        var options = HandleOptions()
        configure(&options)
        return host.handle(IntentInvocation(intent: intent, parameters: parameters), options: options)
    }

    /// Processes whose command line mentions this plugin.
    func leftovers() -> [Int32] { ProcessTable.pids(containing: marker) }

    /// Removes its folder, and expects it gone (the test's run leaves no file).
    func remove(sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            try FileManager.default.removeItem(at: root)
        } catch {
            Issue.record("removing \(root.path): \(error)", sourceLocation: sourceLocation)
        }
        #expect(!FileManager.default.fileExists(atPath: root.path), "\(root.path) is left", sourceLocation: sourceLocation)
    }
}

enum ProcessTable {
    static func pids(containing marker: String) -> [Int32] {
        let me = getpid()
        let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return entries.compactMap { Int32($0) }.filter { pid in
            guard pid != me, let data = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") else { return false }
            guard let state = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), !isZombie(state) else { return false }
            return String(decoding: data, as: UTF8.self).contains(marker)
        }
    }

    static func isZombie(_ stat: String) -> Bool {
        guard let close = stat.lastIndex(of: ")") else { return false }
        return stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).hasPrefix("Z")
    }

    /// Waits (briefly) for processes to disappear: killed processes take a moment to be reaped.
    static func waitUntilGone(_ marker: String, seconds: Double = 3) -> [Int32] {
        let end = Date().addingTimeInterval(seconds)
        var left = pids(containing: marker)
        while !left.isEmpty && Date() < end {
            usleep(20_000)
            left = pids(containing: marker)
        }
        return left
    }
}

/// Writes `$EXTRUN_HOME/policy.json` readable only by its owner, as the host requires.
func writePolicy(_ text: String, home: URL) throws {
    let path = home.appendingPathComponent("policy.json").path
    try Data(text.utf8).write(to: URL(fileURLWithPath: path))
    chmod(path, 0o600)
}
