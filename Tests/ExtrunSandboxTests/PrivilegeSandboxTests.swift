import ExtrunHost
import ExtrunProtocol
import ExtrunStore
import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Hostile plugins against the privilege model (docs/sandbox.md, "Privileges"):
/// the store, the keys and other owners' containers stay out of reach, the host
/// cannot be traced or signalled, and the scratch directory cannot be used to
/// get out. Every test runs both as root (plugins then run as `extrun-plugin`)
/// and as an ordinary user (Scripts/test runs the suite both ways) and asserts
/// what must hold in the mode it finds.
@Suite(.serialized)
struct PrivilegeSandboxTests {
    static let isRoot = geteuid() == 0

    /// A hostile plugin with a store holding a secret, a policy file, and another owner's container.
    struct Setup {
        let plugin: HostilePlugin
        let secretFile: URL

        init(policy: String = "{}") throws {
            plugin = try HostilePlugin(policy: policy)
            let store = try Store(home: plugin.home)
            try store.globals(of: "TESTTEAM").set("secret", to: "the recipe")
            let container = plugin.home.appendingPathComponent("containers/OTHERTEAM")
            try FileManager.default.createDirectory(at: container, withIntermediateDirectories: true)
            chmod(container.path, 0o700)
            secretFile = container.appendingPathComponent("secret.txt")
            try Data("other owner's file".utf8).write(to: secretFile)
            chmod(secretFile.path, 0o644)
        }

        var home: String { plugin.home.path }

        /// Runs `intent`, collecting the `--verbose` lines.
        func run(_ intent: String, _ parameters: [String: JSONValue] = [:]) -> (HandleReport, [String]) {
            let lines = Mutex<[String]>([])
            let report = plugin.handle(intent, parameters) { options in
                options.log = { line in lines.withLock { $0.append(line) } }
            }
            return (report, lines.withLock { $0 })
        }

        /// The plugin's own account of its attempts: what each came to ("ok" or an errno name).
        func attempts(_ report: HandleReport) throws -> [String: String] {
            let text = try #require(report.response?.properties["result"]?.stringValue, "\(String(describing: report.error))")
            return try JSONDecoder().decode([String: String].self, from: Data(text.utf8))
        }

        /// The host and the store are as they were.
        func expectStoreIntact(sourceLocation: SourceLocation = #_sourceLocation) throws {
            let store = try Store(home: plugin.home)
            #expect(try store.globals(of: "TESTTEAM").get("secret")?.value == "the recipe", sourceLocation: sourceLocation)
            for planted in ["planted", "keys/planted.key", "containers/planted"] {
                #expect(!FileManager.default.fileExists(atPath: home + "/" + planted), "\(planted) was written", sourceLocation: sourceLocation)
            }
            #expect(plugin.leftovers().isEmpty, sourceLocation: sourceLocation)
        }
    }

