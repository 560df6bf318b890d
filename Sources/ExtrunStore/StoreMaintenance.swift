import ExtrunProtocol
import ExtrunSystem
import Foundation
import GRDB

#if canImport(Glibc)
import Glibc
#endif

/// `extrun store check` and `extrun store recover`: SQLite's verdict on a store, and a copy
/// of every readable row into a new file. Neither writes to the store's files (docs/store.md,
/// "When the store is damaged").
public enum StoreMaintenance {
    /// What `check` found.
    public struct CheckReport: Sendable {
        public var file: String
        /// True when SQLite found nothing wrong and nothing else was found.
        public var intact: Bool
        /// SQLite's findings (`["ok"]` when it found nothing).
        public var sqlite: [String]
        /// Problems found before SQLite could judge (the header, a missing log), and errors reading tables.
        public var problems: [StoreError]
        /// Rows per table, for the tables that could be counted.
        public var rows: [String: Int]
        /// Facts that are not damage by themselves (a file shorter than its header says while the log holds the rest).
        public var notes: [String] = []

        public var json: JSONValue {
            .object([
                "file": .string(file), "intact": .bool(intact), "sqlite": .array(sqlite.map(JSONValue.string)),
                "problems": .array(problems.map(\.json)), "rows": .object(rows.mapValues { .int(Int64($0)) }),
                "notes": .array(notes.map(JSONValue.string)),
            ])
        }
    }

