import ExtrunHost
import ExtrunProtocol
import ExtrunStore
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Attacks on the private copy a signed plugin runs from (issue 30, item 1, after the fix):
/// someone other than the owner tries to have the host run a signed plugin from files
/// another uid can change.
@Suite("A signed plugin's copy resists other uids", .serialized)
struct OwnerProofCopyAttackTests {
    static let manifest =
        #"{"id":"com.bank.echo","version":"1.0.0","owner":"BANKTEAM","protocolVersion":1,"executable":"plugin.py","modes":["extension","in-app"],"intents":[{"name":"Echo","parameters":[{"name":"text","type":"string"}]}]}"#

    /// A link in a sticky, world-writable folder (as `/tmp` is) that another uid owns can be
    /// pointed elsewhere by that uid at any time (and is followed by root where
    /// `fs.protected_symlinks` is 0): a signed plugin reached through it, or whose folder is
    /// such a link, is refused, naming the link. Root only: only root can give a link away.
    @Test(
        "a signed plugin reached through a link another uid owns (above its folder, or its folder itself) is refused, naming the link",
        .enabled(if: geteuid() == 0, "needs root: only root can make a link another uid owns"))
    func linkOfAnotherUidRefused() throws {
        let tmp = try TempDirectory("copy-attack-link")
        let home = tmp.url.appendingPathComponent("home")
        try Store(home: home).globals(of: "BANKTEAM").set("apiToken", to: "s3cr3t")
        // The real folder: root's, mode 0755 all the way.
        let real = try tmp.directory("real")
        let plugins = try tmp.directory("real/plugins")
        chmod(real.path, 0o755)
        chmod(plugins.path, 0o755)
        let plugin = try ScriptPlugin(in: plugins, name: "bank", script: #"serve({"handle": lambda msg: reply(msg, {"code": "success", "properties": {"echo": "signed"}})})"#)
        try Data(Self.manifest.utf8).write(to: plugin.directory.appendingPathComponent("manifest.json"))
        try ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [plugins])).sign(pluginIn: plugin.directory)
        let invocation = IntentInvocation(intent: "Echo", parameters: ["text": "hi"], source: "test")
        #expect(ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [plugins])).handle(invocation).error == nil)

        // A sticky shared folder, with links of another uid's (nobody, 65534) in it.
        let shared = try tmp.directory("shared")
        chmod(shared.path, 0o1777)
        let above = shared.appendingPathComponent("plugins")
        #expect(symlink(plugins.path, above.path) == 0)
        #expect(lchown(above.path, 65534, 65534) == 0)
        let searchFolder = try tmp.directory("search")
        chmod(searchFolder.path, 0o755)
        let itself = shared.appendingPathComponent("bank")
        #expect(symlink(plugin.directory.path, itself.path) == 0)
        #expect(lchown(itself.path, 65534, 65534) == 0)
        // The folder itself as a link found in a search folder of root's: a root-owned link to the other uid's link.
        #expect(symlink(itself.path, searchFolder.appendingPathComponent("bank").path) == 0)

