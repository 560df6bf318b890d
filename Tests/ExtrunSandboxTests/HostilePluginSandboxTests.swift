import ExtrunHost
import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Misbehaving plugins against the real sandbox: for each, the right error
/// kind with a message a plugin author can act on, and no process left.
/// Serialized: several of these spin the CPU, which would skew the others' deadlines.
@Suite(.serialized)
struct HostilePluginSandboxTests {
    @Test func neverAnsweringIsATimeoutWithItsPhaseAndNumbers() throws {
        let plugin = try HostilePlugin()
        defer { plugin.remove() }
        // 3 s: the deadline counts from the launch, and on a loaded machine (a clean-clone
        // run with builds beside it) a launch took more than 1 s, ending in phase "launch".
        let report = plugin.handle("NeverAnswer") { $0.deadlineMs = 3000 }
        let error = try #require(report.error)
        #expect(error.kind == .timeout)
        #expect(error.details["phase"] == "handle", "\(error.message)")
        #expect(error.details["deadlineMs"] == .int(3000))
        #expect((error.details["elapsedMs"]?.doubleValue ?? 0) >= 3000)
        #expect(error.message.contains("3000 ms"))
        #expect(report.exitCode == 8)
        #expect(ProcessTable.waitUntilGone(plugin.marker).isEmpty)
    }

    @Test func spinningTheCPUIsATimeout() throws {
        let plugin = try HostilePlugin()
        defer { plugin.remove() }
        let report = plugin.handle("Spin") { $0.deadlineMs = 1000 }
        #expect(report.error?.kind == .timeout)
        #expect((report.metrics?.cpuMs ?? 0) > 300, "the spinning plugin used CPU: \(String(describing: report.metrics))")
        #expect(ProcessTable.waitUntilGone(plugin.marker).isEmpty)
    }

    @Test func aForkBombIsContainedAndLeavesNothing() throws {
        let plugin = try HostilePlugin()
        defer { plugin.remove() }
        let report = plugin.handle("ForkBomb") { $0.deadlineMs = 2000 }
        let kind = try #require(report.error?.kind)
        // (memoryLimitExceeded: its processes' memory or page tables together past the cap.)
        #expect(kind == .timeout || kind == .pluginCrashed || kind == .memoryLimitExceeded, "got \(String(describing: report.error))")
        #expect(ProcessTable.waitUntilGone(plugin.marker, seconds: 5).isEmpty)
    }

    @Test(arguments: [
        ("OpenSocket", "socket", "socket(AF_INET)"),
        ("ExecShell", "execve", "execve"),
        ("Ptrace", "ptrace", "ptrace"),
        ("Unshare", "unshare", "unshare"),
    ])
    func forbiddenSystemCallsAreNamedViolations(intent: String, syscall: String, shown: String) throws {
        let plugin = try HostilePlugin()
        defer { plugin.remove() }
        let report = plugin.handle(intent)
        let error = try #require(report.error, "\(intent) should have been stopped")
        #expect(error.kind == .sandboxViolation)
        #expect(error.details["syscall"] == .string(syscall))
        #expect(error.message.contains(shown), "\(error.message)")
        #expect(report.response == nil)
        #expect(report.exitCode == 10)
        #expect(ProcessTable.waitUntilGone(plugin.marker).isEmpty)
    }

    @Test(arguments: ["FloodStdout", "FloodStderr"])
    func floodingOutputDoesNotBreakTheRun(intent: String) throws {
        let plugin = try HostilePlugin()
        defer { plugin.remove() }
        let report = plugin.handle(intent)
        #expect(report.error == nil, "\(String(describing: report.error))")
        #expect(report.response?.code == "success")
    }

