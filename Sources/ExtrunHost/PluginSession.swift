import ExtrunProtocol
import ExtrunStore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What a plugin session is started for: the plugin, its limits and sandbox policy,
/// the home the sandbox hides, and what the plugin's signature proved at the check
/// before the launch. An intent's lifecycle asks a `SessionSource` for a session
/// that fits it (`IntentLifecycle.sessionSpec`).
struct SessionSpec {
    let plugin: DiscoveredPlugin
    let limits: EffectiveLimits
    let policy: SandboxPolicy
    /// `$EXTRUN_HOME`, which the sandbox hides from the plugin.
    let home: URL?
    let seal: PluginSeal?
    let log: (@Sendable (String) -> Void)?

    var id: String { plugin.manifest.id }
    var mode: Mode { limits.mode }
}

/// One plugin process in its sandbox, with its channel, its scratch directory, its
/// cgroup and its limits, from launch to reaping. An intent's lifecycle
/// (`IntentLifecycle`) talks to the plugin through it; a session source
/// (`OneShotSessions`, `PooledSessions`) starts it and decides what happens after an
/// intent: a session that `keepsWarm` stays up for the next intent while its plugin
/// declares `"reusable": true` and nothing went wrong (docs/protocol.md §15); any other
/// ends after its intent, as does every one after a failure.
///
/// Not thread-safe: one intent at a time uses a session.
final class PluginSession {
    /// What must be equal for an intent to run in this process (a pool's lookup).
    struct Key: Equatable {
        var manifestPath: String
        var pluginID: String
        var limits: EffectiveLimits
        var policy: SandboxPolicy
        var owner: String
        /// The manifest's and the executable's versions: a plugin reinstalled or edited
        /// while the pool runs gets a new process, not the old one.
        var manifest: FileIdentity?
        var executable: FileIdentity?
        /// What the plugin's signature proved when the process was started: a process started
        /// unsigned (or signed by another key) runs the code it read then, which the signature
        /// found later did not cover (a file rewritten in place, its modification time set back).
        var seal: PluginSeal?

        init(_ spec: SessionSpec, identity: (String) -> FileIdentity? = { FileIdentity(path: $0) }) {
            manifestPath = spec.plugin.manifestPath
            pluginID = spec.id
            limits = spec.limits
            policy = spec.policy
            owner = spec.plugin.manifest.owner
            manifest = identity(spec.plugin.manifestPath)
            executable = identity(spec.plugin.executablePath)
            seal = spec.seal
        }
    }

    let plugin: DiscoveredPlugin
    let limits: EffectiveLimits
    let policy: SandboxPolicy
    let home: URL?
    /// The current intent's `--verbose` lines (set by each intent that runs on the session).
    var log: (@Sendable (String) -> Void)?
    var id: String { plugin.manifest.id }
    var mode: Mode { limits.mode }
    /// Set by a source that looks sessions up (`PooledSessions`); nil for a one-shot session.
    let key: Key?
    /// Whether the session may stay up for another intent: its source keeps warm processes.
    let keepsWarm: Bool
    let process: PluginProcess
    let connection: PluginConnection
    let scratch: URL
    let cgroup: CgroupRun?
    /// When the launch began: the first intent's deadline counts from here.
    let launchStart: UInt64
    /// Intents run so far (the first one included).
    var intents = 0
    /// Whether another intent may run: the plugin declared `reusable` in its last
    /// handshake, its source keeps warm processes, and nothing has gone wrong.
    var isReusable = false
    /// The plugin's answer to the last `initialize`: whether it takes `session` requests.
    var lastHandshake: InitializeResult?
    /// Set once the session's teardown has run (`end`, `close`).
    private var ended = false

    private init(
        spec: SessionSpec, key: Key?, keepsWarm: Bool, process: PluginProcess, connection: PluginConnection, scratch: URL,
        cgroup: CgroupRun?, launchStart: UInt64
    ) {
        plugin = spec.plugin
        limits = spec.limits
        policy = spec.policy
        home = spec.home
        log = spec.log
        self.key = key
        self.keepsWarm = keepsWarm
        self.process = process
        self.connection = connection
        self.scratch = scratch
        self.cgroup = cgroup
        self.launchStart = launchStart
    }

    /// Whether the process is still there to run an intent: it has not exited
    /// (or been killed) since the last one.
    var isAlive: Bool {
        guard process.exit == nil, process.readEvents() else { return false }
        return process.exit == nil && process.violation == nil
    }

