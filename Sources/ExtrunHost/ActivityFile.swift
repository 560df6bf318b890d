import ExtrunProtocol
import Foundation

extension ActivityFileParser {
    /// Reads an activity file; `-` reads standard input.
    public static func read(path: String) throws(HostError) -> ActivityInvocation {
        let input = try JSONInputFile.read(path: path, what: "activity file")
        return try parse(input.data, source: input.source)
    }
}

extension PluginCatalog {
    /// The plugin that continues activities of `type`: the one that declares it in
    /// `activityTypes` (or has an intent of that name), or the error that says why there is none.
    public func continuer(of type: String) throws(HostError) -> DiscoveredPlugin {
        let declaring = plugins.filter { $0.manifest.activityTypes.contains(type) }
        let claimants = declaring.isEmpty ? plugins.filter { $0.manifest.intent(named: type) != nil } : declaring
        if claimants.count > 1 {
            let list = claimants.map { "\($0.manifest.id) (\($0.manifestURL.path))" }.joined(separator: " and ")
            throw HostError(
                .configurationError, "activity type '\(type)' is declared by more than one plugin: \(list); remove one of them from the plugin path",
                details: ["files": .array(claimants.map { .string($0.manifestURL.path) })])
        }
        guard let plugin = claimants.first else {
            let known = plugins.flatMap(\.manifest.activityTypes).sorted()
            throw HostError(
                .noHandler,
                "no plugin continues the activity type '\(type)': no manifest declares it in activityTypes, and no intent has that name"
                    + (known.isEmpty ? "" : " (declared activity types: \(known.joined(separator: ", ")))"),
                details: ["activityType": .string(type)])
        }
        if let problem = plugin.problem {
            throw HostError(.configurationError, "\(plugin.manifestURL.path): \(problem)", details: ["file": .string(plugin.manifestURL.path)])
        }
        return plugin
    }
}
