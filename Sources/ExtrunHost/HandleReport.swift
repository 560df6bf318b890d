import ExtrunProtocol
import Foundation

/// Numbers measured for one plugin run.
public struct RunMetrics: Sendable, Equatable {
    /// From the start of the launch to the end of the process.
    public var wallMs: Double
    /// From the start of the launch to the plugin's handshake.
    public var launchMs: Double?
    /// Peak private writable memory (VmData, sampled; or the cgroup's memory.peak): what the cap counts.
    public var peakMemoryBytes: Int64?
    public var cpuMs: Double?
    /// Peak resident set size from rusage (includes shared library pages).
    public var peakRSSBytes: Int64?
    /// The host's own peak resident set size (VmHWM) over the whole `extrun` process: read
    /// after its report was rendered in full (`HandleReport.updateHostPeakRSS`).
    public var hostPeakRSSBytes: Int64?

    public var json: JSONValue {
        var object: [String: JSONValue] = ["wallMs": .double(wallMs)]
        if let launchMs { object["launchMs"] = .double(launchMs) }
        if let peakMemoryBytes { object["peakMemoryBytes"] = .int(peakMemoryBytes) }
        if let cpuMs { object["cpuMs"] = .double(cpuMs) }
        if let peakRSSBytes { object["peakRSSBytes"] = .int(peakRSSBytes) }
        if let hostPeakRSSBytes { object["hostPeakRSSBytes"] = .int(hostPeakRSSBytes) }
        return .object(object)
    }
}

/// One process run of a `handle` or `continue`: the extension, then (when it
/// escalated) the app.
public struct StepReport: Sendable, Equatable {
    public var mode: Mode?
    /// Why this step ran, for every step after the first (e.g. "the extension answered continueInApp").
    public var reason: String?
    /// The user activity the step continued.
    public var activity: UserActivity?
    public var response: IntentResponse?
    public var error: HostError?
    public var metrics: RunMetrics?
    public var limits: EffectiveLimits?

    public var json: JSONValue {
        var object: [String: JSONValue] = [:]
        if let mode { object["mode"] = .string(mode.rawValue) }
        if let reason { object["reason"] = .string(reason) }
        if let activity { object["activity"] = activity.jsonValue }
        if let response { object["response"] = response.jsonValue }
        if let error { object["error"] = error.json }
        if let metrics { object["metrics"] = metrics.json }
        if let limits { object["limits"] = limits.json }
        return .object(object)
    }
}

/// What became of the donation of a run's interaction.
public struct DonationOutcome: Sendable, Equatable {
    public var donated: Bool
    /// Why not: `--no-donate`, or the store's error.
    public var reason: String?
    public var error: JSONValue?

    public init(donated: Bool, reason: String? = nil, error: JSONValue? = nil) {
        self.donated = donated
        self.reason = reason
        self.error = error
    }

    public var json: JSONValue {
        var object: [String: JSONValue] = ["donated": .bool(donated)]
        if let reason { object["reason"] = .string(reason) }
        if let error { object["error"] = error }
        return .object(object)
    }
}

/// The result of `extrun handle`: what the plugin answered, or why there is no answer.
public struct HandleReport: Sendable, Equatable {
    public var id: String?
    public var intent: String?
    public var plugin: String?
    public var mode: Mode?
    public var response: IntentResponse?
    public var error: HostError?
    public var metrics: RunMetrics?
    /// The limits that applied.
    public var limits: EffectiveLimits?
    /// What `extrun options` asked for: a parameter's possible values.
    public var options: OptionsResult?
    /// Whether the response code counts as success for this intent.
    public var responseIsSuccess = false
    /// Every process run, in order; the top-level fields describe the last one. The JSON
    /// lists them only when there are two or more (one would repeat the top-level fields).
    public var steps: [StepReport] = []
    /// Why the app was not launched although the extension asked for it (or went over its
    /// memory cap with `retryInAppOnMemoryLimit`): `--no-app-launch`, or a plugin without in-app mode.
    public var appLaunch: String?
    /// The activity `extrun continue` dispatched.
    public var activity: UserActivity?
    /// Set after a successful `handle`.
    public var donation: DonationOutcome?

    public init(intent: String?) {
        self.intent = intent
    }

    /// The process exit status documented in docs/cli.md.
    public var exitCode: Int32 {
        if let error { return error.kind.exitCode }
        if response != nil { return responseIsSuccess ? ExitStatus.success : ExitStatus.unsuccessfulResponse }
        if options != nil { return ExitStatus.success }
        return ErrorKind.internalError.exitCode
    }