    /// Ends the process by `teardown`'s steps, in order: the one place a session ends
    /// (`Teardown.plan` decides how). At its `.report` step, with the process gone,
    /// `settle` puts the intent's error (or what the wait for the exit saw) in the report,
    /// then the evidence of what ended it goes there (`attribute`), and the exit's CPU and
    /// RSS in its metrics. Once: a session that has ended stays so (nil then). What the
    /// teardown saw.
    @discardableResult
    func end(
        _ teardown: Teardown, during phase: Phase, into report: inout HandleReport,
        settle: (inout HandleReport, TeardownOutcome) -> Void = { _, _ in }
    ) -> TeardownOutcome? {
        run(teardown) { outcome, scratchLeft in
            settle(&report, outcome)
            self.attribute(during: phase, scratchLeft: scratchLeft, into: &report)
            report.metrics = self.exitMetrics(wallMs: 0)
        }
    }

    /// Ends a process kept between intents (its pool lets it go): the end of fd 3, the
    /// exit grace, then whatever is left is killed.
    func close() {
        run(Teardown.plan(.idle, policy: policy)) { _, _ in }
    }

    /// Runs `teardown`'s steps; `.report` calls `report` with what the teardown saw and
    /// the scratch directory left, if any.
    @discardableResult
    private func run(_ teardown: Teardown, report: (TeardownOutcome, String?) -> Void) -> TeardownOutcome? {
        guard !ended else { return nil }
        ended = true
        // The grace is counted once, from the start: writing what is queued and waiting for the exit share it.
        let started = MonotonicClock.now()
        let graceEnd = started + UInt64(teardown.graceMs) * 1_000_000
        var outcome = TeardownOutcome(late: nil, graceMs: teardown.graceMs)
        var scratchLeft: String?
        for step in teardown.steps {
            switch step {
            case .stopReading:
                connection.stopReading()
            case .cancel(let reason):
                connection.notify(Method.cancel, CancelParams(reason: reason).jsonValue)
            case .closeInput:
                connection.flushOutbound(deadline: graceEnd)
                process.closeToPlugin()
            case .waitForExit:
                outcome.late = connection.waitForExit(deadline: graceEnd)
                outcome.waitedMs = MonotonicClock.milliseconds(from: started)
                outcome.exit = process.exit
            case .kill:
                process.kill()
            case .reap:
                process.reap()
            case .removeScratch:
                // By descriptor once the supervisor reported the end (what could not be removed
                // goes in the report); by path whatever happened.
                scratchLeft = process.removeScratch()
                ScratchDirectory.remove(scratch)
            case .report:
                report(outcome, scratchLeft)
            case .removeCgroup:
                cgroup?.remove()
            }
        }
        return outcome
    }

    deinit {
        run(Teardown.plan(.dropped, policy: policy)) { _, _ in }
    }

    // MARK: Metrics

    /// What an ended process used: CPU and peak RSS from its exit, peak private memory sampled.
    func exitMetrics(wallMs: Double) -> RunMetrics {
        var metrics = RunMetrics(wallMs: wallMs)
        if let exit = process.exit {
            // Without rusage (the plugin was killed with its namespace), the last sampled CPU time.
            metrics.cpuMs = exit.cpuMs > 0 ? exit.cpuMs : process.memory.lastCPUMs.rounded(toPlaces: 3)
            if exit.maxRSSBytes > 0 { metrics.peakRSSBytes = exit.maxRSSBytes }
        }
        metrics.peakMemoryBytes = peakMemory()
        return metrics
    }

    /// The host's VmHWM (not getrusage's ru_maxrss, which Linux carries over from the
    /// process that exec'd the host), read at most every 50 ms: a warm intent can take
    /// tens of microseconds.
    func ownPeakRSS() -> Int64? {
        MemorySampler.ownPeakRSS(maxAgeNs: 50_000_000)
    }

    // MARK: Launch

