import Testing

@testable import ExtrunHost

/// The `pollAfterUs` a warm `session` request carries (docs/protocol.md §15.1).
@Suite struct PollHintTests {
    @Test("a plugin may poll after its answer while fewer intents run here than there are CPUs, and sleeps at once otherwise")
    func hint() {
        #expect(PooledSessions.pollAfterHint(running: 1, processors: 2) == PooledSessions.pollAfterUs)
        #expect(PooledSessions.pollAfterHint(running: 0, processors: 1) == PooledSessions.pollAfterUs)
        #expect(PooledSessions.pollAfterHint(running: 2, processors: 2) == 0)
        #expect(PooledSessions.pollAfterHint(running: 8, processors: 2) == 0)
        #expect(PooledSessions.pollAfterUs > 0 && PooledSessions.pollAfterUs <= 1_000)
    }
}
