import ExtrunHost
import ExtrunMCP
import ExtrunProtocol
import Foundation
import Logging

/// serve.json's `mcp` (docs/mcp.md, "Over HTTP"): the MCP endpoint at `/mcp`, on by default.
///
///     "mcp": {"enabled": true, "requestStateKeyFile": "/etc/extrun/mcp-request-state.key", "requestStateLifetimeSeconds": 300}
///
/// Every host of a fleet names the same key file (or a copy of it): a 2026-07-28 call's
/// `input_required` rounds then continue on any of them. Read at start; SIGHUP keeps it.
public struct MCPSettings: Sendable, Equatable {
    public var enabled = true
    /// nil: `$EXTRUN_HOME/mcp-request-state.key`, made (0600) when absent.
    public var requestStateKeyFile: String?
    public var requestStateLifetimeSeconds = 300.0

    public init() {}

    static func parse(_ value: JSONValue, source: String) throws(HostError) -> MCPSettings {
        func fail(_ field: String, _ message: String) -> HostError {
            HostError(.configurationError, "\(source): \(field): \(message)", details: ["file": .string(source), "field": .string(field)])
        }
        let fields = ["enabled", "requestStateKeyFile", "requestStateLifetimeSeconds"]
        guard case .object(let object) = value else {
            throw fail("mcp", "expected {\"enabled\": true, \"requestStateKeyFile\": PATH, \"requestStateLifetimeSeconds\": S} (each optional)")
        }
        if let unknown = object.keys.sorted().first(where: { !fields.contains($0) }) {
            throw fail("mcp.\(unknown)", "unknown field (the fields: \(fields.joined(separator: ", ")))")
        }
        var settings = MCPSettings()
        if let field = object["enabled"] {
            guard case .bool(let enabled) = field else { throw fail("mcp.enabled", "expected true or false; got \(field)") }
            settings.enabled = enabled
        }
        if let field = object["requestStateKeyFile"] {
            guard var path = field.stringValue, !path.isEmpty else { throw fail("mcp.requestStateKeyFile", "expected the key file's path; got \(field)") }
            if !path.hasPrefix("/") { path = URL(fileURLWithPath: source).deletingLastPathComponent().appendingPathComponent(path).path }
            settings.requestStateKeyFile = path
        }
        if let field = object["requestStateLifetimeSeconds"] {
            guard let seconds = field.doubleValue, (1...86_400).contains(seconds) else {
                throw fail("mcp.requestStateLifetimeSeconds", "expected seconds from 1 to 86400; got \(field)")
            }
            settings.requestStateLifetimeSeconds = seconds
        }
        return settings
    }
}

