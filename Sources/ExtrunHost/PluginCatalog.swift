import ExtrunProtocol
import Foundation
import NIOConcurrencyHelpers

/// A plugin found on the plugin path.
public struct DiscoveredPlugin: Sendable, Equatable {
    public var manifest: PluginManifest
    public var directory: URL {
        didSet {
            manifestURL = directory.appendingPathComponent("manifest.json", isDirectory: false)
            manifestPath = manifestURL.path
        }
    }
    /// `directory/manifest.json`, and its path (kept, not computed: a pool asks for them
    /// on every intent, and appending a path component costs a `stat`).
    public private(set) var manifestURL: URL
    public private(set) var manifestPath: String
    public var executableURL: URL {
        didSet { executablePath = executableURL.path }
    }
    public private(set) var executablePath: String
    /// Why the plugin cannot run (its executable is missing, for instance), if it cannot.
    public var problem: String?

    public init(manifest: PluginManifest, directory: URL, executableURL: URL, problem: String? = nil) {
        self.manifest = manifest
        self.directory = directory
        self.manifestURL = directory.appendingPathComponent("manifest.json", isDirectory: false)
        self.manifestPath = manifestURL.path
        self.executableURL = executableURL
        self.executablePath = executableURL.path
        self.problem = problem
    }
}

/// Something wrong with one file on the plugin path.
public struct CatalogProblem: Sendable, Equatable, CustomStringConvertible {
    public var file: String
    public var message: String
    public var description: String { "\(file): \(message)" }
}

/// The plugins on the plugin path, and which intent each one handles.
///
/// Search order: each directory of `EXTRUN_PLUGIN_PATH`, then `$EXTRUN_HOME/plugins`.
/// A directory that holds a `manifest.json` is a plugin; otherwise each of its
/// subdirectories that holds one is. When two directories hold plugins with the
/// same id, the first one found is used (like `PATH`). Two different plugins
/// claiming one intent is an error reported when that intent is asked for.
public struct PluginCatalog: Sendable {
    public var plugins: [DiscoveredPlugin] {
        get { loaded }
        set {
            loaded = []
            claimants = [:]
            for plugin in newValue { add(plugin) }
        }
    }
    private var loaded: [DiscoveredPlugin] = []
    /// Intent name → the indices in `plugins` of the plugins that declare it, kept with
    /// them (`add`): `handler(for:)` runs for every intent (twice for a served one), and
    /// filtering every plugin's intents took ~5 µs of it each time.
    private var claimants: [String: [Int]] = [:]

    private mutating func add(_ plugin: DiscoveredPlugin) {
        let index = loaded.count
        loaded.append(plugin)
        for intent in plugin.manifest.intents where claimants[intent.name]?.last != index {
            claimants[intent.name, default: []].append(index)
        }
    }
    public var problems: [CatalogProblem]
    /// Plugins skipped because an earlier directory held one with the same id.
    public var shadowed: [DiscoveredPlugin]

    init(plugins: [DiscoveredPlugin], problems: [CatalogProblem], shadowed: [DiscoveredPlugin], searchPath: [URL]) {
        self.problems = problems
        self.shadowed = shadowed
        self.searchPath = searchPath
        for plugin in plugins { add(plugin) }
    }

    public static func discover(paths: HostPaths) -> PluginCatalog {
        var catalog = PluginCatalog(plugins: [], problems: [], shadowed: [], searchPath: paths.pluginSearchPath)
        for directory in pluginDirectories(paths: paths) {
            catalog.load(directory: directory)
        }
        return catalog
    }

