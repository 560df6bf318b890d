import ExtrunProtocol
import Foundation

/// Everything checked before a process starts, for every kind of run: the policy, the
/// home's permissions, the plugin and its definition, the mode, the limits, the
/// plugin's signature. `handle`, `options` and `phrase` prepare an intent;
/// `continueActivity` an activity; both go through `prepared`.
extension Host {
    /// What a run is for, chosen once the policy is known: the plugin, the intent's
    /// definition and the mode.
    struct Selection {
        var plugin: DiscoveredPlugin
        var definition: IntentDefinition
        var mode: Mode
    }

    /// Finds the plugin, loads the policy, resolves the limits and checks the
    /// intent's parameters, before any process is started. `context`: what a pool caches
    /// (`RunContext`), or nothing (looked up now).
    func prepare(
        _ invocation: IntentInvocation, options: HandleOptions, report: inout HandleReport, context: RunContext = .oneShot
    ) -> (IntentLifecycle, [String: JSONValue])? {
        var parameters: [String: JSONValue] = [:]
        let made = prepared(options: options, report: &report, context: context) { report in
            let (plugin, definition) =
                try context.catalog?.handler(for: invocation.intent) ?? PluginCatalog.handler(for: invocation.intent, paths: paths)
            report.plugin = plugin.manifest.id
            parameters = try IntentFileParser.wireParameters(for: invocation, definition: definition)
            let mode = options.mode ?? invocation.mode ?? plugin.manifest.defaultMode
            guard plugin.manifest.modes.contains(mode) else {
                throw HostError(
                    .invalidIntent,
                    "\(plugin.manifest.id) does not support \(mode.rawValue) mode (it supports \(plugin.manifest.modes.map(\.rawValue).joined(separator: ", ")))",
                    details: ["field": "mode"])
            }
            return Selection(plugin: plugin, definition: definition, mode: mode)
        }
        guard var lifecycle = made else { return nil }
        lifecycle.baseDirectory = invocation.baseDirectory
        return (lifecycle, parameters)
    }

    /// For `extrun continue`: the plugin that declares the activity's type, in in-app
    /// mode, and the interaction that came with it checked against its manifest as an
    /// intent file's parameters are. Returns the lifecycle and the interaction to send.
    func prepare(
        _ invocation: ActivityInvocation, options: HandleOptions, report: inout HandleReport, context: RunContext = .oneShot
    ) -> (IntentLifecycle, Interaction?)? {
        var interactionToSend = invocation.interaction
        var activityOnly = false
        let made = prepared(options: options, report: &report, context: context) { report in
            let plugin = try (context.catalog ?? catalog()).continuer(of: invocation.activity.activityType)
            report.plugin = plugin.manifest.id
            let definition: IntentDefinition
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
            return Selection(plugin: plugin, definition: definition, mode: .inApp)
        }
        guard var lifecycle = made else { return nil }
        lifecycle.activityOnly = activityOnly
        return (lifecycle, interactionToSend)
    }

    /// The steps every run shares: the policy (the caller's, or `$EXTRUN_HOME/policy.json`),
    /// the home's permissions, then `select` (the plugin, definition and mode), the
    /// limits, and the lifecycle bound to this home. Nil when something does not hold:
    /// the report says what.
    private func prepared(
        options: HandleOptions, report: inout HandleReport, context: RunContext, select: (inout HandleReport) throws -> Selection
    ) -> IntentLifecycle? {
        do {
            let policy: SandboxPolicy
            var policySource = "the caller"
            if let given = options.policy {
                policy = given
            } else {
                (policy, policySource) = try SandboxPolicy.load(home: paths.home)
            }
            options.log?("[extrun] policy: \(policySource)")
            if context.checkHome { try HomeProtection.check(home: paths.home) }
            let selection = try select(&report)
            let plugin = selection.plugin
            let limits = try EffectiveLimits.resolve(
                policy: policy, mode: selection.mode, manifest: plugin.manifest.limits, manifestFile: plugin.manifestPath,
                memoryOverride: options.memoryLimitBytes, deadlineOverride: options.deadlineMs)
            report.mode = selection.mode
            report.limits = limits
            return try lifecycle(plugin, definition: selection.definition, limits: limits, policy: policy, options: options, sealMaxAgeNs: context.sealMaxAgeNs)
        } catch {
            report.error = error as? HostError ?? HostError(.internalError, "\(error)")
            return nil
        }
    }

    /// An intent's lifecycle with `plugin`, bound to this host's home: its owner's store
    /// services, and the home the sandbox hides. A plugin whose signature does not hold
    /// is not started (`signatureInvalid`); a signed one runs from its private copy.
    func lifecycle(
        _ plugin: DiscoveredPlugin, definition: IntentDefinition, limits: EffectiveLimits, policy: SandboxPolicy, options: HandleOptions,
        sealMaxAgeNs: UInt64 = 0
    ) throws(HostError) -> IntentLifecycle {
        // A caller of a shared service runs only the owners it was granted (serve.json "grants").
        try options.caller?.admit(owner: plugin.manifest.owner, plugin: plugin.manifest.id)
        // A signed plugin runs from the private copy of what was checked (PluginVerification).
        let (seal, running) = try PluginVerification.running(plugin, home: paths.home, maxAgeNs: sealMaxAgeNs)
        var lifecycle = IntentLifecycle(plugin: running, definition: definition, limits: limits, policy: policy, options: options)
        lifecycle.services = StoreServices(
            home: paths.home, owner: plugin.manifest.owner, plugin: plugin.manifest, directory: plugin.directory, seal: seal,
            donate: options.donate, log: options.log)
        lifecycle.services?.caller = options.caller
        lifecycle.home = paths.home
        return lifecycle
    }
}
