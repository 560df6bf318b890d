import ExtrunProtocol
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// How to run one intent.
public struct HandleOptions: Sendable {
    /// Overrides the intent file's and the manifest's mode.
    public var mode: Mode?
    /// Accepts `confirmationRequired` resolutions without asking.
    public var assumeYes = false
    /// Overrides the memory cap (within the policy's maximum for the mode).
    public var memoryLimitBytes: Int64?
    /// Overrides the deadline, counted from the plugin's launch (within the policy's maximum).
    public var deadlineMs: Int?
    /// The policy; nil loads `$EXTRUN_HOME/policy.json` (or the defaults).
    public var policy: SandboxPolicy?
    /// Receives `--verbose` lines (plugin output, phases). Nil: quiet.
    public var log: (@Sendable (String) -> Void)?

    public init() {}
}

/// The phases of a plugin run, as reported in `timeout` errors.
public enum Phase: String, Sendable {
    case launch, resolve, confirm, handle
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

    /// Handles one intent. Never throws: every failure is in the report.
    public func handle(_ invocation: IntentInvocation, options: HandleOptions = HandleOptions()) -> HandleReport {
        var report = HandleReport(intent: invocation.intent)
        report.id = invocation.id
        let plugin: DiscoveredPlugin
        let definition: IntentDefinition
        let parameters: [String: JSONValue]
        let mode: Mode
        let policy: SandboxPolicy
        let limits: EffectiveLimits
        do {
            var policySource = "the caller"
            if let given = options.policy {
                policy = given
            } else {
                (policy, policySource) = try SandboxPolicy.load(home: paths.home)
            }
            options.log?("[extrun] policy: \(policySource)")
            (plugin, definition) = try catalog().handler(for: invocation.intent)
            report.plugin = plugin.manifest.id
            parameters = try IntentFileParser.wireParameters(for: invocation, definition: definition)
            mode = options.mode ?? invocation.mode ?? plugin.manifest.defaultMode
            guard plugin.manifest.modes.contains(mode) else {
                throw HostError(
                    .invalidIntent,
                    "\(plugin.manifest.id) does not support \(mode.rawValue) mode (it supports \(plugin.manifest.modes.map(\.rawValue).joined(separator: ", ")))",
                    details: ["field": "mode"])
            }
            limits = try EffectiveLimits.resolve(
                policy: policy, mode: mode, manifest: plugin.manifest.limits, manifestFile: plugin.manifestURL.path,
                memoryOverride: options.memoryLimitBytes, deadlineOverride: options.deadlineMs)
        } catch {
            report.error = error as? HostError ?? HostError(.internalError, "\(error)")
            return report
        }
        report.mode = mode
        report.limits = limits
        var run = PluginRun(plugin: plugin, definition: definition, limits: limits, policy: policy, options: options)
        run.services = StoreServices(home: paths.home, owner: plugin.manifest.owner, log: options.log)
        run.execute(parameters: parameters, into: &report)
        return report
    }
}

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

    init(plugin: DiscoveredPlugin, definition: IntentDefinition, limits: EffectiveLimits, policy: SandboxPolicy, options: HandleOptions) {
        self.plugin = plugin
        self.definition = definition
        self.limits = limits
        self.policy = policy
        self.options = options
    }

    var id: String { plugin.manifest.id }

    mutating func execute(parameters: [String: JSONValue], into report: inout HandleReport) {
        let scratch: URL
        do {
            scratch = try ScratchDirectory.create()
        } catch {
            report.error = error
            return
        }
        defer { ScratchDirectory.remove(scratch) }

        let cgroupSupport = CgroupSupport.detectHere(configured: policy.cgroup)
        if case .available(let parent) = cgroupSupport {
            cgroup = CgroupRun(parent: parent, memoryBytes: limits.memoryBytes)
        }
        defer { cgroup?.remove() }
        let capabilities = SandboxCapabilities.current
        let sandbox = SandboxSettings(policy: policy, limits: limits, capabilities: capabilities, cgroup: cgroup)

        start = MonotonicClock.now()
        deadline.set(start: start, limits: limits)
        let process: PluginProcess
        do throws(HostError) {
            process = try PluginProcess.launch(try launchSpec(scratch: scratch), sandbox: sandbox)
        } catch {
            report.error = error
            return
        }
        if let log = options.log {
            log("[extrun] limits (\(mode.rawValue)): memory \(ByteCount.format(limits.memoryBytes)) of private writable memory (RLIMIT_DATA\(cgroup != nil ? " and cgroup memory.max" : "")), deadline \(limits.deadlineMs) ms from launch\(limits.maxExtendedDeadlineMs > limits.deadlineMs ? " (progress may extend it to \(limits.maxExtendedDeadlineMs) ms)" : ""), stack \(ByteCount.format(limits.stackBytes)) per thread")
            log("[extrun] memory enforcement: RLIMIT_DATA; \(cgroup.map { "cgroup \($0.directory.path)" } ?? cgroupSupport.description)")
            log("[extrun] seccomp: \(policy.seccomp ? (capabilities.seccompNotify ? "on (forbidden calls reported by name)" : "on (forbidden calls kill with SIGSYS)") : "OFF (policy)"); no_new_privs; rlimits: \(policy.openFiles) files, \(policy.processes) processes, \(ByteCount.format(policy.fileSizeBytes)) per file, no core dumps")
            log("[extrun] namespaces: \(SandboxSettings.describe(namespaces: process.activeNamespaces)); scratch directory \(scratch.path)")
        }
        var connectionLimits = ConnectionLimits()
        connectionLimits.maxFrameBytes = policy.maxMessageBytes
        connectionLimits.outputCaptureBytes = policy.outputCaptureBytes
        let connection = PluginConnection(process: process, limits: connectionLimits)
        if let log = options.log {
            let id = self.id
            connection.onOutputLine = { isStdout, line in log("[\(id) \(isStdout ? "stdout" : "stderr")] \(line)") }
        }
        connection.onNotification = { [log = options.log, id = self.id, deadline = self.deadline, mode = self.mode] method, params in
            if method == Method.log, let params, let entry = try? JSONCoding.decode(LogParams.self, from: params) {
                log?("[\(id) log \(entry.level)] \(entry.message)")
            } else if method == Method.progress {
                let progress = params.flatMap { try? JSONCoding.decode(ProgressParams.self, from: $0) }
                if mode == .extension, deadline.extend() {
                    log?("[extrun] \(id) reported progress \(progress?.fraction.map { "\($0)" } ?? "") \(progress?.message ?? ""): deadline now \(deadline.currentMs) ms from launch")
                }
            }
        }
        if let services {
            connection.onRequest = { method, params in services.answer(method, params) }
        }
        var launchMs: Double?
        do {
            try initialize(connection)
            launchMs = MonotonicClock.milliseconds(from: start)
            options.log?("[extrun] \(id) started in \(mode.rawValue) mode, handshake after \(launchMs ?? 0) ms")
            let resolved = try resolveAll(connection, parameters: parameters)
            phase = .confirm
            let confirmation = try intentResponse(connection, Method.confirm, parameters: resolved)
            if confirmation.code == ResponseCode.ready || confirmation.code == ResponseCode.success {
                phase = .handle
                report.response = try intentResponse(connection, Method.handle, parameters: resolved)
            } else {
                report.response = confirmation
            }
            if let response = report.response { report.responseIsSuccess = definition.isSuccessCode(response.code) }
            let exitDeadline = MonotonicClock.now() + UInt64(policy.exitGraceMs) * 1_000_000
            if let failure = connection.closeAndWait(deadline: exitDeadline) {
                if case .protocolViolation = failure {
                    report.response = nil
                    report.error = error(for: failure, connection: connection)
                } else {
                    options.log?("[extrun] \(id) did not exit within \(policy.exitGraceMs) ms after the channel closed; killed")
                }
            }
        } catch let failure as CallFailure {
            if case .deadlineExpired = failure {
                connection.notify(Method.cancel, try? JSONCoding.value(of: CancelParams(reason: "timeout")))
                let grace = MonotonicClock.now() + UInt64(policy.cancelGraceMs) * 1_000_000
                connection.flushOutbound(deadline: grace)
                _ = connection.closeAndWait(deadline: grace)
            }
            report.error = error(for: failure, connection: connection)
        } catch let error as HostError {
            report.error = error
        } catch {
            report.error = HostError(.internalError, "\(error)")
        }
        process.finish()
        if let violation = process.violation {
            // Whatever else happened, the plugin was stopped for a forbidden system call.
            report.response = nil
            report.responseIsSuccess = false
            report.error = HostError(
                .sandboxViolation,
                "\(id) made the forbidden system call \(violation.description) during \(phase.rawValue) and was killed (the sandbox denies it: see docs/sandbox.md)",
                details: ["syscall": .string(violation.syscallName), "syscallNumber": .int(Int64(violation.syscallNumber)), "phase": .string(phase.rawValue)])
        } else if report.error?.kind == .pluginCrashed, let exit = process.exit, let breach = memoryBreach(exit: exit, process: process, connection: connection) {
            report.error = breach
        }
        var metrics = RunMetrics(wallMs: MonotonicClock.milliseconds(from: start), launchMs: launchMs)
        if let exit = process.exit {
            metrics.cpuMs = exit.cpuMs
            metrics.peakRSSBytes = exit.maxRSSBytes
        }
        metrics.peakMemoryBytes = peakMemory(process)
        var own = rusage()
        if getrusage(RUSAGE_SELF.rawValue, &own) == 0 { metrics.hostPeakRSSBytes = Int64(own.ru_maxrss) * 1024 }
        report.metrics = metrics
    }

    func peakMemory(_ process: PluginProcess) -> Int64 {
        max(cgroup?.peakBytes ?? 0, process.memory.peakDataBytes)
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
        let peak = peakMemory(process)
        if Double(peak) >= 0.9 * Double(limits.memoryBytes) {
            evidence.append("its private memory reached \(ByteCount.format(peak)) of the \(ByteCount.format(limits.memoryBytes)) cap")
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

    func launchSpec(scratch: URL) throws(HostError) -> LaunchSpec {
        var environment: [String: String] = [
            "PATH": "/usr/local/bin:/usr/bin:/bin",
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
        let (program, arguments) = try Shebang.resolve(
            executable: plugin.executableURL, arguments: plugin.manifest.arguments, searchPath: environment["PATH"] ?? "")
        return LaunchSpec(executable: program, arguments: arguments, environment: environment, workingDirectory: scratch)
    }

    // MARK: Lifecycle steps

    mutating func initialize(_ connection: PluginConnection) throws {
        phase = .launch
        let params = InitializeParams(hostVersion: Host.version, mode: mode, intent: definition.name)
        let value = try call(connection, Method.initialize, try JSONCoding.value(of: params))
        let result: InitializeResult
        do {
            result = try JSONCoding.decode(InitializeResult.self, from: value)
        } catch {
            throw CallFailure.protocolViolation("its initialize result is malformed: \(JSONCoding.describe(error))")
        }
        if result.protocolVersion != ProtocolVersion.current {
            throw CallFailure.protocolViolation(
                "it speaks protocol version \(result.protocolVersion), this host speaks version \(ProtocolVersion.current)")
        }
        if result.plugin.id != id {
            throw CallFailure.protocolViolation(
                "it introduced itself as '\(result.plugin.id)' but its manifest (\(plugin.manifestURL.path)) says '\(id)'")
        }
        if !result.intents.contains(definition.name) {
            throw CallFailure.protocolViolation(
                "its handshake does not list the intent '\(definition.name)' that its manifest declares (it lists: \(result.intents.joined(separator: ", ")))")
        }
    }

    mutating func resolveAll(_ connection: PluginConnection, parameters: [String: JSONValue]) throws -> [String: JSONValue] {
        phase = .resolve
        var values = parameters
        for parameter in definition.parameters {
            let params = ResolveParams(intent: definition.name, parameter: parameter.name, parameters: values)
            let value = try call(connection, Method.resolve, try JSONCoding.value(of: params))
            let resolution: ResolutionResult
            do {
                resolution = try JSONCoding.decode(ResolutionResult.self, from: value)
            } catch {
                throw CallFailure.protocolViolation(
                    "its resolution of '\(parameter.name)' is malformed: \(JSONCoding.describe(error))")
            }
            try apply(resolution, to: parameter, values: &values)
        }
        return values
    }

    func apply(_ resolution: ResolutionResult, to parameter: ParameterDefinition, values: inout [String: JSONValue]) throws {
        func unresolved(_ message: String, _ extra: [String: JSONValue] = [:]) -> HostError {
            var details = extra
            details["parameter"] = .string(parameter.name)
            details["resolution"] = (try? JSONCoding.value(of: resolution)) ?? .null
            return HostError(.parameterUnresolved, message, details: details)
        }
        let prompt = parameter.prompt ?? "A value is needed for \(parameter.title ?? parameter.name)."
        switch resolution {
        case .success(let value), .confirmationRequired(let value, _):
            if case .confirmationRequired(_, let question) = resolution, !options.assumeYes {
                throw unresolved(
                    "\(parameter.name): \(question ?? "please confirm the value") (run with --yes to accept it)", ["value": value])
            }
            if value.isNull {
                values[parameter.name] = nil
            } else if let problem = ParameterValueCheck.problem(value, for: parameter) {
                throw CallFailure.protocolViolation("it resolved '\(parameter.name)' to a value that does not fit its type: \(problem)")
            } else {
                values[parameter.name] = value
            }
        case .needsValue(let question):
            throw unresolved("\(parameter.name): \(question ?? prompt)", ["prompt": .string(question ?? prompt)])
        case .disambiguation(let options, let question):
            throw unresolved(
                "\(parameter.name): \(question ?? "choose one of the options") (\(options.count) options; pass one in the intent file)",
                ["options": .array(options)])
        case .unsupported(let reason, let message):
            var extra: [String: JSONValue] = [:]
            if let reason { extra["reason"] = .string(reason) }
            throw unresolved("\(parameter.name): \(message ?? "this value is not supported")", extra)
        case .notRequired:
            break
        }
        if parameter.required && values[parameter.name] == nil {
            throw unresolved("\(parameter.name): \(prompt)", ["prompt": .string(prompt)])
        }
    }

    mutating func intentResponse(_ connection: PluginConnection, _ method: String, parameters: [String: JSONValue]) throws -> IntentResponse {
        let params = IntentParams(intent: definition.name, parameters: parameters)
        let value = try call(connection, method, try JSONCoding.value(of: params))
        let response: IntentResponse
        do {
            response = try JSONCoding.decode(IntentResponse.self, from: value)
        } catch {
            throw CallFailure.protocolViolation("its \(method) response is malformed: \(JSONCoding.describe(error))")
        }
        if !definition.isKnownResponseCode(response.code) {
            let custom = definition.responses.map(\.code)
            throw CallFailure.protocolViolation(
                "it answered \(method) with the code '\(response.code)', which is neither a standard code nor one its manifest declares"
                    + (custom.isEmpty ? "" : " (declared: \(custom.joined(separator: ", ")))"))
        }
        return response
    }

    func call(_ connection: PluginConnection, _ method: String, _ params: JSONValue) throws -> JSONValue {
        let deadline = self.deadline
        switch connection.call(method, params, deadline: { deadline.instant }) {
        case .success(.success(let value)):
            return value
        case .success(.failure(let rpcError)):
            let kind: ErrorKind =
                rpcError.code == RPCError.unknownIntent || rpcError.code == RPCError.methodNotFound
                    || rpcError.code == RPCError.invalidParams
                ? .protocolError : .pluginError
            throw HostError(
                kind, "\(id) answered \(method) with an error: \(rpcError.message) (code \(rpcError.code))",
                details: ["phase": .string(phase.rawValue), "code": .int(Int64(rpcError.code))])
        case .failure(let failure):
            throw failure
        }
    }

    // MARK: Reporting

    func error(for failure: CallFailure, connection: PluginConnection) -> HostError {
        let stderrTail = connection.stderr.lastLines(20)
        var details: [String: JSONValue] = ["phase": .string(phase.rawValue)]
        if !stderrTail.isEmpty { details["stderr"] = .array(stderrTail.map { .string($0) }) }
        switch failure {
        case .deadlineExpired:
            let elapsed = MonotonicClock.milliseconds(from: start)
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

/// The run's deadline, which progress reports may push back (in extension mode, up to a maximum).
final class Deadline: @unchecked Sendable {
    private(set) var instant: UInt64 = 0
    private var start: UInt64 = 0
    private var stepNs: UInt64 = 0
    private var maximum: UInt64 = 0

    func set(start: UInt64, limits: EffectiveLimits) {
        self.start = start
        stepNs = UInt64(limits.deadlineMs) * 1_000_000
        instant = start + stepNs
        maximum = start + UInt64(max(limits.maxExtendedDeadlineMs, limits.deadlineMs)) * 1_000_000
    }

    /// Pushes the deadline to a full period from now, within the maximum. Returns whether it moved.
    func extend() -> Bool {
        let wanted = min(MonotonicClock.now() + stepNs, maximum)
        guard wanted > instant else { return false }
        instant = wanted
        return true
    }

    var currentMs: Int { Int((instant - start) / 1_000_000) }
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

enum ScratchDirectory {
    static func create() throws(HostError) -> URL {
        let base = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array("\(base)/extrun-run-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else {
            throw HostError(.internalError, "cannot create a scratch directory under \(base): \(String(cString: strerror(errno)))")
        }
        return URL(fileURLWithPath: String(cString: made), isDirectory: true)
    }

    static func remove(_ url: URL) {
        try? FileManager.default.removeItem(at: url)
    }
}