        for (search, link) in [(above, above.path), (searchFolder, itself.path)] {
            let host = ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [search]))
            let report = host.handle(invocation)
            #expect(report.response?.properties["echo"] == nil, "ran through \(link), owned by uid 65534: \(String(describing: report.response))")
            #expect(report.error?.kind == .signatureInvalid, "\(String(describing: report.error))")
            #expect(report.error?.message.contains(link) == true, "\(String(describing: report.error?.message))")
        }
        // The same link, given to root, is followed.
        #expect(lchown(above.path, 0, 0) == 0)
        #expect(ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [above])).handle(invocation).error == nil)
    }

    /// A manifest may start a program outside the folder (`/usr/bin/python3`) with the
    /// script's absolute path in the folder among its arguments. The program was run from
    /// the copy, but the argument still named the folder: the script and its modules were
    /// read from there, after the check, as before the copy (a writer that kept a descriptor
    /// open from before the folder was made safe, `chmod go-w` as the refusal advises, could
    /// still change them). An argument naming a path in the folder now names it in the copy.
    @Test("a manifest argument naming a file in the plugin's folder runs that file from the copy, not from the folder")
    func argumentInFolderRunsFromCopy() throws {
        let tmp = try TempDirectory("copy-attack-argument")
        let home = tmp.url.appendingPathComponent("home")
        try Store(home: home).globals(of: "BANKTEAM").set("apiToken", to: "s3cr3t")
        let plugins = try tmp.directory("plugins")
        chmod(plugins.path, 0o755)
        let plugin = try ScriptPlugin(
            in: plugins, name: "bank",
            script: #"serve({"handle": lambda msg: reply(msg, {"code": "success", "properties": {"echo": os.path.realpath(__file__)}})})"#)
        let script = plugin.directory.appendingPathComponent("plugin.py").path
        let python = FileManager.default.isExecutableFile(atPath: "/usr/bin/python3") ? "/usr/bin/python3" : "/usr/local/bin/python3"
        let manifest =
            #"{"id":"com.bank.echo","version":"1.0.0","owner":"BANKTEAM","protocolVersion":1,"executable":"\#(python)","arguments":["\#(script)"],"modes":["extension","in-app"],"intents":[{"name":"Echo","parameters":[{"name":"text","type":"string"}]}]}"#
        try Data(manifest.utf8).write(to: plugin.directory.appendingPathComponent("manifest.json"))
        let host = ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [plugins]))
        try host.sign(pluginIn: plugin.directory)
        let report = host.handle(IntentInvocation(intent: "Echo", parameters: ["text": "hi"], source: "test"))
        // Before: the script was opened at its path in the folder (hidden from the run by the
        // mount namespace here: "can't open file '<folder>/plugin.py'"; where it is not hidden, it ran from there).
        let ran = try #require(report.response?.properties["echo"]?.stringValue, "\(String(describing: report.error))")
        #expect(ran.hasPrefix(PluginCopies.root(home: home.path) + "/"), "ran \(ran), not from the copy")
    }

    /// A script whose `#!` line names an interpreter in the plugin's folder by its absolute
    /// path (`#!/opt/plugins/x/bin/python3`): the kernel, executing the copy's script, ran the
    /// interpreter from the folder, read after the check. It now runs the copy's interpreter.
    @Test("a script whose #! names an interpreter in the plugin's folder runs the copy's interpreter, not the folder's")
    func shebangInFolderRunsFromCopy() throws {
        let tmp = try TempDirectory("copy-attack-shebang")
        let home = tmp.url.appendingPathComponent("home")
        try Store(home: home).globals(of: "BANKTEAM").set("apiToken", to: "s3cr3t")
        let plugins = try tmp.directory("plugins")
        chmod(plugins.path, 0o755)
        let plugin = try ScriptPlugin(
            in: plugins, name: "bank",
            script: #"serve({"handle": lambda msg: reply(msg, {"code": "success", "properties": {"echo": os.path.realpath(__file__), "interpreter": sys.executable}})})"#)
        let python = FileManager.default.isExecutableFile(atPath: "/usr/bin/python3") ? "/usr/bin/python3" : "/usr/local/bin/python3"
        let interpreter = plugin.directory.appendingPathComponent("interp")
        #expect(symlink(python, interpreter.path) == 0)
        let script = plugin.directory.appendingPathComponent("plugin.py")
        let text = try String(contentsOf: script, encoding: .utf8)
        let body = text.hasPrefix("#!") ? String(text.drop { $0 != "\n" }) : "\n" + text
        try Data(("#!" + interpreter.path + body).utf8).write(to: script)
        chmod(script.path, 0o755)
        try Data(Self.manifest.utf8).write(to: plugin.directory.appendingPathComponent("manifest.json"))
        let host = ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [plugins]))
        try host.sign(pluginIn: plugin.directory)
        let report = host.handle(IntentInvocation(intent: "Echo", parameters: ["text": "hi"], source: "test"))
        // Before: exec of the folder's interpreter (hidden from the run here: the launch failed).
        let ran = try #require(report.response?.properties["interpreter"]?.stringValue, "\(String(describing: report.error))")
        #expect(ran.hasPrefix(PluginCopies.root(home: home.path) + "/"), "the interpreter ran from \(ran), not from the copy")
        #expect(report.response?.properties["echo"]?.stringValue?.hasPrefix(PluginCopies.root(home: home.path) + "/") == true)
    }

    /// A script's interpreter outside its folder is not signed, and is run as the signed
    /// plugin: one that another uid can change (in a folder it may write) would run that
    /// uid's code with the owner's data. Such a plugin is refused, naming the interpreter's folder.
    @Test("a signed script whose #! interpreter lies where another uid could change it is refused, naming the path")
    func interpreterWritableByOthersRefused() throws {
        let tmp = try TempDirectory("copy-attack-interpreter")
        let home = tmp.url.appendingPathComponent("home")
        try Store(home: home).globals(of: "BANKTEAM").set("apiToken", to: "s3cr3t")
        let plugins = try tmp.directory("plugins")
        chmod(plugins.path, 0o755)
        let plugin = try ScriptPlugin(in: plugins, name: "bank", script: #"serve({"handle": lambda msg: reply(msg, {"code": "success", "properties": {"echo": "signed"}})})"#)
        // A shared tool folder: anyone may replace the interpreter in it.
        let tools = try tmp.directory("tools")
        chmod(tools.path, 0o777)
        let python = FileManager.default.isExecutableFile(atPath: "/usr/bin/python3") ? "/usr/bin/python3" : "/usr/local/bin/python3"
        let interpreter = tools.appendingPathComponent("python3")
        #expect(symlink(python, interpreter.path) == 0)
        let script = plugin.directory.appendingPathComponent("plugin.py")
        let text = try String(contentsOf: script, encoding: .utf8)
        let body = text.hasPrefix("#!") ? String(text.drop { $0 != "\n" }) : "\n" + text
        try Data(("#!" + interpreter.path + body).utf8).write(to: script)
        try Data(Self.manifest.utf8).write(to: plugin.directory.appendingPathComponent("manifest.json"))
        let host = ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [plugins]))
        try host.sign(pluginIn: plugin.directory)
        let report = host.handle(IntentInvocation(intent: "Echo", parameters: ["text": "hi"], source: "test"))
        #expect(report.error?.kind == .signatureInvalid, "\(String(describing: report.error))")
        #expect(report.error?.message.contains("\(tools.path) (mode 0777)") == true, "\(String(describing: report.error?.message))")
        // The same interpreter in a folder only root and the host's user can change: it runs.
        chmod(tools.path, 0o755)
        #expect(host.handle(IntentInvocation(intent: "Echo", parameters: ["text": "hi"], source: "test")).error?.kind != .signatureInvalid)
    }
}
