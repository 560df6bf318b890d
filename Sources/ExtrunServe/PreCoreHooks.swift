// TEMPORARY, removed when main's `core hooks:` commit is merged: the lead adds
// `Cancellation`, `HandleOptions.cancellation`/`onProgress` and `ErrorKind.cancelled` to
// ExtrunHost. Until then this lets ExtrunServe compile; nothing here cancels anything.
import ExtrunHost
import ExtrunProtocol
import Synchronization

public final class Cancellation: Sendable {
    private let state = Mutex<String?>(nil)
    public init() {}
    public func cancel(_ reason: String = "cancelled by the caller") { state.withLock { if $0 == nil { $0 = reason } } }
    public var isCancelled: Bool { state.withLock { $0 != nil } }
    public var reason: String? { state.withLock { $0 } }
}

extension HandleOptions {
    var cancellation: Cancellation? {
        get { nil }
        set {}
    }
    var onProgress: (@Sendable (ProgressParams) -> Void)? {
        get { nil }
        set {}
    }
}
