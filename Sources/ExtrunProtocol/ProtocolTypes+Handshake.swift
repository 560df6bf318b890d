import Foundation

// `initialize` and its answer (docs/protocol.md). Each type converts to and from
// `JSONValue` by hand, beside it (JSONValueConvertible.swift says why); its `Codable`
// conformance goes through that same conversion.

public struct InitializeParams: Sendable, Hashable {
    public var protocolVersion: Int
    public var hostVersion: String
    public var mode: Mode
    /// The intent the host is about to send, so a plugin can warm up for it.
    public var intent: String?

    public init(protocolVersion: Int = ProtocolVersion.current, hostVersion: String, mode: Mode, intent: String?) {
        self.protocolVersion = protocolVersion
        self.hostVersion = hostVersion
        self.mode = mode
        self.intent = intent
    }
}

public struct PluginIdentity: Sendable, Hashable {
    public var id: String
    public var version: String
    public init(id: String, version: String) {
        self.id = id
        self.version = version
    }
}

public struct InitializeResult: Sendable, Hashable {
    public var protocolVersion: Int
    public var plugin: PluginIdentity
    public var intents: [String]
    /// `true`: after this session the process can run another one (warm reuse,
    /// docs/protocol.md §15). Absent or `false`: one session, then the process ends.
    public var reusable: Bool?
    /// `true`: the plugin answers the `session` request (a whole later session in one
    /// exchange, docs/protocol.md §15). Absent or `false`: sessions step by step only.
    public var session: Bool?

    public init(
        protocolVersion: Int = ProtocolVersion.current, plugin: PluginIdentity, intents: [String], reusable: Bool? = nil, session: Bool? = nil
    ) {
        self.protocolVersion = protocolVersion
        self.plugin = plugin
        self.intents = intents
        self.reusable = reusable
        self.session = session
    }
}

extension InitializeParams: JSONValueConvertible {
    public init(jsonValue: JSONValue) throws { try self.init(fields: JSONFields(jsonValue)) }
    init(fields: JSONFields) throws {
        self.init(
            protocolVersion: try fields.int("protocolVersion"), hostVersion: try fields.string("hostVersion"), mode: try fields.rawValue("mode", Mode.self),
            intent: try fields.optionalString("intent"))
    }
    public var jsonValue: JSONValue {
        var object: [String: JSONValue] = [
            "protocolVersion": .int(Int64(protocolVersion)), "hostVersion": .string(hostVersion), "mode": .string(mode.rawValue),
        ]
        if let intent { object["intent"] = .string(intent) }
        return .object(object)
    }
}

extension InitializeParams: Codable {
    public init(from decoder: any Decoder) throws { try self.init(fields: JSONFields(decoder: decoder)) }
    public func encode(to encoder: any Encoder) throws { try jsonValue.encode(to: encoder) }
}

extension PluginIdentity: JSONValueConvertible {
    public init(jsonValue: JSONValue) throws { try self.init(fields: JSONFields(jsonValue)) }
    init(fields: JSONFields) throws {
        self.init(id: try fields.string("id"), version: try fields.string("version"))
    }
    public var jsonValue: JSONValue { .object(["id": .string(id), "version": .string(version)]) }
}

extension PluginIdentity: Codable {
    public init(from decoder: any Decoder) throws { try self.init(fields: JSONFields(decoder: decoder)) }
    public func encode(to encoder: any Encoder) throws { try jsonValue.encode(to: encoder) }
}

extension InitializeResult: JSONValueConvertible {
    public init(jsonValue: JSONValue) throws { try self.init(fields: JSONFields(jsonValue)) }
    init(fields: JSONFields) throws {
        self.init(
            protocolVersion: try fields.int("protocolVersion"), plugin: try PluginIdentity(fields: fields.requiredNested("plugin")),
            intents: try fields.strings("intents"), reusable: try fields.optionalBool("reusable"))
        session = try fields.optionalBool("session")
    }
    public var jsonValue: JSONValue {
        var object: [String: JSONValue] = [
            "protocolVersion": .int(Int64(protocolVersion)), "plugin": plugin.jsonValue, "intents": .array(intents.map { .string($0) }),
        ]
        if let reusable { object["reusable"] = .bool(reusable) }
        if let session { object["session"] = .bool(session) }
        return .object(object)
    }
}

extension InitializeResult: Codable {
    public init(from decoder: any Decoder) throws { try self.init(fields: JSONFields(decoder: decoder)) }
    public func encode(to encoder: any Encoder) throws { try jsonValue.encode(to: encoder) }
}
