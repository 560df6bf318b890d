import ExtrunStore
import Foundation
import Logging
import NIOCore
import NIOPosix
import PostgresNIO

// ExtrunBench pgbridge --store URL [--count N]
//     What the store's bridge to postgres-nio costs per statement (docs/store.md, "PostgreSQL"):
//     `SELECT 1` N times on one connection over the server's socket, (a) as the store sends
//     it, the calling thread blocked on the event loop's answer (`EventLoopFuture.wait`), and
//     (b) each statement sent from the previous one's callback on the event loop itself, no
//     thread waiting. The difference of the two medians is the bridge: a wake-up of the
//     waiting thread and a hop onto the loop.

@MainActor func postgresBridge() {
    guard let url = options["store"], case .postgres(let location) = (try? StoreLocation.parse(url)) ?? .sqlite else {
        fail("pgbridge needs --store postgresql://...")
    }
    let count = option("count", 20_000)
    let logger = Logger(label: "bench", factory: { _ in SwiftLogNoOpLogHandler() })
    let loops = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    guard let socket = location.socketPath else { fail("pgbridge measures over a Unix socket: give host=/socket/dir") }
    let configuration = PostgresConnection.Configuration(
        unixSocketPath: socket, username: location.user, password: nil, database: location.database)
    do {
        let connection = try PostgresConnection.connect(on: loops.next(), configuration: configuration, id: 1, logger: logger).wait()
        // Warm-up.
        for _ in 0..<500 { _ = try connection.query("SELECT 1", logger: logger).wait() }
        var blocking: [UInt64] = []
        blocking.reserveCapacity(count)
        for _ in 0..<count {
            let t0 = nowNs()
            _ = try connection.query("SELECT 1", logger: logger).wait()
            blocking.append(nowNs() - t0)
        }
        let loop = connection.eventLoop
        let done = loop.makePromise(of: [UInt64].self)
        // On the loop only: each query starts in the callback of the one before.
        @Sendable func step(_ remaining: Int, _ samples: [UInt64]) {
            guard remaining > 0 else { return done.succeed(samples) }
            let t0 = nowNs()
            connection.query("SELECT 1", logger: logger).whenComplete { result in
                if case .failure(let error) = result { return done.fail(error) }
                step(remaining - 1, samples + [nowNs() - t0])
            }
        }
        loop.execute { step(count, []) }
        let onLoop = try done.futureResult.wait()
        try connection.close().wait()
        try loops.syncShutdownGracefully()
        struct Output: Encodable {
            var kind = "pgbridge"
            var blocking: Summary
            var onLoop: Summary
            var bridgeUs: Double
        }
        let a = Summary(samplesNs: blocking)
        let b = Summary(samplesNs: onLoop)
        FileHandle.standardOutput.write(try encoder.encode(Output(blocking: a, onLoop: b, bridgeUs: a.p50Us - b.p50Us)))
        FileHandle.standardOutput.write(Data("\n".utf8))
    } catch {
        fail("pgbridge: \(error)")
    }
}