/// The MCP dispatcher behind serve's `/mcp`: the engine's `IntentService` (one pool, one
/// admission with its per-uid shares for `/v1` and `/mcp` alike), and the engine's gate
/// (rate limits, access rules, audit log) asked for every `tools/call`.
enum ServeMCP {
    static func dispatcher(engine: ServeEngine, settings: MCPSettings) throws(HostError) -> MCPDispatcher? {
        guard settings.enabled else { return nil }
        var configuration = MCPDispatcher.Configuration()
        configuration.requestStateKeyFile = settings.requestStateKeyFile.map { URL(fileURLWithPath: $0) }
        configuration.requestStateLifetimeSeconds = settings.requestStateLifetimeSeconds
        let logger = engine.logger
        configuration.log = { logger.debug("mcp: \($0)") }
        let gate = engine.gate
        let metrics = engine.metrics
        let refusals = engine.refusals
        configuration.authorizeTool = { access in
            guard let principal = Self.principal(access, gate: gate) else {
                let error = HostError(.notPermitted, "the caller's principal '\(access.principal.prefix(200))' is none this service knows; nothing ran")
                Self.auditRefusal(gate, access: access, error: error, status: 403)
                return MCPToolRefusal(code: Self.refusedCode, message: error.message, data: Self.data(error, tool: access.tool), status: 403)
            }
            if let limited = gate.checkRate(principal) {
                metrics.breach("rateLimit")
                refusals.refused(principal.name, reason: "rateLimit", message: "refused: \(limited.error.message)", metadata: ["call": "mcp tools/call"])
                Self.auditRefusal(gate, access: access, error: limited.error, status: 429)
                return MCPToolRefusal(
                    code: Self.refusedCode, message: limited.error.message, data: Self.data(limited.error, tool: access.tool), status: 429,
                    headers: [("retry-after", String(limited.retryAfterSeconds))])
            }
            if let refused = gate.authorize(principal, intent: access.intent, plugin: access.plugin) {
                Self.auditRefusal(gate, access: access, error: refused.error, status: 403)
                // A caller that a token with another scope would let in is told which (a step-up challenge, as on /v1).
                let challenge = gate.insufficientScopeChallenge(refused, host: nil)
                return MCPToolRefusal(
                    code: Self.refusedCode, message: refused.error.message, data: Self.data(refused.error, tool: access.tool), status: 403,
                    headers: challenge.map { [("www-authenticate", $0)] } ?? [])
            }
            return nil
        }
        configuration.showsTool = { access in
            guard let principal = Self.principal(access, gate: gate) else { return false }
            return gate.authorize(principal, intent: access.intent, plugin: access.plugin) == nil
        }
        configuration.callFinished = { record in
            // A refusal of authorizeTool's was audited there, with its reason and status.
            if record.errorKind == "refused" { return }
            let outcome: String
            if record.inputRequired {
                outcome = "inputRequired"
            } else if let code = record.responseCode {
                outcome = code
            } else {
                outcome = record.errorKind == "refused" ? "refused" : "error"
            }
            gate.audit(
                AuditRecord(
                    principal: record.principal, transport: "mcp", call: "tools/call", intent: record.intent, plugin: record.plugin, outcome: outcome,
                    error: record.errorKind, status: 200, durationMs: Double(record.durationMs), run: record.runID))
        }
        do {
            return try MCPDispatcher(host: engine.host, service: engine.service, configuration: configuration)
        } catch {
            throw HostError(.configurationError, "mcp: \(error.description)", details: ["field": "mcp.requestStateKeyFile"])
        }
    }

    /// A refusal's JSON-RPC code: a server error of the implementation's range (-32000 to
    /// -32099), the same for an access rule and a rate limit; `data.kind` and
    /// `data.reason` tell them apart.
    static let refusedCode = -32003

    /// The audit line of a call refused before it ran: its reason (`rateLimit`, `access`) and status, as /v1's.
    static func auditRefusal(_ gate: ServeGate, access: MCPToolAccess, error: HostError, status: Int) {
        gate.audit(
            AuditRecord(
                principal: access.principal, transport: "mcp", call: "tools/call", intent: access.intent, plugin: access.plugin, outcome: "refused",
                error: error.kind.rawValue, reason: error.details["reason"]?.stringValue, status: status, durationMs: 0))
    }

    static func data(_ error: HostError, tool: String) -> JSONValue {
        var data = error.json.objectValue ?? [:]
        data["tool"] = .string(tool)
        return .object(data)
    }

    /// The caller behind a dispatcher's access question: the principal's name as the
    /// transport gave it (`Principal.name`), with its token's scopes; nil (refused) for a
    /// name that is none of the three forms, which serve never gives. A JWT's subject may
    /// hold `#` (`jwt:ISSUER#svc#1`), so the issuer is the configured one the name begins
    /// with, as the token was verified against it; `Principal(name:)` splits at the last `#`.
    static func principal(_ access: MCPToolAccess, gate: ServeGate) -> Principal? {
        let scopes = Set(access.scopes)
        let name = access.principal
        if name.hasPrefix("jwt:"), let issuer = issuers(gate).filter({ name.hasPrefix("jwt:\($0)#") }).max(by: { $0.count < $1.count }) {
            let subject = String(name.dropFirst("jwt:".count + issuer.count + 1))
            if !subject.isEmpty { return Principal(.jwt(issuer: issuer, subject: subject), scopes: scopes) }
        }
        return Principal(name: name).map { Principal($0.source, scopes: scopes) }
    }

    /// The issuers serve.json's `authentication` names now (SIGHUP may change them).
    static func issuers(_ gate: ServeGate) -> [String] {
        gate.resourceMetadata(host: nil)["authorization_servers"]?.arrayValue?.compactMap(\.stringValue) ?? []
    }
}
