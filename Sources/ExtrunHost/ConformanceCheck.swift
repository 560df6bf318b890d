import ExtrunDefinitions
import ExtrunProtocol
import ExtrunStore
import Foundation

/// One check of `extrun plugins check` and what it found.
public struct ConformanceResult: Sendable, Equatable {
    public enum Outcome: String, Sendable {
        case pass, fail, skip
    }
    /// A short name: `manifest`, `files`, `executable`, `signature`, `handshake`, `memory at rest`,
    /// `unknown method`, `end of input`, `cancel`, `intent NAME (MODE)`, `reuse`.
    public var name: String
    public var outcome: Outcome
    /// What was seen, in a line.
    public var summary: String
    /// Each problem (for the manifest: `manifest.json:LINE:COLUMN: path: message`).
    public var problems: [String] = []

    public var json: JSONValue {
        .object([
            "name": .string(name), "outcome": .string(outcome.rawValue), "summary": .string(summary),
            "problems": .array(problems.map { .string($0) }),
        ])
    }
}

/// What `extrun plugins check` found for one plugin folder.
public struct ConformanceReport: Sendable {
    public var directory: String
    public var plugin: String?
    public var version: String?
    /// The mode the protocol checks ran in (extension when the plugin supports it) and its limits.
    public var limits: EffectiveLimits?
    public var results: [ConformanceResult] = []

    public var failed: [ConformanceResult] { results.filter { $0.outcome == .fail } }
    public var passed: Bool { failed.isEmpty }

    public var json: JSONValue {
        var object: [String: JSONValue] = [
            "directory": .string(directory), "passed": .bool(passed), "checks": .array(results.map(\.json)),
            "failed": .array(failed.map { .string($0.name) }),
        ]
        if let plugin { object["plugin"] = .string(plugin) }
        if let version { object["version"] = .string(version) }
        if let limits { object["limits"] = limits.json }
        return .object(object)
    }
}

/// A conformance run of a plugin folder, out of process and in the real sandbox, as the host
/// runs it (docs/plugin-guide.md, "Checking a plugin"), like Apple's tests of an intents
/// extension: the manifest against its schema and the host's rules, the executable reachable
/// by the plugin's user, the signature, the handshake's identity, memory at rest against
/// the mode's cap, an unknown method answered with -32601, exit at the end of fd 3, `cancel`
/// honoured within the cancel grace, each intent run in each mode with values derived from
/// the manifest, and warm reuse (`reusable`, `session`) when the handshake declares it.
///
/// Every process is started by the host's own launch path (`PluginSession.launch`, `Host.handle`,
/// `PluginPool`), with the host's policy and the manifest's limits.
public struct ConformanceCheck {
    public var host: Host
    /// Receives progress lines (`--verbose`).
    public var log: (@Sendable (String) -> Void)?
    /// How long the check waits for an answer to `handle` before it sends `cancel`.
    public var cancelAfterMs = 200
    /// The share of the mode's private memory a plugin may hold at rest (after its handshake).
    public static let memoryAtRestShare = 0.5

    public init(host: Host = Host(), log: (@Sendable (String) -> Void)? = nil) {
        self.host = host
        self.log = log
    }

    public func run(directory: URL) -> ConformanceReport {
        let directory = directory.standardizedFileURL
        var report = ConformanceReport(directory: directory.path)
        let plugin = checkManifest(directory, into: &report)
        checkDefinitions(directory, manifest: plugin?.manifest, into: &report)
        guard let plugin else { return report }
        report.plugin = plugin.manifest.id
        report.version = plugin.manifest.version
        checkFiles(plugin, into: &report)
        guard checkExecutable(plugin, into: &report), checkSignature(plugin, into: &report) else { return report }

        let policy: SandboxPolicy
        let limits: EffectiveLimits
        do throws(HostError) {
            policy = try SandboxPolicy.load(home: host.paths.home).0
            limits = try EffectiveLimits.resolve(
                policy: policy, mode: plugin.manifest.defaultMode, manifest: plugin.manifest.limits, manifestFile: plugin.manifestPath,
                memoryOverride: nil, deadlineOverride: nil)
        } catch {
            report.results.append(ConformanceResult(name: "limits", outcome: .fail, summary: error.message))
            return report
        }
        report.limits = limits
        let handshake = checkProtocol(plugin, policy: policy, limits: limits, into: &report)
        checkCancel(plugin, policy: policy, limits: limits, into: &report)
        let ran = checkIntents(plugin, into: &report)
        checkReuse(plugin, handshake: handshake, ranToResponse: ran, into: &report)
        return report
    }

