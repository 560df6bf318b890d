import ArgumentParser
import ExtrunHost
import ExtrunProtocol
import ExtrunStore
import Foundation

struct Plugins: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the plugins on the plugin path, the intents they handle and whose they proved to be; check, install, remove, sign and verify them.",
        discussion: """
            Searches the directories of EXTRUN_PLUGIN_PATH, then $EXTRUN_HOME/plugins, then \
            PREFIX/share/extrun/plugins when this is PREFIX/bin/extrun. \
            Manifests that cannot be read, missing executables, and intents or activity \
            types claimed by two plugins are listed as problems; the exit status is then 11 (configurationError).
            Each plugin's signature is shown: "verified owner OWNER" (it gets OWNER's data), \
            "unsigned" (it runs, but gets none of its owner's data), "signed with key K, which \
            OWNER does not trust", or "signature broken: FILE" (it is not started). \
            `extrun plugins sign` and `extrun plugins verify` sign a plugin folder and check it.

            A new plugin's way in: extrun plugins check DIR (does it follow the protocol?), \
            extrun plugins install DIR (copied into $EXTRUN_HOME/plugins), then extrun handle.
            """,
        subcommands: [PluginsCheck.self, PluginsInstall.self, PluginsRemove.self, PluginsSign.self, PluginsVerify.self]
    )

    /// Shared with the subcommands that print a report: declared once, so that `--format`
    /// after a subcommand's name reaches the subcommand too.
    @OptionGroup var output: PluginsFormat
    var format: OutputFormat { output.format }

    func run() throws {
        let host = ExtrunHost.Host()
        let catalog = host.catalog()
        // The store only when a plugin is signed: listing unsigned plugins creates no home.
        let anySigned = catalog.plugins.contains {
            FileManager.default.fileExists(atPath: $0.directory.appendingPathComponent(PluginSignature.fileName).path)
        }
        let (store, storeProblem) = anySigned ? PluginsVerify.openStore(host) : (nil, nil)
        let statuses = catalog.plugins.map { host.signatureStatus(of: $0, store: store, storeProblem: storeProblem) }
        var problems = catalog.problems.map(\.description)
        var claimants: [String: [String]] = [:]
        for plugin in catalog.plugins {
            for intent in plugin.manifest.intents { claimants[intent.name, default: []].append(plugin.manifestURL.path) }
        }
        for (intent, files) in claimants.sorted(by: { $0.key < $1.key }) where files.count > 1 {
            problems.append("intent '\(intent)' is claimed by more than one plugin: \(files.joined(separator: " and "))")
        }
        var activityClaimants: [String: [String]] = [:]
        for plugin in catalog.plugins {
            for type in plugin.manifest.activityTypes { activityClaimants[type, default: []].append(plugin.manifestURL.path) }
        }
        for (type, files) in activityClaimants.sorted(by: { $0.key < $1.key }) where files.count > 1 {
            problems.append("activity type '\(type)' is declared by more than one plugin: \(files.joined(separator: " and "))")
        }

        switch format {
        case .json:
            let plugins: [JSONValue] = zip(catalog.plugins, statuses).map { plugin, status in
                .object([
                    "signature": status.json,
                    "id": .string(plugin.manifest.id),
                    "version": .string(plugin.manifest.version),
                    "owner": .string(plugin.manifest.owner),
                    "directory": .string(plugin.directory.path),
                    "modes": .array(plugin.manifest.modes.map { .string($0.rawValue) }),
                    "intents": .array(plugin.manifest.intents.map { .string($0.name) }),
                    "activityTypes": .array(plugin.manifest.activityTypes.map { .string($0) }),
                    "retryInAppOnMemoryLimit": .bool(plugin.manifest.retryInAppOnMemoryLimit),
                ])
            }
            Output.printJSON(.object([
                "searchPath": .array(catalog.searchPath.map { .string($0.path) }),
                "plugins": .array(plugins),
                "problems": .array(problems.map { .string($0) }),
            ]))
        case .text:
            if catalog.plugins.isEmpty {
                Output.printLine("No plugins found. Searched: \(catalog.searchPath.map(\.path).joined(separator: ":"))")
            }
            for (plugin, status) in zip(catalog.plugins, statuses) {
                let m = plugin.manifest
                Output.printLine("\(m.id) \(m.version)  owner \(m.owner)  modes \(m.modes.map(\.rawValue).joined(separator: ","))")
                Output.printLine("  \(status.summary)")
                Output.printLine("  \(plugin.directory.path)")
                for intent in m.intents {
                    let parameters = intent.parameters.map { "\($0.name): \($0.type.rawValue)\($0.multiple ? "[]" : "")\($0.required ? "" : "?")" }
                    Output.printLine("  \(intent.name)(\(parameters.joined(separator: ", ")))")
                }
                if !m.activityTypes.isEmpty { Output.printLine("  continues activities: \(m.activityTypes.joined(separator: ", "))") }
                if m.retryInAppOnMemoryLimit { Output.printLine("  retried in the app when over the extension's memory cap") }
            }
            if !problems.isEmpty {
                Output.printLine("")
                Output.printLine("Problems:")
                for problem in problems { Output.printLine("  \(problem)") }
            }
        }
        if !problems.isEmpty { throw ExitCode(ErrorKind.configurationError.exitCode) }
    }
}

