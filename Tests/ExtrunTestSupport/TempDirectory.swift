import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A temporary directory, removed when the value goes away. Searchable by others
/// (mode 711): run as root, the host starts plugins as another user, which must
/// reach the plugins and scratch directories the tests make in here.
public final class TempDirectory {
    public let url: URL

    public init(_ label: String = "test") throws {
        let base = NSTemporaryDirectory().hasSuffix("/") ? String(NSTemporaryDirectory().dropLast()) : NSTemporaryDirectory()
        var template = Array("\(base)/extrun-\(label)-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        chmod(made, 0o711)
        url = URL(fileURLWithPath: String(cString: made), isDirectory: true)
    }

    deinit { try? FileManager.default.removeItem(at: url) }

    /// Creates `relative` (and its parents) holding `contents`, with `mode` if given
    /// (`executable`: 0755).
    @discardableResult
    public func write(_ relative: String, _ contents: String, mode: Int? = nil, executable: Bool = false) throws -> URL {
        let file = url.appendingPathComponent(relative)
        try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data(contents.utf8).write(to: file)
        if let mode = mode ?? (executable ? 0o755 : nil) {
            try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: file.path)
        }
        return file
    }

    /// Creates the folder `relative` (and its parents).
    public func directory(_ relative: String) throws -> URL {
        let dir = url.appendingPathComponent(relative, isDirectory: true)
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        return dir
    }
}

/// The `extrun` binary: next to the test bundle, or in `<root>/.build/debug`.
public enum ExtrunBinary {
    public static func url() throws -> URL {
        var candidates: [URL] = []
        if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            candidates.append(URL(fileURLWithPath: exe).deletingLastPathComponent().appendingPathComponent("extrun"))
        }
        candidates.append(StagedPlugins.packageRoot.appendingPathComponent(".build/debug/extrun"))
        for candidate in candidates where FileManager.default.isExecutableFile(atPath: candidate.path) {
            return candidate
        }
        throw StagedPlugins.NotStaged(
            description: "the extrun binary is not built (looked for \(candidates.map(\.path).joined(separator: " and "))); run Scripts/test")
    }
}
