import ExtrunHost
import ExtrunProtocol
import Foundation
import Synchronization
import Testing

/// A caller cancels a run from another thread (`HandleOptions.cancellation`: what
/// `extrun serve` does when its client goes away and `extrun mcp` on
/// `notifications/cancelled`), and hears the plugin's progress (`onProgress`).
@Suite("Cancellation and progress for the host's callers")
struct CancellationTests {
    typealias Fixture = HostilePluginTests.Fixture

    /// Cancels `cancellation` after `seconds`, on another thread.
    static func cancel(_ cancellation: Cancellation, after seconds: Double, reason: String = "the client went away") {
        Thread.detachNewThread {
            Thread.sleep(forTimeInterval: seconds)
            cancellation.cancel(reason)
        }
    }

    @Test("the first reason is kept; cancelling again changes nothing")
    func firstReasonKept() {
        let cancellation = Cancellation()
        #expect(!cancellation.isCancelled)
        #expect(cancellation.reason == nil)
        cancellation.cancel("first")
        cancellation.cancel("second")
        #expect(cancellation.isCancelled)
        #expect(cancellation.reason == "first")
    }

    @Test("cancelled before the launch: no process is started, the report says cancelled (exit 20)")
    func cancelledBeforeLaunch() throws {
        let f = try Fixture("cancel-early", script: "serve()")
        let cancellation = Cancellation()
        cancellation.cancel("shutting down")
        let report = f.run(options: .with { $0.cancellation = cancellation })
        let error = try #require(report.error)
        #expect(error.kind == .cancelled)
        #expect(report.exitCode == 20)
        #expect(error.details["reason"] == "shutting down")
        #expect(error.message.contains("before"), "\(error.message)")
        // The script notes its pid as it starts: it never did.
        #expect(throws: (any Error).self) { try f.plugin.pid() }
    }

    @Test("cancelled during handle: the plugin is sent cancel with reason \"cancelled\", then ended; nothing is left")
    func cancelledDuringHandle() throws {
        let f = try Fixture("cancel-handle", script: #"""
            import select
            def handle(msg):
                # Long work that keeps an eye on fd 3, as docs/protocol.md §12 asks.
                while True:
                    ready, _, _ = select.select([3], [], [], 0.05)
                    if ready:
                        message = read_message()
                        if message is None:
                            sys.exit(0)
                        note("cancel", json.dumps(message))
                        sys.exit(0)
            serve({"handle": handle})
            """#)
        let cancellation = Cancellation()
        Self.cancel(cancellation, after: 0.4)
        let started = Date()
        let report = f.run(options: .with { $0.cancellation = cancellation })
        let seconds = Date().timeIntervalSince(started)
        let error = try #require(report.error)
        #expect(error.kind == .cancelled, "\(error)")
        #expect(error.details["phase"] == "handle")
        #expect(error.details["reason"] == "the client went away")
        #expect((error.details["elapsedMs"]?.doubleValue ?? 0) >= 300)
        #expect(seconds < 5, "a cancelled run ends within the cancel grace, not at its deadline (took \(seconds) s)")
        let cancel = try #require(f.plugin.note("cancel"), "the plugin never read a cancel")
        let message = try JSONDecoder().decode(JSONValue.self, from: Data(cancel.utf8))
        #expect(message["method"] == "cancel")
        #expect(message["params"]?["reason"] == "cancelled")
        try f.expectNoProcessLeft()
    }

    @Test("a plugin that ignores cancel is killed after the grace, with everything it started")
    func cancelledPluginThatIgnoresIt() throws {
        let f = try Fixture("cancel-deaf", script: #"""
            def handle(msg):
                spawn_sleeper("child")
                hang()
            serve({"handle": handle})
            """#)
        let cancellation = Cancellation()
        Self.cancel(cancellation, after: 0.4)
        let report = f.run(options: .with { $0.cancellation = cancellation })
        #expect(report.error?.kind == .cancelled, "\(String(describing: report.error))")
        try f.expectNoProcessLeft()
        if let child = f.plugin.note("child").flatMap({ Int32($0) }) {
            expectGone(noted: child, mentioning: f.plugin.directory.path)
        }
    }

    @Test("cancelled while a person is asked: the run ends cancelled, not parameterUnresolved")
    func cancelledDuringPrompt() throws {
        let f = try Fixture("cancel-prompt", script: #"""
            def resolve(msg):
                reply(msg, {"result": "needsValue", "prompt": "Which text?"})
            serve({"resolve": resolve})
            """#)
        let cancellation = Cancellation()
        /// The front end's side: its client went away while the question was open.
        final class GoneClient: Prompter, Sendable {
            let cancellation: Cancellation
            init(_ cancellation: Cancellation) { self.cancellation = cancellation }
            func ask(_ question: String) -> String? {
                cancellation.cancel("the client disconnected while asked")
                return nil
            }
            func choose(_ question: String, among options: [String]) -> Int? { nil }
            func confirm(_ question: String) -> Bool? { nil }
            func tell(_ message: String) {}
        }
        let report = f.run(["text": .null], options: .with {
            $0.cancellation = cancellation
            $0.prompter = GoneClient(cancellation)
        })
        let error = try #require(report.error)
        #expect(error.kind == .cancelled, "\(error)")
        #expect(error.details["phase"] == "resolve")
        #expect(error.details["reason"] == "the client disconnected while asked")
        try f.expectNoProcessLeft()
    }

    @Test("a warm process whose intent was cancelled is ended, never reused (the real Sleep plugin)")
    func cancelledWarmProcessNotReused() throws {
        let home = try TempDirectory("cancel-warm")
        try StagedPlugins.trust(home: home.url)
        let pool = PluginPool(host: ExtrunHost.Host(paths: HostPaths(home: home.url, pluginSearchPath: [try StagedPlugins.directory()])))
        defer { pool.close() }
        let sleep = IntentInvocation(intent: "Sleep", parameters: ["seconds": 0], source: "test")
        #expect(pool.handle(sleep).error == nil)
        #expect(pool.launches == 1 && pool.idleProcessCount == 1)
        let cancellation = Cancellation()
        Self.cancel(cancellation, after: 0.3)
        let started = Date()
        let cancelled = pool.handle(
            IntentInvocation(intent: "Sleep", parameters: ["seconds": 20], source: "test"), options: .with { $0.cancellation = cancellation })
        #expect(cancelled.error?.kind == .cancelled, "\(String(describing: cancelled.error))")
        #expect(Date().timeIntervalSince(started) < 5)
        #expect(pool.idleProcessCount == 0, "the cancelled process must not go back to the pool")
        #expect(pool.handle(sleep).error == nil)
        #expect(pool.launches == 2, "the next intent needs a new process")
    }

    @Test("progress notifications reach the caller's onProgress, in order")
    func progressReachesCaller() throws {
        let f = try Fixture("progress", script: #"""
            def handle(msg):
                send({"jsonrpc": "2.0", "method": "progress", "params": {"fraction": 0.25, "message": "chopping"}})
                send({"jsonrpc": "2.0", "method": "progress", "params": {"fraction": 0.75}})
                default(msg)
            serve({"handle": handle})
            """#)
        let seen = Mutex<[ProgressParams]>([])
        let report = f.run(options: .with { options in
            options.onProgress = { progress in seen.withLock { $0.append(progress) } }
        })
        #expect(report.error == nil, "\(String(describing: report.error))")
        #expect(seen.withLock { $0 } == [ProgressParams(fraction: 0.25, message: "chopping"), ProgressParams(fraction: 0.75)])
        try f.expectNoProcessLeft()
    }
}
