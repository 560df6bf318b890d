#if canImport(Glibc)
import Glibc
#endif
import NIOConcurrencyHelpers

/// Samples a plugin's private writable memory (VmData in /proc/PID/status: heap,
/// anonymous mappings and thread stacks — what RLIMIT_DATA counts, and no shared
/// library pages) while it runs, and keeps the peak.
final class MemorySampler {
    private var fd: Int32 = -1
    private var statFD: Int32 = -1
    /// CPU time (user + system) at the last sample: the figure when the plugin is
    /// killed before anyone could collect its rusage.
    private(set) var lastCPUMs: Double = 0
    private static let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))
    private(set) var peakDataBytes: Int64 = 0
    private var buffer = [UInt8](repeating: 0, count: 4096)

    func attach(pid: pid_t) {
        detach()
        fd = open("/proc/\(pid)/status", O_RDONLY | O_CLOEXEC)
        statFD = open("/proc/\(pid)/stat", O_RDONLY | O_CLOEXEC)
        sample()
    }

    func detach() {
        if fd >= 0 {
            close(fd)
            fd = -1
        }
        if statFD >= 0 {
            close(statFD)
            statFD = -1
        }
    }

    /// Samples closer together than this are skipped: the host wakes up for every
    /// message, and a warm plugin exchanges thousands a second (docs/benchmarks.md).
    static let minimumIntervalNs: UInt64 = 1_000_000
    private var lastSampleNs: UInt64 = 0

    /// Reads VmData once (at most once per `minimumIntervalNs`).
    func sample() {
        guard fd >= 0 else { return }
        let now = MonotonicClock.now()
        guard now &- lastSampleNs >= Self.minimumIntervalNs || lastSampleNs == 0 else { return }
        lastSampleNs = now
        let count = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
        guard count > 0, let value = Self.field("VmData:", in: buffer, count: count) else { return }
        if value > peakDataBytes { peakDataBytes = value }
        sampleCPU()
    }

    /// utime and stime, fields 14 and 15 of /proc/PID/stat (after the command's closing parenthesis).
    private func sampleCPU() {
        guard statFD >= 0 else { return }
        let count = buffer.withUnsafeMutableBytes { pread(statFD, $0.baseAddress, $0.count, 0) }
        guard count > 0, let close = buffer[0..<count].lastIndex(of: UInt8(ascii: ")")) else { return }
        let fields = buffer[(close + 1)..<count].split(separator: UInt8(ascii: " "))
        // After ")": state is field 3, so utime (14) and stime (15) are at 11 and 12.
        guard fields.count > 12, let user = Double(String(decoding: fields[11], as: UTF8.self)),
            let system = Double(String(decoding: fields[12], as: UTF8.self)), Self.ticksPerSecond > 0
        else { return }
        lastCPUMs = (user + system) * 1000 / Self.ticksPerSecond
    }

    /// This process's own peak resident set size (VmHWM).
    static func ownPeakRSS() -> Int64? {
        let fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        guard count > 0 else { return nil }
        return field("VmHWM:", in: buffer, count: count)
    }

    /// The last `ownPeakRSS()` and when it was read, shared by the process's threads.
    private static let lastOwnPeak = NIOLockedValueBox<(bytes: Int64?, at: UInt64)>((nil, 0))

    /// This process's peak resident set size, read again only when the last figure is older
    /// than `maxAgeNs` (a peak only grows: the figure is at most that old).
    static func ownPeakRSS(maxAgeNs: UInt64) -> Int64? {
        let now = MonotonicClock.now()
        let known = lastOwnPeak.withLockedValue { $0 }
        if let bytes = known.bytes, now &- known.at <= maxAgeNs { return bytes }
        let bytes = ownPeakRSS()
        lastOwnPeak.withLockedValue { $0 = (bytes, now) }
        return bytes
    }

    /// Parses "Name:   1234 kB" out of a status file, in bytes.
    static func field(_ name: String, in buffer: [UInt8], count: Int) -> Int64? {
        let key = Array(name.utf8)
        var i = 0
        while i + key.count <= count {
            if (i == 0 || buffer[i - 1] == 10) && buffer[i] == key[0] && buffer[i..<(i + key.count)].elementsEqual(key) {
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
