import ExtrunHost
import ExtrunProtocol
import ExtrunSystem
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// serve.json's `audit` (docs/serve.md, "Audit log"): a JSON line for every call, in a file
/// rotated by size. Off without the key.
///
///     "audit": {"path": "/var/log/extrun/audit.jsonl", "maxBytes": 10485760, "keep": 5}
public struct AuditSettings: Sendable, Equatable {
    public var path: String
    /// The file is rotated (`path` → `path.1` → ... → `path.KEEP`, the oldest removed) before a line would take it past this.
    public var maxBytes = 10 << 20
    /// Rotated files kept besides the current one.
    public var keep = 5

    static func parse(_ value: JSONValue, source: String) throws(HostError) -> AuditSettings {
        func fail(_ field: String, _ message: String) -> HostError {
            HostError(.configurationError, "\(source): \(field): \(message)", details: ["file": .string(source), "field": .string(field)])
        }
        guard case .object(let object) = value else { throw fail("audit", "expected {\"path\": PATH, \"maxBytes\": N, \"keep\": N}") }
        if let unknown = object.keys.sorted().first(where: { !["path", "maxBytes", "keep"].contains($0) }) {
            throw fail("audit.\(unknown)", "unknown field (the fields: keep, maxBytes, path)")
        }
        guard var path = object["path"]?.stringValue, !path.isEmpty else { throw fail("audit.path", "expected the audit log's path") }
        if !path.hasPrefix("/") { path = URL(fileURLWithPath: source).deletingLastPathComponent().appendingPathComponent(path).path }
        var settings = AuditSettings(path: path)
        if let field = object["maxBytes"] {
            guard let bytes = field.intValue, (4096...(1 << 40)).contains(bytes) else { throw fail("audit.maxBytes", "expected bytes from 4096 to 2^40; got \(field)") }
            settings.maxBytes = Int(bytes)
        }
        if let field = object["keep"] {
            guard let keep = field.intValue, (0...1000).contains(keep) else { throw fail("audit.keep", "expected a whole number from 0 to 1000; got \(field)") }
            settings.keep = Int(keep)
        }
        return settings
    }
}

/// One call, as the audit log keeps it: who, what, how it ended, how long it took. Never an
/// argument's value: the intent's parameters, a phrase's text, a prompt's answer stay out.
public struct AuditRecord: Sendable {
    /// Seconds since 1970 when the call came.
    public var time: Double
    public var principal: String
    /// `unix`, `tcp`, or the front end (`mcp`).
    public var transport: String
    /// `handle`, `options`, `continue`, `phrase`; `tools/call` over MCP.
    public var call: String
    public var intent: String?
    public var plugin: String?
    /// The response's code (`success`...), or `error`, or `refused` (nothing ran).
    public var outcome: String
    /// The error's kind when there was one; with `reason` for a refusal (`access`, `rateLimit`...).
    public var error: String?
    public var reason: String?
    public var status: Int?
    public var durationMs: Double
    public var run: String?

    public init(
        time: Double = Date().timeIntervalSince1970, principal: String, transport: String, call: String, intent: String? = nil, plugin: String? = nil,
        outcome: String, error: String? = nil, reason: String? = nil, status: Int? = nil, durationMs: Double, run: String? = nil
    ) {
        self.time = time
        self.principal = principal
        self.transport = transport
        self.call = call
        self.intent = intent
        self.plugin = plugin
        self.outcome = outcome
        self.error = error
        self.reason = reason
        self.status = status
        self.durationMs = durationMs
        self.run = run
    }

    /// The JSON line.
    var line: [UInt8] {
        var members: [(key: String, value: JSONValue)] = [
            ("time", .string(Self.timestamp(time))),
            ("principal", .string(principal)), ("transport", .string(transport)), ("call", .string(call)),
        ]
        if let intent { members.append(("intent", .string(intent))) }
        if let plugin { members.append(("plugin", .string(plugin))) }
        members.append(("outcome", .string(outcome)))
        if let error { members.append(("error", .string(error))) }
        if let reason { members.append(("reason", .string(reason))) }
        if let status { members.append(("status", .int(Int64(status)))) }
        members.append(("durationMs", .double((durationMs * 1000).rounded() / 1000)))
        if let run { members.append(("run", .string(run))) }
        var bytes = JSONWriter.objectBytes(members)
        bytes.append(0x0A)
        return bytes
    }

