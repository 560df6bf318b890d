import ExtrunProtocol
import Foundation

/// How to run one intent.
public struct HandleOptions: Sendable {
    /// Overrides the intent file's and the manifest's mode.
    public var mode: Mode?
    /// Accepts `confirmationRequired` resolutions and the intent's confirmation without asking.
    public var assumeYes = false
    /// Overrides the memory cap (within the policy's maximum for the mode).
    public var memoryLimitBytes: Int64?
    /// Overrides the deadline, counted from the plugin's launch (within the policy's maximum).
    public var deadlineMs: Int?
    /// The policy; nil loads `$EXTRUN_HOME/policy.json` (or the defaults).
    public var policy: SandboxPolicy?
    /// Receives `--verbose` lines (plugin output, phases). Nil: quiet.
    public var log: (@Sendable (String) -> Void)?
    /// Asks a person for missing values, choices and confirmations. Nil: nobody to ask,
    /// so those end as `parameterUnresolved` or `confirmationDeclined`.
    public var prompter: (any Prompter)?
    /// When an extension-mode run answers `continueInApp` or `failureRequiringAppLaunch`, or
    /// goes over its memory cap and its manifest has `retryInAppOnMemoryLimit`, carry on in
    /// in-app mode (a second process). False (`--no-app-launch`): stop after the extension.
    public var appLaunch = true
    /// Donate the interaction to the owner's donation log after a successful run, and store
    /// the plugin's own donations. False: `--no-donate`.
    public var donate = true

    public init() {}
}

/// The phases of a plugin run, as reported in `timeout` errors.
public enum Phase: String, Sendable {
    case launch, resolve, confirm, handle, options
    case continueActivity = "continue"
    /// A warm process's whole session in one `session` request (docs/protocol.md §15).
    case session
}

/// The host: finds the plugin for an intent, starts it, drives the lifecycle
/// (initialize, resolve each parameter, confirm, handle) and reports.
public struct Host: Sendable {
    public static let version = "0.1.0"
    public var paths: HostPaths

    public init(paths: HostPaths = .fromEnvironment()) {
        self.paths = paths
    }

    public func catalog() -> PluginCatalog {
        PluginCatalog.discover(paths: paths)
    }

    /// Asks the plugin for the possible values of a parameter with dynamic options,
    /// within the same limits and sandbox as `handle`.
    public func options(
        _ invocation: IntentInvocation, parameter: String, search: String?, options: HandleOptions = HandleOptions()
    ) -> HandleReport {
        var report = HandleReport(intent: invocation.intent)
        report.id = invocation.id
        guard let (prepared, parameters) = prepare(invocation, options: options, report: &report) else { return report }
        var run = prepared
        guard let definition = run.definition.parameter(named: parameter) else {
            let known = run.definition.parameters.map(\.name).joined(separator: ", ")
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
        run.execute(.options(parameter: parameter, parameters: parameters, search: search), into: &report)
        return report
    }

    /// The plugin and definition of an intent, without starting anything.
    public func describe(intent: String) throws(HostError) -> (DiscoveredPlugin, IntentDefinition) {
        try catalog().handler(for: intent)
    }

    /// A run of `plugin` bound to this host's home: its owner's store services, and
    /// the home the sandbox hides. Every launch goes through here (or `PluginRun.relaunch`).
    /// A plugin whose signature does not hold is not started (`signatureInvalid`).
    func pluginRun(
        _ plugin: DiscoveredPlugin, definition: IntentDefinition, limits: EffectiveLimits, policy: SandboxPolicy, options: HandleOptions,
        sealMaxAgeNs: UInt64 = 0
    ) throws(HostError) -> PluginRun {
        var run = PluginRun(plugin: plugin, definition: definition, limits: limits, policy: policy, options: options)
        let seal = try PluginVerification.seal(of: plugin, home: paths.home, maxAgeNs: sealMaxAgeNs)
        run.services = StoreServices(
            home: paths.home, owner: plugin.manifest.owner, plugin: plugin.manifest, directory: plugin.directory, seal: seal,
            donate: options.donate, log: options.log)
        run.home = paths.home
        return run
    }

    /// Finds the plugin, loads the policy, resolves the limits and checks the
    /// intent's parameters, before any process is started.
    /// - Parameter checkHome: false when the caller checked the home's permissions itself
    ///   a moment ago (a pool checks them at most once a second).
    /// - Parameter sealMaxAgeNs: how old a check of the plugin's signature may be (a pool's 10 ms); 0: checked now.
    func prepare(
        _ invocation: IntentInvocation, options: HandleOptions, report: inout HandleReport, catalog: PluginCatalog? = nil, checkHome: Bool = true,
        sealMaxAgeNs: UInt64 = 0
    ) -> (PluginRun, [String: JSONValue])? {
        do {
            let policy: SandboxPolicy
            var policySource = "the caller"
            if let given = options.policy {
                policy = given
            } else {
                (policy, policySource) = try SandboxPolicy.load(home: paths.home)
            }
            options.log?("[extrun] policy: \(policySource)")
            if checkHome { try HomeProtection.check(home: paths.home) }
            let (plugin, definition) =
                try catalog?.handler(for: invocation.intent) ?? PluginCatalog.handler(for: invocation.intent, paths: paths)
            report.plugin = plugin.manifest.id
            let parameters = try IntentFileParser.wireParameters(for: invocation, definition: definition)
            let mode = options.mode ?? invocation.mode ?? plugin.manifest.defaultMode
            guard plugin.manifest.modes.contains(mode) else {
                throw HostError(
                    .invalidIntent,
                    "\(plugin.manifest.id) does not support \(mode.rawValue) mode (it supports \(plugin.manifest.modes.map(\.rawValue).joined(separator: ", ")))",
                    details: ["field": "mode"])
            }
            let limits = try EffectiveLimits.resolve(
                policy: policy, mode: mode, manifest: plugin.manifest.limits, manifestFile: plugin.manifestPath,
                memoryOverride: options.memoryLimitBytes, deadlineOverride: options.deadlineMs)
            report.mode = mode
            report.limits = limits
            var run = try pluginRun(plugin, definition: definition, limits: limits, policy: policy, options: options, sealMaxAgeNs: sealMaxAgeNs)
            run.baseDirectory = invocation.baseDirectory
            return (run, parameters)
        } catch {
            report.error = error as? HostError ?? HostError(.internalError, "\(error)")
            return nil
        }
    }
}
