import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

@testable import ExtrunStore

/// Adds 1 to the global `name` with compare-and-set, retrying on conflicts; returns the retries.
@discardableResult
func increment(_ globals: Globals, _ name: String) throws -> Int {
    var retries = 0
    while true {
        let current = try globals.get(name)
        let value = (current?.value.intValue ?? 0) + 1
        do {
            try globals.set(name, to: .int(value), ifVersion: current.map { .version($0.version) } ?? .absent)
            return retries
        } catch let error as StoreError where error.kind == .versionConflict {
            retries += 1
        }
    }
}

private let childHomeVariable = "EXTRUN_STORE_TEST_CHILD_HOME"
private let childCountVariable = "EXTRUN_STORE_TEST_CHILD_COUNT"
/// What a child of `eightProcesses` does: `increment` or `fill`.
private let childModeVariable = "EXTRUN_STORE_TEST_CHILD_MODE"

/// Starts `count` copies of this test binary running `ConcurrencyTests/childProcessWorker` on
/// `test`'s rows (`mode`: what each does), lets them go at once, and returns each one's
/// acknowledged operations (what it printed as `acknowledged N`).
private func runWorkers(_ test: BackendStore, mode: String, count: Int, perProcess: Int) async throws -> [Int] {
    let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
    var children: [(Process, Pipe)] = []
    for _ in 0..<count {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["--testing-library", "swift-testing", "--filter", "ConcurrencyTests/childProcessWorker"]
        var environment = ProcessInfo.processInfo.environment
        environment[childHomeVariable] = test.home
        environment[childCountVariable] = String(perProcess)
        environment[childModeVariable] = mode
        environment["EXTRUN_STORE"] = test.storeVariable
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        children.append((process, output))
    }
    let deadline = Date().addingTimeInterval(60)
    while try FileManager.default.contentsOfDirectory(atPath: test.directory.path).filter({ $0.hasPrefix("ready-") }).count < count,
        Date() < deadline, children.allSatisfy({ $0.0.isRunning })
    {
        try await Task.sleep(for: .milliseconds(5))
    }
    _ = FileManager.default.createFile(atPath: test.directory.sub("go"), contents: Data())
    var acknowledged: [Int] = []
    for (process, output) in children {
        let log = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "child worker failed:\n\(log)")
        let line = log.split(separator: "\n").first { $0.hasPrefix("acknowledged ") }
        let number = line.flatMap { Int($0.dropFirst("acknowledged ".count)) }
        #expect(number != nil, "the child ran the worker:\n\(log)")
        acknowledged.append(number ?? 0)
    }
    return acknowledged
}