    /// ISO 8601 in UTC with milliseconds (`2026-11-29T05:20:01.123Z`), by gmtime_r: a
    /// twentieth of ISO8601DateFormatter's time.
    static func timestamp(_ seconds: Double) -> String {
        var whole = time_t(seconds.rounded(.down))
        let millis = Int(((seconds - seconds.rounded(.down)) * 1000).rounded(.down))
        var parts = tm()
        gmtime_r(&whole, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let ms = millis < 10 ? "00\(millis)" : millis < 100 ? "0\(millis)" : "\(millis)"
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)).\(ms)Z"
    }
}

/// The audit log's writer: `record` only queues the record (a lock and an append: no
/// formatting, no I/O on the caller's thread); a thread of its own formats and writes the
/// queued lines in batches, and rotates the file. Past 100,000 lines waiting (a disk that
/// stopped), new ones are counted as dropped and the count is written as a line of its own.
final class AuditLog: @unchecked Sendable {
    let settings: AuditSettings
    private let condition = NSCondition()
    private var queue: [AuditRecord] = []
    private var dropped = 0
    private var closed = false
    private var finished = false
    private var fd: Int32 = -1
    private var size = 0
    private let onError: @Sendable (String) -> Void
    static let maxQueued = 100_000

    init(settings: AuditSettings, onError: @escaping @Sendable (String) -> Void) {
        self.settings = settings
        self.onError = onError
        Thread.detachNewThread { [self] in writerLoop() }
    }

    func record(_ record: AuditRecord) {
        condition.lock()
        if closed {
            condition.unlock()
            return
        }
        if queue.count >= Self.maxQueued {
            dropped += 1
        } else {
            queue.append(record)
        }
        if queue.count == 1 { condition.signal() }
        condition.unlock()
    }

    /// Writes what is queued and stops the writer (the service stopping, or a new audit path).
    func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        while !finished { condition.wait() }
        condition.unlock()
    }

    private func writerLoop() {
        while true {
            condition.lock()
            while queue.isEmpty && dropped == 0 && !closed { condition.wait() }
            let batch = queue
            let lost = dropped
            queue.removeAll(keepingCapacity: true)
            dropped = 0
            let stopping = closed
            condition.unlock()
            // One write per run of lines that fits the current file; the file rotated between.
            var bytes: [UInt8] = []
            var lines = batch.map(\.line)
            if lost > 0 {
                lines.append(JSONWriter.objectBytes([("time", .string(AuditRecord.timestamp(Date().timeIntervalSince1970))), ("dropped", .int(Int64(lost)))]) + [0x0A])
            }
            for line in lines {
                if !bytes.isEmpty, size + bytes.count + line.count > settings.maxBytes {
                    write(bytes)
                    bytes.removeAll(keepingCapacity: true)
                }
                bytes += line
            }
            if !bytes.isEmpty { write(bytes) }
            if stopping && batch.isEmpty && lost == 0 {
                if fd >= 0 { Glibc.close(fd) }
                fd = -1
                condition.lock()
                finished = true
                condition.broadcast()
                condition.unlock()
                return
            }
        }
    }

    private func write(_ bytes: [UInt8]) {
        if fd < 0 { open() }
        if fd >= 0, size > 0, size + bytes.count > settings.maxBytes { rotate() }
        guard fd >= 0 else { return }
        do {
            try SystemCall.writeAll(fd, bytes)
            size += bytes.count
        } catch {
            onError("the audit log \(settings.path) was not written: \(error)")
        }
    }

    private func open() {
        let opened = SystemCall.retryingInterrupts { Glibc.open(settings.path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600) }
        guard opened >= 0 else {
            onError("the audit log \(settings.path) cannot be opened: \(SystemCall.lastReason)")
            return
        }
        var info = stat()
        size = fstat(opened, &info) == 0 ? Int(info.st_size) : 0
        fd = opened
    }

    /// `path.(keep-1)` → `path.keep` ... `path` → `path.1`, then a new `path`; with keep 0 the file is emptied.
    private func rotate() {
        Glibc.close(fd)
        fd = -1
        let path = settings.path
        if settings.keep == 0 {
            unlink(path)
        } else {
            unlink("\(path).\(settings.keep)")
            if settings.keep > 1 {
                for index in stride(from: settings.keep - 1, through: 1, by: -1) { rename("\(path).\(index)", "\(path).\(index + 1)") }
            }
            rename(path, "\(path).1")
        }
        open()
    }
}
