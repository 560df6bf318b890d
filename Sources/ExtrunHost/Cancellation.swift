import Synchronization
import NIOConcurrencyHelpers

/// Stops a run from another thread: a server whose client went away, an MCP
/// `notifications/cancelled`, a service shutting down.
///
/// Pass it in `HandleOptions.cancellation`. Cancelled before the plugin starts: no
/// process is started. Cancelled while the host waits for the plugin: within a few
/// milliseconds (the connection's loop wakes at least every
/// `PluginConnection.sampleIntervalMs`) the plugin is sent the protocol's `cancel`
/// notification (reason `"cancelled"`), gets the policy's cancel grace, and is then
/// killed with every process it started, as on a timeout. Cancelled while a
/// `Prompter` asks a person: the host does not interrupt the prompter (the front end
/// that cancels makes its pending question return nil); the run ends as soon as the
/// prompter returns. The report's error is `cancelled` (exit status 20), with the
/// phase, the time elapsed and the reason. A warm process whose intent was cancelled
/// is ended, never reused.
public final class Cancellation: Sendable {
    private let state = NIOLockedValueBox<String?>(nil)
    /// Read on every turn of the connection's loop without the lock.
    private let flag = Atomic<Bool>(false)

    public init() {}

    /// Safe from any thread, any number of times; the first reason is kept.
    public func cancel(_ reason: String = "cancelled by the caller") {
        state.withLockedValue { current in
            if current == nil { current = reason }
        }
        flag.store(true, ordering: .releasing)
    }

    public var isCancelled: Bool { flag.load(ordering: .acquiring) }

    public var reason: String? { state.withLockedValue { $0 } }
}
