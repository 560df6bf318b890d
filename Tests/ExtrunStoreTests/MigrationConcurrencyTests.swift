import ExtrunProtocol
import ExtrunStoreFill
import Foundation
import Synchronization
import Testing

@testable import ExtrunStore

/// `extrun migrate --remove-source` of an owner while writers of both owners run, each on a
/// `Store` of its own (its own connection, as another process or host would have), on both
/// backends (issue 34, item 7). What the engine promises (docs/migration.md):
/// - the new owner's own writes are never lost: its counters end at the increments acknowledged;
/// - a write of the old owner acknowledged before the item was copied is carried by the copy;
///   one acknowledged after is kept in the old owner (never removed with it), and running the
///   same command again carries it; once an item is removed, a write with the version read
///   before is refused (`versionConflict`) and the writer finds the item gone;
/// - nothing is duplicated: the new owner has exactly its own names and the migrated ones,
///   the old owner nothing, and the usage counters match the rows.
@Suite struct MigrationConcurrencyTests {
    static let globals = 1_200
    static let valueBytes = 30
    /// Counters of the old owner: before the bulk names ("a…", copied in the first batch, then
    /// changed: kept, then carried by the second run) and after them ("z…", changed while the
    /// copy runs, then copied with the changes).
    static let oldCounters = ["a-counter-0", "a-counter-1", "z-counter-0", "z-counter-1"]
    /// The new owner's own counters.
    static let newCounters = ["n-counter-0", "n-counter-1"]

    /// Compare-and-set increments of `name` until `stop`, on a store of its own; returns how many
    /// were acknowledged. Stops early when the global is gone (moved away from the old owner).
    /// When the writers stop, and how many of their writes were refused for a version that moved.
    final class Writers: Sendable {
        let stop = Atomic<Bool>(false)
        let refusals = Atomic<Int>(0)
        let busy = Atomic<Int>(0)
        /// Writes acknowledged so far, by writer (owner/name).
        let acknowledged = Mutex<[String: Int]>([:])

        /// The fewest writes acknowledged by any of `writers` so far.
        func fewest(of writers: [String]) -> Int {
            acknowledged.withLock { counts in writers.map { counts[$0, default: 0] }.min() ?? 0 }
        }
    }

    static func increment(_ test: BackendStore, owner: String, name: String, writers: Writers) throws -> Int {
        let globals = try test.reopen().globals(of: owner)
        var acknowledged = 0
        while !writers.stop.load(ordering: .relaxed) {
            do {
                guard let current = try globals.get(name) else { return acknowledged }
                guard case .int(let value) = current.value else {
                    Issue.record("\(owner)'s \(name) holds \(current.value)")
                    return acknowledged
                }
                _ = try globals.set(name, to: .int(value + 1), ifVersion: .version(current.version))
                acknowledged += 1
                writers.acknowledged.withLock { $0[owner + "/" + name, default: 0] += 1 }
            } catch let error as StoreError where error.kind == .versionConflict || error.kind == .storeBusy {
                // Not acknowledged: another write came first (or the item moved), or the store was busy.
                if error.kind == .versionConflict { writers.refusals.add(1, ordering: .relaxed) } else { writers.busy.add(1, ordering: .relaxed) }
            }
        }
        return acknowledged
    }

