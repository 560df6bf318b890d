import ExtrunSystem
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The one signal handling of the long-running front ends (`extrun serve`, `extrun mcp`):
/// the first terminating signal (SIGTERM, SIGINT; and SIGHUP for `mcp`) calls `onTerminate`,
/// which ends the front end gracefully (`IntentService.shutDown`); a second one ends the
/// process at once, as its default action does. A reloading signal (SIGHUP for `serve`)
/// calls `onReload` each time it comes.
///
/// The handler only writes the signal's number to a pipe (async-signal-safe); a thread
/// reads it and does the rest. A handler, unlike an ignored or blocked signal, does not
/// pass on to the plugins: exec resets it. The signals are unblocked, in case the parent
/// started the process with them blocked (Foundation's `Process` does).
public enum TerminationSignals {
    nonisolated(unsafe) static var pipeWrite: Int32 = -1

    /// Installs the handlers; call once, before the threads that must not take the signals start.
    public static func install(
        terminating: [Int32], reloading: [Int32] = [], onReload: (@Sendable (Int32) -> Void)? = nil,
        onTerminate: @escaping @Sendable (Int32) -> Void
    ) {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { return }
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }  // not passed on to the plugins
        pipeWrite = fds[1]
        let readEnd = fds[0]
        let handler: @convention(c) (Int32) -> Void = { signal in
            var byte = UInt8(truncatingIfNeeded: signal)
            _ = write(TerminationSignals.pipeWrite, &byte, 1)
        }
        let handled = terminating + reloading
        for signal in handled { _ = Glibc.signal(signal, handler) }
        // A parent may have started us with them blocked (a mask is inherited): unblock them
        // here, before the other threads start, as they inherit this thread's mask.
        var set = sigset_t()
        sigemptyset(&set)
        for signal in handled { sigaddset(&set, signal) }
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
        Thread {
            Thread.current.name = "extrun-signals"
            var byte: UInt8 = 0
            while true {
                let count = SystemCall.retryingInterrupts { read(readEnd, &byte, 1) }
                guard count == 1 else { return }
                let signal = Int32(byte)
                if reloading.contains(signal) {
                    onReload?(signal)
                    continue
                }
                // A second terminating signal ends the process at once (the default action).
                for other in terminating { _ = Glibc.signal(other, SIG_DFL) }
                onTerminate(signal)
                return
            }
        }.start()
    }
}
