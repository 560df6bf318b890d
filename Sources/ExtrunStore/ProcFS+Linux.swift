#if canImport(Glibc)
import Glibc
#endif

/// What the store reads from /proc.
enum ProcFS {
    /// The path an open descriptor names now (the link /proc/self/fd/FD), or nil when it
    /// cannot be read.
    static func path(of fd: Int32) -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let count = readlink("/proc/self/fd/\(fd)", &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
