import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A temporary directory, removed (with everything in it) when the value goes away.
/// Searchable by others (mode 711): run as root, the host starts plugins as another
/// user, which must reach the plugins and scratch directories the tests make in here.
public final class TempDirectory: Sendable {
    public let url: URL
    public var path: String { url.path }

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

    /// The path of `relative` inside it.
    public func sub(_ relative: String) -> String { path + "/" + relative }

    /// Creates the folder `relative` (and its parents); its path.
    @discardableResult
    public func makeFolder(_ relative: String) throws -> String { try directory(relative).path }

    public func read(_ relative: String) throws -> String {
        String(decoding: try Data(contentsOf: URL(fileURLWithPath: sub(relative))), as: UTF8.self)
    }

    /// Whether `relative` exists (a dangling link too).
    public func exists(_ relative: String) -> Bool {
        var info = stat()
        return lstat(sub(relative), &info) == 0
    }
}

/// A new folder in the temporary directory (`extrun-LABEL-` and 8 random characters,
/// mode 755 under the usual umask): for a home or a plugin folder a test hands to the
/// host or the CLI. It is removed, with everything in it, when the test process ends
/// (a test may remove it sooner), so that a run leaves none behind.
public func makeTemporaryFolder(_ label: String) throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("extrun-\(label)-\(UUID().uuidString.prefix(8))")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    TemporaryFolders.shared.add(url)
    return url
}

/// The folders `makeTemporaryFolder` made, removed at the process's exit.
final class TemporaryFolders: @unchecked Sendable {
    static let shared = TemporaryFolders()
    private let lock = NSLock()
    private var urls: [URL] = []
    private var registered = false

    func add(_ url: URL) {
        lock.lock()
        defer { lock.unlock() }
        urls.append(url)
        if !registered {
            registered = true
            atexit { TemporaryFolders.shared.removeAll() }
        }
    }

    func removeAll() {
        lock.lock()
        let made = urls
        urls.removeAll()
        lock.unlock()
        for url in made { try? FileManager.default.removeItem(at: url) }
    }
}

/// The products `swift build` made: next to the running test bundle, or in `<root>/.build/debug`.
public enum BuiltProduct {
    /// The built executable `name`, or nil when it is not built.
    public static func url(_ name: String) -> URL? {
        candidates(name).first { FileManager.default.isExecutableFile(atPath: $0.path) }
    }

    static func candidates(_ name: String) -> [URL] {
        var candidates: [URL] = []
        if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            // Beside the test binary, or, inside an .xctest bundle, a few folders up.
            var dir = URL(fileURLWithPath: exe).deletingLastPathComponent()
            for _ in 0..<4 {
                candidates.append(dir.appendingPathComponent(name))
                dir = dir.deletingLastPathComponent()
            }
        }
        candidates.append(StagedPlugins.packageRoot.appendingPathComponent(".build/debug/\(name)"))
        return candidates
    }
}

/// The `extrun` binary: next to the test bundle, or in `<root>/.build/debug`.
public enum ExtrunBinary {
    public static func url() throws -> URL {
        if let url = BuiltProduct.url("extrun") { return url }
        throw StagedPlugins.NotStaged(
            description: "the extrun binary is not built (looked for \(BuiltProduct.candidates("extrun").map(\.path).joined(separator: " and "))); run Scripts/test")
    }
}
