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