    /// Starts the plugin in its sandbox: the plugin's user and what it may reach, its
    /// scratch directory, the home hidden, the cgroup, the namespaces, seccomp and
    /// rlimits (docs/sandbox.md). Every process the host starts goes through here, warm
    /// ones included. The first intent's deadline counts from here.
    static func launch(_ spec: SessionSpec, key: Key? = nil, keepsWarm: Bool = false) throws(HostError) -> PluginSession {
        let (plugin, limits, policy, home, id, mode) = (spec.plugin, spec.limits, spec.policy, spec.home, spec.id, spec.mode)
        let capabilities = SandboxCapabilities.current
        // What is exec'd, known first: its seccomp filters are built on another thread
        // while the launch is prepared. (Its error, if any, is thrown where it was before.)
        let program = Result { () throws(HostError) in try launchProgram(plugin) }
        if policy.seccomp, case .success(let resolved) = program {
            SeccompFilters.prebuild(path: resolved.executable.path, notify: capabilities.seccompNotify, pidNamespace: policy.namespaces.pid)
        }
        let identity = try PluginCredentials.resolve(policy: policy)
        try identity.checkAccess(
            toExecutable: plugin.executableURL, pluginDirectory: plugin.directory, mountNamespace: policy.namespaces.mount, of: id)
        let scratch = try ScratchDirectory.create(owner: identity)
        if let home { HomeProtection.makeIfMissing(home) }
        let cgroupSupport = CgroupSupport.detectHere(configured: policy.cgroup)
        var cgroup: CgroupRun?
        if case .available(let parent) = cgroupSupport {
            cgroup = CgroupRun(parent: parent, memoryBytes: limits.memoryBytes)
        }
        let sandbox = SandboxSettings(
            policy: policy, limits: limits, capabilities: capabilities, cgroup: cgroup, identity: identity, home: home,
            pluginDirectory: plugin.directory, scratch: scratch, executable: plugin.executableURL)

        let start = MonotonicClock.now()
        let process: PluginProcess
        do throws(HostError) {
            process = try PluginProcess.launch(try launchSpec(spec, scratch: scratch, program: program.get()), sandbox: sandbox)
        } catch {
            cgroup?.remove()
            ScratchDirectory.remove(scratch)
            throw diedLoading(error, spec: spec)
        }
        if let log = spec.log {
            log("[extrun] limits (\(mode.rawValue)): memory \(ByteCount.format(limits.memoryBytes)): \(ByteCount.format(limits.dataBytes)) of private writable memory (RLIMIT_DATA\(cgroup != nil ? " and cgroup memory.max" : "")) and \(ByteCount.format(limits.memoryFilesBytes)) of files in memory, deadline \(limits.deadlineMs) ms from launch\(limits.maxExtendedDeadlineMs > limits.deadlineMs ? " (progress may extend it to \(limits.maxExtendedDeadlineMs) ms)" : ""), stack \(ByteCount.format(limits.stackBytes)) per thread")
            log("[extrun] memory enforcement: RLIMIT_DATA; \(cgroup.map { "cgroup \($0.directory.path)" } ?? cgroupSupport.description)")
            log("[extrun] seccomp: \(policy.seccomp ? (capabilities.seccompNotify ? "on (forbidden calls reported by name)" : "on (forbidden calls kill with SIGSYS)") : "OFF (policy)"); no_new_privs; rlimits: \(policy.openFiles) files, \(policy.processes) processes, \(ByteCount.format(policy.fileSizeBytes)) per file, no core dumps")
            log("[extrun] namespaces: \(SandboxSettings.describe(namespaces: process.activeNamespaces)); scratch directory \(scratch.path)")
            for line in sandbox.describeProtection(active: process.activeNamespaces, home: home) { log("[extrun] \(line)") }
        }
        let connection = PluginConnection(process: process, limits: ConnectionLimits(policy: policy, mode: mode))
        return PluginSession(
            spec: spec, key: key, keepsWarm: keepsWarm, process: process, connection: connection, scratch: scratch, cgroup: cgroup,
            launchStart: start)
    }

