import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// ISO 8601 dates as parameters carry them: a calendar date (`2026-11-22`)
/// or a date and time with a zone (`2026-11-22T10:30:00Z`, fractional seconds allowed).
public enum ISODate {
    public static func parse(_ text: String) -> Date? {
        if let date = parseUTCSeconds(text) { return date }
        if let date = try? Date(text, strategy: Date.ISO8601FormatStyle()) { return date }
        if let date = try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true)) { return date }
        if let date = try? Date(text, strategy: Date.ISO8601FormatStyle().year().month().day()) { return date }
        return nil
    }

    /// `YYYY-MM-DDTHH:MM:SSZ`, what `format` writes, read without a format style (whose
    /// first use in a fresh process is costly: docs/benchmarks.md, "Costs the source's comments point to"). Anything else
    /// (other shapes, out-of-range fields, which the format style rolls over) is nil,
    /// and left to the format style.
    static func parseUTCSeconds(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        guard bytes.count == 20, bytes[4] == 45, bytes[7] == 45, bytes[10] == 84, bytes[13] == 58, bytes[16] == 58, bytes[19] == 90 else {
            return nil
        }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for index in range {
                guard bytes[index] >= 48, bytes[index] <= 57 else { return nil }
                value = value * 10 + Int(bytes[index] - 48)
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10), let hour = number(11..<13),
            let minute = number(14..<16), let second = number(17..<19), (1...12).contains(month), hour < 24, minute < 60, second < 60,
            year >= 1583  // Foundation's calendar is Julian before the Gregorian reform: leave those to it
        else { return nil }
        // Days from the civil date (Howard Hinnant's algorithm), proleptic Gregorian, UTC.
        let monthDays = [31, (year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)) ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        guard day >= 1, day <= monthDays[month - 1] else { return nil }
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146097 + dayOfEra - 719468
        return Date(timeIntervalSince1970: TimeInterval(days * 86400 + hour * 3600 + minute * 60 + second))
    }

    /// `format`'s text, made without a format style for dates in years 1583 to 9999
    /// (whole seconds, UTC); nil for others.
    static func formatUTCSeconds(_ date: Date) -> String? {
        let seconds = date.timeIntervalSince1970.rounded(.down)
        guard seconds.isFinite, seconds > -12_212_553_600, seconds < 253_402_300_800 else { return nil }  // 1583-01-01 ..< 10000-01-01
        var time = Int(seconds)
        var parts = tm()
        guard gmtime_r(&time, &parts) != nil else { return nil }
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let year = Int(parts.tm_year) + 1900
        let yearText = String(repeating: "0", count: max(0, 4 - String(year).count)) + String(year)
        return "\(yearText)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
    }

    public static func format(_ date: Date) -> String {
        if let text = formatUTCSeconds(date) { return text }
        return date.formatted(Date.ISO8601FormatStyle())
    }
}
