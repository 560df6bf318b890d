import ExtrunSystem
import ExtrunTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// ExtrunSystem's calls on non-blocking descriptors: EINTR retried, EAGAIN/EWOULDBLOCK
/// as `.wouldBlock`, anything else a `SystemCallError` named after the call.
@Suite("System calls on non-blocking descriptors")
struct SystemCallTests {
    /// A pipe whose two ends are non-blocking, closed when it goes away.
    private final class Pipe {
        var readEnd: Int32 = -1
        var writeEnd: Int32 = -1

        init() throws {
            var ends: [Int32] = [-1, -1]
            try #require(pipe(&ends) == 0)
            readEnd = ends[0]
            writeEnd = ends[1]
            for fd in ends {
                try #require(fcntl(fd, F_SETFD, FD_CLOEXEC) == 0)
                try #require(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) == 0)
            }
        }

        func closeWriteEnd() {
            close(writeEnd)
            writeEnd = -1
        }

        deinit {
            if readEnd >= 0 { close(readEnd) }
            if writeEnd >= 0 { close(writeEnd) }
        }
    }

    private func read(_ fd: Int32, _ buffer: inout [UInt8]) throws(SystemCallError) -> NonBlocking<Int> {
        var result: Result<NonBlocking<Int>, SystemCallError> = .success(.wouldBlock)
        buffer.withUnsafeMutableBytes { raw in
            do throws(SystemCallError) { result = .success(try SystemCall.readNonBlocking(fd, into: raw)) } catch { result = .failure(error) }
        }
        return try result.get()
    }

    private func write(_ fd: Int32, _ bytes: [UInt8]) throws(SystemCallError) -> NonBlocking<Int> {
        var result: Result<NonBlocking<Int>, SystemCallError> = .success(.wouldBlock)
        bytes.withUnsafeBytes { raw in
            do throws(SystemCallError) { result = .success(try SystemCall.writeNonBlocking(fd, raw)) } catch { result = .failure(error) }
        }
        return try result.get()
    }

    @Test("a read of an empty pipe would block; a write completes; the read then completes; at the end 0")
    func readAndWrite() throws {
        let pipe = try Pipe()
        var buffer = [UInt8](repeating: 0, count: 16)
        let empty = try read(pipe.readEnd, &buffer)
        #expect(empty == .wouldBlock)
        let message: [UInt8] = Array("hello".utf8)
        let written = try write(pipe.writeEnd, message)
        #expect(written == .completed(5))
        let got = try read(pipe.readEnd, &buffer)
        #expect(got == .completed(5))
        #expect(Array(buffer[0..<5]) == message)
        pipe.closeWriteEnd()
        let end = try read(pipe.readEnd, &buffer)
        #expect(end == .completed(0))
    }

    @Test("writes into a full pipe would block, after it took what it had room for")
    func fullPipe() throws {
        let pipe = try Pipe()
        let chunk = [UInt8](repeating: 0x61, count: 64 << 10)
        var taken = 0
        var outcome: NonBlocking<Int> = .completed(0)
        for _ in 0..<1000 {
            outcome = try write(pipe.writeEnd, chunk)
            guard case .completed(let count) = outcome else { break }
            taken += count
        }
        #expect(outcome == .wouldBlock)
        #expect(taken > 0)
        // What the pipe took comes out again, and then the read would block.
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        var drained = 0
        while case .completed(let count) = try read(pipe.readEnd, &buffer), count > 0 {
            drained += count
        }
        #expect(drained == taken)
    }

    @Test("EINTR is retried; EAGAIN and EWOULDBLOCK are .wouldBlock; another errno throws with the call's name")
    func errnos() throws {
        var calls = 0
        let retried = try SystemCall.nonBlocking("fake") { () -> Int32 in
            calls += 1
            if calls < 3 {
                errno = EINTR
                return -1
            }
            return 7
        }
        #expect(retried == .completed(7) && calls == 3)
        for code in [EAGAIN, EWOULDBLOCK] {
            let outcome = try SystemCall.nonBlocking("fake") { () -> Int in
                errno = code
                return -1
            }
            #expect(outcome == .wouldBlock)
        }
        #expect(throws: SystemCallError(call: "fake", code: EPIPE)) {
            try SystemCall.nonBlocking("fake") { () -> Int in
                errno = EPIPE
                return -1
            }
        }
        var buffer = [UInt8](repeating: 0, count: 4)
        #expect(throws: SystemCallError(call: "read", code: EBADF)) { try read(-1, &buffer) }
    }

    @Test("a lock another descriptor holds would block")
    func heldLock() throws {
        let folder = try TempDirectory("systemcall")
        let path = folder.sub("lock")
        let first = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        let second = open(path, O_RDWR | O_CLOEXEC)
        defer {
            close(first)
            close(second)
        }
        try #require(first >= 0 && second >= 0)
        let taken = try SystemCall.nonBlocking("flock") { flock(first, LOCK_EX | LOCK_NB) }
        #expect(taken == .completed(0))
        let refused = try SystemCall.nonBlocking("flock") { flock(second, LOCK_EX | LOCK_NB) }
        #expect(refused == .wouldBlock)
    }

    @Test("poll: 0 when nothing is ready in time, the count ready otherwise")
    func pollReady() throws {
        let pipe = try Pipe()
        var fds = [pollfd(fd: pipe.readEnd, events: Int16(POLLIN), revents: 0)]
        let none = try SystemCall.poll(&fds, timeoutMs: 0)
        #expect(none == 0)
        let written = try write(pipe.writeEnd, [1])
        #expect(written == .completed(1))
        let ready = try SystemCall.poll(&fds, timeoutMs: 1000)
        #expect(ready == 1)
        #expect(fds[0].revents & Int16(POLLIN) != 0)
    }
}
