import ExtrunProtocol
import ExtrunStore
import Foundation
import Synchronization
import Testing

@testable import ExtrunHost

#if canImport(Glibc)
import Glibc
#endif

/// A pool's callers reuse a plugin folder's check for 10 ms (`PluginVerification.running`); the
/// callers that find it too old at the same moment wait for one check instead of each checking
/// (and, in a new home, copying) the same files.
@Suite("A pool checks a plugin's folder once for callers arriving together", .serialized)
struct PluginCheckOnceTests {
    @Test("8 threads asking for a signed plugin at the same moment: one check of its folder, one private copy, the same answer for all")
    func concurrentCallersShareOneCheck() throws {
        let tmp = try TempDirectory("check-once")
        let home = tmp.url.appendingPathComponent("home")
        try Store(home: home).globals(of: "BANKTEAM").set("apiToken", to: "s3cr3t")
        let plugins = try tmp.directory("plugins")
        chmod(plugins.path, 0o755)
        let plugin = try ScriptPlugin(in: plugins, name: "bank", script: #"serve({"handle": lambda msg: reply(msg, {"code": "success"})})"#)
        let manifest =
            #"{"id":"com.bank.echo","version":"1.0.0","owner":"BANKTEAM","protocolVersion":1,"executable":"plugin.py","modes":["extension"],"intents":[{"name":"Echo","parameters":[{"name":"text","type":"string"}]}]}"#
        try Data(manifest.utf8).write(to: plugin.directory.appendingPathComponent("manifest.json"))
        try ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [plugins])).sign(pluginIn: plugin.directory)
        let discovered = try PluginCatalog.plugin(in: plugin.directory)

        let callers = 8
        let ready = Atomic<Int>(0)
        let finished = Atomic<Int>(0)
        let answers = Mutex<[String]>([])
        let before = PluginVerification.checksMade(manifestPath: discovered.manifestPath)
        for _ in 0..<callers {
            Thread.detachNewThread {
                ready.add(1, ordering: .relaxed)
                while ready.load(ordering: .relaxed) < callers { sched_yield() }
                let answer: String
                do {
                    let (seal, running) = try PluginVerification.running(discovered, home: home, maxAgeNs: 10_000_000_000)
                    answer = "\(seal != .unsigned) \(running.directory.path)"
                } catch {
                    answer = "refused: \(error)"
                }
                answers.withLock { $0.append(answer) }
                finished.add(1, ordering: .releasing)
            }
        }
        while finished.load(ordering: .acquiring) < callers { Thread.sleep(forTimeInterval: 0.005) }
        let checks = PluginVerification.checksMade(manifestPath: discovered.manifestPath) - before
        let all = answers.withLock { $0 }
        #expect(checks == 1, "\(checks) checks of one folder for \(callers) callers arriving together")
        #expect(Set(all).count == 1 && all.count == callers, "\(all)")
        let copy = try #require(all.first)
        #expect(copy.hasPrefix("true " + PluginCopies.root(home: home.path) + "/"), "\(copy)")
        // One copy in the home's copies folder.
        let copies = try FileManager.default.contentsOfDirectory(atPath: PluginCopies.root(home: home.path)).filter { !$0.hasPrefix(".") }
        #expect(copies.count == 1, "\(copies)")
    }
}
