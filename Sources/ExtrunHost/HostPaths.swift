import Foundation

/// Where the host looks for things, from the environment.
///
/// - `EXTRUN_HOME`: the host's own directory (default `~/.local/share/extrun`).
/// - `EXTRUN_PLUGIN_PATH`: colon-separated directories searched for plugins
///   before `$EXTRUN_HOME/plugins`.
/// - Last, `PREFIX/share/extrun/plugins` when extrun runs as `PREFIX/bin/extrun`
///   (where `Scripts/install PREFIX` puts the example plugins).
public struct HostPaths: Sendable, Equatable {
    public var home: URL {
        didSet { homePath = home.path }
    }
    public var pluginSearchPath: [URL]
    /// `home.path`, made once: every intent opens its owner's store by it (`PendingStore`),
    /// where URL's `path` cost a warm intent ~3 µs (docs/benchmarks.md, "The donation's own cost").
    public private(set) var homePath: String

    public init(home: URL, pluginSearchPath: [URL]) {
        self.home = home
        self.pluginSearchPath = pluginSearchPath
        homePath = home.path
    }

    /// The paths from this process's environment (read with `getenv`: building
    /// `ProcessInfo`'s dictionary of every variable costs a cold run for nothing).
    public static func fromEnvironment() -> HostPaths {
        fromEnvironment { name in getenv(name).map { String(cString: $0) } }
    }

    public static func fromEnvironment(_ environment: [String: String]) -> HostPaths {
        fromEnvironment { environment[$0] }
    }

    private static func fromEnvironment(_ variable: (String) -> String?) -> HostPaths {
        let home: URL
        if let value = variable("EXTRUN_HOME"), !value.isEmpty {
            home = URL(fileURLWithPath: value, isDirectory: true)
        } else {
            let userHome = variable("HOME").flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
            home = URL(fileURLWithPath: userHome, isDirectory: true).appendingPathComponent(".local/share/extrun", isDirectory: true)
        }
        var search: [URL] = []
        if let value = variable("EXTRUN_PLUGIN_PATH") {
            for entry in value.split(separator: ":") where !entry.isEmpty {
                search.append(URL(fileURLWithPath: String(entry), isDirectory: true))
            }
        }
        search.append(home.appendingPathComponent("plugins", isDirectory: true))
        if let executable = ProcFS.ownExecutable() {
            // PREFIX/bin/extrun → PREFIX/share/extrun/plugins, with string operations (URL's
            // would stat and standardize on every start); compared only when it exists.
            var prefix = Substring(executable)
            for _ in 0..<2 {
                if let slash = prefix.lastIndex(of: "/") { prefix = prefix[..<slash] }
            }
            let bundledPath = (prefix.isEmpty ? "" : String(prefix)) + "/share/extrun/plugins"
            var info = stat()
            if stat(bundledPath, &info) == 0, info.st_mode & S_IFMT == S_IFDIR {
                let bundled = URL(fileURLWithPath: bundledPath, isDirectory: true)
                if bundled.standardizedFileURL != search.last?.standardizedFileURL { search.append(bundled) }
            }
        }
        return HostPaths(home: home, pluginSearchPath: search)
    }
}