    @Test(arguments: [true, false])
    func theStoreTheKeysAndThePolicyCannotBeReadByPathNorThroughProc(pidNamespace: Bool) throws {
        // Without a pid namespace the host's pid and the supervisor (the plugin's parent)
        // are in the plugin's /proc: neither is dumpable, so /proc/PID/cwd and root are refused.
        let setup = try Setup(policy: pidNamespace ? "{}" : #"{"namespaces": {"pid": false}}"#)
        defer { setup.plugin.remove() }
        let (report, log) = setup.run("ReadSecrets", ["path": .string(setup.home), "pid": .int(Int64(getpid()))])
        let attempts = try setup.attempts(report)
        #expect(attempts.count >= 10, "\(attempts)")
        for (path, outcome) in attempts {
            #expect(outcome != "ok", "the plugin read \(path)")
        }
        #expect(log.contains { $0.contains("store and keys: hidden by a mount namespace") }, "\(log)")
        if pidNamespace {
            #expect(log.contains { $0.contains("pid namespace with its own /proc") }, "\(log)")
        }
        try setup.expectStoreIntact()
    }

    @Test func withoutAMountNamespaceOnlyARootHostKeepsThePluginOutByPermissions() throws {
        let setup = try Setup(policy: #"{"namespaces": {"mount": false}}"#)
        defer { setup.plugin.remove() }
        let (report, log) = setup.run("ReadSecrets", ["path": .string(setup.home), "pid": .int(Int64(getpid()))])
        let attempts = try setup.attempts(report)
        if Self.isRoot {
            // The plugin runs as extrun-plugin: keys/ 700, store.sqlite and policy.json 600 keep it out.
            for (path, outcome) in attempts {
                #expect(outcome != "ok", "the plugin read \(path)")
            }
            #expect(log.contains { $0.contains("kept out by permissions alone") }, "\(log)")
        } else if SandboxCapabilities.current.landlockABI > 0 {
            // Same uid, no mount namespace: Landlock alone keeps it out.
            for (path, outcome) in attempts {
                #expect(outcome != "ok", "the plugin read \(path)")
            }
            #expect(attempts[setup.home + "/store.sqlite"] == "EACCES")
            #expect(log.contains { $0.contains("store and keys: kept out by Landlock") }, "\(log)")
        } else {
            // Same uid, nothing hidden: the host says so rather than pretend.
            #expect(attempts[setup.home + "/store.sqlite"] == "ok")
            #expect(log.contains { $0.contains("store and keys: NOT hidden") }, "\(log)")
        }
        try setup.expectStoreIntact()
    }

    @Test func aHomeThatDoesNotExistYetIsMadeBeforeThePluginStartsSoThatItIsCovered() throws {
        // Otherwise a first run's store (made by the host while the plugin runs) would be in plain view.
        let plugin = try HostilePlugin()
        defer { plugin.remove() }
        try FileManager.default.removeItem(at: plugin.home)
        let lines = Mutex<[String]>([])
        let report = plugin.handle("ReadSecrets", ["path": .string(plugin.home.path)]) { options in
            options.log = { line in lines.withLock { $0.append(line) } }
        }
        #expect(report.response?.code == "success", "\(String(describing: report.error))")
        var info = stat()
        #expect(stat(plugin.home.path, &info) == 0 && info.st_mode & 0o777 == 0o700)
        #expect(lines.withLock { $0 }.contains { $0.contains("store and keys: hidden by a mount namespace") })
    }

    @Test func writingIntoTheHomeFails() throws {
        let setup = try Setup()
        defer { setup.plugin.remove() }
        let (report, _) = setup.run("WriteHome", ["path": .string(setup.home)])
        let attempts = try setup.attempts(report)
        #expect(attempts.count == 4)
        for (path, outcome) in attempts {
            #expect(outcome != "ok", "the plugin wrote \(path)")
        }
        try setup.expectStoreIntact()
    }

    @Test func anotherOwnersContainerIsOutOfReach() throws {
        let setup = try Setup()
        defer { setup.plugin.remove() }
        let (report, _) = setup.run("ReadContainer", ["path": .string(setup.secretFile.path)])
        let attempts = try setup.attempts(report)
        #expect(attempts[setup.secretFile.path] != nil)
        for (path, outcome) in attempts {
            #expect(outcome != "ok", "the plugin read \(path)")
        }
        // As root, permissions alone keep it out too (the container is 700).
        if Self.isRoot {
            try writePolicy(#"{"namespaces": {"mount": false}}"#, home: setup.plugin.home)
            let (again, _) = setup.run("ReadContainer", ["path": .string(setup.secretFile.path)])
            for (path, outcome) in try setup.attempts(again) {
                #expect(outcome != "ok", "the plugin read \(path) without a mount namespace")
            }
        }
        try setup.expectStoreIntact()
    }

    @Test func attachingPtraceToTheHostIsAViolation() throws {
        let setup = try Setup()
        defer { setup.plugin.remove() }
        let (report, _) = setup.run("PtraceAttach", ["pid": .int(Int64(getpid()))])
        let error = try #require(report.error)
        #expect(error.kind == .sandboxViolation)
        #expect(error.details["syscall"] == "ptrace")
        #expect(report.exitCode == 10)
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        #expect(status.contains("TracerPid:\t0"), "the host is being traced")
        try setup.expectStoreIntact()
    }

    @Test(arguments: [true, false])
    func signalsToTheHostFailButItsOwnChildCanBeSignalled(pidNamespace: Bool) throws {
        let setup = try Setup(policy: pidNamespace ? "{}" : #"{"namespaces": {"pid": false}}"#)
        defer { setup.plugin.remove() }
        let host = getpid()
        let (report, log) = setup.run("SignalHost", ["pid": .int(Int64(host))])
        let attempts = try setup.attempts(report)
        for call in ["kill(\(host), SIGSTOP)", "kill(\(host), SIGKILL)", "kill(-\(host), SIGKILL)", "pidfd_send_signal(host)"] {
            let outcome = try #require(attempts[call], "\(attempts)")
            // pidfd_send_signal is refused outright (ENOSYS) where the supervisor checks signals.
            #expect(outcome == "EPERM" || outcome == "ESRCH" || (call.hasPrefix("pidfd") && !pidNamespace && outcome == "ENOSYS"), "\(call): \(outcome)")
        }
        #expect(attempts["own child"] == "killed by 9", "\(attempts)")
        if !pidNamespace {
            // Without a pid namespace the supervisor decides, and the host reports each refusal.
            #expect(attempts["kill(-1, 0)"] == "EPERM", "\(attempts) \(log)")
            #expect(log.contains { $0.contains("was refused kill(pid \(host), SIGSTOP)") }, "\(log)")
        }
        try setup.expectStoreIntact()
    }

    @Test func chmodAndChownDoNotGetOutOfTheScratchDirectoryWhichIsRemovedAnyway() throws {
        let setup = try Setup()
        defer { setup.plugin.remove() }
        let tmp = FileManager.default.temporaryDirectory.path
        var before = stat()
        stat(tmp, &before)
        let (report, _) = setup.run("EscapeScratch")
        let attempts = try setup.attempts(report)
        // Where $TMPDIR lies in /tmp, /var/tmp or /dev/shm, the plugin's `..` is a folder of the
        // run's own /tmp (its memory filesystem, gone with the run), which a plugin that is the
        // host's user may change; the host's folder is untouched either way (below).
        let parentIsTheRunsOwn = getuid() != 0 && ["/tmp", "/var/tmp", "/dev/shm"].contains { tmp.hasPrefix($0 + "/") }
        for call in ["chown . root", "chmod .. 777", "chown .. self", "write .."] where call == "chown . root" || !parentIsTheRunsOwn {
            #expect(attempts[call] != nil && attempts[call] != "ok", "\(call): \(attempts)")
        }
        var after = stat()
        stat(tmp, &after)
        #expect(after.st_mode == before.st_mode && after.st_uid == before.st_uid, "the scratch directory's parent was changed")
        #expect(!FileManager.default.fileExists(atPath: tmp + "/planted"), "the plugin wrote into the host's \(tmp)")
        let scratch = try #require(report.response?.properties["scratch"]?.stringValue)
        #expect(!FileManager.default.fileExists(atPath: scratch), "the scratch directory \(scratch) was left behind")
        try setup.expectStoreIntact()
    }

    @Test func thePluginRunsAsItsOwnUserWhenTheHostIsRootAndOwnsItsScratchDirectory() throws {
        let setup = try Setup()
        defer { setup.plugin.remove() }
        let (report, log) = setup.run("WhoAmI")
        let text = try #require(report.response?.properties["result"]?.stringValue, "\(String(describing: report.error))")
        let who = try JSONDecoder().decode(Identity.self, from: Data(text.utf8))
        #expect(who.uid == who.euid)
        #expect(who.scratchOwner == who.uid)
        #expect(who.scratchMode == "0o700")
        if Self.isRoot {
            #expect(who.uid != 0 && who.gid != 0)
            #expect(who.groups.isEmpty, "supplementary groups: \(who.groups)")
            #expect(log.contains { $0.contains("plugin user: extrun-plugin") || $0.contains("plugin user: nobody") }, "\(log)")
            // The policy may name the user.
            try writePolicy(#"{"pluginUser": "nobody"}"#, home: setup.plugin.home)
            let (again, _) = setup.run("WhoAmI")
            let other = try JSONDecoder().decode(
                Identity.self, from: Data(try #require(again.response?.properties["result"]?.stringValue).utf8))
            #expect(other.uid == 65534)
        } else {
            #expect(who.uid == Int(getuid()))
            #expect(log.contains { $0.contains("the host is not root") }, "\(log)")
        }
    }

    struct Identity: Decodable {
        var uid: Int
        var euid: Int
        var gid: Int
        var groups: [Int]
        var scratchOwner: Int
        var scratchMode: String
    }

    @Test(arguments: [
        ("store.sqlite", 0o644, "chmod 600"),
        ("keys/TESTTEAM.key", 0o640, "chmod 600"),
        ("keys", 0o755, "chmod 700"),
        ("policy.json", 0o644, "chmod 600"),
        ("containers/OTHERTEAM", 0o755, "chmod 700"),
        ("", 0o777, "chmod 700"),
    ])
    func aStoreKeyPolicyOrContainerOpenToOthersIsRefusedAtStart(file: String, mode: Int, fix: String) throws {
        let setup = try Setup()
        defer { setup.plugin.remove() }
        let path = file.isEmpty ? setup.home : setup.home + "/" + file
        chmod(path, mode_t(mode))
        let (report, _) = setup.run("WhoAmI")
        let error = try #require(report.error, "\(path) with mode \(String(mode, radix: 8)) was accepted")
        #expect(error.kind == .configurationError)
        #expect(report.exitCode == 11)
        #expect(error.message.contains(path), "\(error.message)")
        #expect(error.message.contains("\(fix) '\(path)'"), "\(error.message)")
        #expect(error.details["problem"] == "insecurePermissions")
        #expect(report.metrics == nil, "a plugin was started")
        // Fixed as the message says, the run goes ahead.
        chmod(path, fix == "chmod 600" ? 0o600 : 0o700)
        #expect(setup.run("WhoAmI").0.response?.code == "success")
    }

    @Test func aPluginInstalledUnderTheHomeCannotRewriteItsOwnManifest() throws {
        let setup = try Setup()
        defer { setup.plugin.remove() }
        let installed = setup.plugin.home.appendingPathComponent("plugins")
        try FileManager.default.createDirectory(at: installed, withIntermediateDirectories: true)
        let folder = installed.appendingPathComponent(setup.plugin.marker)
        try FileManager.default.copyItem(at: setup.plugin.pluginPath.appendingPathComponent(setup.plugin.marker), to: folder)
        // Writable by anyone, as a careless install might leave it: the mount namespace still refuses.
        chmod(folder.path, 0o777)
        chmod(folder.appendingPathComponent("manifest.json").path, 0o666)
        let before = try Data(contentsOf: folder.appendingPathComponent("manifest.json"))
        let host = ExtrunHost.Host(paths: HostPaths(home: setup.plugin.home, pluginSearchPath: [installed]))
        let report = host.handle(IntentInvocation(intent: "RewriteOwnManifest"))
        for (path, outcome) in try setup.attempts(report) {
            #expect(outcome != "ok", "the plugin rewrote \(path)")
        }
        #expect(try Data(contentsOf: folder.appendingPathComponent("manifest.json")) == before)
    }

    @Test func aPluginInstalledUnderTheHomeStillRunsWithTheHomeHidden() throws {
        let setup = try Setup()
        defer { setup.plugin.remove() }
        let installed = setup.plugin.home.appendingPathComponent("plugins")
        try FileManager.default.createDirectory(at: installed, withIntermediateDirectories: true)
        let source = setup.plugin.pluginPath.appendingPathComponent(setup.plugin.marker)
        try FileManager.default.copyItem(at: source, to: installed.appendingPathComponent(setup.plugin.marker))
        let host = ExtrunHost.Host(paths: HostPaths(home: setup.plugin.home, pluginSearchPath: [installed]))
        let lines = Mutex<[String]>([])
        var options = HandleOptions()
        options.log = { line in lines.withLock { $0.append(line) } }
        let report = host.handle(IntentInvocation(intent: "ReadSecrets", parameters: ["path": .string(setup.home)]), options: options)
        let log = lines.withLock { $0 }
        for (path, outcome) in try setup.attempts(report) {
            #expect(outcome != "ok", "the plugin read \(path)")
        }
        #expect(log.contains { $0.contains("bound back: ") && $0.contains(installed.path) }, "\(log)")
        try setup.expectStoreIntact()
    }

    /// The executable is a link out of the plugin's folder, as Scripts/stage-plugins lays plugins
    /// out: straight to the build's products, or through a linked folder as SwiftPM's
    /// `.build/debug` (a link to `.build/<triple>/debug`); a clean clone under /tmp puts all of
    /// it in a folder the plugin does not see.
    @Test(arguments: [false, true])
    func anExecutableThatIsALinkOutOfThePluginsFolderIsReachable(throughALinkedFolder: Bool) throws {
        let setup = try Setup()
        defer { setup.plugin.remove() }
        let folder = setup.plugin.pluginPath.appendingPathComponent(setup.plugin.marker)
        let real = setup.plugin.root.appendingPathComponent("build/x86_64/debug")
        try FileManager.default.createDirectory(at: real, withIntermediateDirectories: true)
        var products = real
        if throughALinkedFolder {
            products = setup.plugin.root.appendingPathComponent("build/debug")
            try FileManager.default.createSymbolicLink(at: products, withDestinationURL: real)
        }
        let script = folder.appendingPathComponent("hostile.py")
        try FileManager.default.moveItem(at: script, to: real.appendingPathComponent("hostile.py"))
        try FileManager.default.createSymbolicLink(at: script, withDestinationURL: products.appendingPathComponent("hostile.py"))
        let (report, log) = setup.run("WhoAmI")
        #expect(report.response?.code == "success", "\(String(describing: report.error)) \(log)")
    }

    @Test func aFolderThePluginsUserCannotEnterIsCoveredOrElseRefusedNamingIt() throws {
        // Like /root above root's $EXTRUN_HOME/plugins: a folder above the plugin's own, mode 700.
        let setup = try Setup()
        defer { setup.plugin.remove() }
        chmod(setup.plugin.pluginPath.path, 0o700)
        // With a mount namespace the folder is covered and the plugin's own bound back: it runs.
        let (covered, _) = setup.run("WhoAmI")
        #expect(covered.response?.code == "success", "\(String(describing: covered.error))")
        try writePolicy(#"{"namespaces": {"mount": false}}"#, home: setup.plugin.home)
        let (report, _) = setup.run("WhoAmI")
        if Self.isRoot {
            // Without one, the host refuses before starting anything, naming the folder and the fix.
            let error = try #require(report.error)
            #expect(error.kind == .configurationError)
            #expect(error.message.contains("chmod o+x '\(setup.plugin.pluginPath.path)'"), "\(error.message)")
            #expect(report.metrics == nil, "a plugin was started")
        } else {
            // The plugin is the host's user: the folder is its own.
            #expect(report.response?.code == "success", "\(String(describing: report.error))")
        }
    }

    @Test(arguments: [("store.sqlite", 0o644, "chmod 600"), ("store.sqlite-wal", 0o640, "chmod 600"), ("", 0o757, "chmod 700")])
    func theStoreItselfRefusesToOpenWhenOthersCanReadIt(file: String, mode: Int, fix: String) throws {
        // What `extrun globals`, `owners` and `migrate` see (exit 15), as the store opens.
        let setup = try Setup()
        defer { setup.plugin.remove() }
        let path = file.isEmpty ? setup.home : setup.home + "/" + file
        if !FileManager.default.fileExists(atPath: path) { try Data().write(to: URL(fileURLWithPath: path)) }
        chmod(path, mode_t(mode))
        do {
            _ = try Store(home: setup.plugin.home)
            Issue.record("the store opened with \(path) at mode \(String(mode, radix: 8))")
        } catch let error as StoreError {
            #expect(error.kind == .insecurePermissions)
            #expect(error.message.contains("\(fix) '\(path)'"), "\(error.message)")
            #expect(error.details["file"] == .string(path))
        }
        chmod(path, file.isEmpty ? 0o700 : 0o600)
        try setup.expectStoreIntact()
    }

    @Test func pluginUserValuesAreChecked() {
        #expect(PluginUserCheck.problem("root") != nil)
        #expect(PluginUserCheck.problem("0") != nil)
        #expect(PluginUserCheck.problem("1000:0") != nil)
        #expect(PluginUserCheck.problem("a:b:c") != nil)
        #expect(PluginUserCheck.problem("") != nil)
        #expect(PluginUserCheck.problem("nobody") == nil)
        #expect(PluginUserCheck.problem("65534:65534") == nil)
    }

    @Test func aPolicyNamingANonexistentPluginUserIsAConfigurationError() throws {
        guard Self.isRoot else { return }  // pluginUser applies only when the host is root
        let setup = try Setup(policy: #"{"pluginUser": "no-such-user-here"}"#)
        defer { setup.plugin.remove() }
        let (report, _) = setup.run("WhoAmI")
        let error = try #require(report.error)
        #expect(error.kind == .configurationError)
        #expect(error.message.contains("no-such-user-here"))
        #expect(error.details["field"] == "pluginUser")
    }
}

/// The policy's `pluginUser` validation, as the policy file sees it.
enum PluginUserCheck {
    static func problem(_ value: String) -> String? {
        var policy = SandboxPolicy.default
        policy.pluginUser = value
        return policy.problems().first { $0.hasPrefix("pluginUser") }
    }
}
