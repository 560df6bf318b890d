#if canImport(Glibc)
import Glibc
#endif

/// Monotonic time in nanoseconds, for deadlines and metrics.
public enum MonotonicClock {
    public static func now() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
    }

    public static func milliseconds(from start: UInt64, to end: UInt64 = now()) -> Double {
        (Double(end &- start) / 1_000_000).rounded(toPlaces: 3)
    }
}

extension Double {
    func rounded(toPlaces places: Int) -> Double {
        var scale = 1.0
        for _ in 0..<places { scale *= 10 }
        return (self * scale).rounded() / scale
    }
}
