import Foundation
import Testing

@testable import ExtrunServe

/// The threads `extrun serve` runs intents on (Admission.swift, `Workers`).
@Suite struct WorkersTests {
    /// Waits (up to 10 s) until `condition` holds.
    private func eventually(_ what: String, _ condition: () -> Bool) throws {
        let deadline = Date().addingTimeInterval(10)
        while !condition() {
            guard Date() < deadline else { throw WorkersTestFailure(what) }
            usleep(1_000)
        }
    }

    /// Runs `count` jobs that all wait for `release`, so that they run at once; returns
    /// when each has started, with the ids of their threads.
    private func runBlocked(_ workers: Workers, count: Int, release: DispatchSemaphore, done: DispatchGroup) throws -> [UInt] {
        let started = DispatchSemaphore(value: 0)
        let ids = ThreadIDs()
        for _ in 0..<count {
            done.enter()
            workers.run {
                ids.add(UInt(pthread_self()))
                started.signal()
                release.wait()
                done.leave()
            }
        }
        for _ in 0..<count {
            guard started.wait(timeout: .now() + 10) == .success else { throw WorkersTestFailure("a job did not start") }
        }
        return ids.all
    }

    @Test("Workers: a thread per job running at once, kept and reused afterwards; no more threads than that")
    func threadsAreReused() throws {
        let workers = Workers()
        let release = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        let first = try runBlocked(workers, count: 4, release: release, done: done)
        #expect(Set(first).count == 4)
        #expect(workers.threads == 4)
        for _ in 0..<4 { release.signal() }
        #expect(done.wait(timeout: .now() + 10) == .success)
        try eventually("four idle threads") { workers.idleThreads == 4 }
        // The same number at once again: the same threads, none started.
        let second = try runBlocked(workers, count: 4, release: release, done: done)
        #expect(Set(second) == Set(first))
        #expect(workers.threads == 4)
        for _ in 0..<4 { release.signal() }
        #expect(done.wait(timeout: .now() + 10) == .success)
        try eventually("four idle threads") { workers.idleThreads == 4 }
        // One after the other, each waited for: one thread does them all, no new one starts.
        for _ in 0..<200 {
            let ran = DispatchSemaphore(value: 0)
            workers.run { ran.signal() }
            #expect(ran.wait(timeout: .now() + 10) == .success)
            try eventually("the thread back to idle") { workers.idleThreads == 4 }
        }
        #expect(workers.threads == 4)
    }

    @Test("Workers: the thread that went idle last takes the next job (its caches are the warmest)")
    func lastIdleThreadTakesTheNextJob() throws {
        let workers = Workers()
        let done = DispatchGroup()
        // Three jobs at once, each released on its own, so that their threads go idle in a known order.
        let releases = (0..<3).map { _ in DispatchSemaphore(value: 0) }
        let started = DispatchSemaphore(value: 0)
        let ids = ThreadIDs()
        for index in 0..<3 {
            done.enter()
            workers.run {
                ids.set(index, UInt(pthread_self()))
                started.signal()
                releases[index].wait()
                done.leave()
            }
        }
        for _ in 0..<3 { #expect(started.wait(timeout: .now() + 10) == .success) }
        for (count, index) in [2, 0, 1].enumerated() {
            releases[index].signal()
            try eventually("thread \(index) idle") { workers.idleThreads == count + 1 }
        }
        // Idle now, most recent last: the threads of jobs 2, 0, 1. The next jobs take 1, then 0,
        // each held until the end, so that the next job cannot take its thread back.
        let hold = DispatchSemaphore(value: 0)
        for expected in [1, 0] {
            let ran = DispatchSemaphore(value: 0)
            let on = ThreadIDs()
            done.enter()
            workers.run {
                on.add(UInt(pthread_self()))
                ran.signal()
                hold.wait()
                done.leave()
            }
            #expect(ran.wait(timeout: .now() + 10) == .success)
            #expect(on.all == [ids.get(expected)])
        }
        for _ in 0..<2 { hold.signal() }
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(workers.threads == 3)
    }
}

private struct WorkersTestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = "timed out waiting for \(description)" }
}

/// Thread ids recorded by jobs on other threads.
private final class ThreadIDs: @unchecked Sendable {
    private let lock = NSLock()
    private var ids: [UInt] = []
    private var byIndex: [Int: UInt] = [:]
    func add(_ id: UInt) { lock.withLock { ids.append(id) } }
    func set(_ index: Int, _ id: UInt) { lock.withLock { byIndex[index] = id } }
    func get(_ index: Int) -> UInt? { lock.withLock { byIndex[index] } }
    var all: [UInt] { lock.withLock { ids } }
}