    static func launchSpec(_ spec: SessionSpec, scratch: URL, program: (executable: URL, arguments: [String])) -> LaunchSpec {
        var environment: [String: String] = [
            "PATH": Self.pluginSearchPath,
            "HOME": scratch.path,
            "TMPDIR": scratch.path,
            ProtocolChannels.environmentVariable: "\(ProtocolChannels.hostToPlugin),\(ProtocolChannels.pluginToHost)",
            "EXTRUN_MODE": spec.mode.rawValue,
            "EXTRUN_PLUGIN_ID": spec.id,
            "EXTRUN_PLUGIN_DIR": spec.plugin.directory.path,
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
    static func launchProgram(_ plugin: DiscoveredPlugin) throws(HostError) -> (executable: URL, arguments: [String]) {
        let executable = SandboxSettings.resolved(plugin.executableURL.path).map { URL(fileURLWithPath: $0) } ?? plugin.executableURL
        return try Shebang.resolve(executable: executable, arguments: plugin.manifest.arguments, searchPath: Self.pluginSearchPath)
    }

    static let pluginSearchPath = "/usr/local/bin:/usr/bin:/bin"

    // MARK: Evidence

    /// What ended the process, from the host's evidence, goes in the report: a forbidden
    /// system call, the disk quota or the run's memory cap (seen by the supervisor) replace
    /// the error whatever else happened; a crash or a closed channel with the memory cap's
    /// evidence becomes memoryLimitExceeded; `scratchLeft` (the scratch directory that could
    /// not be removed) is added to the error, or is the error.
    func attribute(during phase: Phase, scratchLeft left: String?, into report: inout HandleReport) {
        for call in process.denied { log?("[extrun] \(id) was refused \(call.description)") }
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
            report.error = diskBreach(disk, during: phase)
        } else if let run = process.runMemoryBreach {
            report.response = nil
            report.responseIsSuccess = false
            report.error = runMemoryBreach(run, during: phase)
        } else if report.error?.kind == .pluginCrashed, let exit = process.exit, let breach = memoryBreach(exit: exit, during: phase) {
            report.error = breach
        } else if report.error?.kind == .protocolError, let exit = process.exit, refusedMemory,
            let breach = memoryBreach(exit: exit, during: phase)
        {
            // A plugin dying of its cap closes its channels first; on a busy machine its exit
            // can come after the closed-channel grace, which reads as "closed its channel and
            // kept running". With the kernel's refusal on record, it is the cap.
            report.error = breach
        }
        // An error answer (the Python module prints the handler's traceback first): the end of stderr, as for a crash.
        if let kind = report.error?.kind, kind == .pluginError || kind == .protocolError, report.error?.details["stderr"] == nil {
            let tail = connection.stderr.lastLines(20)
            if !tail.isEmpty { report.error?.details["stderr"] = .array(tail.map { .string($0) }) }
        }
        // Nothing of the run's may outlive it: the report says if its scratch directory could not be removed.
        if let left {
            if report.error == nil {
                report.error = HostError(.internalError, "the scratch directory of \(id)'s run could not be removed: \(left)", details: ["scratchLeft": .string(left)])
            } else {
                report.error?.details["scratchLeft"] = .string(left)
            }
        }
    }

    /// The scratch directory went past its quota (counted by the supervisor).
    func diskBreach(_ disk: DiskBreach, during phase: Phase) -> HostError {
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

    /// The plugin's peak private memory: the larger of what was sampled while it ran and
    /// what it held as it ended, read exactly (docs/sandbox.md, "How the peak is measured").
    func peakMemory() -> Int64 {
        max(
            cgroup?.peakBytes ?? 0, process.memory.peakDataBytes, process.exit?.finalMemory?.privateBytes ?? 0,
            process.runMemoryBreach.flatMap { $0.pageTables ? nil : $0.bytes } ?? 0)
    }

    /// The run's processes together past the memory cap, or their page tables past their
    /// share of it (counted by the supervisor).
    func runMemoryBreach(_ run: RunMemoryBreach, during phase: Phase) -> HostError {
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

    /// Whether the plugin's death is the memory cap's doing, from the evidence the
    /// host has: the cgroup's OOM kills, an allocation failure the plugin's runtime
    /// printed, or memory sampled close to the cap.
    /// Whether an allocation of the plugin's was refused at its cap (seen by the supervisor,
    /// or said by its runtime on stderr).
    var refusedMemory: Bool {
        process.refusedAllocation != nil
            || connection.stderr.lastLines(40).contains(where: { line in MemoryFailureText.matches(line) })
    }

    func memoryBreach(exit: ProcessExit, during phase: Phase) -> HostError? {
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
        let peak = max(peakMemory(), process.refusedAllocation?.inUseBytes ?? 0)
        // From the exact figure as it ended when there is one (the same program, the same
        // verdict): a request the supervisor did not see (under EXTRUN_LARGE_MAPPING_BYTES) is
        // refused only that close to the cap. Otherwise from the sampled peak, at 90%.
        let held = process.exit?.finalMemory.map { Double($0.privateBytes) }
        let near = held != nil ? Double(limits.dataBytes - FinalMemory.unseenRequestBytes) : 0.9 * Double(limits.dataBytes)
        if (held ?? Double(peak)) >= near {
            let figure = held.map { "it held \(ByteCount.format(Int64($0))) of private memory as it ended" } ?? "its private memory reached \(ByteCount.format(peak))"
            evidence.append("\(figure), of the \(ByteCount.format(limits.dataBytes)) the cap leaves it (\(ByteCount.format(limits.memoryFilesBytes)) are for files in memory)")
        }
        let image = phase == .launch ? Self.imageEvidence(plugin: plugin, limits: limits) : nil
        if let image { evidence.append(image.text) }
        guard !evidence.isEmpty else { return nil }
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
            "\(id) went over its memory cap of \(ByteCount.format(limits.memoryBytes)) in \(mode.rawValue) mode during \(phase.rawValue) (\(peak > 0 ? "peak measured \(ByteCount.format(peak)); " : "")\(evidence.joined(separator: "; "))) and \(exit.description); \(Self.memoryAdvice(plugin: plugin, limits: limits, policy: policy))\(image != nil ? ExecutableImage.linkingAdvice : "")",
            details: details)
    }

    /// What to do about a memory cap that is too small.
    static func memoryAdvice(plugin: DiscoveredPlugin, limits: EffectiveLimits, policy: SandboxPolicy) -> String {
        let mode = limits.mode
        let maximum = policy.limits(for: mode).maxMemoryBytes
        var advice = "use less memory"
        if limits.memoryBytes < maximum {
            advice += ", ask for more in the manifest (limits.\(mode.rawValue).memoryBytes, at most \(ByteCount.format(maximum)) under this policy)"
        }
        if mode == .extension && plugin.manifest.modes.contains(.inApp) { advice += ", or run it in in-app mode (--mode in-app)" }
        return advice
    }

    /// The program's own image needs most of the cap before its first instruction (a Swift
    /// plugin linked with --static-swift-stdlib, a C program with a large static array).
    static func imageEvidence(plugin: DiscoveredPlugin, limits: EffectiveLimits) -> (text: String, bytes: Int64)? {
        guard let program = try? launchProgram(plugin).executable.path, let bytes = ExecutableImage.writableBytes(atPath: program),
            Double(bytes) >= 0.9 * Double(limits.dataBytes)
        else { return nil }
        return (
            "the writable segments of \(program) (.data, .bss and the data the loader relocates) take \(ByteCount.format(bytes)) of private memory before it runs, "
                + (bytes >= limits.dataBytes ? "more than" : "most of") + " the \(ByteCount.format(limits.dataBytes)) the cap leaves it",
            bytes
        )
    }

    /// A plugin that died inside execve, before its first instruction, for want of memory to load its image.
    static func diedLoading(_ error: HostError, spec: SessionSpec) -> HostError {
        guard error.details["diedAtStart"] != nil, let image = imageEvidence(plugin: spec.plugin, limits: spec.limits) else { return error }
        let (id, limits, mode) = (spec.id, spec.limits, spec.mode)
        return HostError(
            .memoryLimitExceeded,
            "\(id) could not start under its memory cap of \(ByteCount.format(limits.memoryBytes)) in \(mode.rawValue) mode: \(image.text), so the kernel could not load it (\(error.message)); \(memoryAdvice(plugin: spec.plugin, limits: limits, policy: spec.policy))\(ExecutableImage.linkingAdvice)",
            details: [
                "limitBytes": .int(limits.memoryBytes), "peakBytes": .int(image.bytes), "mode": .string(mode.rawValue),
                "phase": .string(Phase.launch.rawValue), "evidence": .array([.string(image.text)]),
            ])
    }
}

/// Lines runtimes print when an allocation fails (under RLIMIT_DATA, malloc returns NULL).
enum MemoryFailureText {
    static let patterns = [
        "could not allocate memory", "cannot allocate memory", "out of memory", "memoryerror", "bad_alloc",
        "failed to allocate", "allocation failed",
    ]

    static func matches(_ line: String) -> Bool {
        let lower = line.lowercased()
        return patterns.contains { lower.contains($0) }
    }
}

enum PluginEnvironment {
    /// Variables a plugin inherits from the host's environment; everything else is scrubbed.
    static let inherited = ["LANG", "LC_ALL", "LC_CTYPE", "TZ"]
}