    // MARK: Files

    /// The manifest against docs/schemas/manifest.schema.json (with lines and columns) and
    /// against the host's own rules. The plugin, when the host can load it.
    func checkManifest(_ directory: URL, into report: inout ConformanceReport) -> DiscoveredPlugin? {
        let path = directory.appendingPathComponent("manifest.json").path
        if let problem = PluginInstaller.manifestLinkProblem(in: directory) {
            report.results.append(ConformanceResult(name: "manifest", outcome: .fail, summary: problem.message))
            return nil
        }
        guard let data = FileManager.default.contents(atPath: path) else {
            report.results.append(
                ConformanceResult(name: "manifest", outcome: .fail, summary: "\(path) cannot be read: a plugin folder holds a manifest.json"))
            return nil
        }
        var problems: [String] = []
        do {
            let document = try JSONNodeParser.parse(data)
            let schema = try JSONSchema(data: Data(BundledSchema.manifest.text.utf8))
            problems += schema.validate(document).map { "manifest.json:\($0)" }
        } catch let error as JSONSyntaxError {
            problems.append("manifest.json:\(error.location): not valid JSON: \(error.message)")
        } catch {
            problems.append("manifest.json: \(error)")
        }
        var plugin: DiscoveredPlugin?
        do throws(HostError) {
            plugin = try PluginCatalog.plugin(in: directory)
        } catch {
            let known = Set(problems)
            let message = error.message.replacingOccurrences(of: path + ": ", with: "")
            if !known.contains(where: { $0.contains("not valid JSON") }) { problems.append("the host cannot load it: \(message)") }
        }
        report.results.append(
            ConformanceResult(
                name: "manifest", outcome: problems.isEmpty ? .pass : .fail,
                summary: problems.isEmpty
                    ? "fits docs/schemas/\(BundledSchema.manifest.fileName) and the host's rules"
                    : "\(problems.count) problem\(problems.count == 1 ? "" : "s") (docs/plugin-guide.md, section 2)",
                problems: problems))
        return plugin
    }

    /// A definition file beside the manifest (`intents.json`, docs/definitions.md): it fits
    /// docs/schemas/definitions.schema.json and extrun-intentgen's checks, and the manifest is
    /// the one it generates (a manifest left from an older definition would disagree with the code).
    func checkDefinitions(_ directory: URL, manifest: PluginManifest?, into report: inout ConformanceReport) {
        let path = directory.appendingPathComponent("intents.json").path
        guard let data = FileManager.default.contents(atPath: path) else { return }
        var problems: [String] = []
        do {
            let document = try JSONNodeParser.parse(data)
            let schema = try JSONSchema(data: Data(BundledSchema.definitions.text.utf8))
            problems += schema.validate(document).map { "intents.json:\($0)" }
        } catch let error as JSONSyntaxError {
            problems.append("intents.json:\(error.location): not valid JSON: \(error.message)")
        } catch {
            problems.append("intents.json: \(error)")
        }
        var generated: PluginManifest?
        do throws(DefinitionError) {
            generated = try DefinitionFile.parse(data, path: "intents.json").manifest(executable: manifest?.executable)
        } catch {
            // The reader's own findings, where the schema did not already point.
            let seen = Set(problems.compactMap { $0.split(separator: ":").prefix(3).joined(separator: ":") })
            for diagnostic in error.diagnostics {
                let position = diagnostic.location.map { "intents.json:\($0.line):\($0.column)" } ?? "intents.json"
                if !seen.contains(position) || diagnostic.location == nil {
                    problems.append("\(position): \(diagnostic.path.isEmpty ? "" : "\(diagnostic.path): ")\(diagnostic.message)")
                }
            }
        }
        if problems.isEmpty, let generated, let manifest, generated != manifest {
            problems.append(
                "manifest.json is not the manifest intents.json generates: generate it again (extrun-intentgen manifest intents.json -o manifest.json)")
        }
        report.results.append(
            ConformanceResult(
                name: "intents.json", outcome: problems.isEmpty ? .pass : .fail,
                summary: problems.isEmpty
                    ? "fits docs/schemas/\(BundledSchema.definitions.fileName) and extrun-intentgen's checks, and generates this manifest"
                    : "\(problems.count) problem\(problems.count == 1 ? "" : "s") (docs/definitions.md)",
                problems: problems))
    }

