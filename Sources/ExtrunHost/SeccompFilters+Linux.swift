import CExtrunLinux
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The seccomp programs of the plugins' launches, built once per executable and kept
/// for the life of the process (docs/sandbox.md).
///
/// A program allows `execve` with one pointer only: the C string of the plugin's
/// path that the launch passes. So each executable's path gets one C string for the
/// process's life, and the programs built for that pointer can be used again by every
/// later launch of it (a pool's new processes, a long-lived host). The first build
/// (libseccomp resolving the rules and generating the BPF in a fresh process: docs/benchmarks.md,
/// "Costs the source's comments point to") is started on another thread as soon as the run knows its executable
/// (`prebuild`), while the host still prepares the launch.
enum SeccompFilters {
    struct Program: @unchecked Sendable {
        let bytes: UnsafeMutableRawPointer?
        let length: Int32
    }

    /// One executable's programs: the main one and, with a pid namespace, the one that
    /// checks signals (used should the namespace not be had).
    struct Set: @unchecked Sendable {
        let path: UnsafeMutablePointer<CChar>
        let main: Program
        let checking: Program?
    }

    private struct Key: Hashable {
        var path: String
        var notify: Bool
        var pidNamespace: Bool
    }

    private struct State: @unchecked Sendable {
        var built: [Key: Set] = [:]
        /// Paths interned as C strings: the pointer the programs name. Never freed.
        var paths: [String: UnsafeMutablePointer<CChar>] = [:]
    }

    private static let state = Mutex(State())

    /// Starts building the programs for `path` on another thread, if they are not built yet.
    static func prebuild(path: String, notify: Bool, pidNamespace: Bool) {
        let key = Key(path: path, notify: notify, pidNamespace: pidNamespace)
        guard state.withLock({ $0.built[key] }) == nil else { return }
        DispatchQueue.global().async { _ = programs(path: path, notify: notify, pidNamespace: pidNamespace) }
    }

    /// The programs for `path` (built now if no other thread has). The error is libseccomp's.
    static func programs(path: String, notify: Bool, pidNamespace: Bool) -> Result<Set, BuildError> {
        let key = Key(path: path, notify: notify, pidNamespace: pidNamespace)
        // Built under the lock: a launch that needs the programs the prebuild is making waits for them.
        return state.withLock { state -> Result<Set, BuildError> in
            if let known = state.built[key] { return .success(known) }
            let pointer = state.paths[path] ?? strdup(path)!
            state.paths[path] = pointer
            var main: UnsafeMutableRawPointer?
            let mainLength = extrun_seccomp_build(pointer, notify ? 1 : 0, pidNamespace ? 0 : (notify ? 1 : 0), &main)
            guard mainLength > 0 else {
                free(main)
                return .failure(BuildError(code: mainLength))
            }
            var checking: Program?
            if pidNamespace && notify {
                var bytes: UnsafeMutableRawPointer?
                let length = extrun_seccomp_build(pointer, 1, 1, &bytes)
                guard length > 0 else {
                    free(main)
                    free(bytes)
                    return .failure(BuildError(code: length))
                }
                checking = Program(bytes: bytes, length: length)
            }
            let set = Set(path: pointer, main: Program(bytes: main, length: mainLength), checking: checking)
            state.built[key] = set
            return .success(set)
        }
    }

    struct BuildError: Error {
        var code: Int32
    }
}
