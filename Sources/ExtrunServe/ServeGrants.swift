import ExtrunHost
import ExtrunProtocol
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Which callers may run which owners' intents: serve.json's `grants` (docs/serve.md,
/// "Who may run what"). An owner's intents use its sealed globals and its bookmarks, so a
/// shared service runs them only for the callers the service's user granted that owner:
///
///     "grants": {"1001": ["EXAMPLETEAM"], "*": ["PUBLICTEAM"], "tcp": ["*"]}
///
/// A key is a uid (a peer on the Unix socket), `tcp` (the holders of the TCP token), a JWT's
/// subject (`jwt:ISSUER#SUBJECT`, or `jwt:ISSUER#*`, `jwt:*`) or `*` (every caller); its value
/// the owners it is granted, `*` for every owner. The service's own uid and root are granted
/// every owner. Without a `tcp` entry, the token's holders are too (the service's user handed
/// them its token); with one, only what it lists. A JWT's subject likewise: its entry, else
/// its issuer's, else `jwt:*`, else every owner (its issuer is one serve.json trusts). Any other
/// caller is granted only what names it or `*`: nothing by default. A refused run answers
/// 403 `notPermitted` naming the caller and the owner; nothing runs.
public struct ServeGrants: Sendable, Equatable {
    public var byUID: [UInt32: Set<String>] = [:]
    public var byPrincipal: [String: Set<String>] = [:]
    /// What every caller is granted (`*`).
    public var everyone: Set<String> = []

    public init() {}

    /// The principal of the TCP token's holders.
    public static let tcpPrincipal = "tcp"

    /// The owners a caller may run; nil: every owner.
    public func owners(uid: UInt32?, principal: String?, serviceUID: UInt32) -> Set<String>? {
        if let uid, uid == serviceUID || uid == 0 { return nil }
        var owners = everyone
        if let uid, let granted = byUID[uid] { owners.formUnion(granted) }
        if let principal {
            if let granted = byPrincipal[principal] {
                owners.formUnion(granted)
            } else if principal.hasPrefix("jwt:"), let parsed = Principal(name: principal),
                let granted = byPrincipal.first(where: { $0.key.hasSuffix("#*") && parsed.matches($0.key) })?.value ?? byPrincipal["jwt:*"]
            {
                // A JWT's subject: its own entry, else its issuer's (jwt:ISSUER#*), else jwt:*.
                owners.formUnion(granted)
            } else if principal == Self.tcpPrincipal || principal.hasPrefix("jwt:") {
                // The token's holders, and a configured issuer's subjects: the service's user trusted them.
                return nil
            }
        }
        return owners.contains("*") ? nil : owners
    }

    static func parse(_ value: JSONValue, source: String) throws(HostError) -> ServeGrants {
        func fail(_ field: String, _ message: String) -> HostError {
            HostError(.configurationError, "\(source): \(field): \(message)", details: ["file": .string(source), "field": .string(field)])
        }
        let shape = "expected an object of caller: [owner, ...], where a caller is a uid, \"tcp\" or \"*\" and an owner a name or \"*\""
        guard case .object(let entries) = value else { throw fail("grants", shape) }
        var grants = ServeGrants()
        for (key, entry) in entries {
            guard let list = entry.arrayValue else { throw fail("grants.\(key)", shape) }
            var owners = Set<String>()
            for item in list {
                guard let owner = item.stringValue, !owner.isEmpty, owner.utf8.count <= 255 else {
                    throw fail("grants.\(key)", "expected owner names (or \"*\"); got \(item)")
                }
                owners.insert(owner)
            }
            if key == "*" {
                grants.everyone.formUnion(owners)
            } else if key == tcpPrincipal || (key.hasPrefix("jwt:") && (key == "jwt:*" || Principal(name: key) != nil)) {
                grants.byPrincipal[key, default: []].formUnion(owners)
            } else if let uid = UInt32(key) {
                grants.byUID[uid, default: []].formUnion(owners)
            } else {
                throw fail("grants.\(key)", "a caller is a numeric uid, \"tcp\", \"jwt:ISSUER#SUBJECT\", \"jwt:ISSUER#*\", \"jwt:*\" or \"*\"")
            }
        }
        return grants
    }
}

extension ServeEngine {
    /// The caller of a run as the host sees it: its uid (none over TCP: the token names no
    /// local user), its principal and the owners serve.json grants it.
    func callerIdentity(_ caller: Caller, grants: ServeGrants) -> CallerIdentity {
        let uid: UInt32? = caller.tcp ? nil : caller.uid
        let principal: String? = caller.tcp ? caller.principal.name : nil
        return CallerIdentity(uid: uid, principal: principal, grantedOwners: grants.owners(uid: uid, principal: principal, serviceUID: getuid()))
    }
}
