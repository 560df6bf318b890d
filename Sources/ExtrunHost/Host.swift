import ExtrunProtocol
import ExtrunStore
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
    /// Stops the run from another thread (a server's client went away, an MCP cancel):
    /// the plugin gets `cancel` and the cancel grace, and the report's error is
    /// `cancelled`. See `Cancellation`.
    public var cancellation: Cancellation?
    /// Called on the run's thread for each `progress` notification of the plugin
    /// (a server or an MCP client passes it on to its caller).
    public var onProgress: (@Sendable (ProgressParams) -> Void)?
    /// Who asks for this run: the intents of which owners it may run, and whose bookmarks it
    /// may use (docs/serve.md, "Who may run what"; docs/store.md, "Who made a bookmark").
    /// `extrun serve` sets the peer's uid (or the token's principal) and its grants, `extrun
    /// mcp` its own uid. Nil: this process's uid, with every owner (`extrun handle`).
    public var caller: CallerIdentity?

    public init() {}

    /// The options of a run as the front ends got them (`RunOptions`: flags, query, JSON).
    /// `interactive` and `text` stay the front end's: it supplies the prompter and the output.
    public init(_ run: RunOptions) {
        self.init()
        apply(run)
    }

    /// Sets the fields `run` names.
    public mutating func apply(_ run: RunOptions) {
        mode = run.mode
        memoryLimitBytes = run.memoryLimitBytes
        deadlineMs = run.deadlineMs
        assumeYes = run.assumeYes
        appLaunch = run.appLaunch
        donate = run.donate
    }
}

/// Who asks for a run, and what it was granted.
public struct CallerIdentity: Sendable, Equatable, CustomStringConvertible {
    /// The local uid: the peer of a Unix socket, this process's own; nil over TCP.
    public var uid: UInt32?
    /// How it came, where known: `tcp` (the token's holders), `mcp`.
    public var principal: String?
    /// The owners whose intents it may run; nil: every owner.
    public var grantedOwners: Set<String>?

    public init(uid: UInt32?, principal: String? = nil, grantedOwners: Set<String>? = nil) {
        self.uid = uid
        self.principal = principal
        self.grantedOwners = grantedOwners
    }

    /// This process's own uid, with every owner.
    public static var process: CallerIdentity { CallerIdentity(uid: getuid()) }

    /// As the store sees it, for a bookmark's files.
    public var bookmarkCaller: BookmarkCaller { BookmarkCaller(uid: uid, principal: principal) }

    public var description: String { bookmarkCaller.description }

    /// Throws `notPermitted` unless the caller was granted `owner`.
    public func admit(owner: String, plugin: String) throws(HostError) {
        guard let granted = grantedOwners, !granted.contains(owner) else { return }
        var details: [String: JSONValue] = ["owner": .string(owner), "plugin": .string(plugin)]
        if let uid { details["uid"] = .int(Int64(uid)) }
        if let principal { details["principal"] = .string(principal) }
        details["caller"] = .string(description)
        throw HostError(
            .notPermitted,
            "\(description) may not run the intents of owner '\(owner)' (\(plugin)): the service's grants (serve.json \"grants\") do not grant it that owner\(granted.isEmpty ? "" : "; it is granted \(granted.sorted().joined(separator: ", "))")",
            details: details)
    }
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
///
/// Where each step lives (docs/architecture.md): `handle`, `options`, `continueActivity`
/// and the one path they share in Host+Handle.swift; what is checked before a process
/// starts in Host+Prepare.swift; the app's step after an extension's in
/// Host+Escalation.swift; the donation in Host+Donation.swift; `phrase` in Phrases.swift.
public struct Host: Sendable {
    public static let version = "0.1.0"
    public var paths: HostPaths

    public init(paths: HostPaths = .fromEnvironment()) {
        self.paths = paths
    }

    public func catalog() -> PluginCatalog {
        PluginCatalog.discover(paths: paths)
    }

    /// What `extrun describe` shows of an intent (IntentDescription), without starting anything.
    public func describe(intent: String) throws(HostError) -> IntentDescription {
        let (plugin, definition) = try catalog().handler(for: intent)
        return IntentDescription(plugin: plugin, definition: definition)
    }
}
