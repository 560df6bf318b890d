import ExtrunProtocol

/// What the host itself may spend on one run, whatever the plugin or the caller
/// sends: the `host` object of the policy (docs/sandbox.md, "The host's own
/// guarantees"; docs/protocol.md, "Limits"). Every field is optional in
/// policy.json and falls back to its default.
public struct HostLimits: Codable, Sendable, Equatable {
    /// Bytes the host holds on a plugin's behalf (answers queued for it, frames read
    /// from it and not yet served), per mode. Past half of it the host stops reading
    /// the plugin's requests until the plugin reads its answers (backpressure); a
    /// plugin that reads none for `unreadAnswersMs` meanwhile is stopped.
    public var extensionMemoryBytes: Int
    public var inAppMemoryBytes: Int
    /// How long the host waits, its queue over budget, for a plugin to read any of its answers.
    public var unreadAnswersMs: Int
    /// The largest answer to a host request (`initialize`, `resolve`, `confirm`, `handle`,
    /// `options`, `continue`, `session`): the response's properties and what the report carries.
    public var maxResponseBytes: Int
    /// The largest notification (`log`, `progress`).
    public var maxNotificationBytes: Int
    /// JSON values (each scalar, array and object counts one) in one message.
    public var maxMessageNodes: Int
    /// The largest intent file or activity file (`extrun handle`, `continue`, `batch`).
    public var maxIntentFileBytes: Int
    /// How long a plugin that closed its output channel while the host waits for an
    /// answer has to exit before it is reported ("closed its channel") and stopped.
    public var closedChannelGraceMs: Int

    public static let `default` = HostLimits(
        extensionMemoryBytes: 32 << 20, inAppMemoryBytes: 64 << 20, unreadAnswersMs: 500, maxResponseBytes: 8 << 20,
        maxNotificationBytes: 64 << 10, maxMessageNodes: 250_000, maxIntentFileBytes: 4 << 20, closedChannelGraceMs: 200)

    public init(
        extensionMemoryBytes: Int, inAppMemoryBytes: Int, unreadAnswersMs: Int, maxResponseBytes: Int, maxNotificationBytes: Int,
        maxMessageNodes: Int, maxIntentFileBytes: Int, closedChannelGraceMs: Int
    ) {
        self.extensionMemoryBytes = extensionMemoryBytes
        self.inAppMemoryBytes = inAppMemoryBytes
        self.unreadAnswersMs = unreadAnswersMs
        self.maxResponseBytes = maxResponseBytes
        self.maxNotificationBytes = maxNotificationBytes
        self.maxMessageNodes = maxMessageNodes
        self.maxIntentFileBytes = maxIntentFileBytes
        self.closedChannelGraceMs = closedChannelGraceMs
    }

    public func memoryBytes(for mode: Mode) -> Int { mode == .extension ? extensionMemoryBytes : inAppMemoryBytes }

    /// The policy field of `memoryBytes(for:)`.
    static func memoryField(for mode: Mode) -> String { mode == .extension ? "host.extensionMemoryBytes" : "host.inAppMemoryBytes" }

    private enum CodingKeys: String, CodingKey {
        case extensionMemoryBytes, inAppMemoryBytes, unreadAnswersMs, maxResponseBytes, maxNotificationBytes, maxMessageNodes, maxIntentFileBytes, closedChannelGraceMs
    }

    public init(from decoder: any Decoder) throws {
        let d = HostLimits.default
        let c = try decoder.container(keyedBy: CodingKeys.self)
        extensionMemoryBytes = try c.decodeIfPresent(Int.self, forKey: .extensionMemoryBytes) ?? d.extensionMemoryBytes
        inAppMemoryBytes = try c.decodeIfPresent(Int.self, forKey: .inAppMemoryBytes) ?? d.inAppMemoryBytes
        unreadAnswersMs = try c.decodeIfPresent(Int.self, forKey: .unreadAnswersMs) ?? d.unreadAnswersMs
        maxResponseBytes = try c.decodeIfPresent(Int.self, forKey: .maxResponseBytes) ?? d.maxResponseBytes
        maxNotificationBytes = try c.decodeIfPresent(Int.self, forKey: .maxNotificationBytes) ?? d.maxNotificationBytes
        maxMessageNodes = try c.decodeIfPresent(Int.self, forKey: .maxMessageNodes) ?? d.maxMessageNodes
        maxIntentFileBytes = try c.decodeIfPresent(Int.self, forKey: .maxIntentFileBytes) ?? d.maxIntentFileBytes
        closedChannelGraceMs = try c.decodeIfPresent(Int.self, forKey: .closedChannelGraceMs) ?? d.closedChannelGraceMs
    }

    /// Problems that make these limits unusable, each naming its field (as `host.<field>`).
    func problems(maxMessageBytes: Int) -> [String] {
        var problems: [String] = []
        for (name, value) in [("extensionMemoryBytes", extensionMemoryBytes), ("inAppMemoryBytes", inAppMemoryBytes)] {
            if value < 1 << 20 { problems.append("host.\(name): must be at least 1 MiB") }
            // Half the budget holds answers queued for the plugin, the other half the frame being read.
            if maxMessageBytes > value / 2 {
                problems.append("maxMessageBytes: \(maxMessageBytes) is above half of host.\(name) (\(value / 2))")
            }
        }
        for (name, value) in [
            ("unreadAnswersMs", unreadAnswersMs), ("maxResponseBytes", maxResponseBytes), ("maxNotificationBytes", maxNotificationBytes),
            ("maxMessageNodes", maxMessageNodes), ("maxIntentFileBytes", maxIntentFileBytes), ("closedChannelGraceMs", closedChannelGraceMs),
        ] where value <= 0 {
            problems.append("host.\(name): must be positive")
        }
        if maxIntentFileBytes < JSONInputFile.alwaysAcceptedBytes {
            problems.append("host.maxIntentFileBytes: must be at least \(JSONInputFile.alwaysAcceptedBytes)")
        }
        return problems
    }
}

/// A limit a plugin went over: which (its policy field), the limit and what was measured.
struct LimitBreach: Error, Equatable {
    /// The policy field, e.g. `host.extensionMemoryBytes` or `maxMessageBytes`.
    var limit: String
    var limitValue: Int
    var measured: Int
    /// What the plugin did, for a person: "it sent 812 requests (90 KB) ...".
    var what: String
    var extra: [String: JSONValue] = [:]

    var details: [String: JSONValue] {
        var details = extra
        details["limit"] = .string(limit)
        details["limitValue"] = .int(Int64(limitValue))
        details["measured"] = .int(Int64(measured))
        return details
    }
}
