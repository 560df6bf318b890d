/// Who calls the service (docs/serve.md, "Principals"): what the access policy, the rate
/// limits, the audit log and an MCP call's request state name. One of
///
/// - `uid:N`: a peer on the Unix socket, its uid read from the socket (SO_PEERCRED);
/// - `tcp`: a holder of the service's `--token-file` token, over TCP;
/// - `jwt:ISSUER#SUBJECT`: the subject of a bearer JWT one of serve.json's
///   `authentication.issuers` signed, with the scopes the token carries.
///
/// `name` is the string form; `Principal(name:)` reads it back (without the scopes, which
/// belong to one token, not to the principal).
public struct Principal: Sendable, Hashable, CustomStringConvertible {
    public enum Source: Sendable, Hashable {
        case peer(uid: UInt32)
        case tokenFile
        case jwt(issuer: String, subject: String)
    }

    public let source: Source
    /// The token's scopes (`scope`, space-separated, or `scp`); empty for the other principals.
    public let scopes: Set<String>
    /// `uid:N`, `tcp` or `jwt:ISSUER#SUBJECT`.
    public let name: String

    public init(_ source: Source, scopes: Set<String> = []) {
        self.source = source
        self.scopes = scopes
        switch source {
        case .peer(let uid): name = "uid:\(uid)"
        case .tokenFile: name = Self.tokenFileName
        case .jwt(let issuer, let subject): name = "jwt:\(issuer)#\(subject)"
        }
    }

    public static func peer(uid: UInt32) -> Principal { Principal(.peer(uid: uid)) }
    public static let tokenHolder = Principal(.tokenFile)
    public static func jwt(issuer: String, subject: String, scopes: Set<String> = []) -> Principal {
        Principal(.jwt(issuer: issuer, subject: subject), scopes: scopes)
    }

    /// The string form of the token file's holders (ServeGrants' `tcp` key).
    public static let tokenFileName = "tcp"

    /// Reads `name` back; nil when it is none of the three forms. A JWT's issuer may hold
    /// `#` (a URL's fragment is not allowed in an issuer, RFC 8414, but the split is at the last `#`).
    public init?(name: String) {
        if name == Self.tokenFileName {
            self.init(.tokenFile)
        } else if name.hasPrefix("uid:"), let uid = UInt32(name.dropFirst(4)) {
            self.init(.peer(uid: uid))
        } else if name.hasPrefix("jwt:"), let hash = name.lastIndex(of: "#") {
            let issuer = String(name[name.index(name.startIndex, offsetBy: 4)..<hash])
            let subject = String(name[name.index(after: hash)...])
            guard !issuer.isEmpty, !subject.isEmpty else { return nil }
            self.init(.jwt(issuer: issuer, subject: subject))
        } else {
            return nil
        }
    }

    public var description: String { name }

    /// The peer's uid on the Unix socket; nil over TCP.
    public var uid: UInt32? {
        if case .peer(let uid) = source { uid } else { nil }
    }

    /// Came over TCP (the token file's holders, a JWT's subject).
    public var isRemote: Bool { uid == nil }

    /// Whether `pattern` names this principal: `*` (everyone), `uid:*` (every local peer),
    /// `jwt:*` (every JWT's subject), `jwt:ISSUER#*` (every subject of one issuer), or the exact name.
    public func matches(_ pattern: String) -> Bool {
        if pattern == "*" || pattern == name { return true }
        switch source {
        case .peer: return pattern == "uid:*"
        case .tokenFile: return false
        case .jwt(let issuer, _): return pattern == "jwt:*" || pattern == "jwt:\(issuer)#*"
        }
    }

    /// Whether `pattern` is one `matches` understands (for serve.json's checks).
    static func isValidPattern(_ pattern: String) -> Bool {
        if pattern == "*" || pattern == "uid:*" || pattern == "jwt:*" || pattern == tokenFileName { return true }
        if pattern.hasPrefix("uid:") { return UInt32(pattern.dropFirst(4)) != nil }
        if pattern.hasPrefix("jwt:") { return Principal(name: pattern) != nil }
        return false
    }
}
