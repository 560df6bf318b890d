#if canImport(Glibc)
import Glibc
#endif

/// Samples a plugin's private writable memory (VmData in /proc/PID/status: heap,
/// anonymous mappings and thread stacks — what RLIMIT_DATA counts, and no shared
/// library pages) while it runs, and keeps the peak.
final class MemorySampler {
    private var fd: Int32 = -1
    private(set) var peakDataBytes: Int64 = 0
    private(set) var lastDataBytes: Int64 = 0
    private(set) var samples = 0
    private var buffer = [UInt8](repeating: 0, count: 4096)

    func attach(pid: pid_t) {
        detach()
        fd = open("/proc/\(pid)/status", O_RDONLY | O_CLOEXEC)
        sample()
    }

    func detach() {
        if fd >= 0 {
            close(fd)
            fd = -1
        }
    }

    /// Reads VmData once.
    func sample() {
        guard fd >= 0 else { return }
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0, let value = Self.field("VmData:", in: buffer, count: count) else { return }
        samples += 1
        lastDataBytes = value
        if value > peakDataBytes { peakDataBytes = value }
    }

    /// Parses "Name:   1234 kB" out of a status file, in bytes.
    static func field(_ name: String, in buffer: [UInt8], count: Int) -> Int64? {
        let key = Array(name.utf8)
        var i = 0
        while i + key.count <= count {
            if (i == 0 || buffer[i - 1] == 10) && Array(buffer[i..<(i + key.count)]) == key {
                var j = i + key.count
                var value: Int64 = 0
                while j < count && (buffer[j] == 32 || buffer[j] == 9) { j += 1 }
                while j < count, buffer[j] >= 48, buffer[j] <= 57 {
                    value = value * 10 + Int64(buffer[j] - 48)
                    j += 1
                }
                return value * 1024
            }
            i += 1
        }
        return nil
    }
}
