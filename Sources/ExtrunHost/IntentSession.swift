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
    /// The deadline, counted from the start of the plugin's launch.
    public var deadlineMs: Int = 10_000
    /// How long a plugin has after `cancel` before its process group is killed.
    public var cancelGraceMs: Int = 500
    /// How long a plugin has to exit after the host closes the channel.
    public var exitGraceMs: Int = 2_000
    public var connectionLimits = ConnectionLimits()
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
        do {
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
        } catch {
            report.error = error as? HostError ?? HostError(.internalError, "\(error)")
            return report
        }
        report.mode = mode
        var run = PluginRun(plugin: plugin, definition: definition, mode: mode, options: options)
        run.execute(parameters: parameters, into: &report)
        return report
    }
}

/// One plugin process from launch to reaping.
struct PluginRun {
    let plugin: DiscoveredPlugin
    let definition: IntentDefinition
    let mode: Mode
    let options: HandleOptions
    var phase: Phase = .launch
    var start: UInt64 = 0
    var deadline: UInt64 = 0

    init(plugin: DiscoveredPlugin, definition: IntentDefinition, mode: Mode, options: HandleOptions) {
        self.plugin = plugin
        self.definition = definition
        self.mode = mode
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

        start = MonotonicClock.now()
        deadline = start + UInt64(options.deadlineMs) * 1_000_000
        let process: PluginProcess
        do {
            process = try PluginProcess.launch(launchSpec(scratch: scratch))
        } catch {
            report.error = error
            return
        }
        let connection = PluginConnection(process: process, limits: options.connectionLimits)
        if let log = options.log {
            let id = self.id
            connection.onOutputLine = { isStdout, line in log("[\(id) \(isStdout ? "stdout" : "stderr")] \(line)") }
        }
        connection.onNotification = { [log = options.log, id = self.id] method, params in
            if method == Method.log, let params, let entry = try? JSONCoding.decode(LogParams.self, from: params) {
                log?("[\(id) log \(entry.level)] \(entry.message)")
            }
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
            let exitDeadline = MonotonicClock.now() + UInt64(options.exitGraceMs) * 1_000_000
            if let failure = connection.closeAndWait(deadline: exitDeadline) {
                if case .protocolViolation = failure {
                    report.response = nil
                    report.error = error(for: failure, connection: connection)
                } else {
                    options.log?("[extrun] \(id) did not exit within \(options.exitGraceMs) ms after the channel closed; killed")
                }
            }
        } catch let failure as CallFailure {
            if case .deadlineExpired = failure {
                connection.notify(Method.cancel, try? JSONCoding.value(of: CancelParams(reason: "timeout")))
                connection.flushOutbound(deadline: MonotonicClock.now() + UInt64(options.cancelGraceMs) * 1_000_000)
                _ = connection.closeAndWait(deadline: MonotonicClock.now() + UInt64(options.cancelGraceMs) * 1_000_000)
            }
            report.error = error(for: failure, connection: connection)
        } catch let error as HostError {
            report.error = error
        } catch {
            report.error = HostError(.internalError, "\(error)")
        }
        process.finish()
        var metrics = RunMetrics(wallMs: MonotonicClock.milliseconds(from: start), launchMs: launchMs)
        if let exit = process.exit {
            metrics.cpuMs = exit.cpuMs
            metrics.peakMemoryBytes = exit.maxRSSBytes
        }
        report.metrics = metrics
    }

    func launchSpec(scratch: URL) -> LaunchSpec {
        var environment: [String: String] = [
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": scratch.path,
            "TMPDIR": scratch.path,
            ProtocolChannels.environmentVariable: "\(ProtocolChannels.hostToPlugin),\(ProtocolChannels.pluginToHost)",
            "EXTRUN_MODE": mode.rawValue,
            "EXTRUN_PLUGIN_ID": id,
            "EXTRUN_PLUGIN_DIR": plugin.directory.path,
        ]
        let inherited = ProcessInfo.processInfo.environment
        for name in PluginEnvironment.inherited { if let value = inherited[name] { environment[name] = value } }
        return LaunchSpec(
            executable: plugin.executableURL, arguments: plugin.manifest.arguments, environment: environment, workingDirectory: scratch)
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
        switch connection.call(method, params, deadline: { deadline }) {
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
            details["deadlineMs"] = .int(Int64(options.deadlineMs))
            details["elapsedMs"] = .double(elapsed)
            return HostError(
                .timeout,
                "\(id) did not answer \(phase.rawValue) within its deadline of \(options.deadlineMs) ms (counted from launch; \(Int(elapsed)) ms elapsed); it was sent cancel, then its process group was killed",
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