    @Test(arguments: StoreBackendKind.all)
    func migrateAnOwnerWhileWritersRun(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        try test.fill(owner: "OLD", globals: MigrationConcurrencyTests.globals, valueBytes: MigrationConcurrencyTests.valueBytes)
        let old = try test.store.globals(of: "OLD")
        for name in MigrationConcurrencyTests.oldCounters { try old.set(name, to: 0) }
        let new = try test.store.globals(of: "NEW")
        for name in MigrationConcurrencyTests.newCounters { try new.set(name, to: 0) }

        let state = Writers()
        let writers = MigrationConcurrencyTests.oldCounters.map { ("OLD", $0) } + MigrationConcurrencyTests.newCounters.map { ("NEW", $0) }
        let acknowledged = Mutex<[String: Int]>([:])
        let failures = Mutex<[String]>([])
        let finished = Atomic<Int>(0)
        for (owner, name) in writers {
            // Threads of their own: blocking writers must not wait for a pool's turn.
            Thread.detachNewThread {
                do {
                    let count = try MigrationConcurrencyTests.increment(test, owner: owner, name: name, writers: state)
                    acknowledged.withLock { $0[owner + "/" + name] = count }
                } catch {
                    failures.withLock { $0.append("\(owner)/\(name): \(error)") }
                }
                finished.add(1, ordering: .releasing)
            }
        }
        // Writers first (a few writes each: a writer whose thread starts late must not find its
        // counter already moved), then the migration in small batches while they run; they go on
        // for a moment after it.
        let keys = writers.map { $0.0 + "/" + $0.1 }
        let start = Date()
        while state.fewest(of: keys) < 4, Date().timeIntervalSince(start) < 30 {
            Thread.sleep(forTimeInterval: 0.02)
        }
        guard state.fewest(of: keys) >= 4 else {
            state.stop.store(true, ordering: .relaxed)
            while finished.load(ordering: .acquiring) < writers.count { Thread.sleep(forTimeInterval: 0.01) }
            Issue.record("a writer did not write 4 times in 30 s: \(state.acknowledged.withLock { $0 }), \(failures.withLock { $0 })")
            return
        }
        let options = MigrationOptions(removeSource: true, batchSize: 40)
        let first = try test.reopen().migrate(from: "OLD", to: "NEW", options: options)
        Thread.sleep(forTimeInterval: 0.3)
        state.stop.store(true, ordering: .relaxed)
        while finished.load(ordering: .acquiring) < writers.count { Thread.sleep(forTimeInterval: 0.01) }
        let errors = failures.withLock { $0 }
        #expect(errors.isEmpty, "\(errors)")
        #expect(first.complete, "\(first.json)")
        #expect(first.globals.failed == 0 && first.globals.conflicting == 0, "\(first.json)")
        // The writers overlapped the migration: changes made after an item's copy were kept in OLD, not removed.
        #expect(first.globals.kept > 0, "\(first.json)")

        // The changes kept in OLD are carried by running the same command again.
        let again = try test.reopen().migrate(from: "OLD", to: "NEW", options: options)
        #expect(again.isClean && again.complete, "\(again.json)")
        #expect(again.globals.overwritten == first.globals.kept, "every kept change is carried: \(first.json) \(again.json)")

        let counts = acknowledged.withLock { $0 }
        let host = try test.reopen()
        let newGlobals = try host.globals(of: "NEW")
        for (owner, name) in writers {
            let count = try #require(counts[owner + "/" + name])
            let value = try newGlobals.get(name)?.value
            #expect(value == .int(Int64(count)), "\(owner)'s \(name): \(count) acknowledged increments")
            #expect(count > 0, "\(owner)'s \(name) was written meanwhile (\(state.refusals.load(ordering: .relaxed)) refused, \(state.busy.load(ordering: .relaxed)) busy)")
        }
        #expect(try host.globals(of: "OLD").list().isEmpty, "nothing left in OLD")
        let names = try newGlobals.list().map(\.name)
        let expected = (0..<MigrationConcurrencyTests.globals).map(BulkFill.globalName) + MigrationConcurrencyTests.oldCounters
            + MigrationConcurrencyTests.newCounters
        #expect(names == expected.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }, "no name twice, none missing, none renamed")
        for index in stride(from: 0, to: MigrationConcurrencyTests.globals, by: 97) {
            let value = try newGlobals.get(BulkFill.globalName(index))?.value
            #expect(value == .string(BulkFill.value(index, bytes: MigrationConcurrencyTests.valueBytes)))
        }
        // The usage counters kept by the writes match the rows.
        for owner in ["OLD", "NEW"] {
            let usage = try host.quota(of: owner).usage
            let recomputed = try test.recomputedUsage(owner)
            #expect(usage.globals == recomputed.globals && usage.bytes == recomputed.bytes, "\(owner): \(usage) vs \(recomputed)")
        }
    }
}
