import Foundation
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// A failed system call: its name and its errno (swift-system's `Errno`, whose
/// description is `strerror`'s text). The host, the store, the SDK and the CLI turn
/// it into their own typed errors, which name the file and say what was wrong.
public struct SystemCallError: Error, Sendable, Hashable, CustomStringConvertible {
    public var call: String
    public var errno: Errno

    public init(call: String, errno: Errno) {
        self.call = call
        self.errno = errno
    }

    public init(call: String, code: Int32) {
        self.init(call: call, errno: Errno(rawValue: code))
    }

    /// The error the last failed call left in `errno`.
    public static func last(_ call: String) -> SystemCallError {
        SystemCallError(call: call, errno: Errno(rawValue: Glibc.errno))
    }

    public var code: Int32 { errno.rawValue }
    /// What went wrong, as `strerror` says it ("No such file or directory").
    public var reason: String { errno.description }
    public var description: String { "\(call): \(reason)" }
}

/// What a call on a non-blocking descriptor did: it completed with its result, or it
/// would have had to wait (EAGAIN/EWOULDBLOCK), and did nothing.
public enum NonBlocking<Value: FixedWidthInteger>: Hashable {
    case completed(Value)
    case wouldBlock
}

extension NonBlocking: Sendable where Value: Sendable {}

/// The one place that retries a system call interrupted by a signal (EINTR), tells
/// "would block" from a failure on a non-blocking descriptor, and turns a failure into
/// a `SystemCallError` named after the call.
public enum SystemCall {
    /// Calls `body` again while it fails with EINTR; any other failure (-1) throws.
    @inline(__always)
    public static func retrying<Result: FixedWidthInteger>(_ call: String, _ body: () -> Result) throws(SystemCallError) -> Result {
        while true {
            let result = body()
            if result != -1 { return result }
            let error = SystemCallError.last(call)
            if error.errno != .interrupted { throw error }
        }
    }

    /// Calls `body` again while it fails with EINTR; any other failure (-1) is returned
    /// as it is, with `errno` set, for callers that read other errnos themselves
    /// (EAGAIN on a non-blocking descriptor, EEXIST).
    @inline(__always)
    public static func retryingInterrupts<Result: FixedWidthInteger>(_ body: () -> Result) -> Result {
        while true {
            let result = body()
            if result != -1 || Glibc.errno != EINTR { return result }
        }
    }

    /// Calls `body` on a non-blocking descriptor: again while it fails with EINTR,
    /// `.wouldBlock` when it fails with EAGAIN/EWOULDBLOCK (nothing to read, no room to
    /// write, a lock held elsewhere), any other failure (-1) throws.
    @inline(__always)
    public static func nonBlocking<Result: FixedWidthInteger>(_ call: String, _ body: () -> Result) throws(SystemCallError) -> NonBlocking<Result> {
        while true {
            let result = body()
            if result != -1 { return .completed(result) }
            let error = SystemCallError.last(call)
            if error.errno == .resourceTemporarilyUnavailable || error.errno == .wouldBlock { return .wouldBlock }
            if error.errno != .interrupted { throw error }
        }
    }

    /// read(2) from a non-blocking descriptor: `.completed(count)` (0 at the end), or `.wouldBlock`.
    public static func readNonBlocking(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(SystemCallError) -> NonBlocking<Int> {
        try nonBlocking("read") { Glibc.read(fd, buffer.baseAddress, buffer.count) }
    }

    /// write(2) to a non-blocking descriptor: `.completed(count)` (perhaps fewer than
    /// `bytes.count`: the pipe took that much), or `.wouldBlock` (it took nothing).
    public static func writeNonBlocking(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws(SystemCallError) -> NonBlocking<Int> {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return .completed(0) }
        return try nonBlocking("write") { Glibc.write(fd, base, bytes.count) }
    }

    /// poll(2) for an event loop: the count of descriptors ready, 0 when the time ran out
    /// or a signal interrupted the wait (the loop works out its timeout again and comes back).
    public static func poll(_ fds: inout [pollfd], timeoutMs: Int32) throws(SystemCallError) -> Int {
        let ready = Glibc.poll(&fds, nfds_t(fds.count), timeoutMs)
        if ready >= 0 { return Int(ready) }
        let error = SystemCallError.last("poll")
        if error.errno == .interrupted { return 0 }
        throw error
    }

    /// `strerror`'s text for an errno.
    public static func reason(_ code: Int32) -> String { Errno(rawValue: code).description }

    /// `strerror`'s text for the last failed call's errno.
    public static var lastReason: String { reason(Glibc.errno) }

    /// Writes all of `bytes` to `fd` (swift-system's `writeAll`: EINTR and short writes retried).
    public static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws(SystemCallError) {
        do {
            _ = try FileDescriptor(rawValue: fd).writeAll(bytes)
        } catch {
            throw SystemCallError(call: "write", errno: error as? Errno ?? .ioError)
        }
    }

    /// Writes all of `bytes` to `fd`.
    public static func writeAll(_ fd: Int32, _ bytes: some ContiguousBytes) throws(SystemCallError) {
        var failure: SystemCallError?
        bytes.withUnsafeBytes { raw in
            do throws(SystemCallError) { try writeAll(fd, raw) } catch { failure = error }
        }
        if let failure { throw failure }
    }

    /// Reads into `buffer` from `fd` (swift-system's `read`: EINTR retried); the count read, 0 at the end.
    public static func read(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(SystemCallError) -> Int {
        do {
            return try FileDescriptor(rawValue: fd).read(into: buffer)
        } catch {
            throw SystemCallError(call: "read", errno: error as? Errno ?? .ioError)
        }
    }

    /// Reads into `bytes` from `offset` to its end; the count read, 0 at the end of the file.
    public static func read(_ fd: Int32, into bytes: inout [UInt8], at offset: Int = 0) throws(SystemCallError) -> Int {
        var result: Result<Int, SystemCallError> = .success(0)
        bytes.withUnsafeMutableBytes { raw in result = readResult(fd, UnsafeMutableRawBufferPointer(rebasing: raw[offset...])) }
        return try result.get()
    }

    /// Reads into `data` from `offset` to its end; the count read, 0 at the end of the file.
    public static func read(_ fd: Int32, into data: inout Data, at offset: Int = 0) throws(SystemCallError) -> Int {
        var result: Result<Int, SystemCallError> = .success(0)
        data.withUnsafeMutableBytes { raw in result = readResult(fd, UnsafeMutableRawBufferPointer(rebasing: raw[offset...])) }
        return try result.get()
    }

    private static func readResult(_ fd: Int32, _ buffer: UnsafeMutableRawBufferPointer) -> Result<Int, SystemCallError> {
        do throws(SystemCallError) { return .success(try read(fd, into: buffer)) } catch { return .failure(error) }
    }

    /// Sleeps for `nanoseconds`, going back to sleep for what is left after a signal.
    public static func sleep(nanoseconds: Int) {
        var request = timespec(tv_sec: nanoseconds / 1_000_000_000, tv_nsec: nanoseconds % 1_000_000_000)
        var left = timespec()
        while nanosleep(&request, &left) != 0 && Glibc.errno == EINTR { request = left }
    }
}
