import Foundation

/// Sizes and durations as people write them (the policy file, the command line) and as
/// messages print them.
public enum ByteCount {
    /// Parses "30MiB", "1GiB", "512KiB", "100MB", "4096" (bytes).
    public static func parse(_ text: String) -> Int64? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let digits = trimmed.prefix { $0.isNumber || $0 == "." }
        guard let number = Double(digits), number >= 0 else { return nil }
        let unit = trimmed.dropFirst(digits.count).trimmingCharacters(in: .whitespaces).lowercased()
        let scale: Double
        switch unit {
        case "", "b": scale = 1
        case "k", "kib", "ki": scale = 1024
        case "m", "mib", "mi": scale = 1_048_576
        case "g", "gib", "gi": scale = 1_073_741_824
        case "kb": scale = 1000
        case "mb": scale = 1_000_000
        case "gb": scale = 1_000_000_000
        default: return nil
        }
        // Int64(_:) traps on a value it cannot hold: a size beyond it is no size.
        return Int64(exactly: (number * scale).rounded(.towardZero))
    }

    public static func format(_ bytes: Int64) -> String {
        if bytes >= 1 << 30 && bytes % (1 << 20) == 0 && bytes % (1 << 30) == 0 { return "\(bytes >> 30) GiB" }
        if bytes >= 1 << 20 && bytes % (1 << 20) == 0 { return "\(bytes >> 20) MiB" }
        if bytes >= 1 << 20 { return String(format: "%.1f MiB", Double(bytes) / 1_048_576) }
        if bytes >= 1 << 10 { return String(format: "%.0f KiB", Double(bytes) / 1024) }
        return "\(bytes) bytes"
    }
}

/// Parses durations like "10s", "500ms", "1.5s", "2m"; a number without a unit is none (nil).
public enum DurationText {
    public static func parseMilliseconds(_ text: String) -> Int? {
        let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
        let digits = trimmed.prefix { $0.isNumber || $0 == "." }
        guard let number = Double(digits), number >= 0 else { return nil }
        let scale: Double
        switch trimmed.dropFirst(digits.count) {
        case "ms": scale = 1
        // A bare number is no duration: "2" was 2 ms and read as 2 seconds (issue 18).
        case "s": scale = 1000
        case "m", "min": scale = 60_000
        default: return nil
        }
        // Int(_:) traps on a value it cannot hold: a duration beyond it is no duration.
        return Int(exactly: (number * scale).rounded(.towardZero))
    }
}
