import ExtrunProtocol

/// The kinds of error `extrun` reports, each with its own exit status.
/// The table is documented in docs/cli.md; keep the two in step.
public enum ErrorKind: String, Codable, Sendable, CaseIterable {
    /// The intent file is malformed or does not fit the manifest.
    case invalidIntent
    /// No plugin handles the intent.
    case noHandler
    /// A parameter could not be resolved (a value is needed, or it is unsupported).
    case parameterUnresolved
    /// The intent needs a confirmation that was declined or could not be asked.
    case confirmationDeclined
    /// The plugin exited or was killed by a signal before it answered.
    case pluginCrashed
    /// The plugin broke the protocol (bad frame, bad message, wrong answer).
    case protocolError
    /// The plugin answered a request with an error of its own (a handler threw).
    case pluginError
    /// The plugin did not answer before its deadline.
    case timeout
    /// The plugin went over its memory cap.
    case memoryLimitExceeded
    /// The plugin made a system call the sandbox forbids.
    case sandboxViolation
    /// The plugin's scratch directory went past its quota (bytes or files).
    case diskLimitExceeded
    /// A plugin manifest, the plugin path or the host's policy is wrong.
    case configurationError
    /// A signed plugin's files changed after it was signed, or its signature is malformed
    /// or names another owner (`details.file` names the file): it is not started.
    case signatureInvalid
    /// The caller may not run this owner's intents: `extrun serve`'s `grants` (serve.json) do not
    /// grant it the owner (`details`: `caller`, `owner`, `plugin`). Nothing ran (docs/serve.md).
    case notPermitted
    /// The caller cancelled the run (`HandleOptions.cancellation`: a server's client
    /// went away, an MCP client's `notifications/cancelled`, a service shutting down).
    case cancelled
    /// A long-running host (`extrun serve`) had no room for the intent: its queue was full,
    /// its caller at its limit, or the plugin backed off after repeated crashes. Nothing ran;
    /// `details` has the numbers (docs/serve.md).
    case overloaded
    /// What a request names does not exist for its caller: `extrun serve`'s endpoint, or an
    /// interactive run that ended, never was, or is another caller's (answered alike).
    case notFound
    /// The host could not do its own work (spawn failed, out of descriptors...).
    case internalError

    /// The process exit status for this kind of error.
    public var exitCode: Int32 {
        switch self {
        case .parameterUnresolved: 3
        case .invalidIntent: 4
        case .noHandler: 5
        case .pluginCrashed: 6
        case .protocolError: 7
        case .timeout: 8
        case .memoryLimitExceeded: 9
        case .sandboxViolation: 10
        case .configurationError: 11
        case .pluginError: 12
        case .confirmationDeclined: 13
        case .diskLimitExceeded: 14
        case .signatureInvalid: 19
        case .notPermitted: 23
        case .cancelled: 20
        case .overloaded: 21
        case .notFound: 22
        case .internalError: 70
        }
    }
}

/// Exit statuses that are not errors.
public enum ExitStatus {
    /// The plugin answered `success` (or a custom code declared as success).
    public static let success: Int32 = 0
    /// The plugin answered with any other response code.
    public static let unsuccessfulResponse: Int32 = 1
    /// The command line was wrong (swift-argument-parser's EX_USAGE).
    public static let usage: Int32 = 64
}

/// An error the host reports: its kind (with its exit status), a message for a person,
/// and details for programs (`KindedError`, the shape the store's errors share).
public typealias HostError = KindedError<ErrorKind>
