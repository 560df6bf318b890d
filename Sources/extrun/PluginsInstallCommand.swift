import ArgumentParser
import ExtrunHost
import ExtrunProtocol
import ExtrunStore
import Foundation

struct PluginsInstall: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "install",
        abstract: "Install a plugin folder into $EXTRUN_HOME/plugins, where every extrun command finds it.",
        discussion: """
            Copies DIR to $EXTRUN_HOME/plugins/<id> (the manifest's id) so that `extrun handle` \
            finds it without EXTRUN_PLUGIN_PATH. The copy is made readable and runnable by the \
            plugin's user (folders 0755, files 0644, the executable 0755), so you need not chmod \
            anything. A signed plugin must verify before it is copied and still verify after \
            (its owner's trust is shown, not required). A symbolic link inside the folder is kept; \
            one that leads out of it is replaced by its file, or refused for a signed plugin \
            (sign again after replacing it). The executable must be in the folder, or an absolute \
            path to a program of this machine (an interpreter such as /usr/bin/python3).

            Refused, with both plugins named: an intent or activity type another plugin on the \
            plugin path already handles, and a plugin already installed under the same id unless \
            --replace is given. The copy is made beside the installed plugins and renamed into \
            place (or exchanged with the old version in one step): a failed install leaves the \
            installed plugin as it was, and nothing else behind.

            Check a plugin before you install it: extrun plugins check DIR.

            Examples:
              extrun plugins install ./my-plugin
              extrun plugins install ./my-plugin --replace
            """)

    @Argument(help: ArgumentHelp("The plugin folder (holding manifest.json).", valueName: "dir")) var directory: String
    @Flag(help: "Replace an installed plugin with the same id (an update).") var replace = false
    @OptionGroup var output: PluginsFormat
    var format: OutputFormat { output.format }

    func run() throws {
        let host = ExtrunHost.Host()
        let source = URL(fileURLWithPath: directory, isDirectory: true)
        let signed = FileManager.default.fileExists(atPath: source.appendingPathComponent(PluginSignature.fileName).path)
        let (store, storeProblem) = signed ? PluginsVerify.openStore(host) : (nil, nil)
        let installed: PluginInstaller.Installed
        do {
            installed = try PluginInstaller(host: host).install(from: source, replace: replace, store: store, storeProblem: storeProblem)
        } catch {
            Output.printError("extrun: \(error.kind.rawValue): \(error.message)")
            throw ExitCode(error.kind.exitCode)
        }
        let m = installed.plugin.manifest
        switch format {
        case .json:
            var object: [String: JSONValue] = [
                "id": .string(m.id), "version": .string(m.version), "owner": .string(m.owner),
                "directory": .string(installed.plugin.directory.path), "files": .int(Int64(installed.files)),
                "intents": .array(m.intents.map { .string($0.name) }), "signature": installed.signature.json,
                "notes": .array(installed.notes.map { .string($0) }),
            ]
            if let replaced = installed.replacedVersion { object["replacedVersion"] = .string(replaced) }
            Output.printJSON(.object(object))
        case .text:
            let replaced = installed.replacedVersion.map { " (replacing \($0))" } ?? ""
            Output.printLine("Installed \(m.id) \(m.version)\(replaced) in \(installed.plugin.directory.path): \(installed.files) files")
            Output.printLine("  \(installed.signature.summary)")
            Output.printLine("  intents: \(m.intents.map(\.name).joined(separator: ", "))")
            for note in installed.notes { Output.printLine("  note: \(note)") }
            if let first = m.intents.first { Output.printLine("Try it: \(Output.commandName) describe \(first.name)") }
        }
    }
}

struct PluginsRemove: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remove",
        abstract: "Remove a plugin installed with `extrun plugins install`.",
        discussion: """
            Deletes $EXTRUN_HOME/plugins/<id> (taken out of the plugin path in one rename \
            first, so no command sees it half deleted). Its owner's globals, bookmarks and \
            donations belong to the owner and are kept. A plugin found through \
            EXTRUN_PLUGIN_PATH is not extrun's to remove: the error says where it is.

            Example:
              extrun plugins remove com.example.python-uppercase
            """)

    @Argument(help: ArgumentHelp("The plugin's id, as `extrun plugins` lists it.", valueName: "id")) var id: String

    func run() throws {
        do {
            let folder = try PluginInstaller().remove(id: id)
            Output.printLine("Removed \(id) (\(folder.path))")
        } catch {
            Output.printError("extrun: \(error.kind.rawValue): \(error.message)")
            throw ExitCode(error.kind.exitCode)
        }
    }
}
