import ExtrunHost
import ExtrunProtocol
import NIOConcurrencyHelpers

/// serve.json's `rateLimits` (docs/serve.md, "Rate limits"): a token bucket per principal,
/// refilled at `perSecond` calls a second up to `burst`. Off without the key.
///
///     "rateLimits": {"perSecond": 5, "burst": 10, "principals": {"jwt:https://auth.example.com#bot": {"perSecond": 0.5, "burst": 2}}}
///
/// The top-level pair applies to every principal; `principals` overrides it for the ones it
/// names (exact names or patterns, as in `access`; the first exact name, else the first
/// pattern that matches). Without the top-level pair only the principals named are limited.
public struct RateLimitSettings: Sendable, Equatable {
    public struct Limit: Sendable, Equatable {
        public var perSecond: Double
        public var burst: Double
    }

    public var everyone: Limit?
    public var principals: [(pattern: String, limit: Limit)] = []

    public init() {}

    public static func == (lhs: RateLimitSettings, rhs: RateLimitSettings) -> Bool {
        lhs.everyone == rhs.everyone && lhs.principals.map(\.pattern) == rhs.principals.map(\.pattern)
            && lhs.principals.map(\.limit) == rhs.principals.map(\.limit)
    }

    public func limit(for principal: Principal) -> Limit? {
        if let exact = principals.first(where: { $0.pattern == principal.name }) { return exact.limit }
        if let pattern = principals.first(where: { principal.matches($0.pattern) }) { return pattern.limit }
        return everyone
    }

    static func parse(_ value: JSONValue, source: String) throws(HostError) -> RateLimitSettings {
        func fail(_ field: String, _ message: String) -> HostError {
            HostError(.configurationError, "\(source): \(field): \(message)", details: ["file": .string(source), "field": .string(field)])
        }
        func limit(_ fields: [String: JSONValue], _ path: String, required: Bool) throws(HostError) -> Limit? {
            let rate = fields["perSecond"]
            let burst = fields["burst"]
            if rate == nil, burst == nil, !required { return nil }
            guard let perSecond = rate?.doubleValue, perSecond > 0, perSecond <= 1_000_000 else {
                throw fail("\(path).perSecond", "expected calls per second, over 0 and at most 1000000; got \(rate.map { "\($0)" } ?? "nothing")")
            }
            let size = burst?.doubleValue ?? max(1, perSecond)
            guard size >= 1, size <= 1_000_000, size == size.rounded() else {
                throw fail("\(path).burst", "expected a whole number of calls from 1 to 1000000; got \(burst.map { "\($0)" } ?? "nothing")")
            }
            return Limit(perSecond: perSecond, burst: size)
        }
        guard case .object(let object) = value else { throw fail("rateLimits", "expected {\"perSecond\": N, \"burst\": N, \"principals\": {PRINCIPAL: {\"perSecond\": N, \"burst\": N}}}") }
        if let unknown = object.keys.sorted().first(where: { !["perSecond", "burst", "principals"].contains($0) }) {
            throw fail("rateLimits.\(unknown)", "unknown field (the fields: burst, perSecond, principals)")
        }
        var settings = RateLimitSettings()
        settings.everyone = try limit(object, "rateLimits", required: false)
        if let entries = object["principals"] {
            guard case .object(let named) = entries else { throw fail("rateLimits.principals", "expected an object of principal: {\"perSecond\": N, \"burst\": N}") }
            for key in named.keys.sorted() {
                let path = "rateLimits.principals.\(key)"
                guard Principal.isValidPattern(key) else { throw fail(path, "'\(key)' is not a principal: uid:N, uid:*, tcp, jwt:ISSUER#SUBJECT, jwt:ISSUER#* or jwt:*") }
                guard case .object(let fields)? = named[key], let parsed = try limit(fields, path, required: true) else {
                    throw fail(path, "expected {\"perSecond\": N, \"burst\": N}")
                }
                if let unknown = fields.keys.sorted().first(where: { !["perSecond", "burst"].contains($0) }) {
                    throw fail("\(path).\(unknown)", "unknown field (the fields: burst, perSecond)")
                }
                settings.principals.append((key, parsed))
            }
        }
        return settings
    }
}

/// A call over its principal's rate: HTTP 429 with `Retry-After` (`retryAfterSeconds`, the
/// wait rounded up to whole seconds), or over MCP a JSON-RPC error with the same numbers.
public struct RateLimitRefusal: Error, Sendable {
    public var retryAfterSeconds: Int
    public var error: HostError
}

/// The buckets, one per principal that called (a bucket refilled to full is forgotten when
/// the table passes 10,000 principals).
final class RateLimiter: Sendable {
    private struct Bucket {
        var tokens: Double
        var updated: UInt64
    }

    private let buckets = NIOLockedValueBox<[String: Bucket]>([:])
    static let pruneAbove = 10_000

    /// Takes one call from the principal's bucket; nil when it had one, else the refusal.
    func take(_ principal: Principal, settings: RateLimitSettings, now: UInt64 = MonotonicClock.now()) -> RateLimitRefusal? {
        guard let limit = settings.limit(for: principal) else { return nil }
        let wait: Double? = buckets.withLockedValue { buckets in
            var bucket = buckets[principal.name] ?? Bucket(tokens: limit.burst, updated: now)
            let elapsed = Double(now &- bucket.updated) / 1e9
            bucket.tokens = min(limit.burst, bucket.tokens + elapsed * limit.perSecond)
            bucket.updated = now
            defer {
                buckets[principal.name] = bucket
                if buckets.count > Self.pruneAbove {
                    buckets = buckets.filter { Double(now &- $0.value.updated) / 1e9 * limit.perSecond + $0.value.tokens < limit.burst }
                }
            }
            if bucket.tokens >= 1 {
                bucket.tokens -= 1
                return nil
            }
            return (1 - bucket.tokens) / limit.perSecond
        }
        guard let wait else { return nil }
        let seconds = max(1, Int(wait.rounded(.up)))
        let rate = limit.perSecond == limit.perSecond.rounded() ? "\(Int(limit.perSecond))" : "\(limit.perSecond)"
        return RateLimitRefusal(
            retryAfterSeconds: seconds,
            error: HostError(
                .overloaded,
                "\(principal.name) is over its rate limit of \(rate) calls a second (burst \(Int(limit.burst)); serve.json rateLimits); nothing ran, try again in \(seconds) s",
                details: [
                    "reason": "rateLimit", "principal": .string(principal.name), "perSecond": .double(limit.perSecond),
                    "burst": .int(Int64(limit.burst)), "retryAfterMs": .int(Int64((wait * 1000).rounded(.up))),
                ]))
    }
}