    /// The folder's files as `extrun plugins install` takes them: what install would refuse
    /// (a dangling link, a link leading out, a named pipe...), found by install's own walk and
    /// said in its words. A link to nothing fails the check (the plugin is broken where it is);
    /// the rest is listed under a pass, since the plugin runs from where it is (the staged
    /// examples' executables are links into .build) but cannot be installed as it is. The
    /// other checks still run: their failures often follow from a broken file.
    func checkFiles(_ plugin: DiscoveredPlugin, into report: inout ConformanceReport) {
        let (problems, broken, entries) = PluginInstaller.layoutProblems(of: plugin)
        let summary: String
        if problems.isEmpty {
            summary = "\(entries) files and folders, as install takes them"
        } else if !broken.isEmpty {
            summary = "\(broken.count) broken (a link to nothing)\(problems.count > broken.count ? ", and \(problems.count - broken.count) more that install would refuse" : "") (docs/plugin-guide.md, section 6.2)"
        } else {
            summary = "it runs from here, but extrun plugins install would refuse it: \(problems.count) problem\(problems.count == 1 ? "" : "s") (docs/plugin-guide.md, section 6.2)"
        }
        report.results.append(ConformanceResult(name: "files", outcome: broken.isEmpty ? .pass : .fail, summary: summary, problems: problems))
    }

