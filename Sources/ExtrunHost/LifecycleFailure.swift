/// Why an intent's lifecycle (`IntentLifecycle`) stopped before the plugin's answer. Its
/// steps throw this and nothing else: a call to the plugin that had no answer, or an
/// error of the host's that is complete as it is. What it becomes in the report (and how
/// the session ends: `teardownEnding`) is decided in one place,
/// `IntentLifecycle.run(_:on:into:)`.
enum LifecycleFailure: Error {
    /// A call to the plugin had no answer (its exit, its deadline, a cancellation, a
    /// protocol violation, a limit): the error is made from it with the run's phase, the
    /// time elapsed and the end of the plugin's stderr (`IntentLifecycle.error(for:connection:elapsedMs:)`).
    case call(CallFailure)
    /// The host's own error, whole: a parameter unresolved, a confirmation declined, the
    /// plugin's error answer.
    case host(HostError)

    /// The plugin broke the protocol (`what` says how).
    static func protocolViolation(_ what: String) -> LifecycleFailure {
        .call(.protocolViolation(what))
    }

    /// How the session that ran the intent ends after this failure: at a deadline or a
    /// cancellation the plugin is sent `cancel` and gets the cancel grace; after anything
    /// else what is left of it is killed at once.
    var teardownEnding: Teardown.Ending {
        switch self {
        case .call(.deadlineExpired): .stopped(reason: "timeout")
        case .call(.cancelled): .stopped(reason: "cancelled")
        case .call, .host: .killed
        }
    }
}
