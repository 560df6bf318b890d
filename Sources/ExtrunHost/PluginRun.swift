import ExtrunProtocol
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// One plugin process from launch to reaping.
struct PluginRun {
    let plugin: DiscoveredPlugin
    let definition: IntentDefinition
    let limits: EffectiveLimits
    let policy: SandboxPolicy
    let options: HandleOptions
    var mode: Mode { limits.mode }
    var phase: Phase = .launch
    var start: UInt64 = 0
    let deadline = Deadline()
    var cgroup: CgroupRun?
    /// Answers the plugin's requests for its owner's globals and bookmarks.
    var services: StoreServices?
    /// `$EXTRUN_HOME`, which the sandbox hides from the plugin.
    var home: URL?
    /// Where relative file paths typed at a prompt are taken from.
    var baseDirectory: URL {
        get { givenBaseDirectory ?? URL(fileURLWithPath: FileManager.default.currentDirectoryPath) }
        set { givenBaseDirectory = newValue }
    }
    /// Set by the caller (the intent file's folder); the working directory is looked up
    /// only when needed (a URL for it costs a `getcwd` and a `stat` per intent in a pool).
    private var givenBaseDirectory: URL?
    /// The parameters once every one was resolved (set by `handle`), for a later step.
    var resolved: [String: JSONValue]?
    /// Whether a person (or --yes) confirmed the intent in this run.
    var intentConfirmed = false
    /// Continuing an activity that no intent comes with: `initialize` names no intent.
    var activityOnly = false
    /// Ask for the whole session in one `session` request (a warm process whose plugin
    /// declared it; docs/protocol.md §15) instead of one request per step.
    var sessionRequest = false
    /// The `session` answer, replayed step by step while the host walks the lifecycle.
    var replay: SessionReplay?

    /// What a run is for.
    enum Work {
        /// Resolve, confirm and handle the intent.
        case handle(parameters: [String: JSONValue])
        /// Ask for a parameter's possible values.
        case options(parameter: String, parameters: [String: JSONValue], search: String?)
        /// In in-app mode: carry on with a user activity (and the interaction an extension handed over).
        case continueActivity(UserActivity, interaction: Interaction?)
    }

    init(plugin: DiscoveredPlugin, definition: IntentDefinition, limits: EffectiveLimits, policy: SandboxPolicy, options: HandleOptions) {
        self.plugin = plugin
        self.definition = definition
        self.limits = limits
        self.policy = policy
        self.options = options
    }

    var id: String { plugin.manifest.id }

    /// The same plugin, intent, policy, store and home, in a new process with other
    /// limits: the app's step after the extension's.
    func relaunch(limits: EffectiveLimits) -> PluginRun {
        var run = PluginRun(plugin: plugin, definition: definition, limits: limits, policy: policy, options: options)
        run.services = services
        run.home = home
        run.givenBaseDirectory = givenBaseDirectory
        run.activityOnly = activityOnly
        return run
    }

    /// Starts the plugin in its sandbox, does `work`, and ends the plugin, whatever
    /// happens; everything that happened is in `report`.
    mutating func execute(_ work: Work, into report: inout HandleReport) {
        let launched: LaunchedPlugin
        do throws(HostError) {
            launched = try launch()
        } catch {
            report.error = error
            return
        }
        defer { launched.release() }
        let (process, connection) = (launched.process, launched.connection)
        bind(connection)
        var launchMs: Double?
        do {
            try initialize(connection)
            launchMs = MonotonicClock.milliseconds(from: start)
            options.log?("[extrun] \(id) started in \(mode.rawValue) mode, handshake after \(launchMs ?? 0) ms")
            try perform(work, connection, into: &report)
            closeAndWait(process, connection, into: &report)
        } catch {
            fail(error, connection, into: &report)
        }
        process.finish()
        attribute(process, connection, into: &report)
        var metrics = exitMetrics(process, wallMs: MonotonicClock.milliseconds(from: start))
        metrics.launchMs = launchMs
        // VmHWM, not getrusage's ru_maxrss, which Linux carries over from the process that exec'd the host.
        metrics.hostPeakRSSBytes = MemorySampler.ownPeakRSS()
        report.metrics = metrics
    }

