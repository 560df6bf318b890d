import ExtrunProtocol
import Foundation

/// A parsed and validated definition file (docs/definitions.md): the one source
/// of truth for a plugin's manifest and for the Swift its author builds on.
///
/// ```swift
/// let file = try DefinitionFile.load(path: "Examples/SoupChef/intents.json")
/// let manifest = file.manifest()            // PluginManifest
/// let source = file.swiftSource()           // the generated Swift
/// ```
public struct DefinitionFile: Sendable {
    /// The path as given, used in messages.
    public let path: String
    public let definition: Definition

    /// Reads, parses and validates the file at `path`.
    /// Throws `DefinitionError` with every problem found, each naming the file and the path inside it.
    public static func load(path: String) throws(DefinitionError) -> DefinitionFile {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            let reason = (error as NSError).localizedFailureReason ?? (error as NSError).localizedDescription
            throw DefinitionError([Diagnostic(file: path, path: "", location: nil, message: "cannot read the definition file: \(reason)")])
        }
        return try parse(data, path: path)
    }

    /// Parses and validates a definition; `path` names it in messages and gives the default executable name (its directory's).
    public static func parse(_ data: Data, path: String) throws(DefinitionError) -> DefinitionFile {
        let root: JSONNode
        do {
            root = try JSONNodeParser.parse(data)
        } catch {
            throw DefinitionError([Diagnostic(file: path, path: "", location: error.location, message: "not valid JSON: \(error.message)")])
        }
        let reader = DefinitionReader(file: path)
        let definition = reader.read(root)
        var diagnostics = reader.sink.diagnostics
        guard let definition else { throw DefinitionError(diagnostics) }
        var validator = Validator(definition: definition, file: path)
        diagnostics += validator.run()
        guard diagnostics.isEmpty else { throw DefinitionError(diagnostics) }
        let file = DefinitionFile(path: path, definition: definition)
        // The manifest's own checks, as the host will run them: a safety net.
        let problems = file.manifest().problems()
        if !problems.isEmpty {
            throw DefinitionError(problems.map { Diagnostic(file: path, path: "", location: nil, message: "the generated manifest is invalid: \($0)") })
        }
        return file
    }

    /// The executable the manifest names: `executable` if given, else the definition's, else the name of the file's directory.
    public func executableName(_ executable: String? = nil) -> String {
        if let executable, !executable.isEmpty { return executable }
        if let declared = definition.plugin.executable { return declared }
        return URL(fileURLWithPath: path).standardizedFileURL.deletingLastPathComponent().lastPathComponent
    }

    /// The plugin's manifest.
    public func manifest(executable: String? = nil) -> PluginManifest {
        ManifestGenerator(definition: definition).manifest(executable: executableName(executable))
    }

    /// The manifest as `manifest.json` holds it (pretty, keys sorted, a final newline).
    public func manifestJSON(executable: String? = nil) throws -> Data {
        var data = try JSONCoding.encoder(pretty: true).encode(manifest(executable: executable))
        data.append(0x0A)
        return data
    }

    /// The Swift source for the plugin's author (`import ExtrunSDK`).
    public func swiftSource() -> String {
        let generator = SwiftGenerator(definition: definition, sourceName: URL(fileURLWithPath: path).lastPathComponent)
        return generator.generate()
    }
}
