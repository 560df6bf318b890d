import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

@testable import ExtrunStore

#if canImport(Glibc)
import Glibc
#endif

/// A "server" that takes the connection and never answers (a PostgreSQL in the middle of a
/// restart may do so): every wait of the store for it ends, at the run's deadline or at the
/// store's longest wait, with a typed error; no wait is left to postgres-nio's futures, one of
/// which was seen never to complete (the fleet's PostgreSQL restart).
@Suite struct PostgresSilentServerTests {
    /// Python accepting on `DIR/.s.PGSQL.5999`, reading what comes, never writing.
    final class SilentServer {
        let process = Process()
        let directory: String

        /// - Parameter startsSessions: true answers the start of a session (authentication ok,
        ///   the parameters postgres-nio reads, ready for a query) and then nothing more.
        /// - Parameter closes: the first statement's connection is closed 0.3 s after it came, unanswered.
        init(in directory: String, startsSessions: Bool, closes: Bool = false) throws {
            self.directory = directory
            let script = """
                import os, socket, struct, sys, threading, time
                parent = os.getppid()
                starts = sys.argv[2] == "1"
                closes = sys.argv[3] == "1"
                def message(kind, body):
                    return kind + struct.pack("!I", len(body) + 4) + body
                def exactly(c, n):
                    data = b""
                    while len(data) < n:
                        more = c.recv(n - len(data))
                        if not more:
                            raise EOFError
                        data += more
                    return data
                def serve(c):
                    try:
                        if starts:
                            exactly(c, struct.unpack("!I", exactly(c, 4))[0] - 4)
                            out = message(b"R", struct.pack("!I", 0))
                            for k, v in [("server_version", "16.0"), ("integer_datetimes", "on"), ("client_encoding", "UTF8"),
                                         ("DateStyle", "ISO, MDY"), ("TimeZone", "UTC"), ("standard_conforming_strings", "on")]:
                                out += message(b"S", k.encode() + b"\\0" + v.encode() + b"\\0")
                            out += message(b"K", struct.pack("!II", 1234, 5678)) + message(b"Z", b"I")
                            c.sendall(out)
                        if closes:
                            # The first statement is taken, then the connection closed unanswered
                            # (a server stopped at once under a waiting statement).
                            c.recv(65536)
                            time.sleep(0.3)
                            c.close()
                            return
                        while c.recv(65536):
                            pass
                    except (EOFError, OSError):
                        pass
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.bind(sys.argv[1]); s.listen(16)
                print("ready", flush=True)
                held = []
                def watch():
                    while os.getppid() == parent:
                        time.sleep(0.2)
                    os._exit(0)
                threading.Thread(target=watch, daemon=True).start()
                while True:
                    c, _ = s.accept()
                    held.append(c)
                    threading.Thread(target=serve, args=(c,), daemon=True).start()
                """
            let ready = Pipe()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            process.arguments = ["-c", script, directory + "/.s.PGSQL.5999", startsSessions ? "1" : "0", closes ? "1" : "0"]
            process.standardOutput = ready
            try process.run()
            _ = ready.fileHandleForReading.availableData
        }

        func stop() {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    /// Runs `body` on a thread of its own and waits for it at most `seconds`: a hang is a failed
    /// expectation, not a hung suite. Nil when it did not end.
    static func bounded<T: Sendable>(seconds: Double, _ body: @escaping @Sendable () -> T) -> T? {
        let box = LockedBox<T?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            box.set(body())
            done.signal()
        }
        guard done.wait(timeout: .now() + seconds) == .success else { return nil }
        return box.get()
    }

    final class LockedBox<T>: @unchecked Sendable {
        private let lock = NSLock()
        private var value: T
        init(_ value: T) { self.value = value }
        func set(_ new: T) { lock.withLock { value = new } }
        func get() -> T { lock.withLock { value } }
    }

    /// Opens a store on a `SilentServer` (made with `startsSessions` and `closes`) under a deadline
    /// `deadlineMs` from now, on a thread of its own: the error's kind and message, and how long it
    /// took; nil when it did not end in 30 s.
    static func openOnSilentServer(startsSessions: Bool, closes: Bool = false, deadlineMs: UInt64) throws -> (kind: String, message: String, elapsedMs: Int64)? {
        let tmp = try TempDirectory()
        try FileManager.default.createDirectory(atPath: tmp.sub("socket"), withIntermediateDirectories: true)
        let server = try SilentServer(in: tmp.sub("socket"), startsSessions: startsSessions, closes: closes)
        defer { server.stop() }
        let location = try StoreLocation.parse("postgresql:///extrun?host=\(tmp.sub("socket"))&port=5999&user=nobody")
        let home = URL(fileURLWithPath: tmp.sub("home"))
        return Self.bounded(seconds: 30) { () -> (kind: String, message: String, elapsedMs: Int64) in
            let started = StoreDeadline.now()
            let error = StoreDeadline.$current.withValue(started + deadlineMs * 1_000_000) { () -> StoreError? in
                do {
                    _ = try Store(home: home, location: location)
                    return nil
                } catch let error as StoreError {
                    return error
                } catch {
                    return StoreError(.databaseError, "not a StoreError: \(error)")
                }
            }
            return (error?.kind.rawValue ?? "none", error?.message ?? "", Int64((StoreDeadline.now() - started) / 1_000_000))
        }
    }

    @Test(
        "A server that never answers, at the start of a session or at the first statement: opening the store under a 1 s deadline ends within about 2 s, typed, naming the server",
        arguments: [false, true])
    func aSilentServerEndsAtTheDeadline(startsSessions: Bool) throws {
        let outcome = try Self.openOnSilentServer(startsSessions: startsSessions, deadlineMs: 1_000)
        let (kind, message, elapsedMs) = try #require(outcome, "opening the store on a silent server did not end in 30 s")
        // No session: the server cannot be reached. A session whose statement is never
        // answered: the run's deadline came while the store waited for the server.
        #expect(kind == (startsSessions ? "storeBusy" : "storeUnavailable"), "\(message)")
        #expect(message.contains(startsSessions ? "no answer from the server by then" : ".s.PGSQL.5999"), "\(message)")
        #expect(elapsedMs < 4_000, "ended after \(elapsedMs) ms")
    }

    @Test("A connection closed under a waiting statement ends the wait at once: storeUnavailable about 0.3 s into a 10 s deadline, not at the deadline")
    func aConnectionClosedUnderAStatementEndsItsWait() throws {
        let outcome = try Self.openOnSilentServer(startsSessions: true, closes: true, deadlineMs: 10_000)
        let (kind, message, elapsedMs) = try #require(outcome, "the store's call did not end in 30 s")
        #expect(kind == "storeUnavailable", "\(message)")
        #expect(elapsedMs < 3_000, "ended after \(elapsedMs) ms of a 10,000 ms deadline: \(message)")
    }
}