    /// What an ended process used: CPU and peak RSS from its exit, peak private memory sampled.
    func exitMetrics(_ process: PluginProcess, wallMs: Double) -> RunMetrics {
        var metrics = RunMetrics(wallMs: wallMs)
        if let exit = process.exit {
            // Without rusage (the plugin was killed with its namespace), the last sampled CPU time.
            metrics.cpuMs = exit.cpuMs > 0 ? exit.cpuMs : process.memory.lastCPUMs.rounded(toPlaces: 3)
            if exit.maxRSSBytes > 0 { metrics.peakRSSBytes = exit.maxRSSBytes }
        }
        metrics.peakMemoryBytes = peakMemory(process)
        return metrics
    }

    /// A plugin process started in its sandbox, with its channel.
    struct LaunchedPlugin {
        let process: PluginProcess
        let connection: PluginConnection
        let scratch: URL
        let cgroup: CgroupRun?

        /// Removes the scratch directory and the cgroup, once the process has ended.
        func release() {
            cgroup?.remove()
            ScratchDirectory.remove(scratch)
        }
    }

    /// Starts the plugin in its sandbox: the plugin's user and what it may reach, its
    /// scratch directory, the home hidden, the cgroup, the namespaces, seccomp and
    /// rlimits (docs/sandbox.md). Every process a run starts goes through here, warm
    /// ones included. The deadline counts from here.
    mutating func launch() throws(HostError) -> LaunchedPlugin {
        let capabilities = SandboxCapabilities.current
        // What is exec'd, known first: its seccomp filters are built on another thread
        // while the launch is prepared. (Its error, if any, is thrown where it was before.)
        let program = Result { () throws(HostError) in try launchProgram() }
        if policy.seccomp, case .success(let resolved) = program {
            SeccompFilters.prebuild(path: resolved.executable.path, notify: capabilities.seccompNotify, pidNamespace: policy.namespaces.pid)
        }
        let identity = try PluginIdentity.resolve(policy: policy)
        try identity.checkAccess(
            toExecutable: plugin.executableURL, pluginDirectory: plugin.directory, mountNamespace: policy.namespaces.mount, of: id)
        let scratch = try ScratchDirectory.create(owner: identity)
        if let home { HomeProtection.makeIfMissing(home) }
        let cgroupSupport = CgroupSupport.detectHere(configured: policy.cgroup)
        if case .available(let parent) = cgroupSupport {
            cgroup = CgroupRun(parent: parent, memoryBytes: limits.memoryBytes)
        }
        let sandbox = SandboxSettings(
            policy: policy, limits: limits, capabilities: capabilities, cgroup: cgroup, identity: identity, home: home,
            pluginDirectory: plugin.directory, scratch: scratch, executable: plugin.executableURL)

        start = MonotonicClock.now()
        deadline.set(start: start, limits: limits)
        let process: PluginProcess
        do throws(HostError) {
            process = try PluginProcess.launch(try launchSpec(scratch: scratch, program: program.get()), sandbox: sandbox)
        } catch {
            cgroup?.remove()
            ScratchDirectory.remove(scratch)
            throw error
        }
        if let log = options.log {
            log("[extrun] limits (\(mode.rawValue)): memory \(ByteCount.format(limits.memoryBytes)): \(ByteCount.format(limits.dataBytes)) of private writable memory (RLIMIT_DATA\(cgroup != nil ? " and cgroup memory.max" : "")) and \(ByteCount.format(limits.memoryFilesBytes)) of files in memory, deadline \(limits.deadlineMs) ms from launch\(limits.maxExtendedDeadlineMs > limits.deadlineMs ? " (progress may extend it to \(limits.maxExtendedDeadlineMs) ms)" : ""), stack \(ByteCount.format(limits.stackBytes)) per thread")
            log("[extrun] memory enforcement: RLIMIT_DATA; \(cgroup.map { "cgroup \($0.directory.path)" } ?? cgroupSupport.description)")
            log("[extrun] seccomp: \(policy.seccomp ? (capabilities.seccompNotify ? "on (forbidden calls reported by name)" : "on (forbidden calls kill with SIGSYS)") : "OFF (policy)"); no_new_privs; rlimits: \(policy.openFiles) files, \(policy.processes) processes, \(ByteCount.format(policy.fileSizeBytes)) per file, no core dumps")
            log("[extrun] namespaces: \(SandboxSettings.describe(namespaces: process.activeNamespaces)); scratch directory \(scratch.path)")
            for line in sandbox.describeProtection(active: process.activeNamespaces, home: home) { log("[extrun] \(line)") }
        }
        let connection = PluginConnection(process: process, limits: ConnectionLimits(policy: policy, mode: mode))
        return LaunchedPlugin(process: process, connection: connection, scratch: scratch, cgroup: cgroup)
    }