    /// The executable exists, is executable, and the plugin's user reaches it as the sandbox will.
    func checkExecutable(_ plugin: DiscoveredPlugin, into report: inout ConformanceReport) -> Bool {
        if let problem = plugin.problem {
            report.results.append(ConformanceResult(name: "executable", outcome: .fail, summary: problem))
            return false
        }
        do throws(HostError) {
            let policy = try SandboxPolicy.load(home: host.paths.home).0
            let identity = try PluginCredentials.resolve(policy: policy)
            try identity.checkAccess(
                toExecutable: plugin.executableURL, pluginDirectory: plugin.directory, mountNamespace: policy.namespaces.mount, of: plugin.manifest.id)
            let (program, _) = try Shebang.resolve(
                executable: URL(fileURLWithPath: SandboxSettings.resolved(plugin.executablePath) ?? plugin.executablePath),
                arguments: plugin.manifest.arguments, searchPath: PluginSession.pluginSearchPath)
            let user = identity.name ?? "uid \(identity.uid)"
            report.results.append(
                ConformanceResult(
                    name: "executable", outcome: .pass,
                    summary: "\(plugin.manifest.executable), run as \(program.path) by \(user)\(identity.dropsPrivileges ? " (the plugin user)" : " (the host's own user)")"))
            return true
        } catch {
            report.results.append(ConformanceResult(name: "executable", outcome: .fail, summary: error.message))
            return false
        }
    }

    /// A broken signature stops the plugin from starting; unsigned and untrusted plugins run.
    func checkSignature(_ plugin: DiscoveredPlugin, into report: inout ConformanceReport) -> Bool {
        let signed = FileManager.default.fileExists(atPath: plugin.directory.appendingPathComponent(PluginSignature.fileName).path)
        var store: Store?
        var storeProblem: String?
        if signed {
            do { store = try Store(home: host.paths.home) } catch { storeProblem = "the store cannot be opened: \(error)" }
        }
        let status = host.signatureStatus(of: plugin, store: store, storeProblem: storeProblem)
        switch status {
        case .broken(_, let message):
            report.results.append(ConformanceResult(name: "signature", outcome: .fail, summary: message))
            return false
        case .unsigned:
            report.results.append(
                ConformanceResult(
                    name: "signature", outcome: .pass,
                    summary: "unsigned: it runs, but gets none of \(plugin.manifest.owner)'s data (extrun plugins sign)"))
        case .verified, .untrusted:
            report.results.append(ConformanceResult(name: "signature", outcome: .pass, summary: status.summary))
        }
        return true
    }

    // MARK: Processes

    /// An intent's lifecycle with the plugin, bound to the host's home, for its first intent (the handshake names it).
    func lifecycle(_ plugin: DiscoveredPlugin, policy: SandboxPolicy, limits: EffectiveLimits) throws(HostError) -> IntentLifecycle {
        guard let definition = plugin.manifest.intents.first else {
            throw HostError(.configurationError, "\(plugin.manifestPath): the plugin declares no intent")
        }
        var options = HandleOptions()
        options.log = log
        options.donate = false
        options.appLaunch = false
        return try host.lifecycle(plugin, definition: definition, limits: limits, policy: policy, options: options)
    }

    /// Starts the plugin as every session starts, runs `body` with it, and ends it as
    /// `body` says (`Teardown.plan`; after a failure, at a deadline with `cancel`, else
    /// killed at once); `ended` judges what the teardown saw when `body` returned. The
    /// host's own account of what went wrong (a violation, the memory cap, a crash), if anything did.
    func probe(
        _ plugin: DiscoveredPlugin, policy: SandboxPolicy, limits: EffectiveLimits,
        _ body: (inout IntentLifecycle, PluginSession) throws(LifecycleFailure) -> Teardown.Ending,
        ended: (TeardownOutcome, IntentLifecycle, PluginSession) -> Void = { _, _, _ in }
    ) -> HostError? {
        var report = HandleReport(intent: plugin.manifest.intents.first?.name ?? "")
        let session: PluginSession
        var run: IntentLifecycle
        do throws(HostError) {
            run = try lifecycle(plugin, policy: policy, limits: limits)
            session = try PluginSession.launch(run.sessionSpec)
        } catch {
            return error
        }
        run.start = session.launchStart
        run.deadline.set(start: run.start, limits: limits)
        run.bind(session.connection)
        var failure: LifecycleFailure?
        var ending = Teardown.Ending.killed
        do throws(LifecycleFailure) {
            ending = try body(&run, session)
        } catch {
            failure = error
        }
        let outcome = run.end(session, after: failure, otherwise: ending, into: &report)
        if failure == nil, let outcome { ended(outcome, run, session) }
        return report.error
    }

    /// One process: the handshake (identity, intents), memory at rest, an unknown method,
    /// and the exit at the end of fd 3. The handshake, when it came.
    func checkProtocol(
        _ plugin: DiscoveredPlugin, policy: SandboxPolicy, limits: EffectiveLimits, into report: inout ConformanceReport
    ) -> InitializeResult? {
        var handshake: InitializeResult?
        var results: [ConformanceResult] = []
        let unknownMethod = "extrun.check.noSuchMethod"
        let failure = probe(plugin, policy: policy, limits: limits) { (run: inout IntentLifecycle, launched: PluginSession) throws(LifecycleFailure) in
            let connection = launched.connection
            let result = try run.initialize(connection)
            handshake = result
            let launchMs = MonotonicClock.milliseconds(from: run.start)
            let missing = plugin.manifest.intents.map(\.name).filter { !result.intents.contains($0) }
            let declared = [result.reusable == true ? "reusable" : nil, result.session == true ? "session" : nil].compactMap { $0 }
            results.append(
                ConformanceResult(
                    name: "handshake", outcome: missing.isEmpty ? .pass : .fail,
                    summary: missing.isEmpty
                        ? "introduced itself as \(result.plugin.id) \(result.plugin.version) in \(Int(launchMs)) ms, listing every intent of its manifest; declares \(declared.isEmpty ? "no warm reuse" : declared.joined(separator: " and "))"
                        : "its handshake does not list the intents \(missing.joined(separator: ", ")) that its manifest declares (it lists: \(result.intents.joined(separator: ", ")))"))

            launched.process.memory.sample()
            let atRest = launched.process.memory.peakDataBytes
            let allowed = Int64(Double(limits.dataBytes) * Self.memoryAtRestShare)
            let share = limits.dataBytes > 0 ? Int(Double(atRest) * 100 / Double(limits.dataBytes)) : 0
            results.append(
                ConformanceResult(
                    name: "memory at rest", outcome: atRest <= allowed ? .pass : .fail,
                    summary: atRest <= allowed
                        ? "\(ByteCount.format(atRest)) of private memory after the handshake, \(share)% of the \(ByteCount.format(limits.dataBytes)) its \(limits.mode.rawValue)-mode cap of \(ByteCount.format(limits.memoryBytes)) leaves it"
                        : "\(ByteCount.format(atRest)) of private memory after the handshake, \(share)% of the \(ByteCount.format(limits.dataBytes)) its \(limits.mode.rawValue)-mode cap of \(ByteCount.format(limits.memoryBytes)) leaves it: over half before any intent's data (load less at start, or ask for more in the manifest's limits.\(limits.mode.rawValue).memoryBytes)"))

            switch connection.call(unknownMethod, .object([:]), deadline: { run.deadline.instant }) {
            case .success(.failure(let error)) where error.code == RPCError.methodNotFound:
                results.append(ConformanceResult(name: "unknown method", outcome: .pass, summary: "\(unknownMethod) answered with -32601 (method not found)"))
            case .success(.failure(let error)):
                results.append(
                    ConformanceResult(
                        name: "unknown method", outcome: .fail,
                        summary: "\(unknownMethod) answered with the error \(error.code) (\(error.message)), not -32601 (method not found): docs/protocol.md §5.6"))
            case .success(.success(let value)):
                results.append(
                    ConformanceResult(
                        name: "unknown method", outcome: .fail,
                        summary: "\(unknownMethod) answered with a result (\(String(decoding: JSONWriter.bytes(value), as: UTF8.self).prefix(80))) instead of the error -32601: docs/protocol.md §5.6"))
            case .failure(let failure):
                let error = run.error(for: failure, connection: connection)
                results.append(ConformanceResult(name: "unknown method", outcome: .fail, summary: "\(unknownMethod): \(error.message)"))
                throw .call(failure)
            }

            // The end of fd 3 and the exit grace, as after an intent's answer: judged below.
            return .answered
        } ended: { outcome, run, launched in
            let grace = outcome.graceMs
            switch (outcome.late, outcome.exit) {
            case (nil, let exit?) where exit.isClean:
                results.append(
                    ConformanceResult(name: "end of input", outcome: .pass, summary: "exited with 0 \(Int(outcome.waitedMs ?? 0)) ms after the end of fd 3"))
            case (nil, let exit?):
                results.append(
                    ConformanceResult(
                        name: "end of input", outcome: .fail,
                        summary: "it \(exit.description) at the end of fd 3; a plugin exits with 0 there (docs/protocol.md §12)"))
            case (.some(.deadlineExpired), _), (nil, nil):
                results.append(
                    ConformanceResult(
                        name: "end of input", outcome: .fail,
                        summary: "still running \(grace) ms after the end of fd 3 (the exit grace); it was killed. A plugin exits when fd 3 ends (docs/protocol.md §12)"))
            case (.some(let failure), _):
                results.append(
                    ConformanceResult(name: "end of input", outcome: .fail, summary: run.error(for: failure, connection: launched.connection).message))
            }
        }
        if let failure {
            let name = handshake == nil ? "handshake" : (results.contains { $0.name == "unknown method" } ? "end of input" : "unknown method")
            if !results.contains(where: { $0.name == name && $0.outcome == .fail }) {
                results.removeAll { $0.name == name }
                results.append(ConformanceResult(name: name, outcome: .fail, summary: "\(failure.kind.rawValue): \(failure.message)"))
            }
        }
        report.results += results
        return handshake
    }

    /// `handle` with values from the manifest; if it has not answered after `cancelAfterMs`,
    /// `cancel` and the end of fd 3, as at a deadline: the plugin must be gone within the
    /// policy's cancel grace (500 ms by default).
    func checkCancel(_ plugin: DiscoveredPlugin, policy: SandboxPolicy, limits: EffectiveLimits, into report: inout ConformanceReport) {
        guard let intent = plugin.manifest.intents.first else { return }
        var result: ConformanceResult?
        var before = ""
        let failure = probe(plugin, policy: policy, limits: limits) { (run: inout IntentLifecycle, launched: PluginSession) throws(LifecycleFailure) in
            let connection = launched.connection
            try run.initialize(connection)
            let parameters: [String: JSONValue]
            do throws(HostError) {
                parameters = try IntentFileParser.wireParameters(for: Self.invocation(for: intent, mode: limits.mode), definition: intent)
            } catch {
                result = ConformanceResult(name: "cancel", outcome: .skip, summary: "no values could be derived for \(intent.name): \(error.message)")
                return .killed
            }
            let sent = MonotonicClock.now()
            let wait = sent + UInt64(cancelAfterMs) * 1_000_000
            let params = IntentParams(intent: intent.name, parameters: parameters).jsonValue
            switch connection.call(Method.handle, params, deadline: { min(wait, run.deadline.instant) }) {
            case .success: before = "it answered handle of \(intent.name) within \(cancelAfterMs) ms, then"
            case .failure(.deadlineExpired): before = "it was still handling \(intent.name) after \(cancelAfterMs) ms;"
            case .failure(let failure): throw .call(failure)
            }
            // `cancel` and the end of fd 3, as at a deadline: judged below.
            return .stopped(reason: "timeout")
        } ended: { outcome, _, _ in
            guard result == nil else { return }
            let grace = outcome.graceMs
            if outcome.exit != nil, let goneMs = outcome.waitedMs, goneMs <= Double(grace) {
                result = ConformanceResult(
                    name: "cancel", outcome: .pass, summary: "\(before) it exited \(Int(goneMs)) ms after cancel and the end of fd 3 (allowed: \(grace) ms)")
            } else {
                result = ConformanceResult(
                    name: "cancel", outcome: .fail,
                    summary: "\(before) it was still running \(grace) ms after cancel and the end of fd 3, and was killed: stop the work on cancel and exit when fd 3 ends (docs/protocol.md §12)")
            }
        }
        if let failure, result?.outcome != .fail {
            result = ConformanceResult(name: "cancel", outcome: .fail, summary: "\(failure.kind.rawValue): \(failure.message)")
        }
        if let result { report.results.append(result) }
    }

    /// A host for the plugin folder alone: the checks find it as `extrun handle` would.
    func hostForPlugin(_ plugin: DiscoveredPlugin) -> Host {
        Host(paths: HostPaths(home: host.paths.home, pluginSearchPath: [plugin.directory]))
    }

    func handleOptions(mode: Mode) -> HandleOptions {
        var options = HandleOptions()
        options.mode = mode
        options.assumeYes = true
        options.appLaunch = false
        options.donate = false
        options.log = log
        return options
    }

    /// Each intent in each mode, with values derived from the manifest, through `Host.handle`.
    /// What a plugin may answer (any response, a value it asks for, an error of its own) passes;
    /// what breaks the protocol or the sandbox fails. The intents that ran to a response.
    func checkIntents(_ plugin: DiscoveredPlugin, into report: inout ConformanceReport) -> [IntentDefinition] {
        let host = hostForPlugin(plugin)
        var ranToResponse: [IntentDefinition] = []
        for intent in plugin.manifest.intents {
            for mode in plugin.manifest.modes {
                let name = "intent \(intent.name) (\(mode.rawValue))"
                let result = host.handle(derivedInvocation(for: intent, mode: mode, host: host), options: handleOptions(mode: mode))
                if let error = result.error {
                    switch error.kind {
                    case .invalidIntent:
                        report.results.append(
                            ConformanceResult(name: name, outcome: .skip, summary: "no values the host accepts could be derived: \(error.message)"))
                    case .parameterUnresolved, .confirmationDeclined, .pluginError:
                        report.results.append(ConformanceResult(name: name, outcome: .pass, summary: "answered within the protocol: \(error.kind.rawValue): \(error.message)"))
                    default:
                        report.results.append(ConformanceResult(name: name, outcome: .fail, summary: "\(error.kind.rawValue): \(error.message)"))
                    }
                } else {
                    let code = result.response?.code ?? "?"
                    let wall = result.metrics.map { ", \(Int($0.wallMs)) ms" } ?? ""
                    let peak = result.metrics?.peakMemoryBytes.map { ", peak \(ByteCount.format($0))" } ?? ""
                    report.results.append(ConformanceResult(name: name, outcome: .pass, summary: "answered \(code)\(wall)\(peak)"))
                    if mode == plugin.manifest.defaultMode && !ranToResponse.contains(intent) { ranToResponse.append(intent) }
                }
            }
        }
        return ranToResponse
    }

    /// A plugin that declares `reusable` must take a second session in its process; one that
    /// declares `session` must answer it by the rule (the host's pool walks and checks it).
    func checkReuse(_ plugin: DiscoveredPlugin, handshake: InitializeResult?, ranToResponse: [IntentDefinition], into report: inout ConformanceReport) {
        guard let handshake else { return }
        guard handshake.reusable == true else {
            report.results.append(ConformanceResult(name: "reuse", outcome: .skip, summary: "not declared: every intent gets a new process"))
            return
        }
        guard let intent = ranToResponse.first else {
            report.results.append(
                ConformanceResult(name: "reuse", outcome: .skip, summary: "declared, but no intent ran to a response with the derived values"))
            return
        }
        let pool = PluginPool(host: hostForPlugin(plugin), maxIdleProcesses: 1)
        defer { pool.close() }
        let mode = plugin.manifest.defaultMode
        let invocation = derivedInvocation(for: intent, mode: mode, host: hostForPlugin(plugin))
        var reports: [HandleReport] = []
        for _ in 0..<3 { reports.append(pool.handle(invocation, options: handleOptions(mode: mode))) }
        let declared = handshake.session == true ? "reusable and session" : "reusable"
        if let failed = reports.first(where: { $0.error != nil }), let error = failed.error {
            report.results.append(
                ConformanceResult(
                    name: "reuse", outcome: .fail,
                    summary: "declares \(declared); \(intent.name) run again in the same process: \(error.kind.rawValue): \(error.message)"))
        } else if pool.reuses < 2 {
            report.results.append(
                ConformanceResult(
                    name: "reuse", outcome: .fail,
                    summary: "declares \(declared), but took \(pool.reuses) of 2 later sessions in its process (\(pool.launches) launches for 3 intents): a reusable plugin keeps running after a session and answers the next initialize (docs/protocol.md §15)"))
        } else {
            report.results.append(
                ConformanceResult(
                    name: "reuse", outcome: .pass,
                    summary: "declares \(declared): \(intent.name) ran 3 times in 1 process\(handshake.session == true ? ", the later ones each as one session request" : "")"))
        }
    }

    // MARK: Values

    /// `invocation(for:mode:)`, with the plugin's own first option for each parameter with
    /// dynamic options (asked as `extrun options` asks): a custom value it will recognize.
    func derivedInvocation(for intent: IntentDefinition, mode: Mode, host: Host) -> IntentInvocation {
        var invocation = Self.invocation(for: intent, mode: mode)
        for parameter in intent.parameters where parameter.dynamicOptions && parameter.default == nil {
            let answer = host.options(invocation, parameter: parameter.name, search: nil, options: handleOptions(mode: mode))
            if let value = answer.options?.sections.first(where: { !$0.items.isEmpty })?.items.first?.value {
                invocation.parameters[parameter.name] = parameter.multiple ? .array([value]) : value
            }
        }
        return invocation
    }

    /// An invocation of `intent` with a value for each parameter from its manifest entry: none
    /// where it has a default (the host fills it in), the first case of an enum, and a plain
    /// value of the type otherwise.
    static func invocation(for intent: IntentDefinition, mode: Mode) -> IntentInvocation {
        var parameters: [String: JSONValue] = [:]
        for parameter in intent.parameters where parameter.default == nil {
            guard let value = sampleValue(for: parameter) else { continue }
            parameters[parameter.name] = parameter.multiple ? .array([value]) : value
        }
        return IntentInvocation(intent: intent.name, mode: mode, parameters: parameters, source: "extrun plugins check (\(intent.name))")
    }

    static func sampleValue(for parameter: ParameterDefinition) -> JSONValue? {
        switch parameter.type {
        case .string: return .string("extrun check")
        case .integer: return .int(1)
        case .number: return .double(1.5)
        case .boolean: return .bool(true)
        case .date: return .string("2026-01-01")
        case .enum: return parameter.values?.first.map { .string($0) }
        case .file:
            let images = (parameter.allowedTypes ?? []).contains { $0.contains("image") }
            return images
                ? .object(["filename": "check.png", "data": .string(Self.onePixelPNG)])
                : .object(["filename": "check.txt", "text": "extrun plugins check\n"])
        case .custom: return .object(["identifier": "check", "title": "Check"])
        }
    }

    static let onePixelPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
}
