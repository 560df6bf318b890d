import ExtrunHost
import ExtrunProtocol
import ExtrunStore
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Issue 30, item 1: the check of a signed plugin's files and their use raced. Someone
/// who can write the plugin's folder swaps one file between the signed version and their
/// own (a hard link, then `rename`, so the signed inode survives and its digest stays
/// cached); before the fix about a quarter of the runs executed the swapped code as the
/// signed plugin, with its owner's data. A signed plugin now runs from a private copy of
/// what was checked, and a folder that others could write is refused.
///
/// `EXTRUN_SWAP_RUNS` sets the runs per plugin (60 here; the campaign of issue 30 is 500:
/// `EXTRUN_SWAP_RUNS=500 swift test --filter OwnerProofSwapTests`).
@Suite("A signed plugin runs what was checked", .serialized)
struct OwnerProofSwapTests {
    static var runs: Int { ProcessInfo.processInfo.environment["EXTRUN_SWAP_RUNS"].flatMap(Int.init) ?? 60 }

    /// Asks for the owner's `apiToken` and, when it gets it, leaves a mark in the owner's
    /// globals (`stolen-<random>`): each mark is one run of the hostile code with the owner's data.
    static let hostileHandler = #"""
        def call(method, params):
            call.n = getattr(call, "n", 0) + 1
            rid = "h%d" % call.n
            send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
            while True:
                msg = read_message()
                if msg is not None and msg.get("id") == rid and "method" not in msg:
                    return msg

