import Foundation
import Testing

import ExtrunHost

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

    /// Runs a job per semaphore of `releases`, each waiting for its own, so that they run at
    /// once; returns when each has started, with the ids of their threads in that order.
    private func runBlocked(_ workers: Workers, releases: [DispatchSemaphore], done: DispatchGroup) throws -> [UInt] {
        let started = DispatchSemaphore(value: 0)
        let ids = ThreadIDs()
        for (index, release) in releases.enumerated() {
            done.enter()
            workers.run {
                ids.set(index, UInt(pthread_self()))
                started.signal()
                release.wait()
                done.leave()
            }
        }
        for _ in releases {
            guard started.wait(timeout: .now() + 10) == .success else { throw WorkersTestFailure("a job to start") }
        }
        return (0..<releases.count).compactMap { ids.get($0) }
    }

    @Test("Workers: a thread per job running at once, kept and reused afterwards; no more threads than that")
    func threadsAreReused() throws {
        let workers = Workers()
        let release = DispatchSemaphore(value: 0)
        let done = DispatchGroup()
        let first = try runBlocked(workers, releases: Array(repeating: release, count: 4), done: done)
        #expect(Set(first).count == 4)
        #expect(workers.threads == 4)
        for _ in 0..<4 { release.signal() }
        #expect(done.wait(timeout: .now() + 10) == .success)
        try eventually("four idle threads") { workers.idleThreads == 4 }
        // The same number at once again: the same threads, none started.
        let second = try runBlocked(workers, releases: Array(repeating: release, count: 4), done: done)
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
        let ids = try runBlocked(workers, releases: releases, done: done)
        for (count, index) in [2, 0, 1].enumerated() {
            releases[index].signal()
            try eventually("thread \(index) idle") { workers.idleThreads == count + 1 }
        }
        // Idle now, most recent last: the threads of jobs 2, 0, 1. The next jobs take 1, then 0,
        // each held until the end, so that the next job cannot take its thread back.
        let hold = DispatchSemaphore(value: 0)
        for expected in [1, 0] {
            #expect(try runBlocked(workers, releases: [hold], done: done) == [ids[expected]])
        }
        for _ in 0..<2 { hold.signal() }
        #expect(done.wait(timeout: .now() + 10) == .success)
        #expect(workers.threads == 3)
    }
}

private struct WorkersTestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ what: String) { description = "timed out waiting for \(what)" }
}

/// Thread ids recorded by jobs on other threads, by job.
private final class ThreadIDs: @unchecked Sendable {
    private let lock = NSLock()
    private var byIndex: [Int: UInt] = [:]
    func set(_ index: Int, _ id: UInt) { lock.withLock { byIndex[index] = id } }
    func get(_ index: Int) -> UInt? { lock.withLock { byIndex[index] } }
}
