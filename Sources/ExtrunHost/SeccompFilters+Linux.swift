import CExtrunLinux
import Foundation
import NIOConcurrencyHelpers
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
///
/// With a pid namespace (the default) a run gets one program, which leaves signals to the
/// namespace. The program that sends them to the supervisor instead (for a run without
/// one) is built only when a run is to have none: the policy says so, or a launch found
/// that none can be had here (`noPidNamespace`; the supervisor then refuses to start the
/// plugin with the first program, and the launch starts again with the second). Building
/// both for every run cost twice the CPU (docs/benchmarks.md).
enum SeccompFilters {
    struct Program: @unchecked Sendable {
        let bytes: UnsafeMutableRawPointer?
        let length: Int32
    }

    /// One executable's program, and the path's C string it allows execve with.
    struct Set: @unchecked Sendable {
        let path: UnsafeMutablePointer<CChar>
        let main: Program
        /// It leaves the signal-sending calls to the pid namespace: not for a run without one.
        let needsPidNamespace: Bool
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

    private static let state = NIOLockedValueBox(State())

    /// A launch found that no pid namespace can be had here (user namespaces not allowed,
    /// say): later launches build the program that checks signals from the start.
    private static let pidNamespaceMissing = Atomic<Bool>(false)

    static func noteNoPidNamespace() {
        pidNamespaceMissing.store(true, ordering: .relaxed)
    }

    /// Starts building the programs for `path` on another thread, if they are not built yet.
    static func prebuild(path: String, notify: Bool, pidNamespace: Bool) {
        let pidNamespace = pidNamespace && !pidNamespaceMissing.load(ordering: .relaxed)
        let key = Key(path: path, notify: notify, pidNamespace: pidNamespace)
        guard state.withLockedValue({ $0.built[key] }) == nil else { return }
        DispatchQueue.global().async { _ = programs(path: path, notify: notify, pidNamespace: pidNamespace) }
    }

    /// The programs for `path` (built now if no other thread has). The error is libseccomp's.
    static func programs(path: String, notify: Bool, pidNamespace: Bool) -> Result<Set, BuildError> {
        let pidNamespace = pidNamespace && !pidNamespaceMissing.load(ordering: .relaxed)
        let key = Key(path: path, notify: notify, pidNamespace: pidNamespace)
        // Built under the lock: a launch that needs the programs the prebuild is making waits for them.
        return state.withLockedValue { state -> Result<Set, BuildError> in
            if let known = state.built[key] { return .success(known) }
            let pointer = state.paths[path] ?? strdup(path)!
            state.paths[path] = pointer
            var main: UnsafeMutableRawPointer?
            // Signals checked by the supervisor without a pid namespace (which needs notify).
            let checksSignals = notify && !pidNamespace
            let mainLength = extrun_seccomp_build(pointer, notify ? 1 : 0, checksSignals ? 1 : 0, &main)
            guard mainLength > 0 else {
                free(main)
                return .failure(BuildError(code: mainLength))
            }
            let set = Set(path: pointer, main: Program(bytes: main, length: mainLength), needsPidNamespace: notify && pidNamespace)
            state.built[key] = set
            return .success(set)
        }
    }

    struct BuildError: Error {
        var code: Int32
    }
}
