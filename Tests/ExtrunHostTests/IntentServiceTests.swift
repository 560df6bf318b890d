import ExtrunHost
import ExtrunProtocol
import Foundation
import Testing

/// The one layer batch, serve and mcp share (`IntentService`), with the real Sleep and
/// MakeUppercase plugins: admission, warm sessions for every verb, cancelling what is in
/// flight, and the one shutdown.
@Suite("IntentService", .serialized)
struct IntentServiceTests {
    let home: TempDirectory
    let host: ExtrunHost.Host

    init() throws {
        home = try TempDirectory("home")
        host = try StagedPlugins.host(home: home.url)
    }

    static func sleep(_ seconds: Int) -> IntentRequest {
        .handle(IntentInvocation(intent: "Sleep", parameters: ["seconds": .int(Int64(seconds))], source: "test"))
    }

    static let uppercase = IntentRequest.handle(IntentInvocation(intent: "MakeUppercase", parameters: ["text": "hi"], source: "test"))

    /// Waits (up to 10 s) until `condition` holds.
    func eventually(_ condition: () -> Bool) -> Bool {
        let end = Date().addingTimeInterval(10)
        while !condition() {
            if Date() > end { return false }
            usleep(10_000)
        }
        return true
    }

    @Test("One place at once and none waiting: a second run is refused at once, overloaded with the numbers; the first is not disturbed")
    func admissionRefuses() throws {
        let service = IntentService(host: host, admission: Admission.Limits(maxConcurrent: 1, maxQueued: 0), warm: .init(maxIdle: 2))
        let first = Promise<HandleReport>()
        _ = service.submit(Self.sleep(1), options: HandleOptions(), uid: getuid()) { first.fulfil($0) }
        #expect(eventually { service.running == 1 })
        let second = Promise<HandleReport>()
        let submitted = service.submit(Self.uppercase, options: HandleOptions(), uid: getuid()) { second.fulfil($0) }
        guard case .failure(let error) = submitted else {
            Issue.record("a second run was admitted")
            return
        }
        #expect(error.kind == .overloaded && error.details["maxConcurrent"] == 1 && error.details["maxQueued"] == 0, "\(error)")
        #expect(second.wait().error?.kind == .overloaded, "the refusal is also the completion's report")
        #expect(first.wait().error == nil, "\(String(describing: first.wait().error))")
        service.shutDown(grace: 0, reason: "test")
        #expect(service.pool.idleProcessCount == 0)
    }

    @Test("Every verb through warm sessions: the second handle and the second options reuse the process")
    func verbsAreWarm() throws {
        let service = IntentService(host: host, admission: Admission.Limits(maxConcurrent: 2, maxQueued: 2), warm: .init(maxIdle: 2))
        defer { service.shutDown(grace: 0, reason: "test") }
        let order = IntentInvocation(intent: "OrderSoup", parameters: [:], source: "test")
        for request in [Self.uppercase, Self.uppercase, .options(order, parameter: "soup", search: nil), .options(order, parameter: "soup", search: nil)] {
            let report = service.perform(request, options: HandleOptions())
            #expect(report.error == nil, "\(String(describing: report.error))")
        }
        // MakeUppercase once, SoupChef once; each second call warm.
        #expect(service.pool.launches == 2 && service.pool.reuses == 2, "launches \(service.pool.launches), reuses \(service.pool.reuses)")
    }

    @Test("shutDown: the runs in flight past the grace are cancelled (kind cancelled), later ones refused (reason shutdown), no plugin left")
    func shutDownCancels() throws {
        let service = IntentService(host: host, admission: Admission.Limits(maxConcurrent: 2, maxQueued: 2), warm: .init(maxIdle: 2))
        let running = Promise<HandleReport>()
        _ = service.submit(Self.sleep(30), options: HandleOptions(), uid: getuid()) { running.fulfil($0) }
        #expect(eventually { service.running == 1 })
        usleep(300_000)  // the plugin is in its handler
        let started = Date()
        var told = -1
        service.shutDown(grace: 0.2, reason: "the test ends the service") { told = $0 }
        let report = running.wait()
        #expect(told == 1)
        #expect(report.error?.kind == .cancelled, "\(String(describing: report.error))")
        #expect(report.error?.details["reason"]?.stringValue == "the test ends the service" || report.error?.message.contains("the test ends the service") == true,
                "\(String(describing: report.error))")
        #expect(Date().timeIntervalSince(started) < 10, "the cancel grace, not the 30 s sleep")
        let after = service.perform(Self.uppercase, options: HandleOptions())
        #expect(after.error?.kind == .overloaded && after.error?.details["reason"] == "shutdown", "\(String(describing: after.error))")
        if case .success = service.submit(uid: getuid(), refused: { _ in }, {}) { Issue.record("a run was admitted after the shutdown") }
        #expect(service.running == 0 && service.pool.idleProcessCount == 0)
    }

    @Test("cancelAll reaches a run started with perform on the caller's thread, and its control's onCancel")
    func cancelAllReachesPerform() throws {
        let service = IntentService(host: host, admission: Admission.Limits(maxConcurrent: 1, maxQueued: 0), warm: .init(maxIdle: 1))
        defer { service.shutDown(grace: 0, reason: "test") }
        let control = RunControl()
        let closed = Promise<Bool>()
        control.onCancel { closed.fulfil(true) }
        let done = Promise<HandleReport>()
        Thread { done.fulfil(service.perform(Self.sleep(30), options: HandleOptions(), control: control)) }.start()
        usleep(500_000)
        service.cancelAll("cancelled by the test")
        #expect(closed.wait())
        #expect(done.wait().error?.kind == .cancelled)
    }

    @Test("A run that had its place but starts after the shutdown's cancel is cancelled, not refused; one still queued is refused (reason shutdown)")
    func admittedRunsStartingLateAreCancelled() throws {
        let service = IntentService(host: host, admission: Admission.Limits(maxConcurrent: 1, maxQueued: 1), warm: .init(maxIdle: 1))
        let gate = DispatchSemaphore(value: 0)
        let late = Promise<HandleReport>()
        // Its worker is slow to start (the gate): the end of MCP's input came first (issue 32's fresh-machine run).
        _ = service.submit(uid: getuid(), refused: { _ in Issue.record("a run with a place was refused") }) {
            gate.wait()
            late.fulfil(service.perform(Self.sleep(30), options: HandleOptions()))
        }
        let queued = Promise<HostError?>()
        _ = service.submit(uid: getuid(), refused: { queued.fulfil($0) }) { queued.fulfil(nil) }
        let ended = Promise<Bool>()
        Thread {
            service.shutDown(grace: 0, reason: "the input ended")
            ended.fulfil(true)
        }.start()
        #expect(queued.wait()?.details["reason"] == "shutdown", "the queued run is refused at once")
        usleep(200_000)  // the shutdown's cancel has happened: its grace is 0
        gate.signal()
        let report = late.wait()
        #expect(report.error?.kind == .cancelled, "\(String(describing: report.error))")
        #expect(ended.wait())
        #expect(service.pool.idleProcessCount == 0)
    }
}