    /// Points the connection's callbacks at this run: its log, its deadline (progress), its store services.
    func bind(_ connection: PluginConnection) {
        if let log = options.log {
            let id = self.id
            connection.onOutputLine = { isStdout, line in log("[\(id) \(isStdout ? "stdout" : "stderr")] \(line)") }
        } else {
            connection.onOutputLine = nil
        }
        connection.onNotification = { [log = options.log, id = self.id, deadline = self.deadline, mode = self.mode] method, params in
            if method == Method.log, let params, let entry = try? LogParams(jsonValue: params) {
                log?("[\(id) log \(entry.level)] \(entry.message)")
            } else if method == Method.progress {
                let progress = params.flatMap { try? ProgressParams(jsonValue: $0) }
                if mode == .extension, deadline.extend() {
                    log?("[extrun] \(id) reported progress \(progress?.fraction.map { "\($0)" } ?? "") \(progress?.message ?? ""): deadline now \(deadline.currentMs) ms from launch")
                }
            }
        }
        if let services {
            connection.onRequest = { method, params in services.answer(method, params) }
        } else {
            connection.onRequest = nil
        }
    }

    /// The work of a session, after `initialize`.
    mutating func perform(_ work: Work, _ connection: PluginConnection, into report: inout HandleReport) throws {
        switch work {
        case .handle(let parameters):
            try handle(connection, parameters: parameters, into: &report)
        case .options(let parameter, let parameters, let search):
            phase = .options
            report.options = try options(connection, parameter: parameter, parameters: parameters, search: search)
        case .continueActivity(let activity, let interaction):
            try continueActivity(connection, activity: activity, interaction: interaction, into: &report)
        }
    }

    /// The normal end of a last session: close fd 3 and wait for the exit within the grace.
    func closeAndWait(_ process: PluginProcess, _ connection: PluginConnection, into report: inout HandleReport) {
        let exitDeadline = MonotonicClock.now() + UInt64(policy.exitGraceMs) * 1_000_000
        if let failure = connection.closeAndWait(deadline: exitDeadline) {
            switch failure {
            case .protocolViolation, .overLimit:
                report.response = nil
                report.error = error(for: failure, connection: connection)
            default:
                options.log?("[extrun] \(id) did not exit within \(policy.exitGraceMs) ms after the channel closed; killed")
            }
        }
    }

    /// A session that failed: past its deadline the plugin gets `cancel` and a grace;
    /// the report gets the error.
    func fail(_ error: any Error, _ connection: PluginConnection, into report: inout HandleReport) {
        switch error {
        case let failure as CallFailure:
            // The time at the deadline, not after the grace below.
            let elapsed = MonotonicClock.milliseconds(from: start)
            if case .deadlineExpired = failure {
                connection.stopReading()
                connection.notify(Method.cancel, CancelParams(reason: "timeout").jsonValue)
                let grace = MonotonicClock.now() + UInt64(policy.cancelGraceMs) * 1_000_000
                connection.flushOutbound(deadline: grace)
                _ = connection.closeAndWait(deadline: grace)
            }
            report.error = self.error(for: failure, connection: connection, elapsedMs: elapsed)
        case let error as HostError:
            report.error = error
        default:
            report.error = HostError(.internalError, "\(error)")
        }
    }