@Suite struct ConcurrencyTests {
    @Test func twoConnectionsManyTasksNoLostUpdateNoBusyError() async throws {
        let test = try TestStore()
        let stores = [test.store, try test.reopen()]
        let tasks = 16
        let perTask = 25
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<tasks {
                let globals = try stores[index % 2].globals(of: "TEAM")
                group.addTask {
                    for _ in 0..<perTask { try increment(globals, "counter") }
                }
            }
            try await group.waitForAll()
        }
        #expect(try test.store.globals(of: "TEAM").get("counter")?.value == .int(Int64(tasks * perTask)))
    }

    @Test func storesOpenedAtOnceOnAFreshHomeShareOneDatabase() async throws {
        let directory = try TempDirectory()
        let home = URL(fileURLWithPath: directory.sub("home"))
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<6 {
                group.addTask {
                    let store = try Store(home: home)
                    try store.globals(of: "TEAM").set("from-\(index)", to: .int(Int64(index)))
                }
            }
            try await group.waitForAll()
        }
        #expect(try Store(home: home).globals(of: "TEAM").list().count == 6)
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: home.path).filter { $0.hasPrefix(".") }
        #expect(leftovers.isEmpty, "temporary store files were removed: \(leftovers)")
    }

    @Test func blindWritesFromTwoConnectionsAllLand() async throws {
        let test = try TestStore()
        let stores = [test.store, try test.reopen()]
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<8 {
                let globals = try stores[index % 2].globals(of: "TEAM")
                group.addTask {
                    for item in 0..<25 { try globals.set("t\(index)-\(item)", to: .int(Int64(item))) }
                }
            }
            try await group.waitForAll()
        }
        #expect(try test.store.globals(of: "TEAM").list().count == 200)
    }

    /// Two real processes (this test binary, started again on `childProcessWriter`) and this
    /// one increment the same counter through compare-and-set at the same time.
    @Test func twoProcessesIncrementWithoutLostUpdates() async throws {
        let test = try TestStore()
        try test.store.createOwner("TEAM")
        let perProcess = 150
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        var children: [(Process, Pipe)] = []
        for _ in 0..<2 {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = ["--testing-library", "swift-testing", "--filter", "ConcurrencyTests/childProcessWriter"]
            var environment = ProcessInfo.processInfo.environment
            environment[childHomeVariable] = test.home
            environment[childCountVariable] = String(perProcess)
            process.environment = environment
            let output = Pipe()
            process.standardOutput = output
            process.standardError = output
            try process.run()
            children.append((process, output))
        }
        // Start together: wait until both children have opened the store.
        let deadline = Date().addingTimeInterval(30)
        while try FileManager.default.contentsOfDirectory(atPath: test.directory.path).filter({ $0.hasPrefix("ready-") }).count < 2,
            Date() < deadline, children.allSatisfy({ $0.0.isRunning })
        {
            try await Task.sleep(for: .milliseconds(5))
        }
        _ = FileManager.default.createFile(atPath: test.directory.sub("go"), contents: Data())
        let globals = try test.store.globals(of: "TEAM")
        for _ in 0..<perProcess { try increment(globals, "counter") }
        for (process, output) in children {
            let log = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            #expect(process.terminationStatus == 0, "child writer failed:\n\(log)")
            #expect(log.contains("childProcessWriter()"), "the child ran the writer:\n\(log)")
        }
        #expect(try globals.get("counter")?.value == .int(Int64(3 * perProcess)))
    }

    /// 8 processes do compare-and-set increments of one global at once: the final value is
    /// the sum of the increments they were told succeeded. On each backend (issue 34).
    @Test(arguments: StoreBackendKind.all)
    func eightProcessesIncrementOneGlobal(backend: StoreBackendKind) async throws {
        let test = try BackendStore(backend)
        try test.store.createOwner("TEAM")
        let perProcess = ProcessInfo.processInfo.environment["EXTRUN_TEST_INCREMENTS"].flatMap { Int($0) } ?? 25
        let acknowledged = try await runWorkers(test, mode: "increment", count: 8, perProcess: perProcess)
        #expect(acknowledged.reduce(0, +) == 8 * perProcess)
        #expect(try test.store.globals(of: "TEAM").get("counter")?.value == .int(Int64(acknowledged.reduce(0, +))))
    }

    /// 8 processes add globals to one owner at once against a quota of 30 globals: exactly 30
    /// land, every other write is refused `quotaExceeded`, and the counters match the rows.
    @Test(arguments: StoreBackendKind.all)
    func eightProcessesFillOneQuota(backend: StoreBackendKind) async throws {
        let test = try BackendStore(backend)
        try test.store.createOwner("TEAM")
        try test.store.setQuota(of: "TEAM", ["globals": 30])
        let acknowledged = try await runWorkers(test, mode: "fill", count: 8, perProcess: 10)
        let globals = try test.store.globals(of: "TEAM").list()
        #expect(acknowledged.reduce(0, +) == 30)
        #expect(globals.count == 30)
        #expect(try test.store.quota(of: "TEAM").usage == test.recomputedUsage("TEAM"))
    }

    /// The worker of `eightProcesses...`; runs only in their child processes. Prints its
    /// acknowledged operations.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[childModeVariable] != nil))
    func childProcessWorker() throws {
        let environment = ProcessInfo.processInfo.environment
        let home = try #require(environment[childHomeVariable])
        let count = try #require(environment[childCountVariable].flatMap { Int($0) })
        let globals = try Store(home: URL(fileURLWithPath: home)).globals(of: "TEAM")
        let directory = (home as NSString).deletingLastPathComponent
        _ = FileManager.default.createFile(atPath: "\(directory)/ready-\(getpid())", contents: Data())
        let deadline = Date().addingTimeInterval(60)
        while !FileManager.default.fileExists(atPath: directory + "/go"), Date() < deadline { usleep(2000) }
        var acknowledged = 0
        for index in 0..<count {
            if environment[childModeVariable] == "fill" {
                do {
                    try globals.set("p\(getpid())-\(index)", to: .int(Int64(index)))
                    acknowledged += 1
                } catch let error as StoreError where error.kind == .quotaExceeded {
                    continue
                }
            } else {
                try increment(globals, "counter")
                acknowledged += 1
            }
        }
        print("acknowledged \(acknowledged)")
    }

    /// The writer half of `twoProcessesIncrementWithoutLostUpdates`; runs only in its child processes.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[childHomeVariable] != nil))
    func childProcessWriter() throws {
        let environment = ProcessInfo.processInfo.environment
        let home = try #require(environment[childHomeVariable])
        let count = try #require(environment[childCountVariable].flatMap { Int($0) })
        let globals = try Store(home: URL(fileURLWithPath: home)).globals(of: "TEAM")
        let directory = (home as NSString).deletingLastPathComponent
        _ = FileManager.default.createFile(atPath: "\(directory)/ready-\(getpid())", contents: Data())
        let deadline = Date().addingTimeInterval(30)
        while !FileManager.default.fileExists(atPath: directory + "/go"), Date() < deadline { usleep(2000) }
        for _ in 0..<count { try increment(globals, "counter") }
    }
}
