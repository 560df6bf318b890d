import ExtrunHost
import ExtrunProtocol
import ExtrunStore
import ExtrunTestSupport
import Foundation
import Synchronization
import Testing

/// A Python plugin on SDKs/python/extrun_plugin.py (vendored beside its script, as
/// docs/plugin-guide.md §5.1 says), run by the real host: the owner's globals through
/// `globals.update`, a refused service request, and warm reuse with `session` requests.
@Suite struct PythonModuleTests {
    let root: URL
    let home: URL
    let plugin: URL

    static let script = #"""
        #!/usr/bin/env python3
        import sys
        sys.dont_write_bytecode = True
        import extrun_plugin as extrun


        class Count(extrun.Intent):
            name = "Count"

            def resolve(self, parameter, values, context):
                if parameter == "by" and values.get("by", 1) < 1:
                    return extrun.Resolution.unsupported("tooSmall")
                return super().resolve(parameter, values, context)

            def handle(self, values, context):
                value, version = context.globals.update("count", lambda n: (n or 0) + values.get("by", 1))
                try:
                    context.bookmarks.read("nothing", "x")
                    refused = None
                except extrun.ServiceError as error:
                    refused = error.kind
                return extrun.Response.success({"count": value, "version": version, "refused": refused})


        extrun.run("test.pycount", "1.0.0", [Count()])
        """#

    init() throws {
        root = try makeTemporaryFolder("integration-pycount")
        chmod(root.path, 0o711)
        home = root.appendingPathComponent("home")
        plugin = root.appendingPathComponent("plugins/pycount")
        try FileManager.default.createDirectory(at: plugin, withIntermediateDirectories: true)
        let manifest = PluginManifest(
            id: "test.pycount", version: "1.0.0", owner: "TESTTEAM", executable: "plugin.py",
            intents: [
                IntentDefinition(name: "Count", parameters: [
                    ParameterDefinition(name: "by", type: .integer, unsupportedReasons: [UnsupportedReason(code: "tooSmall", message: "Count by 1 or more.")])
                ])
            ])
        try JSONCoding.encoder().encode(manifest).write(to: plugin.appendingPathComponent("manifest.json"))
        try Data(Self.script.utf8).write(to: plugin.appendingPathComponent("plugin.py"))
        _ = chmod(plugin.appendingPathComponent("plugin.py").path, 0o755)
        try StagedPlugins.copyPythonModule(into: plugin)
        try ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [])).sign(pluginIn: plugin)
    }

    /// No live process (zombies aside) whose command line names the plugin's folder, within 2 s.
    func noProcessLeft() -> Bool {
        for _ in 0..<200 {
            let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
            let left = entries.contains { entry in
                guard Int32(entry) != nil, let data = FileManager.default.contents(atPath: "/proc/\(entry)/cmdline"),
                    let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8), !stat.contains(") Z ")
                else { return false }
                return String(decoding: data, as: UTF8.self).contains(plugin.path)
            }
            if !left { return true }
            usleep(10_000)
        }
        return false
    }

    var host: ExtrunHost.Host { ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [plugin.deletingLastPathComponent()])) }

    @Test func servicesReachTheOwnersStoreAndARefusalIsTheHandlers() throws {
        defer { try? FileManager.default.removeItem(at: root) }
        let first = host.handle(IntentInvocation(intent: "Count", parameters: ["by": 2]))
        #expect(first.error == nil, "\(String(describing: first.error))")
        #expect(first.response?.properties == ["count": 2, "version": 1, "refused": "notFound"])
        let second = host.handle(IntentInvocation(intent: "Count"))
        #expect(second.response?.properties["count"] == 3)
        #expect(try Store(home: home).globals(of: "TESTTEAM").get("count")?.value == 3)
        // The manifest's message for the reason the plugin answered without one.
        let small = host.handle(IntentInvocation(intent: "Count", parameters: ["by": 0]))
        #expect(small.error?.kind == .parameterUnresolved)
        #expect(small.error?.message == "by: Count by 1 or more.")
        #expect(noProcessLeft())
    }

    @Test func aWarmProcessRunsLaterSessionsInOneRequest() throws {
        defer { try? FileManager.default.removeItem(at: root) }
        let pool = PluginPool(host: host, maxIdleProcesses: 2)
        let lines = Mutex<[String]>([])
        var options = HandleOptions()
        options.log = { line in lines.withLock { $0.append(line) } }
        for expected in 1...3 {
            let report = pool.handle(IntentInvocation(intent: "Count"), options: options)
            #expect(report.response?.properties["count"] == .int(Int64(expected)), "\(String(describing: report.error))")
        }
        pool.close()
        #expect(pool.launches == 1)
        #expect(pool.reuses == 2)
        #expect(lines.withLock { $0 }.contains { $0.contains("test.pycount session 3 in extension mode, in one session request") })
        #expect(noProcessLeft())
    }
}
