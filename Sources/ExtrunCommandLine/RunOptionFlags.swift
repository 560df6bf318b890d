import ArgumentParser
import ExtrunProtocol

/// The flags that set a run's `RunOptions`, for every command that runs intents:
/// `--memory-limit`, `--timeout` and `--no-donate` (`handle`, `batch`, `phrase`,
/// `continue`, `mcp`), with `RunOptionFlags` adding `--mode`, `--no-app-launch`, `--yes`
/// and `--no-input` for the commands that resolve and confirm (`handle`, `batch`, `phrase`).
/// Each flag sets one field of `RunOptions`, whose wire names (the service's query, the
/// JSON form) are in ExtrunProtocol/RunOptions.swift.
public struct RunLimitFlags: ParsableArguments, Sendable {
    @Option(
        name: .customLong("memory-limit"),
        help: ArgumentHelp(
            "Memory cap for each intent, e.g. 64MiB or 1GiB (private writable memory), above 64 KiB and within the policy's maximum for the mode; a warm process counts its whole life.",
            valueName: "size"))
    public var memoryLimit: String?

    @Option(
        help: ArgumentHelp(
            "Deadline for each intent, counted from the plugin's launch (or its session), e.g. 5s, 2500ms or 1m (a unit is required), within the policy's maximum; in extension mode progress reports extend it up to the mode's maximum.",
            valueName: "duration"))
    public var timeout: String?

    @Flag(help: "Do not donate the interaction (nor the plugin's own donations) to the donation log.")
    public var noDonate = false

    public init() {}

    public func validate() throws {
        if let memoryLimit, ByteCount.parse(memoryLimit) == nil {
            throw ValidationError("--memory-limit '\(memoryLimit)' is not a size; write it like 64MiB, 1GiB or 500000000")
        }
        let bare = timeout?.trimmingCharacters(in: .whitespaces) ?? ""
        if let timeout, !bare.isEmpty, bare.allSatisfy({ $0.isNumber || $0 == "." }) {
            throw ValidationError("--timeout '\(timeout)' has no unit: write \(bare)s (seconds) or \(bare)ms (milliseconds)")
        }
        if let timeout, DurationText.parseMilliseconds(timeout) == nil {
            throw ValidationError("--timeout '\(timeout)' is not a duration; write it like 5s, 2500ms or 1m")
        }
    }

    /// Sets the fields these flags name.
    public func apply(to options: inout RunOptions) {
        options.memoryLimitBytes = memoryLimit.flatMap(ByteCount.parse)
        options.deadlineMs = timeout.flatMap(DurationText.parseMilliseconds)
        options.donate = !noDonate
    }
}

/// `RunLimitFlags` and the flags of resolving and confirming.
public struct RunOptionFlags: ParsableArguments, Sendable {
    @Option(help: "Run the plugin in this mode (extension or in-app), overriding the intent file and the manifest.")
    public var mode: Mode?

    @OptionGroup public var limits: RunLimitFlags

    @Flag(help: "Stop after the extension when it asks for the app (continueInApp, failureRequiringAppLaunch, or a memory retry).")
    public var noAppLaunch = false

    @Flag(name: [.customLong("yes"), .customShort("y")], help: "Accept parameter values and intents the plugin asks to confirm.")
    public var assumeYes = false

    @Flag(help: "Never ask on the terminal: a missing value or a needed confirmation ends the intent with an error.")
    public var noInput = false

    public init() {}

    /// The run's options; `interactive` unless `--no-input` (and only when `mayPrompt`:
    /// false where nobody can be asked, e.g. `batch --jobs 4`).
    public func runOptions(mayPrompt: Bool = true) -> RunOptions {
        var options = RunOptions()
        options.mode = mode
        limits.apply(to: &options)
        options.appLaunch = !noAppLaunch
        options.assumeYes = assumeYes
        options.interactive = !noInput && mayPrompt
        return options
    }
}

extension Mode: ExpressibleByArgument {}
