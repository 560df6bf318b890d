import ExtrunHost
import ExtrunStore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Where Scripts/test staged the example plugins (one directory per plugin).
///
/// `EXTRUN_TEST_PLUGINS` when set; otherwise `<package root>/.build/extrun-plugins`,
/// the package root found from this file's path. Fails with a hint when neither exists.
public enum StagedPlugins {
    public struct NotStaged: Error, CustomStringConvertible {
        public var description: String
        public init(description: String) { self.description = description }
    }

    public static var packageRoot: URL {
        // <root>/Tests/ExtrunTestSupport/StagedPlugins.swift
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    public static func directory() throws -> URL {
        if let value = ProcessInfo.processInfo.environment["EXTRUN_TEST_PLUGINS"], !value.isEmpty {
            let url = URL(fileURLWithPath: value, isDirectory: true)
            guard FileManager.default.fileExists(atPath: url.path) else {
                throw NotStaged(description: "EXTRUN_TEST_PLUGINS=\(value) does not exist; run Scripts/test, which builds and stages the example plugins")
            }
            return url
        }
        let url = packageRoot.appendingPathComponent(".build/extrun-plugins", isDirectory: true)
        guard FileManager.default.fileExists(atPath: url.appendingPathComponent("MakeUppercase/manifest.json").path) else {
            throw NotStaged(
                description: "the example plugins are not staged in \(url.path) and EXTRUN_TEST_PLUGINS is not set; run Scripts/test (it builds the plugins, stages them and runs the tests)")
        }
        return url
    }

    /// Makes the test home's EXAMPLETEAM trust the key Scripts/stage-plugins signed the
    /// examples with (its public key file is staged as EXAMPLETEAM.pub), so that the
    /// examples get EXAMPLETEAM's data in that home.
    public static func trust(home: URL) throws {
        let file = try directory().appendingPathComponent("EXAMPLETEAM.pub")
        guard let data = FileManager.default.contents(atPath: file.path) else {
            throw NotStaged(description: "\(file.path) is missing: the staged examples were not signed; run Scripts/test")
        }
        guard let key = try OwnerPublicKey.decode(data, file: file.path).signingKey else {
            throw NotStaged(description: "\(file.path) has no signing key; run Scripts/test")
        }
        try Store(home: home).trust("EXAMPLETEAM", author: "the staged examples", signingKey: key)
    }

    /// The staged plugins on a host whose home (`home`) trusts the examples' key.
    public static func host(home: URL) throws -> ExtrunHost.Host {
        try trust(home: home)
        return ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [try directory()]))
    }

    /// SDKs/python/extrun_plugin.py, copied beside a Python plugin that imports it (as an
    /// author vendors it), readable by the plugin's user.
    public static func copyPythonModule(into plugin: URL) throws {
        let module = plugin.appendingPathComponent("extrun_plugin.py")
        try FileManager.default.copyItem(at: packageRoot.appendingPathComponent("SDKs/python/extrun_plugin.py"), to: module)
        _ = chmod(module.path, 0o644)
    }
}
