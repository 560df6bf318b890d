import ExtrunProtocol
import ExtrunSystem
import Foundation
import GRDB

#if canImport(Glibc)
import Glibc
#endif

/// `extrun store recover`: every readable row of a damaged SQLite store copied into a new
/// file, table by table, past the damaged stretches (docs/store.md, "When the store is damaged").
extension StoreMaintenance {
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
    ///
    /// On a home whose store is on PostgreSQL (`location`, else `EXTRUN_STORE` or policy.json)
    /// it is `wrongType`: there is no file to read past its damage; the server recovers its own
    /// files from its write-ahead log when it starts, and `extrun store copy --to sqlite`
    /// copies its rows into a store file.
    public static func recover(home: URL, into destination: String, location: StoreLocation? = nil) throws -> RecoveryReport {
        let homePath = home.standardizedFileURL.path
        if case .postgres(let server) = try location ?? StoreLocation.configured(home: homePath, keystore: Keystore(home: homePath)) {
            throw StoreError(
                .wrongType,
                "`store recover` reads a damaged store.sqlite, but this home's store is on the PostgreSQL server \(server.display): there is no file to read past its damage. The server repairs its own files from its write-ahead log when it starts (and from its backups, pg_basebackup and point-in-time recovery); `extrun store check` says what is wrong in its rows; `extrun store copy --to sqlite` copies its rows into $EXTRUN_HOME/store.sqlite. Nothing was written.",
                details: ["store": .string(server.display), "backend": .string("postgresql"), "file": .string(destination)])
        }
        let path = homePath + "/store.sqlite"
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
