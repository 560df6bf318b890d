import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

@testable import ExtrunStore

#if canImport(Glibc)
import Glibc
#endif

/// Faults of the kind ops meet on a bad day, made for real: SIGKILL at random moments of
/// writers that checkpoint, of `globals import`; a full disk at several fill levels. After
/// each: the store opens, every acknowledged write is there, nothing is duplicated, the next
/// write succeeds (issue 17). Short here; `Scripts/faults` runs the long campaign
/// (EXTRUN_FAULT_ROUNDS scales the counts below).

private let writerHomeVariable = "EXTRUN_FAULT_WRITER_HOME"
private let writerPrefixVariable = "EXTRUN_FAULT_WRITER_PREFIX"

/// Rounds of each campaign: EXTRUN_FAULT_ROUNDS, or the short default.
private func rounds(_ short: Int) -> Int {
    ProcessInfo.processInfo.environment["EXTRUN_FAULT_ROUNDS"].flatMap { Int($0) } ?? short
}

/// The value the writer stores under `name`: its name, repeated to a few pages.
private func value(of name: String) -> JSONValue {
    .string(String(repeating: name + ";", count: 400 + name.utf8.reduce(0) { ($0 &* 31 &+ Int($1)) & 0x7ff }))
}

/// Every acknowledged write is there with its value; names are unique; a new write works.
private func expectIntact(_ home: String, acknowledged: [String], sourceLocation: SourceLocation = #_sourceLocation) throws {
    let store = try Store(home: URL(fileURLWithPath: home))
    let globals = try store.globals(of: "TEAM")
    let listed = try globals.list().map(\.name)
    #expect(Set(listed).count == listed.count, "no name twice", sourceLocation: sourceLocation)
    let present = Set(listed)
    for name in acknowledged {
        #expect(present.contains(name), "acknowledged write \(name) is there", sourceLocation: sourceLocation)
    }
    for name in acknowledged.suffix(20) {
        #expect(try globals.get(name)?.value == value(of: name), "\(name)", sourceLocation: sourceLocation)
    }
    try globals.set("next-write", to: .int(Int64(acknowledged.count)))
}

@Suite(.serialized) struct FaultInjectionTests {
    /// A writer process (this test binary again, `killedWriter`) that writes and checkpoints,
    /// killed with SIGKILL at random moments, half of them just after it starts a checkpoint:
    /// those can leave a file shorter than its header says, the log holding the rest.
    @Test func writersKilledDuringCheckpointsLoseNoAcknowledgedWrite() throws {
        let directory = try TempDirectory()
        let home = directory.sub("home")
        _ = try Store(home: URL(fileURLWithPath: home))
        let executable = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        var generator = SplitMix(seed: 17_017)
        var acknowledged: [String] = []
        var killedWhileRunning = 0
        var shortFiles = 0
        let count = rounds(8)
        for round in 0..<count {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = ["--testing-library", "swift-testing", "--filter", "FaultInjectionTests/killedWriter"]
            var environment = ProcessInfo.processInfo.environment
            environment[writerHomeVariable] = home
            environment[writerPrefixVariable] = "r\(round)"
            process.environment = environment
            let output = Pipe()
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            try process.run()
            // Every other round: at a random moment after the first acknowledged write; the
            // others: within 3 ms of the writer saying it starts a checkpoint.
            let reader = output.fileHandleForReading
            var received = Data()
            let targeted = round % 2 == 1
            let marker = Data((targeted ? "CKPT\n" : "\n").utf8)
            while received.range(of: marker) == nil {
                let chunk = reader.availableData
                if chunk.isEmpty { break }
                received += chunk
            }
            usleep(useconds_t(targeted ? generator.next() % 3_000 : generator.next() % 150_000))
            kill(process.processIdentifier, SIGKILL)
            received += reader.readDataToEndOfFile()
            process.waitUntilExit()
            if process.terminationReason == .uncaughtSignal { killedWhileRunning += 1 }
            // A line is written only after its set returned: those are acknowledged.
            let lines = String(decoding: received, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false)
            acknowledged += lines.dropLast().filter { $0.hasPrefix("ACK ") }.map { String($0.dropFirst(4)) }
            if let header = fileBytes(home + "/store.sqlite")?.prefix(100), header.count == 100 {
                let pages = header[28..<32].reduce(0) { $0 << 8 | Int($1) }
                let size = (try? FileManager.default.attributesOfItem(atPath: home + "/store.sqlite")[.size] as? Int) ?? 0
                if pages * 4096 > size { shortFiles += 1 }
            }
            try expectIntact(home, acknowledged: acknowledged)
        }
        #expect(killedWhileRunning >= count / 2, "most kills cut a writer short")
        print("writers: \(count) runs (half killed within 3 ms of a checkpoint's start), \(killedWhileRunning) killed while writing, \(shortFiles) left store.sqlite shorter than its header, \(acknowledged.count) acknowledged writes all present")
    }

