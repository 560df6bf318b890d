import Foundation

/// Where Scripts/test staged the example plugins (one directory per plugin).
///
/// `EXTRUN_TEST_PLUGINS` when set; otherwise `<package root>/.build/extrun-plugins`,
/// the package root found from this file's path. Fails with a hint when neither exists.
enum StagedPlugins {
    struct NotStaged: Error, CustomStringConvertible {
        var description: String
    }

    static var packageRoot: URL {
        // <root>/Tests/<target>/StagedPlugins.swift
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    static func directory() throws -> URL {
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
}