        def handle(msg):
            got = json.dumps(call("globals.get", {"name": "apiToken"}))
            if "s3cr3t" in got:
                call("globals.set", {"name": "stolen-" + os.urandom(6).hex(), "value": "x"})
            reply(msg, {"code": "success", "properties": {"echo": "HOSTILE " + got}})
        serve({"handle": handle})
        """#

    /// Swaps `target` between two files kept beside the folder every ~10 ms: a hard link
    /// of the version, renamed over the target, as the attacker of issue 30 did.
    final class Swapper: @unchecked Sendable {
        let target: String
        let versions: [String]
        private let lock = NSLock()
        private var stopping = false
        private let ended = DispatchSemaphore(value: 0)
        private(set) var swaps = 0

        init(target: String, versions: [String]) {
            self.target = target
            self.versions = versions
        }

        func start() {
            let thread = Thread { [self] in
                var index = 0
                while !lock.withLock({ stopping }) {
                    let version = versions[index % versions.count]
                    let link = version + ".link"
                    unlink(link)
                    if Glibc.link(version, link) == 0 { rename(link, target) }
                    index += 1
                    lock.withLock { swaps += 1 }
                    usleep(10_000)
                }
                // The signed version is left in place.
                let link = versions[0] + ".link"
                if Glibc.link(versions[0], link) == 0 { rename(link, target) }
                ended.signal()
            }
            thread.start()
        }

        func stop() {
            lock.withLock { stopping = true }
            ended.wait()
        }
    }

    /// What the runs did.
    struct Tally: CustomStringConvertible {
        var signed = 0, refused = 0, hostile = 0, other = 0
        var otherErrors: [String] = []
        var description: String { "signed \(signed), refused \(refused), hostile code ran \(hostile), other \(other) \(otherErrors.prefix(3))" }
    }

    /// A home where `owner` has an `apiToken`; the signing key is the owner's own there.
    static func home(in tmp: TempDirectory, owner: String) throws -> URL {
        let home = tmp.url.appendingPathComponent("home")
        try Store(home: home).globals(of: owner).set("apiToken", to: "s3cr3t")
        return home
    }

    /// The marks the hostile code left in `owner`'s globals.
    static func stolen(home: URL, owner: String) throws -> Int {
        try Store(home: home).globals(of: owner).list().filter { $0.name.hasPrefix("stolen-") }.count
    }

    /// Runs `invocation` `runs` times while `target` is swapped between `signed` and `hostile`.
    static func campaign(
        host: ExtrunHost.Host, invocation: IntentInvocation, target: URL, signed: URL, hostile: URL, runs: Int,
        isSigned: (HandleReport) -> Bool
    ) -> Tally {
        let swapper = Swapper(target: target.path, versions: [signed.path, hostile.path])
        swapper.start()
        var tally = Tally()
        for _ in 0..<runs {
            let report = host.handle(invocation)
            if let echo = report.response?.properties["echo"]?.stringValue, echo.hasPrefix("HOSTILE") {
                tally.hostile += 1
            } else if report.error?.kind == .signatureInvalid {
                tally.refused += 1
            } else if report.error == nil, isSigned(report) {
                tally.signed += 1
            } else {
                tally.other += 1
                tally.otherErrors.append(report.error.map { "\($0.kind): \($0.message)" } ?? "\(String(describing: report.response))")
            }
        }
        swapper.stop()
        return tally
    }

    @Test("a Python plugin whose script is swapped every 10 ms never runs the swapped script with its owner's data")
    func pythonScriptSwapped() throws {
        let tmp = try TempDirectory("swap-python")
        let home = try Self.home(in: tmp, owner: "BANKTEAM")
        let plugins = tmp.url.appendingPathComponent("plugins")
        let plugin = try ScriptPlugin(in: plugins, name: "bank", script: "serve()")
        chmod(plugins.path, 0o755)
        let manifest = #"{"id":"com.bank.echo","version":"1.0.0","owner":"BANKTEAM","protocolVersion":1,"executable":"plugin.py","modes":["extension","in-app"],"intents":[{"name":"Echo","parameters":[{"name":"text","type":"string"}]}]}"#
        try Data(manifest.utf8).write(to: plugin.directory.appendingPathComponent("manifest.json"))
        let host = ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [plugins]))
        try host.sign(pluginIn: plugin.directory)
        // The two versions, outside the folder (the same filesystem: a hard link of each is renamed in).
        let spare = try tmp.directory("spare")
        let script = plugin.directory.appendingPathComponent("plugin.py")
        let signed = spare.appendingPathComponent("signed.py")
        let hostile = spare.appendingPathComponent("hostile.py")
        #expect(link(script.path, signed.path) == 0)
        try Data((pythonPluginKit + Self.hostileHandler + "\n").utf8).write(to: hostile)
        chmod(hostile.path, 0o755)

        let invocation = IntentInvocation(intent: "Echo", parameters: ["text": "hi"], source: "test")
        let before = host.handle(invocation)
        #expect(before.error == nil && before.response?.properties["echo"] == "hi", "\(String(describing: before.error))")
        let tally = Self.campaign(
            host: host, invocation: invocation, target: script, signed: signed, hostile: hostile, runs: Self.runs,
            isSigned: { $0.response?.properties["echo"] == "hi" })
        let stolen = try Self.stolen(home: home, owner: "BANKTEAM")
        print("[swap] python, \(Self.runs) runs: \(tally); runs of the hostile code with the owner's data: \(stolen)")
        #expect(stolen == 0, "\(stolen) of \(Self.runs) runs executed the swapped script with BANKTEAM's data: \(tally)")
        #expect(tally.hostile == 0, "\(tally)")
        #expect(tally.other == 0, "\(tally)")
    }

    @Test("a native plugin whose executable is swapped every 10 ms never runs the swapped program with its owner's data")
    func nativeExecutableSwapped() throws {
        let staged = try StagedPlugins.directory().appendingPathComponent("Sleep")
        let tmp = try TempDirectory("swap-native")
        let home = try Self.home(in: tmp, owner: "EXAMPLETEAM")
        let plugins = try tmp.directory("plugins")
        let folder = try tmp.directory("plugins/sleep")
        chmod(plugins.path, 0o755)
        chmod(folder.path, 0o755)
        try FileManager.default.copyItem(
            at: staged.appendingPathComponent("manifest.json"), to: folder.appendingPathComponent("manifest.json"))
        let executable = folder.appendingPathComponent("Sleep")
        // The program itself (the staged one is a link into the build's products).
        try FileManager.default.copyItem(at: staged.appendingPathComponent("Sleep").resolvingSymlinksInPath(), to: executable)
        chmod(executable.path, 0o755)
        let host = ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [plugins]))
        try host.sign(pluginIn: folder)
        let spare = try tmp.directory("spare")
        let signed = spare.appendingPathComponent("signed")
        let hostile = spare.appendingPathComponent("hostile")
        #expect(link(executable.path, signed.path) == 0)
        // Exec'd by the kernel from its path (`#!` with the interpreter's own path), as the signed program is.
        let kit = pythonPluginKit.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false).last.map(String.init) ?? ""
        try Data(("#!/usr/bin/python3\n" + kit + Self.hostileHandler + "\n").utf8).write(to: hostile)
        chmod(hostile.path, 0o755)

        let invocation = IntentInvocation(intent: "Sleep", parameters: ["seconds": 0], source: "test")
        let before = host.handle(invocation)
        #expect(before.error == nil, "\(String(describing: before.error))")
        let tally = Self.campaign(
            host: host, invocation: invocation, target: executable, signed: signed, hostile: hostile, runs: Self.runs,
            isSigned: { $0.response?.properties["sleptSeconds"] != nil })
        let stolen = try Self.stolen(home: home, owner: "EXAMPLETEAM")
        print("[swap] native, \(Self.runs) runs: \(tally); runs of the hostile code with the owner's data: \(stolen)")
        #expect(stolen == 0, "\(stolen) of \(Self.runs) runs executed the swapped program with EXAMPLETEAM's data: \(tally)")
        #expect(tally.hostile == 0, "\(tally)")
        #expect(tally.other == 0, "\(tally)")
    }

    @Test("a signed plugin runs from a private, read-only copy, made once per signature and reused")
    func runsFromPrivateCopy() throws {
        let tmp = try TempDirectory("swap-copy")
        let home = try Self.home(in: tmp, owner: "BANKTEAM")
        let plugins = tmp.url.appendingPathComponent("plugins")
        let plugin = try ScriptPlugin(
            in: plugins, name: "bank",
            script: #"serve({"handle": lambda msg: reply(msg, {"code": "success", "properties": {"echo": os.path.realpath(__file__)}})})"#)
        chmod(plugins.path, 0o755)
        let manifest = #"{"id":"com.bank.echo","version":"1.0.0","owner":"BANKTEAM","protocolVersion":1,"executable":"plugin.py","modes":["extension","in-app"],"intents":[{"name":"Echo","parameters":[{"name":"text","type":"string"}]}]}"#
        try Data(manifest.utf8).write(to: plugin.directory.appendingPathComponent("manifest.json"))
        let host = ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [plugins]))
        try host.sign(pluginIn: plugin.directory)
        let invocation = IntentInvocation(intent: "Echo", parameters: ["text": "hi"], source: "test")
        let first = host.handle(invocation)
        let ran = try #require(first.response?.properties["echo"]?.stringValue, "\(String(describing: first.error))")
        let copies = PluginCopies.root(home: home.path)
        #expect(ran.hasPrefix(copies + "/"), "ran \(ran)")
        var info = stat()
        #expect(stat(ran, &info) == 0 && info.st_mode & 0o7777 == 0o555 && info.st_uid == geteuid())
        let copy = URL(fileURLWithPath: ran).deletingLastPathComponent().deletingLastPathComponent()
        #expect(stat(copy.path, &info) == 0 && info.st_mode & 0o7777 == 0o755)
        let inode = info.st_ino
        // Reused by the next run; a new signature makes a new copy.
        let second = host.handle(invocation)
        #expect(second.response?.properties["echo"]?.stringValue == ran)
        #expect(stat(copy.path, &info) == 0 && info.st_ino == inode)
        try Data((pythonPluginKit + #"serve({"handle": lambda msg: reply(msg, {"code": "success", "properties": {"echo": "v2"}})})"# + "\n").utf8)
            .write(to: plugin.directory.appendingPathComponent("plugin.py"))
        #expect(host.handle(invocation).error?.kind == .signatureInvalid)
        try host.sign(pluginIn: plugin.directory)
        #expect(host.handle(invocation).response?.properties["echo"] == "v2")
        #expect(try FileManager.default.contentsOfDirectory(atPath: copies).filter { !$0.hasPrefix(".") }.count == 2)
    }

    @Test("a signed plugin whose folder, file or a folder above it others can write is refused, naming the path and its mode")
    func writableFolderRefused() throws {
        let tmp = try TempDirectory("swap-writable")
        let home = try Self.home(in: tmp, owner: "BANKTEAM")
        let above = try tmp.directory("above")
        let plugins = try tmp.directory("above/plugins")
        chmod(above.path, 0o755)
        chmod(plugins.path, 0o755)
        let plugin = try ScriptPlugin(in: plugins, name: "bank", script: "serve()")
        let manifest = #"{"id":"com.bank.echo","version":"1.0.0","owner":"BANKTEAM","protocolVersion":1,"executable":"plugin.py","modes":["extension","in-app"],"intents":[{"name":"Echo","parameters":[{"name":"text","type":"string"}]}]}"#
        try Data(manifest.utf8).write(to: plugin.directory.appendingPathComponent("manifest.json"))
        let host = ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [plugins]))
        try host.sign(pluginIn: plugin.directory)
        let invocation = IntentInvocation(intent: "Echo", parameters: ["text": "hi"], source: "test")
        #expect(host.handle(invocation).error == nil)

        func refused(_ path: String, mode: String) {
            let report = host.handle(invocation)
            #expect(report.error?.kind == .signatureInvalid, "\(String(describing: report.error))")
            #expect(report.error?.details["file"] == .string(path), "\(String(describing: report.error?.details))")
            #expect(report.error?.message.contains("\(path) (mode \(mode))") == true, "\(String(describing: report.error?.message))")
        }
        // The folder.
        chmod(plugin.directory.path, 0o777)
        refused(plugin.directory.path, mode: "0777")
        chmod(plugin.directory.path, 0o775)
        refused(plugin.directory.path, mode: "0775")
        chmod(plugin.directory.path, 0o755)
        // A file.
        let script = plugin.directory.appendingPathComponent("plugin.py")
        chmod(script.path, 0o757)
        refused(script.path, mode: "0757")
        chmod(script.path, 0o755)
        // A folder above it, unless it is sticky (as /tmp is).
        chmod(above.path, 0o777)
        refused(above.path, mode: "0777")
        chmod(above.path, 0o1777)
        #expect(host.handle(invocation).error == nil)
        chmod(above.path, 0o755)
        // A file of another uid (root only can give one away).
        if geteuid() == 0 {
            chown(script.path, 65534, 65534)
            refused(script.path, mode: "0755")
            chown(script.path, 0, 0)
        }
        #expect(host.handle(invocation).error == nil)
    }
}