    /// The writer half of `writersKilledDuringCheckpointsLoseNoAcknowledgedWrite`; runs only in its child processes.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[writerHomeVariable] != nil))
    func killedWriter() throws {
        let environment = ProcessInfo.processInfo.environment
        let home = try #require(environment[writerHomeVariable])
        let prefix = try #require(environment[writerPrefixVariable])
        // SQLite's own checkpoints (every 1,000 pages of log) and one every 300 writes: each
        // copies a few MB, so a kill lands inside one often.
        let store = try Store(home: URL(fileURLWithPath: home))
        let globals = try store.globals(of: "TEAM")
        for index in 0..<100_000 {
            let name = "\(prefix)-\(index)"
            try globals.set(name, to: value(of: name))
            FileHandle.standardOutput.write(Data("ACK \(name)\n".utf8))
            if index % 300 == 299 {
                FileHandle.standardOutput.write(Data("CKPT\n".utf8))
                _ = try? store.database.withoutTransaction { db in try db.execute(sql: "PRAGMA wal_checkpoint(PASSIVE)") }
            }
        }
    }

    /// `extrun globals import` of a large document killed at random moments: all of it or
    /// nothing, every time, and the next import succeeds.
    @Test func globalsImportKilledIsAllOrNothing() throws {
        let directory = try TempDirectory()
        let home = directory.sub("home")
        let store = try Store(home: URL(fileURLWithPath: home))
        try store.globals(of: "TEAM").set("before", to: 1)
        var document: [String: JSONValue] = [:]
        for index in 0..<3_000 { document["imported-\(index)"] = .string(String(repeating: "i", count: 200 + index % 100)) }
        let file = directory.sub("import.json")
        let data = try JSONCoding.encoder().encode(JSONValue.object([
            "format": .string(Globals.documentFormat), "version": .int(Globals.documentVersion), "owner": "TEAM", "globals": .object(document),
        ]))
        try data.write(to: URL(fileURLWithPath: file))
        // One uninterrupted run on a copy of the home: the kills spread over 10–110% of it.
        let calibration = directory.sub("calibration")
        _ = try Store(home: URL(fileURLWithPath: calibration))
        let start = Date()
        try runExtrun(["globals", "import", file, "--owner", "TEAM"], home: calibration)
        let full = Date().timeIntervalSince(start)
        var generator = SplitMix(seed: 1_717)
        var outcomes: [String] = []
        for _ in 0..<rounds(4) {
            let delay = full * (0.1 + Double(generator.next() % 1000) / 1000)
            let run = try runExtrun(["globals", "import", file, "--owner", "TEAM", "--mode", "replace"], home: home, killAfter: delay)
            let names = Set(try Store(home: URL(fileURLWithPath: home)).globals(of: "TEAM").list().map(\.name))
            let imported = names.filter { $0.hasPrefix("imported-") }.count
            #expect(imported == 0 || imported == document.count, "all or nothing: \(imported)")
            if imported == 0 { #expect(names.contains("before")) }
            outcomes.append("\(Int(delay * 1000)) ms: \(run.killed ? "killed" : "exit \(run.status)"), \(imported) imported")
            // The store is usable: its next write succeeds.
            try Store(home: URL(fileURLWithPath: home)).globals(of: "TEAM").set("after", to: 2)
            try Store(home: URL(fileURLWithPath: home)).globals(of: "TEAM").delete("after")
        }
        let last = try runExtrun(["globals", "import", file, "--owner", "TEAM", "--mode", "merge"], home: home)
        #expect(last.status == 0)
        print("globals import kills (a whole run: \(Int(full * 1000)) ms): " + outcomes.joined(separator: "; "))
    }

    /// `extrun migrate import` killed at random moments, then run again: it finishes with
    /// every global of the bundle in NEW, once, with its value.
    @Test func migrateImportKilledThenRunAgainLosesNothing() throws {
        let machines = try TwoMachines(extraGlobals: 4_000)
        let senderFile = machines.old.test.directory.sub("old.pub")
        try machines.sender.encoded().write(to: URL(fileURLWithPath: senderFile))
        let arguments = ["migrate", "import", machines.bundle, "--to", "NEW", "--sender", senderFile, "--batch-size", "200"]
        // One uninterrupted run into a home of its own: the kills spread over 5–95% of it.
        let calibration = try TempDirectory()
        try FileManager.default.copyItem(atPath: machines.new.home, toPath: calibration.sub("home"))
        let start = Date()
        let whole = try runExtrun(arguments, home: calibration.sub("home"))
        let full = Date().timeIntervalSince(start)
        #expect(whole.status == 0 || whole.status == 18, "the calibration run finished")
        var generator = SplitMix(seed: 4_242)
        var outcomes: [String] = []
        for _ in 0..<rounds(4) {
            let delay = full * (0.05 + 0.9 * Double(generator.next() % 1000) / 1000)
            let run = try runExtrun(arguments, home: machines.new.home, killAfter: delay)
            let names = try Store(home: URL(fileURLWithPath: machines.new.home)).globals(of: "NEW").list().map(\.name)
            #expect(Set(names).count == names.count)
            outcomes.append("\(Int(delay * 1000)) ms: \(run.killed ? "killed" : "exit \(run.status)"), \(names.count) in NEW")
        }
        let last = try runExtrun(arguments, home: machines.new.home)
        #expect(last.status == 0 || last.status == 18, "\(String(decoding: last.stdout, as: UTF8.self))")
        let old = try machines.old.store.globals(of: "OLD")
        let new = try Store(home: URL(fileURLWithPath: machines.new.home)).globals(of: "NEW")
        let oldNames = try old.list().map(\.name)
        #expect(try new.list().map(\.name) == oldNames)
        for name in oldNames.filter({ _ in generator.next() % 20 == 0 }) + ["text", "count"] {
            #expect(try new.get(name)?.value == old.get(name)?.value, "\(name)")
        }
        print("migrate import kills (a whole run: \(Int(full * 1000)) ms): " + outcomes.joined(separator: "; "))
    }

    /// A full disk at several fill levels (root: a small tmpfs): every write either succeeds
    /// or fails with the disk-full error, never a damaged store; with room again, everything
    /// acknowledged is there.
    @Test(.enabled(if: getuid() == 0, "needs root to mount a small tmpfs (runs in the root half of Scripts/test)"))
    func aFullDiskAtSeveralFillLevelsLosesNothingAcknowledged() throws {
        let directory = try TempDirectory()
        let levels = [0, 4 << 10, 16 << 10, 64 << 10, 256 << 10]
        for (round, leaving) in levels.enumerated() {
            let disk = try SmallDisk(at: directory.sub("disk-\(round)"), megabytes: 3)
            defer { disk.unmount() }
            let home = disk.path + "/home"
            var acknowledged: [String] = []
            do {
                let globals = try Store(home: URL(fileURLWithPath: home)).globals(of: "TEAM")
                for index in 0..<40 {
                    let name = "pre-\(index)"
                    try globals.set(name, to: value(of: name))
                    acknowledged.append(name)
                }
            }
            let filler = try disk.fill(leaving: leaving)
            var failures: [StoreErrorKind: Int] = [:]
            for index in 0..<200 {
                let name = "full-\(index)"
                do {
                    let store = try Store(home: URL(fileURLWithPath: home), checkpointOnClose: index % 2 == 0)
                    try store.globals(of: "TEAM").set(name, to: value(of: name))
                    acknowledged.append(name)
                } catch let error as StoreError {
                    failures[error.kind, default: 0] += 1
                    #expect(error.kind == .ioError || error.kind == .databaseError, "a full disk is not damage: \(error)")
                    #expect(!error.message.contains("aside"))
                }
            }
            #expect(failures.values.reduce(0, +) > 0, "the disk filled up (leaving \(leaving) bytes)")
            unlink(filler)
            try expectIntact(home, acknowledged: acknowledged)
            print("full disk leaving \(leaving) bytes: \(acknowledged.count) acknowledged, failures \(failures)")
        }
    }
}
