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
    /// A signed script plugin of BANKTEAM's in `tmp`, and the home that knows its owner.
    static func signedPlugin(in tmp: TempDirectory) throws -> (home: URL, plugin: DiscoveredPlugin) {
        let home = tmp.url.appendingPathComponent("home")
        try Store(home: home).globals(of: "BANKTEAM").set("apiToken", to: "s3cr3t")
        let plugins = try tmp.directory("plugins")
        chmod(plugins.path, 0o755)
        let plugin = try ScriptPlugin(in: plugins, name: "bank", script: #"serve({"handle": lambda msg: reply(msg, {"code": "success"})})"#)
        let manifest =
            #"{"id":"com.bank.echo","version":"1.0.0","owner":"BANKTEAM","protocolVersion":1,"executable":"plugin.py","modes":["extension"],"intents":[{"name":"Echo","parameters":[{"name":"text","type":"string"}]}]}"#
        try Data(manifest.utf8).write(to: plugin.directory.appendingPathComponent("manifest.json"))
        try ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [plugins])).sign(pluginIn: plugin.directory)
        return (home, try PluginCatalog.plugin(in: plugin.directory))
    }

    /// An attack on the shared check: the plugin's script is changed while callers keep asking.
    /// Every caller that starts 10 ms after the change is refused (`signatureInvalid`), each
    /// one checking again (a refusal is never reused), and none gets the old answer.
    @Test("a folder changed while 8 callers keep asking: every call that starts 10 ms after the change is refused, none gets the answer from before")
    func changeSeenByCallersAfterTheCheckAge() throws {
        let tmp = try TempDirectory("check-once-change")
        let (home, discovered) = try Self.signedPlugin(in: tmp)
        let maxAge: UInt64 = 10_000_000
        _ = try PluginVerification.running(discovered, home: home, maxAgeNs: maxAge)
        let changedAt = Atomic<UInt64>(0)
        let stop = Atomic<Bool>(false)
        let finished = Atomic<Int>(0)
        let late = Mutex<[String]>([])
        let callers = 8
        for _ in 0..<callers {
            Thread.detachNewThread {
                while !stop.load(ordering: .relaxed) {
                    let start = MonotonicClock.now()
                    let changed = changedAt.load(ordering: .acquiring)
                    let outcome: String
                    do {
                        _ = try PluginVerification.running(discovered, home: home, maxAgeNs: maxAge)
                        outcome = "accepted"
                    } catch {
                        outcome = (error as? HostError).map { "\($0.kind)" } ?? "\(error)"
                    }
                    // Started more than the check's age after the change: must be refused.
                    if changed > 0, start > changed + maxAge, outcome != "signatureInvalid" {
                        late.withLock { $0.append(outcome) }
                    }
                }
                finished.add(1, ordering: .releasing)
            }
        }
        Thread.sleep(forTimeInterval: 0.05)
        try Data("# changed after signing\n".utf8).write(to: discovered.directory.appendingPathComponent("plugin.py"), options: .atomic)
        changedAt.store(MonotonicClock.now(), ordering: .releasing)
        Thread.sleep(forTimeInterval: 0.1)
        stop.store(true, ordering: .relaxed)
        while finished.load(ordering: .acquiring) < callers { Thread.sleep(forTimeInterval: 0.005) }
        let wrong = late.withLock { $0 }
        #expect(wrong.isEmpty, "\(wrong.count) calls started after the change's 10 ms were not refused: \(Set(wrong))")
        #expect(throws: HostError.self) { try PluginVerification.running(discovered, home: home, maxAgeNs: maxAge) }
    }

    @Test("8 threads asking for a signed plugin at the same moment: one check of its folder, one private copy, the same answer for all")
    func concurrentCallersShareOneCheck() throws {
        let tmp = try TempDirectory("check-once")
        let (home, discovered) = try Self.signedPlugin(in: tmp)

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