    /// The plugin directories on the search path, in search order.
    static func pluginDirectories(paths: HostPaths) -> [URL] {
        let fileManager = FileManager.default
        var directories: [URL] = []
        for searchDirectory in paths.pluginSearchPath {
            var isDirectory: ObjCBool = false
            guard fileManager.fileExists(atPath: searchDirectory.path, isDirectory: &isDirectory), isDirectory.boolValue else {
                continue
            }
            if fileManager.fileExists(atPath: searchDirectory.appendingPathComponent("manifest.json").path) {
                directories.append(searchDirectory)
            } else {
                let entries = (try? fileManager.contentsOfDirectory(atPath: searchDirectory.path)) ?? []
                directories += entries.sorted().map { searchDirectory.appendingPathComponent($0, isDirectory: true) }
                    .filter { fileManager.fileExists(atPath: $0.appendingPathComponent("manifest.json").path) }
            }
        }
        return directories
    }

    /// The plugin that handles `intent` on the search path: the same answer as
    /// `discover(paths:).handler(for:)`, for less. Decoding a manifest is a cold
    /// `extrun handle`'s cost per plugin (docs/benchmarks.md, "Costs the source's
    /// comments point to"), so this one reads every
    /// manifest with `JSONParser` only for its `id` and intent names, and decodes
    /// and checks just the manifests that declare the intent and those sharing an
    /// id with them (which may shadow them). Whenever the short way cannot answer
    /// exactly as the full catalog would (a manifest it cannot read, no handler),
    /// it asks the full catalog, so errors are word for word the same.
    public static func handler(for intent: String, paths: HostPaths) throws(HostError) -> (DiscoveredPlugin, IntentDefinition) {
        let directories = pluginDirectories(paths: paths)
        var scanned: [(directory: URL, id: String, declares: Bool)] = []
        for directory in directories {
            guard let data = FileManager.default.contents(atPath: directory.appendingPathComponent("manifest.json").path),
                let value = try? JSONParser.parse(data), case .object(let fields) = value,
                case .string(let id)? = fields["id"], case .array(let intents)? = fields["intents"]
            else {
                return try discover(paths: paths).handler(for: intent)
            }
            let declares = intents.contains { $0["name"] == .string(intent) }
            scanned.append((directory, id, declares))
        }
        let claimingIDs = Set(scanned.filter(\.declares).map(\.id))
        guard !claimingIDs.isEmpty else { return try discover(paths: paths).handler(for: intent) }
        var catalog = PluginCatalog(plugins: [], problems: [], shadowed: [], searchPath: paths.pluginSearchPath)
        for entry in scanned where entry.declares || claimingIDs.contains(entry.id) {
            catalog.load(directory: entry.directory)
        }
        do {
            return try catalog.handler(for: intent)
        } catch where error.kind == .noHandler {
            return try discover(paths: paths).handler(for: intent)
        }
    }

    /// The plugin in `directory` (a folder holding a manifest.json), found as the catalog
    /// finds plugins; its `problem` says if it cannot run. `configurationError` for a manifest it cannot read.
    public static func plugin(in directory: URL) throws(HostError) -> DiscoveredPlugin {
        var catalog = PluginCatalog(plugins: [], problems: [], shadowed: [], searchPath: [directory])
        catalog.load(directory: directory.standardizedFileURL)
        if let plugin = catalog.plugins.first { return plugin }
        let message = catalog.problems.map(\.description).joined(separator: "; ")
        throw HostError(.configurationError, message, details: ["file": .string(directory.appendingPathComponent("manifest.json").path)])
    }

    private mutating func load(directory: URL) {
        let manifestURL = directory.appendingPathComponent("manifest.json")
        let manifest: PluginManifest
        do {
            manifest = try ManifestLoader.load(manifestURL)
        } catch {
            problems.append(CatalogProblem(file: manifestURL.path, message: error.message))
            return
        }
        let executableURL =
            manifest.executable.hasPrefix("/")
            ? URL(fileURLWithPath: manifest.executable) : directory.appendingPathComponent(manifest.executable)
        var plugin = DiscoveredPlugin(manifest: manifest, directory: directory, executableURL: executableURL, problem: nil)
        if !FileManager.default.fileExists(atPath: executableURL.path) {
            plugin.problem = "executable '\(manifest.executable)' is missing (looked for \(executableURL.path))"
        } else if access(executableURL.path, X_OK) != 0 {
            plugin.problem = "executable \(executableURL.path) is not executable (chmod +x it)"
        }
        if let problem = plugin.problem {
            problems.append(CatalogProblem(file: manifestURL.path, message: problem))
        }
        if loaded.contains(where: { $0.manifest.id == manifest.id }) {
            shadowed.append(plugin)
        } else {
            add(plugin)
        }
    }