    /// After the process ended: a forbidden system call, or the memory cap, explains
    /// the failure whatever else happened.
    func attribute(_ process: PluginProcess, _ connection: PluginConnection, into report: inout HandleReport) {
        for call in process.denied { options.log?("[extrun] \(id) was refused \(call.description)") }
        if let violation = process.violation {
            report.response = nil
            report.responseIsSuccess = false
            report.error = HostError(
                .sandboxViolation,
                "\(id) made the forbidden system call \(violation.description) during \(phase.rawValue) and was killed (the sandbox denies it: see docs/sandbox.md)",
                details: violation.details.merging(["phase": .string(phase.rawValue)]) { _, new in new })
        } else if let disk = process.diskBreach {
            report.response = nil
            report.responseIsSuccess = false
            report.error = diskBreach(disk)
        } else if let run = process.runMemoryBreach {
            report.response = nil
            report.responseIsSuccess = false
            report.error = runMemoryBreach(run)
        } else if report.error?.kind == .pluginCrashed, let exit = process.exit, let breach = memoryBreach(exit: exit, process: process, connection: connection) {
            report.error = breach
        }
        // Nothing of the run's may outlive it: its scratch directory goes now, and the report says if it could not.
        if let left = process.removeScratch() {
            if report.error == nil {
                report.error = HostError(.internalError, "the scratch directory of \(id)'s run could not be removed: \(left)", details: ["scratchLeft": .string(left)])
            } else {
                report.error?.details["scratchLeft"] = .string(left)
            }
        }
    }

    /// The scratch directory went past its quota (counted by the supervisor).
    func diskBreach(_ disk: DiskBreach) -> HostError {
        let what =
            disk.tooDeep
            ? "nested folders deeper than 256"
            : disk.files > limits.diskFiles
                ? "\(disk.files) files and folders, past its quota of \(limits.diskFiles)"
                : "\(ByteCount.format(disk.bytes)), past its quota of \(ByteCount.format(limits.diskBytes))"
        return HostError(
            .diskLimitExceeded,
            "\(id) wrote \(what) in its scratch directory during \(phase.rawValue) in \(mode.rawValue) mode and was stopped (policy \(mode.rawValue).diskBytes and diskFiles; docs/sandbox.md)",
            details: [
                "limitBytes": .int(limits.diskBytes), "limitFiles": .int(limits.diskFiles), "usedBytes": .int(disk.bytes),
                "usedFiles": .int(disk.files), "mode": .string(mode.rawValue), "phase": .string(phase.rawValue),
            ])
    }

    /// The run's processes together past the memory cap, or their page tables past their
    /// share of it (counted by the supervisor).
    func runMemoryBreach(_ run: RunMemoryBreach) -> HostError {
        let who = run.processes == 1 ? "\(id)" : "\(id)'s \(run.processes) processes"
        let what =
            run.pageTables
            ? "\(who) made \(ByteCount.format(run.bytes)) of page tables, past the \(ByteCount.format(limits.dataBytes / 8)) they may take (an eighth of its \(ByteCount.format(limits.dataBytes)) of private memory)"
            : "\(who) held \(ByteCount.format(run.bytes)) of private memory together, past the \(ByteCount.format(limits.dataBytes)) its cap allows the whole run"
        var details: [String: JSONValue] = [
            "limitBytes": .int(limits.memoryBytes), "processes": .int(run.processes),
            "mode": .string(mode.rawValue), "phase": .string(phase.rawValue),
            "evidence": .array([.string(run.pageTables ? "its page tables took \(ByteCount.format(run.bytes))" : "its \(run.processes) processes held \(ByteCount.format(run.bytes)) together (the supervisor sums them)")]),
        ]
        details[run.pageTables ? "pageTableBytes" : "peakBytes"] = .int(run.bytes)
        return HostError(
            .memoryLimitExceeded,
            "\(what) during \(phase.rawValue) under its cap of \(ByteCount.format(limits.memoryBytes)) in \(mode.rawValue) mode, and was stopped (docs/sandbox.md, \"Memory\")",
            details: details)
    }

