import ExtrunProtocol
import ExtrunSystem
import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// The service's log lines on stderr (swift-log): one JSON object a line (`--log-format
/// json`, the default: `{"time", "level", "message", ...metadata}`, with the intent's id,
/// the caller's uid and the plugin on every intent's lines), or text.
public struct ServeLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level
    let json: Bool

    public init(json: Bool, level: Logger.Level) {
        self.json = json
        logLevel = level
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let time = Self.timestamp()
        var line: [UInt8]
        if json {
            // The members as a list (the event's metadata over the handler's, both over time,
            // level and message), written sorted as one object: no merged dictionaries.
            let extra = event.metadata
            var members: [(key: String, value: JSONValue)] = []
            members.reserveCapacity(metadata.count + (extra?.count ?? 0) + 3)
            for (key, value) in metadata where extra?[key] == nil { members.append((key, Self.json(value))) }
            if let extra { for (key, value) in extra { members.append((key, Self.json(value))) } }
            for (key, value) in [("time", time), ("level", event.level.rawValue)] where !members.contains(where: { $0.key == key }) {
                members.append((key, .string(value)))
            }
            if !members.contains(where: { $0.key == "message" }) { members.append(("message", .string(event.message.description))) }
            line = JSONWriter.objectBytes(members)
        } else {
            var merged = metadata
            if let extra = event.metadata { merged.merge(extra) { _, new in new } }
            // Callers' words (intent names, ids) are escaped: a control character cannot forge a line.
            let fields = merged.keys.sorted().map { "\(Self.escaped($0))=\(Self.escaped(merged[$0].map { "\($0)" } ?? ""))" }.joined(separator: " ")
            line = Array("\(time) \(event.level.rawValue) \(Self.escaped(event.message.description))\(fields.isEmpty ? "" : " " + fields)".utf8)
        }
        line.append(0x0A)
        // A log line that cannot be written is dropped: there is nowhere to say so.
        try? SystemCall.writeAll(STDERR_FILENO, line)
    }

    /// Text for `--log-format text`: control characters (newlines, escapes) as \n, \t, \u{1b}.
    static func escaped(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F || $0 == "\\" }) else { return text }
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\\": out += "\\\\"
            case _ where scalar.value < 0x20 || scalar.value == 0x7F: out += "\\u{\(String(scalar.value, radix: 16))}"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// Now, as `2026-11-25T16:29:07.374Z` (gmtime_r: a formatter per line costs more than the line).
    static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var parts = tm()
        var seconds = now.tv_sec
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let millis = Int(now.tv_nsec / 1_000_000)
        let fraction = millis < 10 ? "00\(millis)" : millis < 100 ? "0\(millis)" : "\(millis)"
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)).\(fraction)Z"
    }

    static func json(_ value: Logger.MetadataValue) -> JSONValue {
        switch value {
        case .string(let text): if let number = Int64(text), String(number) == text { .int(number) } else { .string(text) }
        case .stringConvertible(let convertible): .string(convertible.description)
        case .array(let values): .array(values.map(json))
        case .dictionary(let values): .object(values.mapValues(json))
        }
    }
}