    /// The plugin that handles `intent`, or the error that says why there is none.
    public func handler(for intent: String) throws(HostError) -> (DiscoveredPlugin, IntentDefinition) {
        let claimants = (self.claimants[intent] ?? []).map { plugins[$0] }
        if claimants.count > 1 {
            let list = claimants.map { "\($0.manifest.id) (\($0.manifestURL.path))" }.joined(separator: " and ")
            throw HostError(
                .configurationError,
                "intent '\(intent)' is claimed by more than one plugin: \(list); remove one of them from the plugin path",
                details: ["files": .array(claimants.map { .string($0.manifestURL.path) })])
        }
        guard let plugin = claimants.first, let definition = plugin.manifest.intent(named: intent) else {
            var message = "no plugin handles the intent '\(intent)'"
            let known = plugins.flatMap { $0.manifest.intents.map(\.name) }.sorted()
            if let close = Suggestion.closest(to: intent, among: known) { message += " (did you mean '\(close)'?)" }
            message += known.isEmpty ? "; no plugins were found" : "; known intents: \(known.joined(separator: ", "))"
            message += " (plugin path: \(searchPathDescription))"
            let loaded = plugins + shadowed
            let unreadable = problems.filter { problem in !loaded.contains { $0.manifestURL.path == problem.file } }
            if !unreadable.isEmpty {
                message += "; these manifests could not be read: " + unreadable.map(\.description).joined(separator: "; ")
            }
            throw HostError(.noHandler, message, details: ["intent": .string(intent)])
        }
        if let problem = plugin.problem {
            throw HostError(
                .configurationError, "\(plugin.manifestURL.path): \(problem)",
                details: ["file": .string(plugin.manifestURL.path)])
        }
        return (plugin, definition)
    }

    /// The directories searched, in order.
    public var searchPath: [URL]

    var searchPathDescription: String {
        searchPath.map(\.path).joined(separator: ":")
    }
}

/// Reads and checks a manifest file.
public enum ManifestLoader {
    public struct LoadError: Error {
        public var message: String
    }

    /// Loads a manifest, from the process's cache when the file is unchanged
    /// (same device, inode, size and modification time to the nanosecond): a
    /// host that handles many intents (PluginPool, ExtrunBench) decodes each
    /// manifest once instead of once per intent. A changed file is read again.
    public static func load(_ url: URL) throws(LoadError) -> PluginManifest {
        guard let identity = FileIdentity(path: url.path) else { return try loadFromFile(url) }
        if let cached = cache.withLockedValue({ $0[url.path] }), cached.identity == identity { return cached.manifest }
        let manifest = try loadFromFile(url)
        cache.withLockedValue { entries in
            if entries.count >= 256 { entries.removeAll() }
            entries[url.path] = (identity, manifest)
        }
        return manifest
    }

    private static let cache = NIOLockedValueBox<[String: (identity: FileIdentity, manifest: PluginManifest)]>([:])

    static func loadFromFile(_ url: URL) throws(LoadError) -> PluginManifest {
        let data: Data
        do {
            data = try Data(contentsOf: url)
        } catch {
            throw LoadError(message: "cannot read the manifest: \(error.localizedDescription)")
        }
        let manifest: PluginManifest
        do {
            manifest = try PluginManifest(json: data)
        } catch {
            throw LoadError(message: "invalid manifest: \(JSONCoding.describe(error))")
        }
        let problems = manifest.problems()
        if !problems.isEmpty {
            throw LoadError(message: "invalid manifest: " + problems.joined(separator: "; "))
        }
        return manifest
    }
}