    /// The plugin's peak private memory: the larger of what was sampled while it ran and
    /// what it held as it ended, read exactly (docs/sandbox.md, "How the peak is measured").
    func peakMemory(_ process: PluginProcess) -> Int64 {
        max(cgroup?.peakBytes ?? 0, process.memory.peakDataBytes, process.exit?.finalMemory?.privateBytes ?? 0, process.runMemoryBreach.flatMap { $0.pageTables ? nil : $0.bytes } ?? 0)
    }

    /// Whether the plugin's death is the memory cap's doing, from the evidence the
    /// host has: the cgroup's OOM kills, an allocation failure the plugin's runtime
    /// printed, or memory sampled close to the cap.
    func memoryBreach(exit: ProcessExit, process: PluginProcess, connection: PluginConnection) -> HostError? {
        guard !exit.isClean else { return nil }
        var evidence: [String] = []
        if let cgroup, cgroup.oomKills > 0 { evidence.append("the kernel's OOM killer acted in its cgroup") }
        if let line = connection.stderr.lastLines(40).last(where: { line in MemoryFailureText.matches(line) }) {
            evidence.append("its runtime reported an allocation failure: \"\(line.trimmingCharacters(in: .whitespaces))\"")
        }
        if let refused = process.refusedAllocation {
            evidence.append(
                "it asked for \(ByteCount.format(refused.requestedBytes)) at once with \(ByteCount.format(refused.inUseBytes)) in use, past the \(ByteCount.format(limits.dataBytes)) of private memory its cap allows, and the kernel refused it")
        }
        let peak = max(peakMemory(process), process.refusedAllocation?.inUseBytes ?? 0)
        // From the exact figure as it ended when there is one (the same program, the same
        // verdict): a request the supervisor did not see (under EXTRUN_LARGE_MAPPING_BYTES) is
        // refused only that close to the cap. Otherwise from the sampled peak, at 90%.
        let held = process.exit?.finalMemory.map { Double($0.privateBytes) }
        let near = held != nil ? Double(limits.dataBytes - FinalMemory.unseenRequestBytes) : 0.9 * Double(limits.dataBytes)
        if (held ?? Double(peak)) >= near {
            let figure = held.map { "it held \(ByteCount.format(Int64($0))) of private memory as it ended" } ?? "its private memory reached \(ByteCount.format(peak))"
            evidence.append("\(figure), of the \(ByteCount.format(limits.dataBytes)) the cap leaves it (\(ByteCount.format(limits.memoryFilesBytes)) are for files in memory)")
        }
        guard !evidence.isEmpty else { return nil }
        let maximum = policy.limits(for: mode).maxMemoryBytes
        var advice = "use less memory"
        if limits.memoryBytes < maximum {
            advice += ", ask for more in the manifest (limits.\(mode.rawValue).memoryBytes, at most \(ByteCount.format(maximum)) under this policy)"
        }
        if mode == .extension && plugin.manifest.modes.contains(.inApp) { advice += ", or run it in in-app mode (--mode in-app)" }
        var details: [String: JSONValue] = [
            "limitBytes": .int(limits.memoryBytes), "peakBytes": .int(peak), "mode": .string(mode.rawValue),
            "phase": .string(phase.rawValue), "evidence": .array(evidence.map { .string($0) }),
        ]
        switch exit.termination {
        case .exited(let code): details["exitStatus"] = .int(Int64(code))
        case .signaled(let signal): details["signalName"] = .string(signalName(signal))
        }
        return HostError(
            .memoryLimitExceeded,
            "\(id) went over its memory cap of \(ByteCount.format(limits.memoryBytes)) in \(mode.rawValue) mode during \(phase.rawValue) (peak measured \(ByteCount.format(peak)); \(evidence.joined(separator: "; "))) and \(exit.description); \(advice)",
            details: details)
    }

