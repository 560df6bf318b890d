import ExtrunProtocol
import ExtrunStore
import Foundation
import Synchronization

/// Handling an intent in steps, as on Apple platforms: the extension first; when it
/// answers `continueInApp` or `failureRequiringAppLaunch` (or goes over its memory cap
/// and the manifest says it may retry in the app), the app, in in-app mode, in a new
/// process. Then the donation of the interaction. docs/protocol.md, "Continuing in the app".
extension Host {
    /// Handles one intent. Never throws: every failure is in the report.
    public func handle(_ invocation: IntentInvocation, options: HandleOptions = HandleOptions()) -> HandleReport {
        var report = HandleReport(intent: invocation.intent)
        report.id = invocation.id ?? Self.newIdentifier()
        guard let (prepared, parameters) = prepare(invocation, options: options, report: &report) else { return report }
        var run = prepared
        // The donation log is opened on another thread while the plugin runs: a process
        // start of its own (opening SQLite, reading the key) the caller need not wait for.
        let owner = run.plugin.manifest.owner
        let log = options.donate ? DonationLog.open(home: paths.home, owner: owner) : nil
        if let log { run.services?.storeSource = { try log.store() } }
        run.execute(.handle(parameters: parameters), into: &report)
        finishHandling(run, parameters: parameters, report: &report, invocation: invocation, options: options) {
            guard let log else { throw StoreError(.databaseError, "the donation log was not opened (donations are off)") }
            return try log.store().donations(of: owner)
        }
        return report
    }

    /// After the first step (the extension's, usually): the app's step when the
    /// extension called for it, then the donation of a successful run. `Host.handle`
    /// and `PluginPool.handle` share it.
    func finishHandling(
        _ first: PluginRun, parameters: [String: JSONValue], report: inout HandleReport, invocation: IntentInvocation,
        options: HandleOptions, donations: () throws -> Donations
    ) {
        var run = first
        let next = nextStep(after: run, parameters: parameters, report: &report, options: options)
        report.recordStep()
        if let next, let app = carryOn(next, after: run, report: &report, options: options), app.resolved != nil {
            run = app
        }
        if report.error == nil, report.response != nil, report.responseIsSuccess {
            report.donation = donate(run: run, report: report, invocation: invocation, options: options, donations: donations)
        }
    }

    /// Continues a user activity in in-app mode with the plugin that declares its type
    /// (`extrun continue`). Never throws: every failure is in the report.
    public func continueActivity(_ invocation: ActivityInvocation, options: HandleOptions = HandleOptions()) -> HandleReport {
        var report = HandleReport(intent: invocation.interaction?.intent)
        report.id = invocation.interaction?.identifier ?? Self.newIdentifier()
        report.activity = invocation.activity
        do {
            let policy: SandboxPolicy
            if let given = options.policy {
                policy = given
            } else {
                policy = try SandboxPolicy.load(home: paths.home).0
            }
            try HomeProtection.check(home: paths.home)
            let catalog = catalog()
            let plugin = try catalog.continuer(of: invocation.activity.activityType)
            report.plugin = plugin.manifest.id
            var definition: IntentDefinition
            var activityOnly = false
            var interactionToSend = invocation.interaction
            if let interaction = invocation.interaction {
                guard let declared = plugin.manifest.intent(named: interaction.intent) else {
                    throw HostError(
                        .invalidIntent,
                        "\(invocation.source): interaction.intent: \(plugin.manifest.id), which continues '\(invocation.activity.activityType)', does not declare the intent '\(interaction.intent)' (it declares \(plugin.manifest.intents.map(\.name).joined(separator: ", ")))",
                        details: ["file": .string(invocation.source), "field": "interaction.intent"])
                }
                definition = declared
                // Checked against the manifest as an intent file's are (types, files, unknown names).
                var checked = interaction
                checked.parameters = try IntentFileParser.wireParameters(
                    for: IntentInvocation(intent: interaction.intent, parameters: interaction.parameters, source: invocation.source), definition: declared)
                interactionToSend = checked
            } else {
                // No intent comes with it: any code the plugin declares for any intent may answer.
                definition = IntentDefinition(name: invocation.activity.activityType, responses: plugin.manifest.intents.flatMap(\.responses))
                activityOnly = true
            }
            guard plugin.manifest.modes.contains(.inApp) else {
                throw HostError(
                    .configurationError,
                    "\(plugin.manifestURL.path): \(plugin.manifest.id) declares the activity type '\(invocation.activity.activityType)' but not in-app mode, in which activities are continued",
                    details: ["file": .string(plugin.manifestURL.path), "field": "modes"])
            }
            let limits = try EffectiveLimits.resolve(
                policy: policy, mode: .inApp, manifest: plugin.manifest.limits, manifestFile: plugin.manifestURL.path,
                memoryOverride: options.memoryLimitBytes, deadlineOverride: options.deadlineMs)
            report.mode = .inApp
            report.limits = limits
            var run = try pluginRun(plugin, definition: definition, limits: limits, policy: policy, options: options)
            run.activityOnly = activityOnly
            run.execute(.continueActivity(invocation.activity, interaction: interactionToSend), into: &report)
            report.recordStep(activity: invocation.activity)
        } catch {
            report.error = error as? HostError ?? HostError(.internalError, "\(error)")
        }
        return report
    }

