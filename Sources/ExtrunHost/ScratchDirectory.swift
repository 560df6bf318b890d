import CExtrunLinux
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Each plugin process's own directory (its HOME and TMPDIR), made before the launch and removed after it.
enum ScratchDirectory {
    /// A new directory (mode 700) under `$TMPDIR` (or /tmp) that belongs to the
    /// plugin's user: when the host is root, it is handed over to the plugin's uid and gid.
    static func create(owner: PluginCredentials? = nil) throws(HostError) -> URL {
        let base = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        var template = Array("\(base)/extrun-run-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else {
            throw HostError(.internalError, "cannot create a scratch directory under \(base): \(String(cString: strerror(errno)))")
        }
        let path = String(cString: made)
        if let owner, owner.dropsPrivileges, chown(path, owner.uid, owner.gid) != 0 {
            let reason = String(cString: strerror(errno))
            rmdir(path)
            throw HostError(.internalError, "cannot give the scratch directory \(path) to the plugin's user (uid \(owner.uid)): \(reason)")
        }
        return URL(fileURLWithPath: path, isDirectory: true)
    }

    /// Removes the directory whatever the plugin left in it, by descriptor (openat and
    /// unlinkat: no path-length limit; symbolic links removed, never followed; folders
    /// the plugin made unreadable opened again first), and checks that it is gone.
    /// Nil, or what could not be removed and why.
    @discardableResult
    static func remove(_ url: URL) -> String? {
        var failure = [CChar](repeating: 0, count: 512)
        guard extrun_remove_tree(url.path, &failure, failure.count) != 0 else { return nil }
        return "\(url.path): \(String(decoding: failure.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))"
    }
}