    func launchSpec(scratch: URL, program: (executable: URL, arguments: [String])) -> LaunchSpec {
        var environment: [String: String] = [
            "PATH": Self.pluginSearchPath,
            "HOME": scratch.path,
            "TMPDIR": scratch.path,
            ProtocolChannels.environmentVariable: "\(ProtocolChannels.hostToPlugin),\(ProtocolChannels.pluginToHost)",
            "EXTRUN_MODE": mode.rawValue,
            "EXTRUN_PLUGIN_ID": id,
            "EXTRUN_PLUGIN_DIR": plugin.directory.path,
            // Swift's crash backtracer execs a helper program, which the sandbox forbids.
            "SWIFT_BACKTRACE": "enable=no",
        ]
        let inherited = ProcessInfo.processInfo.environment
        for name in PluginEnvironment.inherited { if let value = inherited[name] { environment[name] = value } }
        return LaunchSpec(executable: program.executable, arguments: program.arguments, environment: environment, workingDirectory: scratch)
    }

    /// What is exec'd: the executable, links resolved, or the interpreter of a script
    /// (found on the plugin's PATH). The file itself, links resolved: a staged plugin's
    /// executable links into the build's products (through further links, such as
    /// .build/debug); in the plugin's mount namespace only that file is bound back where
    /// it is covered, not the links to it.
    func launchProgram() throws(HostError) -> (executable: URL, arguments: [String]) {
        let executable = SandboxSettings.resolved(plugin.executableURL.path).map { URL(fileURLWithPath: $0) } ?? plugin.executableURL
        return try Shebang.resolve(executable: executable, arguments: plugin.manifest.arguments, searchPath: Self.pluginSearchPath)
    }

    static let pluginSearchPath = "/usr/local/bin:/usr/bin:/bin"

    // MARK: Reporting

    func error(for failure: CallFailure, connection: PluginConnection, elapsedMs: Double? = nil) -> HostError {
        let stderrTail = connection.stderr.lastLines(20)
        var details: [String: JSONValue] = ["phase": .string(phase.rawValue)]
        if !stderrTail.isEmpty { details["stderr"] = .array(stderrTail.map { .string($0) }) }
        switch failure {
        case .deadlineExpired:
            let elapsed = elapsedMs ?? MonotonicClock.milliseconds(from: start)
            let deadlineMs = deadline.currentMs
            details["deadlineMs"] = .int(Int64(deadlineMs))
            details["elapsedMs"] = .double(elapsed)
            details["mode"] = .string(mode.rawValue)
            return HostError(
                .timeout,
                "\(id) did not answer \(phase.rawValue) within its deadline of \(deadlineMs) ms in \(mode.rawValue) mode (counted from launch; \(Int(elapsed)) ms elapsed); it was sent cancel and, after a grace of up to \(policy.cancelGraceMs) ms, killed with every process it started",
                details: details)
        case .protocolViolation(let what):
            return HostError(.protocolError, "\(id) broke the protocol during \(phase.rawValue): \(what)", details: details)
        case .overLimit(let breach):
            details.merge(breach.details) { _, new in new }
            return HostError(
                .protocolError, "\(id) went over a limit of the host during \(phase.rawValue): \(breach.what); it was stopped", details: details)
        case .exited(let exit):
            switch exit.termination {
            case .exited(let code): details["exitStatus"] = .int(Int64(code))
            case .signaled(let signal):
                details["signal"] = .int(Int64(signal))
                details["signalName"] = .string(signalName(signal))
            }
            var message = "\(id) \(exit.description) during \(phase.rawValue), before it answered"
            if let last = stderrTail.last { message += "; last stderr line: \(last)" }
            return HostError(.pluginCrashed, message, details: details)
        }
    }
}