    /// A new interaction identifier.
    static func newIdentifier() -> String {
        UUID().uuidString.lowercased()
    }

    // MARK: - Escalation

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
    func nextStep(after run: PluginRun, parameters: [String: JSONValue], report: inout HandleReport, options: HandleOptions)
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
    func carryOn(_ next: NextStep, after first: PluginRun, report: inout HandleReport, options: HandleOptions) -> PluginRun? {
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
        var run = first.relaunch(limits: limits)
        options.log?("[extrun] launching \(first.plugin.manifest.id) in in-app mode: \(next.reason)")
        switch next {
        case .continueInApp(let activity, let interaction, let reason):
            run.execute(.continueActivity(activity, interaction: interaction), into: &report)
            report.recordStep(reason: reason, activity: activity)
        case .retry(let parameters, let reason):
            // A confirmation already given is not asked again.
            run.intentConfirmed = first.intentConfirmed
            run.execute(.handle(parameters: parameters), into: &report)
            report.recordStep(reason: reason)
        }
        return run
    }

    // MARK: - Donation

    /// Donates the interaction of a successful run to its owner's donation log. A store
    /// that cannot take it does not fail the run: the outcome says why.
    func donate(
        run: PluginRun, report: HandleReport, invocation: IntentInvocation, options: HandleOptions, donations: () throws -> Donations
    ) -> DonationOutcome {
        guard options.donate else { return DonationOutcome(donated: false, reason: "--no-donate") }
        let manifest = run.plugin.manifest
        let donation = Donation(
            identifier: report.id ?? Self.newIdentifier(), owner: manifest.owner, plugin: manifest.id, intent: run.definition.name,
            groupIdentifier: invocation.groupIdentifier, source: "handle",
            parameters: (run.resolved ?? [:]).mapValues(Self.withoutFileData), response: report.response)
        do {
            try run.services?.authorize()
            try donations().donate(donation, durable: false)
            options.log?("[extrun] donated the interaction \(donation.identifier) to \(manifest.owner)'s donation log")
            return DonationOutcome(donated: true)
        } catch let error as StoreError {
            options.log?("[extrun] the interaction was not donated: \(error.message)")
            return DonationOutcome(donated: false, reason: error.message, error: error.json)
        } catch {
            return DonationOutcome(donated: false, reason: "\(error)")
        }
    }

    /// A parameter value as donated: files keep their name and type but not their bytes.
    static func withoutFileData(_ value: JSONValue) -> JSONValue {
        switch value {
        case .object(var fields) where fields["filename"] != nil && fields["data"] != nil:
            fields["data"] = nil
            return .object(fields)
        case .array(let items):
            return .array(items.map(withoutFileData))
        default:
            return value
        }
    }
}

extension Host.NextStep {
    var reason: String {
        switch self {
        case .continueInApp(_, _, let reason), .retry(_, let reason): reason
        }
    }
}

/// The store, with an owner's key loaded, being opened on another thread while the
/// plugin runs; the run's store services and its donation then share it (one
/// connection per process and home).
final class DonationLog: @unchecked Sendable {
    // Written once by the opening thread before `done` is signalled, read after `wait`.
    private var result: Result<Store, any Error> = .failure(CancellationError())
    private let done = DispatchSemaphore(value: 0)

    static func open(home: URL, owner: String) -> DonationLog {
        let log = DonationLog()
        Thread.detachNewThread {
            log.result = Result {
                let store = try OpenStores.store(home: home)
                try store.donations(of: owner).prepare()
                return store
            }
            log.done.signal()
        }
        return log
    }

    /// The opened store, or its error (waits for the opening thread; any number of times).
    func store() throws -> Store {
        done.wait()
        done.signal()
        return try result.get()
    }
}

/// The stores `Host.handle` opened, one per home, kept open for the process's life:
/// the next `Host.handle` of the process reuses the connection, and none is closed
/// on the way out (a close cost `extrun handle` a checkpoint, an fsync and Foundation's
/// notification machinery: milliseconds per run). A store whose file was replaced
/// (another inode) is opened again. Opened without a checkpoint at close, for when one is
/// replaced: the write-ahead log is left for a later connection (docs/store.md).
enum OpenStores {
    private static let cache = Mutex<[String: (store: Store, file: FileIdentity, used: UInt64)]>([:])
    /// The most homes kept open (a test process goes through hundreds of homes; a host, one).
    static let maxOpen = 4

    static func store(home: URL) throws -> Store {
        let key = home.path
        let identity = FileIdentity(path: key + "/store.sqlite")
        let now = MonotonicClock.now()
        let hit = cache.withLock { cache -> Store? in
            guard let identity, var cached = cache[key], cached.file.isSameFile(as: identity) else { return nil }
            cached.used = now
            cache[key] = cached
            return cached.store
        }
        if let hit { return hit }
        let store = try Store(home: home, checkpointOnClose: false)
        if let opened = FileIdentity(path: store.databasePath) {
            cache.withLock { cache in
                cache[key] = (store, opened, now)
                // The least recently used beyond the limit: closed once its last user lets go.
                while cache.count > maxOpen, let oldest = cache.min(by: { $0.value.used < $1.value.used })?.key { cache[oldest] = nil }
            }
        }
        return store
    }
}
