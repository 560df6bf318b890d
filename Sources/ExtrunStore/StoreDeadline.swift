import ExtrunSystem
import Foundation
import GRDB

#if canImport(Glibc)
import Glibc
#endif

/// How long the store waits for another process's lock (SQLite's busy handler): at most
/// `StoreLimits.busyTimeoutSeconds`, and never past the deadline bound to the calling
/// thread with `StoreDeadline.$current.withValue(...)`. The host binds a run's deadline
/// while it serves the plugin's requests, so that a store held by another process
/// (a long `globals import`, a migration) cannot keep a run past its deadline (issue 14):
/// the request is answered `storeBusy` when the deadline comes.
public enum StoreDeadline {
    /// CLOCK_MONOTONIC nanoseconds (the host's MonotonicClock); nil: only the busy timeout bounds a wait.
    @TaskLocal public static var current: UInt64?

    /// CLOCK_MONOTONIC, in nanoseconds.
    public static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    /// SQLite's own busy handler's delays (ms), the last one repeated.
    static let delaysMs: [UInt64] = [1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100]

    /// Milliseconds waited before try `tries` (the sum of the delays before it).
    static func waitedMs(beforeTry tries: Int) -> UInt64 {
        var total: UInt64 = 0
        for index in 0..<tries { total += delaysMs[min(index, delaysMs.count - 1)] }
        return total
    }

    /// The busy handler: sleeps the next delay (cut short by the deadline) and says
    /// whether SQLite should try again.
    static let busyCallback: Database.BusyCallback = { tries in
        let waited = waitedMs(beforeTry: tries)
        let limitMs = UInt64(StoreLimits.busyTimeoutSeconds * 1000)
        guard waited < limitMs else { return false }
        var delayNs = min(delaysMs[min(tries, delaysMs.count - 1)], limitMs - waited) * 1_000_000
        if let deadline = current {
            let now = now()
            guard now < deadline else { return false }
            delayNs = min(delayNs, deadline - now)
        }
        SystemCall.sleep(nanoseconds: Int(delayNs))
        return true
    }
}
