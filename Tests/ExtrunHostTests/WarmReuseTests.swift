import ExtrunHost
import ExtrunProtocol
import Foundation
import Testing

/// Warm reuse (docs/protocol.md §15) through `PluginPool`, with the real example
/// plugins (the Swift SDK declares `reusable`) and Python script plugins.
@Suite("Warm plugin reuse")
struct WarmReuseTests {
    let home: TempDirectory

    init() throws {
        home = try TempDirectory("warm-home")
    }

    /// A pool over the staged example plugins.
    func stagedPool() throws -> PluginPool {
        try StagedPlugins.trust(home: home.url)
        return PluginPool(host: ExtrunHost.Host(paths: HostPaths(home: home.url, pluginSearchPath: [try StagedPlugins.directory()])))
    }

    /// A pool that sees one Python script plugin (the kit of HostilePluginTests).
    func scriptPool(_ name: String, script: String) throws -> (PluginPool, ScriptPlugin, TempDirectory) {
        let tmp = try TempDirectory(name)
        let plugin = try ScriptPlugin(in: tmp.url.appendingPathComponent("plugins"), name: name, script: script)
        let host = ExtrunHost.Host(
            paths: HostPaths(home: tmp.url.appendingPathComponent("home"), pluginSearchPath: [tmp.url.appendingPathComponent("plugins")]))
        return (PluginPool(host: host), plugin, tmp)
    }

    func invocation(_ intent: String, _ parameters: [String: JSONValue]) -> IntentInvocation {
        IntentInvocation(intent: intent, parameters: parameters, source: "test")
    }

