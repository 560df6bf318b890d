import ExtrunHost
import ExtrunProtocol

/// The bodies of the service's answers (docs/serve.md, "Responses"): every run ends in
/// `{"exitStatus": N, "report": REPORT}` where REPORT is exactly what `extrun handle`
/// prints and N its exit status; `"text"` is added with `?format=text`.
enum ServeResponse {
    /// The HTTP status of a finished run (docs/serve.md, "Status codes"). An interactive
    /// run's stream has started with 200 before its outcome is known: its last event carries the outcome.
    static func status(exitStatus: Int32, error: ErrorKind?) -> Int {
        guard let error else { return exitStatus == ErrorKind.internalError.exitCode ? 500 : 200 }
        switch error {
        case .invalidIntent, .parameterUnresolved, .confirmationDeclined: return 422
        case .noHandler, .notFound: return 404
        case .pluginCrashed, .protocolError, .pluginError, .sandboxViolation, .memoryLimitExceeded, .diskLimitExceeded: return 502
        case .timeout: return 504
        case .overloaded: return 503
        case .notPermitted: return 403
        case .configurationError, .signatureInvalid, .internalError: return 500
        // 503 is only ever a refusal before anything ran (`overloaded`), which a balancer may retry
        // on another host; a run stopped part-way may have done some of its work.
        case .cancelled: return 500
        }
    }

    /// A refusal's status: 429 for a principal over its rate (`overloaded`, reason
    /// `rateLimit`: serve.json rateLimits), else as `status(exitStatus:error:)`.
    static func status(refusal error: HostError, exitStatus: Int32) -> Int {
        if error.kind == .overloaded, error.details["reason"]?.stringValue == "rateLimit" { return 429 }
        return status(exitStatus: exitStatus, error: error.kind)
    }

    static func envelope(_ report: HandleReport, text: Bool) -> JSONValue {
        var object: [String: JSONValue] = ["exitStatus": .int(Int64(report.exitCode)), "report": report.json]
        if text { object["text"] = .string(report.text) }
        return .object(object)
    }

    /// A refusal before the request's endpoint is known or looked at (a connection limit at
    /// the accept, two Authorization headers, an expectation the service does not meet): the
    /// body has both shapes, `{"error"}` of the other endpoints and a run's envelope.
    static func early(_ error: HostError) -> JSONValue {
        guard case .object(var object) = envelope(refusal(error), text: false) else { return .object(["error": error.json]) }
        object["error"] = error.json
        return .object(object)
    }

    /// A request refused before any run: the report holds only the error.
    static func refusal(_ error: HostError, intent: String? = nil) -> HandleReport {
        var report = HandleReport(intent: intent)
        report.error = error
        return report
    }
}
