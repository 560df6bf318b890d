import ExtrunHost
import Foundation
import Logging
import NIOConcurrencyHelpers
import Testing

@testable import ExtrunServe

/// The shared service's bookkeeping on its own (issue 30): the connections per caller, the
/// refusals' log, the per-uid fields of serve.json. The real service is in
/// Tests/ExtrunCLITests/ServeSharedTests.swift.
@Suite("extrun serve: connections per caller, refusals in the log")
struct SharedServiceTests {
    /// Every line a logger writes.
    final class Lines: LogHandler, @unchecked Sendable {
        let box = NIOLockedValueBox<[String]>([])
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) { box.withLockedValue { $0.append(event.message.description) } }
        var all: [String] { box.withLockedValue { $0 } }
    }

    @Test("A holder at its limit is refused with the numbers, others are not; a close frees the place; the total holds over every holder")
    func ledger() {
        let ledger = ConnectionLedger()
        for _ in 0..<3 { #expect(ledger.open(.uid(1001), limit: 3, total: 5) == nil) }
        let refused = ledger.open(.uid(1001), limit: 3, total: 5)
        #expect(refused?.kind == .overloaded && refused?.details["reason"] == "callerConnections" && refused?.details["uid"] == 1001)
        #expect(refused?.details["open"] == 3 && refused?.details["limitValue"] == 3)
        #expect(ledger.open(.uid(0), limit: 5, total: 5) == nil)
        #expect(ledger.open(.address("127.0.0.1"), limit: 3, total: 5) == nil)
        let full = ledger.open(.uid(1002), limit: 3, total: 5)
        #expect(full?.details["reason"] == "connections" && full?.details["limitValue"] == 5)
        ledger.close(.uid(1001))
        #expect(ledger.count(.uid(1001)) == 2 && ledger.open == 4)
        #expect(ledger.open(.uid(1002), limit: 3, total: 5) == nil)
        // The token's holders are counted apart from the total (their connections counted at the accept).
        #expect(ledger.add(.token, limit: 1) == nil)
        #expect(ledger.add(.token, limit: 1)?.details["holder"] == "token")
        #expect(ledger.open == 5)
    }

    @Test("10,000 refusals of one caller: one line at once, one sum per 10 s window; 40 callers: at most 16 named and one line for the rest")
    func refusalsSummedUp() {
        let lines = Lines()
        let log = RefusalLog(logger: Logger(label: "test") { _ in lines })
        for _ in 0..<10_000 { log.refused("uid 1001", reason: "callerConnections", message: "connection refused") }
        #expect(lines.all.count == 1 && lines.all[0].hasPrefix("connection refused"))
        log.flushIfDue(now: MonotonicClock.now() + 11_000_000_000)
        #expect(lines.all.count == 2 && lines.all[1] == "9999 refused for uid 1001 in the last 10 s", "\(lines.all)")
        // Still refused in the next window: summed up, not logged at once again.
        log.refused("uid 1001", reason: "callerConnections", message: "connection refused")
        #expect(lines.all.count == 2)
        let many = Lines()
        let crowd = RefusalLog(logger: Logger(label: "test") { _ in many })
        for round in 0..<5 {
            for uid in 0..<40 { crowd.refused("uid \(uid)", reason: "callerConnections", message: "refused \(uid) \(round)") }
        }
        #expect(many.all.count == 16, "\(many.all)")
        crowd.flushIfDue(now: MonotonicClock.now() + 11_000_000_000)
        #expect(many.all.count <= 16 + 16 + 1, "\(many.all)")
        #expect(many.all.last?.contains("other callers") == true, "\(many.all)")
    }

    @Test("serve.json: callers take maxConcurrent, maxConnections and both request deadlines per uid; the service's own uid is held by maxConnections alone unless named; unknown fields are refused")
    func perCallerPolicy() throws {
        let policy = try ServePolicy.parse(
            Array(
                #"{"maxConnectionsPerCaller": 8, "requestHeadTimeoutSeconds": 2, "callers": {"1001": {"maxConnections": 2, "requestTimeoutSeconds": 1}, "1002": {"maxConcurrent": 1}}}"#
                    .utf8), source: "serve.json")
        #expect(policy.maxConnections(forCaller: 1001, serviceUID: 0) == 2)
        #expect(policy.maxConnections(forCaller: 1002, serviceUID: 0) == 8)
        #expect(policy.maxConnections(forCaller: 0, serviceUID: 0) == policy.maxConnections)
        #expect(policy.maxConcurrent(forCaller: 1002) == 1 && policy.maxConcurrent(forCaller: 1001) == policy.maxConcurrentPerCaller)
        // The head's deadline never outlasts the whole request's.
        #expect(policy.requestDeadlines(forCaller: 1001) == (head: 1, request: 1))
        #expect(policy.requestDeadlines(forCaller: 1002) == (head: 2, request: 10))
        #expect(ServePolicy().maxConnectionsPerCaller < ServePolicy().maxConnections)
        #expect(throws: HostError.self) { try ServePolicy.parse(Array(#"{"callers": {"1001": {"maxConections": 2}}}"#.utf8), source: "s") }
        #expect(throws: HostError.self) { try ServePolicy.parse(Array(#"{"maxConnectionsPerCaller": 0}"#.utf8), source: "s") }
    }
}