    @Test func theHostsMemoryStaysBoundedWhileAPluginFloodsIt() throws {
        // Run the CLI as its own process so that its peak memory is its own.
        let plugin = try HostilePlugin()
        defer { plugin.remove() }
        let intentFile = plugin.root.appendingPathComponent("flood.json")
        try Data(#"{"intent": "FloodStdout"}"#.utf8).write(to: intentFile)
        let measured = try CLIRun.measure(
            [try ExtrunBinary.url().path, "handle", intentFile.path],
            environment: ["EXTRUN_PLUGIN_PATH": plugin.pluginPath.path, "EXTRUN_HOME": plugin.home.path])
        #expect(measured.status == 0, "\(measured.output)")
        // The plugin wrote about 50 MB to stdout; the host keeps 64 KiB of it.
        let output = try JSONCoding.decode(JSONValue.self, fromJSON: Data(measured.output.utf8))
        let hostPeak = try #require(output["metrics"]?["hostPeakRSSBytes"]?.intValue)
        #expect(hostPeak < 60 << 20, "host peak RSS \(hostPeak) bytes")
    }

    @Test func aHugeResponseIsRefusedAtItsHeader() throws {
        let plugin = try HostilePlugin()
        defer { plugin.remove() }
        let report = plugin.handle("HugeResponse")
        let error = try #require(report.error)
        #expect(error.kind == .protocolError)
        #expect(error.message.contains("314572800"), "\(error.message)")
        #expect(error.message.contains("exceeds the limit"))
        #expect(ProcessTable.waitUntilGone(plugin.marker).isEmpty)
    }

    @Test(arguments: [true, false])
    func aDaemonizedGrandchildDoesNotSurvive(pidNamespace: Bool) throws {
        let plugin = try HostilePlugin(policy: pidNamespace ? nil : #"{"namespaces": {"pid": false, "network": false, "ipc": false}}"#)
        defer { plugin.remove() }
        let report = plugin.handle("Daemonize")
        #expect(report.response?.code == "success", "\(String(describing: report.error))")
        #expect(ProcessTable.waitUntilGone(plugin.marker).isEmpty, "the double-forked, setsid grandchild is still running")
    }

    @Test func writingPastTheFileSizeLimitFails() throws {
        let plugin = try HostilePlugin(policy: #"{"fileSizeBytes": 1048576}"#)
        defer { plugin.remove() }
        let report = plugin.handle("WriteBigFile", ["megabytes": 4])
        let error = try #require(report.error)
        // Python ignores SIGXFSZ, so the write fails with EFBIG and the script dies of the exception.
        #expect(error.kind == .pluginCrashed)
        #expect(error.message.contains("File too large"), "\(error.message)")
    }

    @Test func progressExtendsTheDeadlineInExtensionModeOnly() throws {
        let plugin = try HostilePlugin(policy: #"{"extension": {"deadlineMs": 1000}, "in-app": {"deadlineMs": 1000}}"#)
        defer { plugin.remove() }
        // Three progress reports 0.6 s apart: 1.8 s in all, past the policy's 1 s deadline.
        let extended = plugin.handle("ProgressThenAnswer", ["steps": 3])
        #expect(extended.response?.code == "success", "\(String(describing: extended.error))")
        let inApp = plugin.handle("ProgressThenAnswer", ["steps": 3]) { $0.mode = .inApp }
        #expect(inApp.error?.kind == .timeout)
        // A deadline given for one run (--timeout) is a cap: progress does not extend it.
        let capped = plugin.handle("ProgressThenAnswer", ["steps": 3]) { $0.deadlineMs = 1000 }
        #expect(capped.error?.kind == .timeout)
        #expect(capped.limits?.maxExtendedDeadlineMs == 1000)
    }

    @Test func theHostsDeathTakesThePluginWithIt() throws {
        let plugin = try HostilePlugin()
        defer { plugin.remove() }
        let intentFile = plugin.root.appendingPathComponent("never.json")
        try Data(#"{"intent": "NeverAnswer"}"#.utf8).write(to: intentFile)
        let process = Process()
        process.executableURL = try ExtrunBinary.url()
        process.arguments = ["handle", intentFile.path]
        process.environment = ["EXTRUN_PLUGIN_PATH": plugin.pluginPath.path, "EXTRUN_HOME": plugin.home.path, "PATH": "/usr/bin:/bin"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        // Wait for the plugin to be up.
        let end = Date().addingTimeInterval(5)
        while plugin.leftovers().isEmpty && Date() < end { usleep(20_000) }
        #expect(!plugin.leftovers().isEmpty, "the plugin never started")
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        #expect(ProcessTable.waitUntilGone(plugin.marker).isEmpty, "the plugin outlived its host")
    }
}

/// The limits with the real example plugins (AllocateMemory, Sleep).
@Suite(.serialized)
struct LimitExampleTests {
    @Test func allocating100MBInExtensionModeIsAMemoryBreachWithItsNumbers() throws {
        let home = try makeTemporaryFolder("sandbox-home")
        let report = try StagedPlugins.host(home: home).handle(IntentInvocation(intent: "AllocateMemory", parameters: ["megabytes": 100]))
        let error = try #require(report.error)
        #expect(error.kind == ErrorKind.memoryLimitExceeded, "\(error)")
        #expect(error.details["limitBytes"] == JSONValue.int(30 << 20))
        #expect(error.details["mode"] == "extension")
        let peak = try #require(error.details["peakBytes"]?.intValue)
        // The peak is read as the plugin ends, not sampled: it went up to its private share
        // (26 MiB of the 30: 4 MiB are for files in memory), where the next 1 MiB was refused.
        #expect(peak > 22 << 20 && peak <= 26 << 20, "peak \(peak)")
        #expect(error.details["evidence"]?.arrayValue?.isEmpty == false, "\(error)")
        #expect(error.message.contains("--mode in-app"))
        #expect(report.exitCode == 9)
    }

    /// A plugin dying of its cap closes its channels before its exit is reported; on a
    /// busy machine the exit came after the closed-channel grace and the run read as
    /// protocolError ("closed its channel and kept running": seen once in a full suite run
    /// beside another's tests). With no grace at all, the race is lost every time: the
    /// verdict must still be the cap, from the kernel's refusal.
    @Test func aPluginDyingOfItsCapIsMemoryLimitExceededHoweverLateItsExitComes() throws {
        let home = try makeTemporaryFolder("sandbox-home")
        let host = try StagedPlugins.host(home: home)
        var options = HandleOptions()
        var policy = SandboxPolicy.default
        policy.host.closedChannelGraceMs = 0
        options.policy = policy
        for _ in 0..<4 {
            let report = host.handle(IntentInvocation(intent: "AllocateMemory", parameters: ["megabytes": 40]), options: options)
            let error = try #require(report.error)
            #expect(error.kind == .memoryLimitExceeded, "\(error)")
            #expect(error.details["peakBytes"]?.intValue != nil)
        }
        #expect(ProcessTable.waitUntilGone("AllocateMemory").isEmpty)
    }

    /// The same program gets the same verdict and the same peak every run, however
    /// loaded the machine: the figure is the kernel's, read as the plugin ends.
    @Test func theSameProgramGetsTheSameVerdictAndPeakEveryRun() throws {
        let home = try makeTemporaryFolder("sandbox-home")
        let host = try StagedPlugins.host(home: home)
        var peaks: [Int64] = []
        for _ in 0..<6 {
            let report = host.handle(IntentInvocation(intent: "AllocateMemory", parameters: ["megabytes": 40]))
            let error = try #require(report.error)
            #expect(error.kind == .memoryLimitExceeded, "\(error)")
            peaks.append(try #require(error.details["peakBytes"]?.intValue))
        }
        let spread = (peaks.max() ?? 0) - (peaks.min() ?? 0)
        // (Within 1 MiB: where the cap stops it depends on what the runtime's other threads
        // hold at that moment, 0.8 MB apart at most in the runs seen.)
        #expect(spread <= 1 << 20, "peaks \(peaks)")
        #expect(ProcessTable.waitUntilGone("AllocateMemory").isEmpty)
    }

    @Test func theSameInInAppModeSucceeds() throws {
        let home = try makeTemporaryFolder("sandbox-home")
        var options = HandleOptions()
        options.mode = .inApp
        let report = try StagedPlugins.host(home: home).handle(
            IntentInvocation(intent: "AllocateMemory", parameters: ["megabytes": 100]), options: options)
        #expect(report.response?.code == "success", "\(String(describing: report.error))")
        #expect((report.metrics?.peakMemoryBytes ?? 0) > 100 << 20)
        #expect(report.limits?.memoryBytes == 1 << 30)
    }

    @Test func allocatingJustUnderTheCapSucceeds() throws {
        let home = try makeTemporaryFolder("sandbox-home")
        let report = try StagedPlugins.host(home: home).handle(IntentInvocation(intent: "AllocateMemory", parameters: ["megabytes": 16]))
        #expect(report.response?.code == "success", "\(String(describing: report.error))")
        #expect((report.metrics?.peakMemoryBytes ?? .max) < 30 << 20)
    }

    @Test func sleeping30SecondsTimesOutAtTheDefault10() throws {
        let home = try makeTemporaryFolder("sandbox-home")
        let report = try StagedPlugins.host(home: home).handle(IntentInvocation(intent: "Sleep", parameters: ["seconds": 30]))
        let error = try #require(report.error)
        #expect(error.kind == ErrorKind.timeout)
        #expect(error.details["deadlineMs"] == JSONValue.int(10_000))
        let elapsed = try #require(error.details["elapsedMs"]?.doubleValue)
        #expect(elapsed >= 10_000 && elapsed < 15_000)
    }

    @Test func aManifestOrCommandLineAskingAboveThePolicyIsAnError() throws {
        let home = try makeTemporaryFolder("sandbox-home")
        var options = HandleOptions()
        options.memoryLimitBytes = 2 << 30
        let report = try StagedPlugins.host(home: home).handle(
            IntentInvocation(intent: "AllocateMemory", parameters: ["megabytes": 1]), options: options)
        let error = try #require(report.error)
        #expect(error.message.contains("at most 120 MiB"), "\(error.message)" as Comment)
        #expect(report.metrics == nil, "nothing was started")
    }
}

enum CLIRun {
    struct Measured {
        var status: Int32
        var output: String
    }

    /// Runs a command and returns its exit status and standard output.
    static func measure(_ arguments: [String], environment: [String: String]) throws -> Measured {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: arguments[0])
        process.arguments = Array(arguments.dropFirst())
        process.environment = environment.merging(["PATH": "/usr/bin:/bin"]) { a, _ in a }
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        try process.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return Measured(status: process.terminationStatus, output: String(decoding: output, as: UTF8.self))
    }
}
