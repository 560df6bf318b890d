import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// SIGTERM, SIGINT and SIGHUP end `extrun mcp` as the end of its input does (the
/// calls in flight cancelled, each plugin's grace, the warm processes ended, their
/// scratch folders removed), then the process exits with 128 + the signal. An MCP
/// client that does not close the server's input first sends SIGTERM (the spec's
/// shutdown for stdio). A second signal during that ends the process at once.
///
/// The handler only writes the signal's number to a pipe (async-signal-safe); a
/// thread reads it and does the rest. A handler, unlike a blocked mask, does not
/// pass on to the plugins: exec resets it. The three are unblocked, in case the
/// client started the server with them blocked (Foundation's `Process` does).
public enum TerminationSignals {
    nonisolated(unsafe) static var pipeWrite: Int32 = -1
    static let handled = [SIGTERM, SIGINT, SIGHUP]

    public static func install(_ onSignal: @escaping @Sendable (Int32) -> Void) {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { return }
        // Not passed on to the plugins.
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        pipeWrite = fds[1]
        let readEnd = fds[0]
        let handler: @convention(c) (Int32) -> Void = { signal in
            var byte = UInt8(truncatingIfNeeded: signal)
            _ = write(TerminationSignals.pipeWrite, &byte, 1)
        }
        for signal in handled { _ = Glibc.signal(signal, handler) }
        // A parent may have started us with them blocked (a mask is inherited): unblock them
        // here, before the server's threads start, as they inherit this thread's mask.
        var set = sigset_t()
        sigemptyset(&set)
        for signal in handled { sigaddset(&set, signal) }
        pthread_sigmask(SIG_UNBLOCK, &set, nil)
        Thread {
            var byte: UInt8 = 0
            while read(readEnd, &byte, 1) < 0 && errno == EINTR {}
            // A second signal ends the process at once.
            for signal in handled { _ = Glibc.signal(signal, SIG_DFL) }
            onSignal(Int32(byte))
        }.start()
    }
}
