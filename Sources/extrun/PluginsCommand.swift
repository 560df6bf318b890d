import ArgumentParser
import ExtrunHost
import ExtrunProtocol
import Foundation

struct Plugins: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List the plugins on the plugin path and the intents they handle.",
        discussion: """
            Searches the directories of EXTRUN_PLUGIN_PATH, then $EXTRUN_HOME/plugins. \
            Manifests that cannot be read, missing executables, and intents or activity \
            types claimed by two plugins are listed as problems; the exit status is then 11 (configurationError).
            """
    )

    @Option(help: "Output format: text or json.")
    var format: OutputFormat = .text

    func run() throws {
        let host = Host()
        let catalog = host.catalog()
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
            let plugins: [JSONValue] = catalog.plugins.map { plugin in
                .object([
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
            for plugin in catalog.plugins {
                let m = plugin.manifest
                Output.printLine("\(m.id) \(m.version)  owner \(m.owner)  modes \(m.modes.map(\.rawValue).joined(separator: ","))")
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
