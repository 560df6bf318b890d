import Foundation
import PackagePlugin

/// Generates a target's intent code and its manifest.json from the definition
/// file in the target's directory (`intents.json`, docs/definitions.md), with
/// `extrun-intentgen build`. An invalid definition fails the build; the messages
/// name the file, the line and column, and the path inside the file.
///
/// Outputs, in the plugin's work directory: `<Target>Intents.swift` (compiled
/// into the target) and `manifest.json` (the same manifest that
/// `extrun-intentgen manifest` writes; Scripts/stage-plugins uses that one).
@main
struct IntentGenerator: BuildToolPlugin {
    static let definitionName = "intents.json"

    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        guard let target = target as? SourceModuleTarget else { return [] }
        // The definition is usually excluded from the target's sources (it is not a resource); look in the directory too.
        let inSources = target.sourceFiles.first { $0.url.lastPathComponent == Self.definitionName }?.url
        let inDirectory = target.directoryURL.appendingPathComponent(Self.definitionName)
        guard let definition = inSources ?? (FileManager.default.fileExists(atPath: inDirectory.path) ? inDirectory : nil) else {
            Diagnostics.error("\(target.name): no \(Self.definitionName) in \(target.directoryURL.path); IntentGenerator needs one (docs/definitions.md)")
            return []
        }
        let tool = try context.tool(named: "extrun-intentgen")
        let swift = context.pluginWorkDirectoryURL.appendingPathComponent("\(target.name)Intents.swift")
        let manifest = context.pluginWorkDirectoryURL.appendingPathComponent("manifest.json")
        return [
            .buildCommand(
                displayName: "Generating \(target.name)'s intents from \(Self.definitionName)",
                executable: tool.url,
                arguments: ["build", definition.path, "--swift", swift.path, "--manifest", manifest.path],
                inputFiles: [definition],
                // manifest.json is written too, but not declared: SwiftPM would take it for a resource.
                outputFiles: [swift])
        ]
    }
}