    /// SQLite's `quick_check` (or `integrity_check` when `full`) of `<home>/store.sqlite`,
    /// opened read-only. Throws only when there is no store file to check.
    public static func check(home: URL, full: Bool) throws -> CheckReport {
        let path = home.standardizedFileURL.path + "/store.sqlite"
        var report = CheckReport(file: path, intact: false, sqlite: [], problems: [], rows: [:])
        guard let source = try openSource(path, report: &report) else { return report }
        defer { source.close() }
        do {
            report.sqlite = try source.queue.read { db in
                try String.fetchAll(db, sql: full ? "PRAGMA integrity_check(100)" : "PRAGMA quick_check(100)")
            }
        } catch {
            report.sqlite = ["SQLite could not run the check: \(StoreDatabase.storeError(error, path: path).message)"]
        }
        for table in (try? source.queue.read({ db in try tableNames(db) })) ?? [] {
            do {
                report.rows[table] = try source.queue.read { db in try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM \(table.quotedDatabaseIdentifier)") ?? 0 }
            } catch {
                report.problems.append(StoreError(.corruptStore, "table \(table) cannot be read to the end: \(StoreDatabase.storeError(error, path: path).message)", details: ["table": .string(table)]))
            }
        }
        report.intact = report.sqlite == ["ok"] && report.problems.isEmpty
        return report
    }

    /// What `recover` copied.
    public struct RecoveryReport: Sendable {
        public var source: String
        public var destination: String
        /// Rows copied, by table.
        public var copied: [String: Int]
        /// What could not be read, by table (each a sentence naming the rows).
        public var unreadable: [String: [String]]
        /// Problems with the source found before reading (a missing log, a header that disagrees).
        public var problems: [StoreError]
        /// SQLite's quick_check of the new file.
        public var destinationCheck: [String]

        public var complete: Bool { unreadable.isEmpty && problems.isEmpty }

        public var json: JSONValue {
            .object([
                "source": .string(source), "destination": .string(destination), "complete": .bool(complete),
                "copied": .object(copied.mapValues { .int(Int64($0)) }),
                "unreadable": .object(unreadable.mapValues { .array($0.map(JSONValue.string)) }),
                "problems": .array(problems.map(\.json)), "destinationCheck": .array(destinationCheck.map(JSONValue.string)),
            ])
        }
    }

    /// Copies every row SQLite can read from `<home>/store.sqlite` into a new store file at
    /// `destination` (which must not exist), skipping damaged rows and naming them. The
    /// store's own files are not written. Keys are not copied: the new file's rows are
    /// sealed with the same keys, in `<home>/keys`.
    public static func recover(home: URL, into destination: String) throws -> RecoveryReport {
        let path = home.standardizedFileURL.path + "/store.sqlite"
        let destination = URL(fileURLWithPath: destination).standardizedFileURL.path
        var info = stat()
        guard lstat(destination, &info) != 0 else {
            throw StoreError(.alreadyExists, "\(destination) already exists; `store recover` writes only a new file", details: ["file": .string(destination)])
        }
        let directory = (destination as NSString).deletingLastPathComponent
        var checkReport = CheckReport(file: path, intact: false, sqlite: [], problems: [], rows: [:])
        guard let source = try openSource(path, report: &checkReport, forRecovery: true) else {
            throw checkReport.problems.first ?? StoreError(.corruptStore, "\(path) cannot be opened by SQLite", details: ["file": .string(path)])
        }
        defer { source.close() }
        var report = RecoveryReport(
            source: path, destination: destination, copied: [:], unreadable: [:], problems: checkReport.problems, destinationCheck: [])

        let temporary = directory + "/" + FileOps.temporaryName("store-recovered")
        var finished = false
        defer {
            if !finished { for suffix in ["", "-wal", "-shm", "-journal"] { unlink(temporary + suffix) } }
        }
        try StoreDatabase.create(path: temporary, home: directory)
        var configuration = Configuration()
        configuration.foreignKeysEnabled = false  // Rows whose owner row is unreadable are kept, not refused.
        let target: DatabaseQueue
        do {
            target = try DatabaseQueue(path: temporary, configuration: configuration)
        } catch {
            throw StoreDatabase.storeError(error, path: temporary)
        }
        do {
            let knownTables = try target.read { db in try tableNames(db) }
            let sourceTables = try source.queue.read { db in try tableNames(db) }
            for table in knownTables where sourceTables.contains(table) {
                let (copied, unreadable) = try copyTable(table, from: source.queue, to: target, path: path)
                report.copied[table] = copied
                if !unreadable.isEmpty { report.unreadable[table] = unreadable }
            }
            for table in sourceTables where !knownTables.contains(table) {
                report.unreadable[table, default: []].append("table \(table) is unknown to this extrun and was not copied")
            }
            report.destinationCheck = try target.read { db in try String.fetchAll(db, sql: "PRAGMA quick_check(20)") }
            try target.close()
        } catch {
            try? target.close()
            throw StoreDatabase.storeError(error, path: temporary)
        }
        do {
            try StoreShims.renameat2(AT_FDCWD, temporary, AT_FDCWD, destination, flags: LinuxABI.RENAME_NOREPLACE)
            finished = true
        } catch {
            throw StoreError(.ioError, "cannot name the recovered file \(destination): \(error.reason)", details: ["file": .string(destination)])
        }
        return report
    }

    // MARK: - Reading the source

    struct Source {
        var queue: DatabaseQueue
        func close() { try? queue.close() }
    }

    /// The store opened read-only, with its log (SQLite creates an empty -wal and -shm when
    /// there are none, as any reader does). Problems found first go to `report`; nil when
    /// SQLite cannot open it at all. When its log is missing, SQLite would rebuild the log's
    /// index (`-shm`, the evidence of what is missing): then store.sqlite alone is read, as
    /// an immutable file (recovery only; `check` stops there).
    private static func openSource(_ path: String, report: inout CheckReport, forRecovery: Bool = false) throws -> Source? {
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw StoreError(.storeMissing, "\(path) does not exist: there is no store to check", details: ["file": .string(path)])
        }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw StoreError(.ioError, "cannot open \(path): \(SystemCall.lastReason)", details: ["file": .string(path)])
        }
        defer { close(fd) }
        do {
            if let note = try StoreDatabase.checkHeader(path, fd: fd) {
                report.notes.append("\(path): \(note) (normal while the write-ahead log holds the rest; SQLite's check decides)")
            }
        } catch let error as StoreError {
            report.problems.append(error)
            if error.kind != .corruptStore || error.message.contains("not a SQLite database") || error.message.contains("empty") || error.message.contains("not a regular file") {
                return nil
            }
        }
        var readPath = path
        do {
            try StoreDatabase.checkLog(path)
        } catch let error as StoreError {
            report.problems.append(error)
            guard forRecovery else { return nil }
            // store.sqlite alone, as it is: no lock, no log, no -shm (SQLite's "immutable").
            let escaped = path.replacingOccurrences(of: "%", with: "%25").replacingOccurrences(of: "?", with: "%3f")
                .replacingOccurrences(of: "#", with: "%23")
            readPath = "file:\(escaped)?immutable=1"
        }
        var configuration = Configuration()
        configuration.readonly = true
        configuration.busyMode = .timeout(StoreLimits.busyTimeoutSeconds)
        // A file shorter than its header says is read as far as it goes (SQLite refuses it otherwise).
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA writable_schema = ON") }
        do {
            return Source(queue: try DatabaseQueue(path: readPath, configuration: configuration))
        } catch {
            report.problems.append(StoreDatabase.storeError(error, path: path))
            return nil
        }
    }

    private static func tableNames(_ db: Database) throws -> [String] {
        try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
    }

    /// Copies the rows of `table` that SQLite can read, in key order; damaged stretches are
    /// stepped over (probing ever further keys) and named.
    private static func copyTable(_ table: String, from source: DatabaseQueue, to target: DatabaseQueue, path: String) throws
        -> (copied: Int, unreadable: [String])
    {
        let columns = try target.read { db in try db.columns(in: table).map(\.name) }
        let sourceColumns = Set(try source.read { db in try db.columns(in: table).map(\.name) })
        let shared = columns.filter(sourceColumns.contains)
        let columnList = shared.map(\.quotedDatabaseIdentifier).joined(separator: ", ")
        let quotedTable = table.quotedDatabaseIdentifier
        let insert = "INSERT OR IGNORE INTO \(quotedTable) (\(columnList)) VALUES (\(shared.map { _ in "?" }.joined(separator: ", ")))"
        let hasRowID = try source.read { db in !isWithoutRowID(db, table) }
        var copied = 0
        var unreadable: [String] = []
        func reason(_ error: any Error) -> String {
            (error as? DatabaseError)?.message ?? "\(error)"
        }
        func store(_ rows: [[DatabaseValue]]) throws {
            guard !rows.isEmpty else { return }
            try target.write { db in
                let statement = try db.makeStatement(sql: insert)
                for values in rows {
                    try statement.execute(arguments: StatementArguments(values))
                    copied += db.changesCount
                }
            }
        }

        guard hasRowID else {
            // WITHOUT ROWID: one pass in key order; what follows a damaged row is named as lost.
            var rows: [[DatabaseValue]] = []
            do {
                try source.read { db in
                    let cursor = try Row.fetchCursor(db, sql: "SELECT \(columnList) FROM \(quotedTable)")
                    while let row = try cursor.next() { rows.append(shared.map { row[$0] as DatabaseValue }) }
                }
            } catch {
                unreadable.append("the rows after the first \(rows.count) (in key order) could not be read (SQLite: \(reason(error)))")
            }
            try store(rows)
            return (copied, unreadable)
        }

        let select = "SELECT rowid AS extrun_rowid, \(columnList) FROM \(quotedTable) WHERE rowid > ? ORDER BY rowid LIMIT ?"
        /// Reads up to `limit` rows after `after` into `rows`, as far as SQLite can.
        func read(after: Int64, limit: Int, into rows: inout [(Int64, [DatabaseValue])]) -> (any Error)? {
            do {
                try source.read { db in
                    let cursor = try Row.fetchCursor(db, sql: select, arguments: [after, limit])
                    while let row = try cursor.next() { rows.append((row["extrun_rowid"], shared.map { row[$0] as DatabaseValue })) }
                }
                return nil
            } catch {
                return error
            }
        }
        var last = Int64.min
        let batch = 500
        copying: while true {
            var rows: [(Int64, [DatabaseValue])] = []
            let failure = read(after: last, limit: batch, into: &rows)
            try store(rows.map(\.1))
            if let row = rows.last { last = row.0 }
            guard let failure else {
                if rows.count < batch { break }
                continue
            }
            // The next row, or, when even the keys cannot be read there, the next key that can be
            // reached by probing ever further.
            let described = last == Int64.min ? "the first row" : "rowid \(last)"
            for attempt in 0..<63 {
                let after = attempt == 0 ? last : last &+ (Int64(1) << (attempt - 1))
                let next: Int64?
                do {
                    next = try source.read { db in
                        try Int64.fetchOne(db, sql: "SELECT rowid FROM \(quotedTable) WHERE rowid > ? ORDER BY rowid LIMIT 1", arguments: [after])
                    }
                } catch {
                    continue
                }
                guard let next else {
                    unreadable.append("rows after \(described) could not be read (SQLite: \(reason(failure)))")
                    break copying
                }
                if attempt == 0 {
                    // The key is readable: the row itself is damaged, or was (a second read decides).
                    var single: [(Int64, [DatabaseValue])] = []
                    if let error = read(after: last, limit: 1, into: &single) {
                        unreadable.append("row rowid \(next) could not be read (SQLite: \(reason(error)))")
                    }
                    try store(single.map(\.1))
                    last = next
                } else {
                    unreadable.append("rows after \(described) and before rowid \(next) could not be read (SQLite: \(reason(failure)))")
                    last = next - 1
                }
                continue copying
            }
            unreadable.append("rows after \(described) could not be read (SQLite: \(reason(failure)))")
            break
        }
        return (copied, unreadable)
    }

    private static func isWithoutRowID(_ db: Database, _ table: String) -> Bool {
        let sql = (try? String.fetchOne(db, sql: "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", arguments: [table])) ?? nil
        return sql?.uppercased().contains("WITHOUT ROWID") ?? false
    }
}
