import ExtrunProtocol

/// An intent's deadline, which progress reports may push back (in extension mode, up to a maximum).
final class Deadline: @unchecked Sendable {
    private(set) var instant: UInt64 = 0
    private var start: UInt64 = 0
    private var stepNs: UInt64 = 0
    private var maximum: UInt64 = 0
    /// Time spent waiting for a person (prompts), which does not count against the plugin.
    private(set) var excludedNs: UInt64 = 0

    /// Runs `body` (a question to a person) with the clock stopped for the plugin.
    func excluding<T>(_ body: () throws -> T) rethrows -> T {
        let began = MonotonicClock.now()
        defer {
            let spent = MonotonicClock.now() - began
            excludedNs += spent
            instant += spent
            maximum += spent
        }
        return try body()
    }

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

    /// The deadline in milliseconds from launch, not counting time spent waiting for a person.
    var currentMs: Int { Int((instant - start - excludedNs) / 1_000_000) }
}
