import ExtrunHost
import ExtrunProtocol
import Foundation
import Logging
import NIOConcurrencyHelpers

/// Who holds a connection, for the per-caller counts (docs/serve.md, "A shared service"):
/// a peer uid on the Unix socket; over TCP the source address from the accept, and the
/// token's holders once a request showed the token.
enum ConnectionHolder: Hashable, Sendable, CustomStringConvertible {
    case uid(UInt32)
    case address(String)
    case token

    var description: String {
        switch self {
        case .uid(let uid): "uid \(uid)"
        case .address(let address): "address \(address)"
        case .token: "the TCP token"
        }
    }

    /// The details' member naming the holder.
    var detail: (String, JSONValue) {
        switch self {
        case .uid(let uid): ("uid", .int(Int64(uid)))
        case .address(let address): ("address", .string(address))
        case .token: ("holder", "token")
        }
    }
}

/// The connections open now: in all (`maxConnections`) and per holder (`maxConnectionsPerCaller`,
/// `callers.UID.maxConnections`). Every connection counts from its accept to its close, whatever
/// it is doing: a head or a body on its way, an idle kept-alive connection, a stream.
final class ConnectionLedger: Sendable {
    private struct State {
        var open = 0
        var byHolder: [ConnectionHolder: Int] = [:]
    }

    private let state = NIOLockedValueBox(State())

    /// Counts a connection of `holder`; or, over a limit, the refusal with its numbers (nothing counted).
    func open(_ holder: ConnectionHolder, limit: Int, total: Int) -> HostError? {
        state.withLockedValue { state -> HostError? in
            let held = state.byHolder[holder, default: 0]
            if state.open >= total {
                return HostError(
                    .overloaded,
                    "the service has \(state.open) connections open, its limit (serve.json maxConnections); try again shortly",
                    details: [
                        "reason": "connections", "limit": "maxConnections", "limitValue": .int(Int64(total)), "open": .int(Int64(state.open)),
                        "retryAfterMs": 1000,
                    ])
            }
            if held >= limit {
                var details: [String: JSONValue] = [
                    "reason": "callerConnections", "limit": "maxConnectionsPerCaller", "limitValue": .int(Int64(limit)), "open": .int(Int64(held)),
                    "retryAfterMs": 1000,
                ]
                let (key, value) = holder.detail
                details[key] = value
                return HostError(
                    .overloaded,
                    "\(holder) has \(held) connections open, its limit (serve.json maxConnectionsPerCaller, or callers.UID.maxConnections); close one, or try again shortly",
                    details: details)
            }
            state.open += 1
            state.byHolder[holder] = held + 1
            return nil
        }
    }

    /// Counts one more connection for `holder` alone (a TCP connection that showed the token):
    /// not in the total, which counted it at its accept.
    func add(_ holder: ConnectionHolder, limit: Int) -> HostError? {
        state.withLockedValue { state -> HostError? in
            let held = state.byHolder[holder, default: 0]
            if held >= limit {
                let (key, value) = holder.detail
                return HostError(
                    .overloaded,
                    "\(holder) has \(held) connections open, its limit (serve.json maxConnectionsPerCaller); close one, or try again shortly",
                    details: [
                        "reason": "callerConnections", "limit": "maxConnectionsPerCaller", "limitValue": .int(Int64(limit)), "open": .int(Int64(held)),
                        "retryAfterMs": 1000, key: value,
                    ])
            }
            state.byHolder[holder] = held + 1
            return nil
        }
    }

    func close(_ holder: ConnectionHolder, counted: Bool = true) {
        state.withLockedValue { state in
            if counted { state.open -= 1 }
            let held = state.byHolder[holder, default: 1] - 1
            state.byHolder[holder] = held > 0 ? held : nil
        }
    }

    var open: Int { state.withLockedValue { $0.open } }

    /// The connections of one holder now.
    func count(_ holder: ConnectionHolder) -> Int { state.withLockedValue { $0.byHolder[holder, default: 0] } }
}

/// Refusals in the log without letting a caller write it (issue 30: one line per refused
/// connection let one uid write ~20 MB in 30 s). The first refusal of a holder and reason is
/// logged at once, with its numbers; the next ones are counted and summed up once per
/// window: "N refused for uid U in the last 10 s". At most `maxLines` holders are named
/// per window; the rest are one line. So a flood writes a few lines per 10 s, whatever its rate.
final class RefusalLog: Sendable {
    struct Key: Hashable {
        var holder: String
        var reason: String
    }

    private struct State {
        var windowStart: UInt64
        var counts: [Key: Int] = [:]
        /// Keys already logged at once in this window or the last one.
        var announced: Set<Key> = []
        var previous: Set<Key> = []
    }

    let windowSeconds: Double
    let maxLines: Int
    private let state: NIOLockedValueBox<State>
    private let logger: Logger

    init(logger: Logger, windowSeconds: Double = 10, maxLines: Int = 16) {
        self.logger = logger
        self.windowSeconds = windowSeconds
        self.maxLines = maxLines
        state = NIOLockedValueBox(State(windowStart: MonotonicClock.now()))
    }

    /// One refusal. `message` and `metadata` are made only when the line is written.
    func refused(
        _ holder: String, reason: String, message: @autoclosure () -> String, metadata: @autoclosure () -> Logger.Metadata = [:]
    ) {
        let key = Key(holder: holder, reason: reason)
        let logNow = state.withLockedValue { state -> Bool in
            if state.announced.contains(key) || state.previous.contains(key) {
                state.counts[key, default: 0] += 1
                return false
            }
            if state.announced.count >= maxLines {
                state.counts[Key(holder: "other callers", reason: "various"), default: 0] += 1
                return false
            }
            state.announced.insert(key)
            return true
        }
        if logNow {
            var metadata = metadata()
            metadata["reason"] = "\(reason)"
            metadata["holder"] = "\(holder)"
            logger.warning(
                "\(message()) (further refusals of \(holder) are summed up every \(Int(windowSeconds)) s)", metadata: metadata)
        }
        flushIfDue()
    }

    /// Writes the window's sums when it is over (called on every refusal and once a second).
    func flushIfDue(now: UInt64 = MonotonicClock.now()) {
        let due = state.withLockedValue { state -> [(Key, Int)]? in
            guard now >= state.windowStart, now - state.windowStart >= UInt64(windowSeconds * 1e9) else { return nil }
            let counts = state.counts
            state.windowStart = now
            state.counts = [:]
            // A holder refused in this window keeps being summed up in the next (no line at once).
            state.previous = state.announced.union(counts.keys)
            state.announced = []
            return counts.sorted { $0.value > $1.value }
        }
        guard let due, !due.isEmpty else { return }
        for (key, count) in due.prefix(maxLines) {
            logger.warning(
                "\(count) refused for \(key.holder) in the last \(Int(windowSeconds)) s",
                metadata: ["reason": "\(key.reason)", "holder": "\(key.holder)", "refused": "\(count)", "windowSeconds": "\(Int(windowSeconds))"])
        }
        if due.count > maxLines {
            let rest = due.dropFirst(maxLines).reduce(0) { $0 + $1.1 }
            logger.warning(
                "\(rest) refused for \(due.count - maxLines) other callers in the last \(Int(windowSeconds)) s",
                metadata: ["refused": "\(rest)", "windowSeconds": "\(Int(windowSeconds))"])
        }
    }
}
