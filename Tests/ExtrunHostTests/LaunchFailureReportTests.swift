import ExtrunHost
import ExtrunProtocol
import Foundation
import Testing

/// Errors that point at the cause (issue 18): a plugin whose own image does not fit
/// under its memory cap, and the stderr of a plugin that answers with an error.
@Suite("Launch failures and error answers say why")
struct LaunchFailureReportTests {
    #if arch(x86_64)
    /// A static x86-64 ELF program of one writable, executable PT_LOAD segment of
    /// `memoryBytes`, of which the file holds `fileBytes` (the rest is .bss). Its code reads
    /// fd 3 until end of file and exits 0: it never answers, it only has to be loaded.
    static func program(memoryBytes: UInt64, fileBytes: UInt64) -> Data {
        let code: [UInt8] = [
            0xBF, 0x03, 0x00, 0x00, 0x00,  // mov edi, 3
            0x48, 0x8D, 0xB4, 0x24, 0x00, 0xF0, 0xFF, 0xFF,  // lea rsi, [rsp-4096]
            0xBA, 0x00, 0x10, 0x00, 0x00,  // mov edx, 4096
            0x31, 0xC0,  // xor eax, eax (read)
            0x0F, 0x05,  // syscall
            0x48, 0x85, 0xC0,  // test rax, rax
            0x7F, 0xE5,  // jg back to the start
            0x31, 0xFF,  // xor edi, edi
            0xB8, 0x3C, 0x00, 0x00, 0x00,  // mov eax, 60 (exit)
            0x0F, 0x05,  // syscall
        ]
        var data = Data()
        func put(_ value: UInt64, _ size: Int) { for i in 0..<size { data.append(UInt8(truncatingIfNeeded: value >> (8 * UInt64(i)))) } }
        let base: UInt64 = 0x400000
        let entry = base + 64 + 56
        data.append(contentsOf: [0x7F, 0x45, 0x4C, 0x46, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0])
        put(2, 2); put(0x3E, 2); put(1, 4); put(entry, 8); put(64, 8); put(0, 8); put(0, 4)
        put(64, 2); put(56, 2); put(1, 2); put(0, 2); put(0, 2); put(0, 2)
        let fileSize = max(fileBytes, UInt64(64 + 56 + code.count))
        put(1, 4); put(7, 4); put(0, 8); put(base, 8); put(base, 8); put(fileSize, 8); put(max(memoryBytes, fileSize), 8); put(0x1000, 8)
        data.append(contentsOf: code)
        return data
    }

    /// A plugin directory whose executable is `program`, padded (sparsely) to `fileBytes`.
    static func plugin(in tmp: TempDirectory, name: String, memoryBytes: UInt64, fileBytes: UInt64) throws {
        let directory = try tmp.directory("plugins/\(name)")
        let executable = directory.appendingPathComponent(name)
        try program(memoryBytes: memoryBytes, fileBytes: fileBytes).write(to: executable)
        let handle = try FileHandle(forWritingTo: executable)
        try handle.truncate(atOffset: max(fileBytes, 200))
        try handle.close()
        chmod(executable.path, 0o755)
        try tmp.write("plugins/\(name)/manifest.json", manifestJSON(id: "test.\(name)", executable: name))
    }

    @Test(
        "a program whose image needs more than the cap is memoryLimitExceeded with the evidence and the advice",
        arguments: [
            // .data in the file: execve maps it and the process is gone before the supervisor sees it run
            // (was: internalError "setup stage 1: No such process", exit 70; a --static-swift-stdlib plugin does this).
            ("imagedata", UInt64(40 << 20), UInt64(40 << 20)),
            // .bss: the kernel cannot map it past execve's point of no return (was: pluginCrashed, SIGSEGV during launch).
            ("imagebss", UInt64(40 << 20), UInt64(0)),
        ])
    func imageOverTheCap(name: String, memoryBytes: UInt64, fileBytes: UInt64) throws {
        let tmp = try TempDirectory(name)
        try Self.plugin(in: tmp, name: name, memoryBytes: memoryBytes, fileBytes: fileBytes)
        let host = ExtrunHost.Host(paths: HostPaths(home: tmp.url.appendingPathComponent("home"), pluginSearchPath: [tmp.url.appendingPathComponent("plugins")]))
        let report = host.handle(IntentInvocation(intent: "Echo", parameters: ["text": "hi"], source: "test"))
        let error = try #require(report.error)
        #expect(error.kind == .memoryLimitExceeded, "\(error)")
        #expect(report.exitCode == 9)
        #expect(error.details["phase"] == "launch")
        #expect(error.details["limitBytes"] == .int(30 << 20))
        let evidence = error.details["evidence"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(evidence.contains { $0.contains("writable segments of") && $0.contains("40 MiB of private memory before it runs, more than the 26 MiB the cap leaves it") },
                "\(evidence)")
        #expect(error.message.contains("ask for more in the manifest (limits.extension.memoryBytes"), "\(error.message)")
        #expect(error.message.contains("link it dynamically"), "\(error.message)")
        #expect(error.details["scratchLeft"] == nil)
        #expect(processes(mentioning: tmp.url.path).isEmpty)

        // Under a cap that holds it, the same program starts (and, never answering, times out).
        var options = HandleOptions()
        options.memoryLimitBytes = 64 << 20
        options.deadlineMs = 300
        let roomy = host.handle(IntentInvocation(intent: "Echo", parameters: ["text": "hi"], source: "test"), options: options)
        #expect(roomy.error?.kind == .timeout, "\(String(describing: roomy.error))")
        #expect(processes(mentioning: tmp.url.path).isEmpty)
    }
    #endif

    @Test("an error answer carries the end of the plugin's stderr, as a crash does")
    func pluginErrorCarriesStderr() throws {
        let tmp = try TempDirectory("errstderr")
        let plugin = try ScriptPlugin(in: tmp.url.appendingPathComponent("plugins"), name: "errstderr", script: #"""
            def handle(msg):
                sys.stderr.write("Traceback (most recent call last):\nValueError: the printer is on fire\n")
                sys.stderr.flush()
                reply_error(msg, -32000, "the printer is offline")
            serve({"handle": handle})
            """#)
        let host = ExtrunHost.Host(paths: HostPaths(home: tmp.url.appendingPathComponent("home"), pluginSearchPath: [tmp.url.appendingPathComponent("plugins")]))
        let report = host.handle(IntentInvocation(intent: "Echo", parameters: ["text": "hi"], source: "test"))
        let error = try #require(report.error)
        #expect(error.kind == .pluginError)
        #expect(error.message == "test.errstderr answered handle with an error: the printer is offline (code -32000)")
        #expect(error.details["stderr"]?.arrayValue?.compactMap(\.stringValue).last == "ValueError: the printer is on fire", "\(error.details)")
        expectGone(noted: try plugin.pid(), mentioning: plugin.directory.path)
    }
}