/// `--format` of `extrun plugins` and its subcommands.
struct PluginsFormat: ParsableArguments {
    @Option(help: "Output format: text or json.") var format: OutputFormat = .text
}

struct PluginsSign: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sign",
        abstract: "Sign a plugin folder for its owner, so that the host gives it the owner's data.",
        discussion: """
            Writes extrun-signature.json into the folder: the Ed25519 signature, with OWNER's \
            signing key (in $EXTRUN_HOME/keys/, made on first need), of the plugin's id, its \
            owner and the SHA-256 of every file in the folder (the manifest, the executable, \
            scripts and resources; symbolic links are followed) and of the executable when it \
            lies outside the folder. OWNER must be the manifest's owner. Sign again after any \
            change: a signed plugin whose files changed is not started. To sign here for \
            another host, that host trusts your key: give it `extrun owners pubkey OWNER -o FILE` \
            and run `extrun owners trust OWNER --signing-key FILE` there. docs/plugin-guide.md, \
            "Signing your plugin".

            Example:
              extrun plugins sign ./my-plugin --owner EXAMPLETEAM
            """)
    @Argument(help: ArgumentHelp("The plugin folder (holding manifest.json).", valueName: "dir")) var directory: String
    @Option(help: ArgumentHelp("The owner to sign for: the manifest's owner.", valueName: "owner")) var owner: String

    func run() throws {
        let plugin = try PluginsSign.plugin(in: directory)
        guard plugin.manifest.owner == owner else {
            Output.printError(
                "extrun: configurationError: \(plugin.manifestPath) names owner '\(plugin.manifest.owner)', not '\(owner)': sign it for its owner (--owner \(plugin.manifest.owner)), or change the manifest's owner first")
            throw ExitCode(ErrorKind.configurationError.exitCode)
        }
        if let problem = plugin.problem {
            Output.printError("extrun: configurationError: \(plugin.manifestPath): \(problem)")
            throw ExitCode(ErrorKind.configurationError.exitCode)
        }
        try StoreExit.run { store in
            let signature = try PluginSignature.sign(
                directory: plugin.directory.path, owner: owner, plugin: plugin.manifest.id, executable: plugin.executablePath, store: store)
            Output.printLine(
                "Signed \(plugin.manifest.id) for \(owner) with key \(signature.signingFingerprint): \(signature.files.count) files, in \(plugin.directory.path)/\(PluginSignature.fileName)")
        }
    }
}

extension PluginsSign {
    /// The plugin in `directory` (its manifest read as the catalog reads it), or the error printed and its exit status.
    static func plugin(in directory: String) throws -> DiscoveredPlugin {
        do {
            return try PluginCatalog.plugin(in: URL(fileURLWithPath: directory, isDirectory: true))
        } catch {
            Output.printError("extrun: \(error.kind.rawValue): \(error.message)")
            throw ExitCode(error.kind.exitCode)
        }
    }
}

struct PluginsVerify: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Check a plugin folder's signature: whether it holds, for which owner, and which file changed.",
        discussion: """
            Exit status 0: the signature holds and its owner trusts the key on this host \
            ($EXTRUN_HOME). 15: it holds, but the owner does not trust the key here (`extrun \
            owners trust`). 19 (signatureInvalid): the folder is unsigned, or a file changed, was \
            added or removed after signing (the file is named), or the signature was altered.
            """)
    @Argument(help: ArgumentHelp("The plugin folder (holding manifest.json).", valueName: "dir")) var directory: String

    static func openStore(_ host: ExtrunHost.Host) -> (Store?, String?) {
        do {
            return (try Store(home: host.paths.home), nil)
        } catch {
            return (nil, "the store cannot be opened: \(error)")
        }
    }

    func run() throws {
        let host = ExtrunHost.Host()
        let plugin = try PluginsSign.plugin(in: directory)
        let (store, storeProblem) = Self.openStore(host)
        let status = host.signatureStatus(of: plugin, store: store, storeProblem: storeProblem)
        switch status {
        case .verified:
            Output.printLine("\(plugin.manifest.id): the signature holds: \(status.summary)")
        case .untrusted(_, _, let reason):
            Output.printLine("\(plugin.manifest.id): the signature holds, but: \(reason)")
        case .unsigned:
            Output.printLine(
                "\(plugin.manifest.id) is not signed (no \(PluginSignature.fileName)): it runs, but gets none of \(plugin.manifest.owner)'s data. Sign it: extrun plugins sign '\(plugin.directory.path)' --owner \(plugin.manifest.owner)")
        case .broken(_, let message):
            Output.printLine(message)
        }
        switch status {
        case .verified: return
        case .untrusted: throw ExitCode(StoreExit.code(for: .untrustedSigner))
        case .unsigned, .broken: throw ExitCode(ErrorKind.signatureInvalid.exitCode)
        }
    }
}
