import ExtrunProtocol
import ExtrunStore
import Foundation

/// The app's step after the extension's, as on Apple platforms: when the extension
/// answers `continueInApp` or `failureRequiringAppLaunch`, or goes over its memory cap
/// and its manifest has `retryInAppOnMemoryLimit`, the plugin carries on in in-app
/// mode, in a new process (docs/protocol.md, "Continuing in the app").
extension Host {
    /// What the app is asked to do after the extension.
    enum NextStep {
        /// Carry on with the user activity and the interaction the extension handed over.
        case continueInApp(UserActivity, Interaction, reason: String)
        /// Run the intent again (the extension went over its memory cap).
        case retry(parameters: [String: JSONValue], reason: String)
    }

    /// Whether the extension's outcome calls for the app, and whether the app may be
    /// launched. Notes in the report why not, when it may not. A `continueInApp` with an
    /// activity type the plugin does not declare is the plugin's protocol error.
    func nextStep(after run: IntentLifecycle, parameters: [String: JSONValue], report: inout HandleReport, options: HandleOptions)
        -> NextStep?
    {
        guard run.mode == .extension else { return nil }
        let manifest = run.plugin.manifest
        let next: NextStep
        if report.error == nil, let response = report.response,
            response.code == ResponseCode.continueInApp || response.code == ResponseCode.failureRequiringAppLaunch
        {
            let activity = response.userActivity ?? UserActivity(activityType: run.definition.name)
            guard manifest.continues(activityType: activity.activityType) else {
                report.response = nil
                report.responseIsSuccess = false
                report.error = HostError(
                    .protocolError,
                    "\(manifest.id) broke the protocol during \(run.phase.rawValue): it answered \(response.code) with the activity type '\(activity.activityType)', which its manifest does not declare (declare it in activityTypes, or use an intent's name)",
                    details: ["phase": .string(run.phase.rawValue), "activityType": .string(activity.activityType)])
                return nil
            }
            let interaction = Interaction(
                identifier: report.id, intent: run.definition.name, parameters: run.resolved ?? parameters, response: response)
            next = .continueInApp(activity, interaction, reason: "the extension answered \(response.code)")
        } else if let error = report.error, error.kind == .memoryLimitExceeded, manifest.retryInAppOnMemoryLimit {
            let peak = report.metrics?.peakMemoryBytes.map { " (peak \(ByteCount.format($0)))" } ?? ""
            next = .retry(
                parameters: run.resolved ?? parameters,
                reason: "the extension went over its memory cap of \(ByteCount.format(run.limits.memoryBytes))\(peak), and the manifest has retryInAppOnMemoryLimit")
        } else {
            return nil
        }
        guard manifest.modes.contains(.inApp) else {
            report.appLaunch = "\(manifest.id) does not support in-app mode (its manifest's modes: \(manifest.modes.map(\.rawValue).joined(separator: ", ")))"
            return nil
        }
        guard options.appLaunch else {
            report.appLaunch = "--no-app-launch: the run stopped after the extension"
            return nil
        }
        return next
    }

    /// Runs the app's step: a new process in in-app mode with in-app limits (the
    /// command line's --timeout still caps it; --memory-limit was for the first step).
    @discardableResult
    func carryOn(_ next: NextStep, after first: IntentLifecycle, report: inout HandleReport, options: HandleOptions) -> IntentLifecycle? {
        let limits: EffectiveLimits
        do {
            limits = try EffectiveLimits.resolve(
                policy: first.policy, mode: .inApp, manifest: first.plugin.manifest.limits, manifestFile: first.plugin.manifestURL.path,
                memoryOverride: nil, deadlineOverride: options.deadlineMs)
        } catch {
            report.startStep(mode: .inApp, limits: report.limits ?? first.limits)
            report.error = error
            report.recordStep(reason: "could not launch the app")
            return nil
        }
        // The app is a new process started from the folder as it is now: proven again, as every
        // launch is (the extension's step may have lasted long enough for its files to be rewritten).
        do throws(HostError) {
            let seal = try PluginVerification.seal(of: first.plugin, home: paths.home)
            guard seal == first.services?.seal else {
                let directory = first.plugin.directory.path
                throw HostError(
                    .signatureInvalid,
                    "\(first.plugin.manifest.id) (\(directory)) is not started in in-app mode: its signature changed while the extension ran (\(directory)/\(PluginSignature.fileName)). Handle the intent again",
                    details: ["plugin": .string(first.plugin.manifest.id), "directory": .string(directory), "file": .string(directory + "/" + PluginSignature.fileName)])
            }
        } catch {
            report.startStep(mode: .inApp, limits: limits)
            report.error = error
            report.recordStep(reason: "could not launch the app")
            return nil
        }
        report.startStep(mode: .inApp, limits: limits)
        var run = first.appStep(limits: limits)
        options.log?("[extrun] launching \(first.plugin.manifest.id) in in-app mode: \(next.reason)")
        switch next {
        case .continueInApp(let activity, let interaction, let reason):
            run.execute(.continueActivity(activity, interaction: interaction), from: OneShotSessions(), into: &report)
            report.recordStep(reason: reason, activity: activity)
        case .retry(let parameters, let reason):
            // A confirmation already given is not asked again.
            run.intentConfirmed = first.intentConfirmed
            run.execute(.handle(parameters: parameters), from: OneShotSessions(), into: &report)
            report.recordStep(reason: reason)
        }
        return run
    }
}

extension Host.NextStep {
    var reason: String {
        switch self {
        case .continueInApp(_, _, let reason), .retry(_, let reason): reason
        }
    }
}