    /// A Python plugin that declares reuse; `extra` adds method handlers (name → lambda).
    static func reusableScript(_ extra: String = "") -> String {
        #"""
        def reusable_handshake(msg):
            reply(msg, {"protocolVersion": 1, "plugin": {"id": os.environ["EXTRUN_PLUGIN_ID"], "version": "1.0.0"},
                        "intents": [msg["params"]["intent"]], "reusable": True})
        handlers = {"initialize": reusable_handshake}
        """# + "\n" + extra + "\nserve(handlers)"
    }

    @Test("a Swift SDK plugin runs many intents in one process; each answer is its own")
    func reuseSwiftPlugin() throws {
        let pool = try stagedPool()
        for i in 0..<12 {
            let report = pool.handle(invocation("MakeUppercase", ["text": .string("text number \(i)")]))
            #expect(report.error == nil, "\(String(describing: report.error))")
            #expect(report.response?.properties["result"] == .string("TEXT NUMBER \(i)"))
            #expect(report.exitCode == 0)
            let metrics = try #require(report.metrics)
            #expect(metrics.wallMs > 0 && (metrics.peakMemoryBytes ?? 0) > 0)
        }
        #expect(pool.launches == 1)
        #expect(pool.reuses == 11)
        #expect(pool.idleProcessCount == 1)
        pool.close()
        #expect(pool.idleProcessCount == 0)
    }

    @Test("a long-lived process does not grow: 1,000 sessions later its private memory is where it was after 100")
    func memoryStaysFlat() throws {
        let pool = try stagedPool()
        var early: Int64 = 0
        for i in 1...1000 {
            let report = pool.handle(invocation("MakeUppercase", ["text": "steady"]))
            #expect(report.error == nil, "\(String(describing: report.error))")
            if i == 100 { early = report.metrics?.peakMemoryBytes ?? 0 }
            if i == 1000 {
                let late = report.metrics?.peakMemoryBytes ?? 0
                // Before the SDK registered its request tasks under their lock, ~5 KiB leaked per session.
                #expect(late - early < 1 << 20, "private memory grew from \(early) to \(late) bytes over 900 sessions")
            }
        }
        #expect(pool.launches == 1)
    }

    @Test("intents of different plugins alternate, each plugin keeping its own warm process")
    func twoPlugins() throws {
        let pool = try stagedPool()
        for i in 0..<4 {
            let upper = pool.handle(invocation("MakeUppercase", ["text": .string("a\(i)")]))
            #expect(upper.response?.properties["result"] == .string("A\(i)"), "\(String(describing: upper.error))")
            let alloc = pool.handle(invocation("AllocateMemory", ["megabytes": 1]))
            #expect(alloc.error == nil && alloc.response?.code == "success", "\(String(describing: alloc.error))")
        }
        #expect(pool.launches == 2)
        #expect(pool.reuses == 6)
    }

    @Test("the memory cap counts the process's whole life: going over it mid-reuse is reported for that intent, and the next gets a fresh process")
    func memoryCapMidReuse() throws {
        let pool = try stagedPool()
        #expect(pool.handle(invocation("AllocateMemory", ["megabytes": 2])).error == nil)
        #expect(pool.handle(invocation("AllocateMemory", ["megabytes": 2])).error == nil)
        let over = pool.handle(invocation("AllocateMemory", ["megabytes": 200]))
        #expect(over.error?.kind == .memoryLimitExceeded, "\(String(describing: over.error))")
        #expect(over.response == nil)
        #expect(pool.idleProcessCount == 0)
        let after = pool.handle(invocation("AllocateMemory", ["megabytes": 2]))
        #expect(after.error == nil, "\(String(describing: after.error))")
        #expect(pool.launches == 2)
        #expect(pool.reuses == 2)
    }

    @Test("the deadline is per intent: a later session gets its own budget, and a timeout ends the process")
    func deadlinePerSession() throws {
        let pool = try stagedPool()
        var options = HandleOptions()
        options.deadlineMs = 1500
        // Three sessions of 0.6 s: 1.8 s in all, more than one deadline, but each within its own.
        for _ in 0..<3 {
            let report = pool.handle(invocation("Sleep", ["seconds": 0.6]), options: options)
            #expect(report.error == nil, "\(String(describing: report.error))")
        }
        #expect(pool.launches == 1)
        let late = pool.handle(invocation("Sleep", ["seconds": 5]), options: options)
        #expect(late.error?.kind == .timeout, "\(String(describing: late.error))")
        #expect(pool.idleProcessCount == 0)
        #expect(pool.handle(invocation("Sleep", ["seconds": 0.01]), options: options).error == nil)
        #expect(pool.launches == 2)
    }

    @Test("different limits do not share a process")
    func limitsKeyTheProcess() throws {
        let pool = try stagedPool()
        var small = HandleOptions()
        small.memoryLimitBytes = 40 << 20
        #expect(pool.handle(invocation("MakeUppercase", ["text": "x"])).error == nil)
        #expect(pool.handle(invocation("MakeUppercase", ["text": "x"]), options: small).error == nil)
        #expect(pool.handle(invocation("MakeUppercase", ["text": "x"]), options: small).error == nil)
        #expect(pool.launches == 2)
        #expect(pool.reuses == 1)
    }

    @Test("a plugin that does not declare reuse gets a new process for every intent (the Python example)")
    func notDeclared() throws {
        let pool = try stagedPool()
        for _ in 0..<3 {
            let report = pool.handle(invocation("ShoutText", ["text": "hi"]))
            #expect(report.error == nil, "\(String(describing: report.error))")
            #expect(report.response?.code == "success")
            #expect(report.metrics?.cpuMs != nil)
        }
        #expect(pool.launches == 3)
        #expect(pool.reuses == 0)
        #expect(pool.idleProcessCount == 0)
    }

    @Test("a plugin whose manifest changed while its process was warm gets a new process")
    func changedPluginGetsANewProcess() throws {
        let (pool, plugin, tmp) = try scriptPool("warmchanged", script: Self.reusableScript())
        #expect(pool.handle(invocation("Echo", ["text": "one"])).response?.properties["echo"] == "one")
        #expect(pool.handle(invocation("Echo", ["text": "two"])).response?.properties["echo"] == "two")
        #expect(pool.launches == 1)
        // Reinstalled: the same manifest, written again (a new version of the file).
        let manifest = plugin.directory.appendingPathComponent("manifest.json")
        let text = try Data(contentsOf: manifest)
        try FileManager.default.removeItem(at: manifest)
        try text.write(to: manifest)
        // The pool looks at the plugin's files at most every 10 ms.
        usleep(30_000)
        #expect(pool.handle(invocation("Echo", ["text": "three"])).response?.properties["echo"] == "three")
        #expect(pool.launches == 2)
        pool.close()
        withExtendedLifetime(tmp) {}
    }

    @Test("a crash mid-reuse is reported for the intent in flight; the process is gone and the next intent gets a new one")
    func crashMidReuse() throws {
        let (pool, plugin, tmp) = try scriptPool("warmcrash", script: Self.reusableScript(#"""
            handlers["handle"] = lambda msg: os._exit(3) if msg["params"]["parameters"]["text"] == "crash" else default(msg)
            """#))
        #expect(pool.handle(invocation("Echo", ["text": "one"])).response?.properties["echo"] == "one")
        // The pid the plugin notes is its pid namespace's (docs/sandbox.md): a new
        // process may note the same number, so the pool's launch count tells them apart.
        let firstPID = try plugin.pid()
        #expect(pool.handle(invocation("Echo", ["text": "two"])).response?.properties["echo"] == "two")
        #expect(pool.launches == 1)
        let crash = pool.handle(invocation("Echo", ["text": "crash"]))
        #expect(crash.error?.kind == .pluginCrashed, "\(String(describing: crash.error))")
        #expect(crash.error?.details["exitStatus"] == 3)
        expectGone(noted: firstPID, mentioning: plugin.directory.path)
        let next = pool.handle(invocation("Echo", ["text": "three"]))
        #expect(next.response?.properties["echo"] == "three", "\(String(describing: next.error))")
        #expect(pool.launches == 2)
        pool.close()
        #expect(processes(mentioning: plugin.directory.path).isEmpty)
        withExtendedLifetime(tmp) {}
    }

    @Test("a process that ends while idle is replaced, not blamed on the next intent")
    func endsWhileIdle() throws {
        let (pool, plugin, tmp) = try scriptPool("warmquit", script: Self.reusableScript(#"""
            def handle_then_quit(msg):
                default(msg)
                os._exit(0)
            handlers["handle"] = handle_then_quit
            """#))
        for text in ["a", "b", "c"] {
            let report = pool.handle(invocation("Echo", ["text": .string(text)]))
            #expect(report.response?.properties["echo"] == .string(text), "\(String(describing: report.error))")
            // Let the exit reach the host before the next intent.
            usleep(200_000)
        }
        #expect(pool.launches == 3)
        #expect(pool.reuses == 0)
        #expect(processes(mentioning: plugin.directory.path).isEmpty)
        withExtendedLifetime(tmp) {}
    }

    @Test("a forbidden system call mid-reuse is a sandboxViolation for that intent")
    func violationMidReuse() throws {
        let (pool, _, tmp) = try scriptPool("warmviolation", script: Self.reusableScript(#"""
            import socket
            def inet(msg):
                socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                default(msg)
            handlers["handle"] = lambda msg: inet(msg) if msg["params"]["parameters"]["text"] == "net" else default(msg)
            """#))
        #expect(pool.handle(invocation("Echo", ["text": "ok"])).error == nil)
        let report = pool.handle(invocation("Echo", ["text": "net"]))
        #expect(report.error?.kind == .sandboxViolation, "\(String(describing: report.error))")
        #expect(report.error?.details["syscall"] == "socket")
        #expect(report.response == nil)
        #expect(pool.idleProcessCount == 0)
        #expect(pool.handle(invocation("Echo", ["text": "ok"])).error == nil)
        #expect(pool.launches == 2)
        withExtendedLifetime(tmp) {}
    }
}

/// Cancellation reaches a Swift handler that never suspends: the SDK runs requests
/// on its channel's thread, and its watchdog reads `cancel` while that thread computes.
@Suite("Cancel reaches a busy handler")
struct BusyHandlerCancelTests {
    @Test("a handler computing past its deadline sees Task.isCancelled and ends within the cancel grace, not killed at its end")
    func busyHandlerIsCancelled() throws {
        let home = try TempDirectory("busy-home")
        let host = ExtrunHost.Host(paths: HostPaths(home: home.url, pluginSearchPath: [try StagedPlugins.directory()]))
        var options = HandleOptions()
        options.deadlineMs = 1000
        let report = host.handle(IntentInvocation(intent: "Sleep", parameters: ["seconds": 20, "busy": true], source: "test"), options: options)
        #expect(report.error?.kind == .timeout, "\(String(describing: report.error))")
        // The cancel grace is 500 ms: a plugin that did not see cancel is killed at its end.
        let wall = try #require(report.metrics?.wallMs)
        #expect(wall < 1000 + 400, "the busy handler was not cancelled: the run took \(wall) ms")
    }
}
