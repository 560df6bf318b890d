import ExtrunProtocol
import ExtrunStore
import Foundation

/// Handling an intent: one path for `extrun handle` (a new process), a pool's intents
/// (`extrun batch`: warm processes) and a phrase's. Steps, as on Apple platforms: the
/// extension first; when it answers `continueInApp` or `failureRequiringAppLaunch`
/// (or goes over its memory cap and the manifest says it may retry in the app), the
/// app, in in-app mode, in a new process (Host+Escalation.swift). Then the donation
/// of the interaction (Host+Donation.swift). docs/architecture.md walks this path.
extension Host {
    /// Handles one intent, in a new process. Never throws: every failure is in the report.
    public func handle(_ invocation: IntentInvocation, options: HandleOptions = HandleOptions()) -> HandleReport {
        run(invocation, options: options, context: .oneShot)
    }

    /// Handles one intent with a session from `context.sessions`: prepare (Host+Prepare.swift),
    /// the lifecycle on a session (IntentLifecycle+Execution.swift), the app's step when
    /// the extension calls for it, the donation.
    func run(_ invocation: IntentInvocation, options: HandleOptions, context: RunContext) -> HandleReport {
        var report = HandleReport(intent: invocation.intent)
        report.id = invocation.id ?? Self.newIdentifier()
        guard let (prepared, parameters) = prepare(invocation, options: options, report: &report, context: context) else { return report }
        var lifecycle = prepared
        // The owner's store serves the plugin's requests and the donation; when this process
        // has not opened it yet, it is opened on another thread while the plugin runs.
        let owner = lifecycle.plugin.manifest.owner
        // Opened ahead only when the run may use it: an unsigned plugin gets none of its owner's data.
        let store = PendingStore(paths: paths, owner: owner, openAhead: options.donate && lifecycle.services?.isSigned == true)
        // No thread of the run outlives it: a run that ended before the store was needed waits for its opening.
        defer { store.settle() }
        lifecycle.services?.storeSource = { try store.get() }
        lifecycle.execute(.handle(parameters: parameters), from: context.sessions, into: &report)
        finishHandling(lifecycle, parameters: parameters, report: &report, invocation: invocation, options: options) {
            try store.get().donations(of: owner)
        }
        return report
    }

    /// After the first step (the extension's, usually): the app's step when the
    /// extension called for it, then the donation of a successful run.
    func finishHandling(
        _ first: IntentLifecycle, parameters: [String: JSONValue], report: inout HandleReport, invocation: IntentInvocation,
        options: HandleOptions, donations: () throws -> Donations
    ) {
        var lifecycle = first
        let next = nextStep(after: lifecycle, parameters: parameters, report: &report, options: options)
        report.recordStep()
        if let next, let app = carryOn(next, after: lifecycle, report: &report, options: options), app.resolved != nil {
            lifecycle = app
        }
        if report.error == nil, report.response != nil, report.responseIsSuccess {
            report.donation = donate(lifecycle, report: report, invocation: invocation, options: options, donations: donations)
        }
    }

    /// Asks the plugin for the possible values of a parameter with dynamic options,
    /// within the same limits and sandbox as `handle`.
    public func options(
        _ invocation: IntentInvocation, parameter: String, search: String?, options: HandleOptions = HandleOptions()
    ) -> HandleReport {
        self.options(invocation, parameter: parameter, search: search, options: options, context: .oneShot)
    }

    func options(
        _ invocation: IntentInvocation, parameter: String, search: String?, options: HandleOptions, context: RunContext
    ) -> HandleReport {
        var report = HandleReport(intent: invocation.intent)
        report.id = invocation.id
        guard let (prepared, parameters) = prepare(invocation, options: options, report: &report, context: context) else { return report }
        var lifecycle = prepared
        guard let definition = lifecycle.definition.parameter(named: parameter) else {
            let known = lifecycle.definition.parameters.map(\.name).joined(separator: ", ")
            report.error = HostError(
                .invalidIntent, "\(invocation.intent) has no parameter '\(parameter)' (its parameters: \(known))",
                details: ["field": .string(parameter)])
            report.metrics = nil
            return report
        }
        guard definition.dynamicOptions else {
            report.error = HostError(
                .invalidIntent,
                "\(invocation.intent).\(parameter) has no dynamic options (its manifest entry lacks \"dynamicOptions\": true)"
                    + ((definition.values.map { "; its values are fixed: \($0.joined(separator: ", "))" }) ?? ""),
                details: ["field": .string(parameter)])
            return report
        }
        lifecycle.execute(.options(parameter: parameter, parameters: parameters, search: search), from: context.sessions, into: &report)
        return report
    }

    /// Continues a user activity in in-app mode with the plugin that declares its type
    /// (`extrun continue`), in a new process. Never throws: every failure is in the report.
    public func continueActivity(_ invocation: ActivityInvocation, options: HandleOptions = HandleOptions()) -> HandleReport {
        continueActivity(invocation, options: options, context: .oneShot)
    }

    func continueActivity(_ invocation: ActivityInvocation, options: HandleOptions, context: RunContext) -> HandleReport {
        var report = HandleReport(intent: invocation.interaction?.intent)
        report.id = invocation.interaction?.identifier ?? Self.newIdentifier()
        report.activity = invocation.activity
        guard let (prepared, interaction) = prepare(invocation, options: options, report: &report, context: context) else { return report }
        var lifecycle = prepared
        lifecycle.execute(.continueActivity(invocation.activity, interaction: interaction), from: context.sessions, into: &report)
        report.recordStep(activity: invocation.activity)
        return report
    }

    /// A new interaction identifier.
    static func newIdentifier() -> String {
        RandomIdentifier.uuid()
    }
}