    public var json: JSONValue {
        var object: [String: JSONValue] = [:]
        if let id { object["id"] = .string(id) }
        if let intent { object["intent"] = .string(intent) }
        if let plugin { object["plugin"] = .string(plugin) }
        if let mode { object["mode"] = .string(mode.rawValue) }
        if let response { object["response"] = response.jsonValue }
        if let options { object["options"] = (try? JSONCoding.value(of: options)) ?? .null }
        if let error { object["error"] = error.json }
        if let metrics { object["metrics"] = metrics.json }
        if let limits { object["limits"] = limits.json }
        if let activity { object["activity"] = activity.jsonValue }
        // One step is the top-level fields again: `steps` appears when a second process ran (the app).
        if steps.count > 1 { object["steps"] = .array(steps.map(\.json)) }
        if let appLaunch { object["appLaunch"] = .string(appLaunch) }
        if let donation { object["donation"] = donation.json }
        return .object(object)
    }

    /// Sets `hostPeakRSSBytes` (of the run and of its last step) to the host's peak so far
    /// (VmHWM). `extrun` calls it once the report has been rendered in full, so that the
    /// figure covers the report too (docs/cli.md).
    ///
    /// `maxAgeNs`: a long-lived host (`extrun serve`) takes a figure read at most that long
    /// ago by any of its threads (reading /proc/self/status for every intent was 2% of its CPU).
    public mutating func updateHostPeakRSS(maxAgeNs: UInt64 = 0) {
        guard let peak = maxAgeNs == 0 ? MemorySampler.ownPeakRSS() : MemorySampler.ownPeakRSS(maxAgeNs: maxAgeNs) else { return }
        if let before = metrics?.hostPeakRSSBytes ?? metrics.map({ _ in 0 }) { metrics?.hostPeakRSSBytes = max(peak, before) }
        if let last = steps.indices.last, let before = steps[last].metrics.map({ $0.hostPeakRSSBytes ?? 0 }) {
            steps[last].metrics?.hostPeakRSSBytes = max(peak, before)
        }
    }

    /// The top-level fields as one step.
    mutating func recordStep(reason: String? = nil, activity: UserActivity? = nil) {
        steps.append(
            StepReport(
                mode: mode, reason: reason, activity: activity, response: response, error: error, metrics: metrics, limits: limits))
    }

    /// Clears the top-level fields for the next step.
    mutating func startStep(mode: Mode, limits: EffectiveLimits) {
        self.mode = mode
        self.limits = limits
        response = nil
        error = nil
        metrics = nil
        responseIsSuccess = false
    }

    /// A summary for people (`--format text`).
    public var text: String {
        var lines: [String] = []
        if steps.count > 1 {
            for (index, step) in steps.dropLast().enumerated() {
                let outcome = step.response.map { "answered \($0.code)" } ?? step.error.map { "error \($0.kind.rawValue)" } ?? "no answer"
                lines.append("step \(index + 1) (\(step.mode?.rawValue ?? "?")): \(outcome)")
            }
            if let reason = steps.last?.reason { lines.append("step \(steps.count) (\(mode?.rawValue ?? "?")): \(reason)") }
        }
        // `continue` has no intent of its own: its activity type names what ran.
        let head = [intent ?? activity?.activityType, plugin.map { "by \($0)" }, mode.map { "(\($0.rawValue))" }].compactMap { $0 }.joined(
            separator: " ")
        if let response {
            lines.append("\(head): \(response.code)")
            if let full = response.dialog?.full { lines.append("  \(full)") }
            if let supporting = response.dialog?.supporting { lines.append("  \(supporting)") }
            for key in response.properties.keys.sorted() {
                lines.append("  \(key): \(ValueText.describe(response.properties[key] ?? .null))")
            }
        }
        if let options {
            lines.append("\(head): \(options.allItems.count) option\(options.allItems.count == 1 ? "" : "s")")
            for section in options.sections {
                if let title = section.title { lines.append("  \(title)") }
                for item in section.items {
                    lines.append("    \(item.title)\(item.subtitle.map { " — \($0)" } ?? "")  [\(item.identifier)]")
                }
            }
        }
        if let error {
            lines.append("\(head.isEmpty ? "extrun" : head): error \(error.kind.rawValue)")
            lines.append("  \(error.message)")
            // A disambiguation's candidates (or a phrase's), one a line: what to pass in the intent file.
            if error.details["resolution"] != nil, let choices = error.details["options"]?.arrayValue {
                for choice in choices { lines.append("    - \(ValueText.describeChoice(choice))") }
            }
        }
        if let appLaunch { lines.append("  app not launched: \(appLaunch)") }
        if let metrics {
            var parts = ["wall \(ValueText.ms(metrics.wallMs))"]
            if let launch = metrics.launchMs { parts.append("launch \(ValueText.ms(launch))") }
            if let cpu = metrics.cpuMs { parts.append("cpu \(ValueText.ms(cpu))") }
            if let peak = metrics.peakMemoryBytes { parts.append("peak memory \(ValueText.bytes(peak))") }
            lines.append("  [\(parts.joined(separator: ", "))]")
        }
        return lines.joined(separator: "\n")
    }
}
