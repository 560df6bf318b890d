import ExtrunProtocol
import ExtrunSystem
import Foundation
import GRDB

#if canImport(Glibc)
import Glibc
#endif

/// `extrun store check` and `extrun store recover`: what is wrong with a store, and a copy
/// of every readable row of a damaged SQLite file into a new file. Neither writes to the
/// store (docs/store.md, "When the store is damaged").
public enum StoreMaintenance {
    /// One step of `check`, in the order they ran.
    public struct CheckStep: Sendable {
        public enum Outcome: String, Sendable {
            /// Ran and found nothing wrong.
            case ok
            /// Ran and found what `problems` lists.
            case problems
            /// Has no meaning on this backend (SQLite's file checks on PostgreSQL, the server's on SQLite).
            case notApplicable
            /// Could have run but did not (`--full` not given, an extension not installed, an earlier step failed).
            case skipped
        }

        public var name: String
        public var outcome: Outcome
        /// What was checked, or why it did not apply.
        public var detail: String

        public var json: JSONValue {
            .object(["step": .string(name), "outcome": .string(outcome.rawValue), "detail": .string(detail)])
        }
    }

    /// What `check` found about one owner: its key, its rows opened with it, its usage counters.
    public struct OwnerCheck: Sendable {
        public var owner: String
        /// The key fingerprint the store recorded (nil: no owner row).
        public var fingerprint: String?
        /// `ok`, or the kind of the key's problem (`keyMissing`, `wrongKey`, `invalidKeyFile`, `insecurePermissions`).
        public var key: String
        /// Rows per table (`global`, `bookmark`, `donation`).
        public var rows: [String: Int] = [:]
        /// Sealed rows that opened with the owner's key, and those that did not (nil: not opened, the key being unusable).
        public var opened: Int?
        public var broken: Int?
        /// The usage counters as recorded, and as counted from the rows (`fileBytes` has no rows to count from).
        public var recordedUsage: OwnerUsage
        public var countedUsage: OwnerUsage
        public var usageAgrees: Bool {
            recordedUsage.bytes == countedUsage.bytes && recordedUsage.globals == countedUsage.globals
                && recordedUsage.bookmarks == countedUsage.bookmarks && recordedUsage.donations == countedUsage.donations
        }

        static func usage(_ usage: OwnerUsage) -> JSONValue {
            .object([
                "bytes": .int(usage.bytes), "globals": .int(usage.globals), "bookmarks": .int(usage.bookmarks), "donations": .int(usage.donations),
            ])
        }

        public var json: JSONValue {
            let usage = OwnerCheck.usage
            return .object([
                "owner": .string(owner), "fingerprint": fingerprint.map(JSONValue.string) ?? .null, "key": .string(key),
                "rows": .object(rows.mapValues { .int(Int64($0)) }), "opened": opened.map { .int(Int64($0)) } ?? .null,
                "broken": broken.map { .int(Int64($0)) } ?? .null, "usage": usage(recordedUsage), "countedUsage": usage(countedUsage),
                "usageAgrees": .bool(usageAgrees),
            ])
        }
    }

    /// What `check` found.
    public struct CheckReport: Sendable {
        /// `store.sqlite`'s path, or the PostgreSQL server's URL (without a password).
        public var file: String
        /// `sqlite` or `postgresql`.
        public var backend: String = "sqlite"
        /// True when nothing was found wrong: no problem, and on SQLite its own check said ok.
        public var intact: Bool
        /// SQLite's findings (`["ok"]` when it found nothing); empty on PostgreSQL.
        public var sqlite: [String]
        /// What is wrong: damage, rows that do not open, keys missing or replaced, counters that disagree.
        public var problems: [StoreError]
        /// Rows per table, for the tables that could be counted.
        public var rows: [String: Int]
        /// Facts that are not damage by themselves (a file shorter than its header says while the
        /// log holds the rest, a lock held, schema migrations not applied yet).
        public var notes: [String] = []
        /// Every step, with what it found or why it did not apply.
        public var steps: [CheckStep] = []
        /// Each owner in the store, in byte order of the names.
        public var owners: [OwnerCheck] = []
        /// The PostgreSQL server: version, database, user, page checksums, advisory locks (empty on SQLite).
        public var server: [String: JSONValue] = [:]

        public init(file: String, intact: Bool, sqlite: [String], problems: [StoreError], rows: [String: Int]) {
            self.file = file
            self.intact = intact
            self.sqlite = sqlite
            self.problems = problems
            self.rows = rows
        }

        public var json: JSONValue {
            .object([
                "file": .string(file), "backend": .string(backend), "intact": .bool(intact), "sqlite": .array(sqlite.map(JSONValue.string)),
                "problems": .array(problems.map(\.json)), "rows": .object(rows.mapValues { .int(Int64($0)) }),
                "notes": .array(notes.map(JSONValue.string)), "steps": .array(steps.map(\.json)), "owners": .array(owners.map(\.json)),
                "server": .object(server),
            ])
        }

        mutating func step(_ name: String, _ outcome: CheckStep.Outcome, _ detail: String) {
            steps.append(CheckStep(name: name, outcome: outcome, detail: detail))
        }

        /// Runs `body`, recording it as step `name`: ok when it added no problem, problems when it
        /// added some or threw (what it threw is a problem too).
        mutating func run(_ name: String, _ detail: String, _ body: (inout CheckReport) throws -> Void) {
            let before = problems.count
            do {
                try body(&self)
            } catch let error as StoreError {
                problems.append(error)
            } catch {
                problems.append(StoreError(.databaseError, "\(name): \(error)"))
            }
            step(name, problems.count > before ? .problems : .ok, detail)
        }
    }

    /// Checks the store of `home` (where `location` says, else where the home is configured
    /// to keep it: `EXTRUN_STORE`, policy.json, `store.sqlite`), reading only:
    ///
    /// - SQLite: the file's header and log, SQLite's `quick_check` (or `integrity_check`
    ///   when `full`), the rows of each table;
    /// - PostgreSQL: the server (version, page checksums and the checksum failures it counted,
    ///   a standby), the schema's migrations, the advisory locks held, the rows of each table,
    ///   with `full` amcheck's `verify_heapam` and `bt_index_check` when the database has the
    ///   extension; SQLite's file checks are steps that do not apply;
    /// - both: the home's and keys' permissions, the schema's migrations, and each owner: its
    ///   key file against the recorded fingerprint, every sealed row opened with it, the
    ///   usage counters against the rows.
    ///
    /// Throws only when there is no store to check (no `store.sqlite`; a database without an
    /// extrun schema) or its server cannot be reached.
    public static func check(home: URL, full: Bool, location: StoreLocation? = nil) throws -> CheckReport {
        let homePath = home.standardizedFileURL.path
        let keystore = Keystore(home: homePath)
        switch try location ?? StoreLocation.configured(home: homePath, keystore: keystore) {
        case .sqlite:
            return try checkSQLite(home: homePath, full: full, keystore: keystore)
        case .postgres(let server):
            return try PostgresStore(location: server, migrating: false).check(home: homePath, full: full, keystore: keystore)
        }
    }

    private static func checkSQLite(home: String, full: Bool, keystore: Keystore) throws -> CheckReport {
        let path = home + "/store.sqlite"
        var report = CheckReport(file: path, intact: false, sqlite: [], problems: [], rows: [:])
        report.run("permissions", "the home, keys/ and every key file, store.sqlite and its -wal and -shm: yours, closed to others") { report in
            try StorePermissions.checkHomeAndKeys(home: home)
            try StorePermissions.checkDatabase(home: home)
        }
        report.step("server", .notApplicable, "the store is the file \(path): there is no server")
        report.step("advisory locks", .notApplicable, "SQLite locks the file itself; a writer held too long shows as storeBusy")
        let before = report.problems.count
        guard let source = try openSource(path, report: &report) else {
            report.step("header and log", .problems, "the file's header and its write-ahead log: SQLite cannot judge the file (problems)")
            return report
        }
        defer { source.close() }
        report.step(
            "header and log", report.problems.count > before ? .problems : .ok,
            "the file's header (an extrun store, its page size) and its write-ahead log (none missing that -shm says held commits)")
        do {
            report.sqlite = try source.queue.read { db in
                try String.fetchAll(db, sql: full ? "PRAGMA integrity_check(100)" : "PRAGMA quick_check(100)")
            }
        } catch {
            report.sqlite = ["SQLite could not run the check: \(StoreDatabase.storeError(error, path: path).message)"]
        }
        report.step(
            full ? "integrity_check" : "quick_check", report.sqlite == ["ok"] ? .ok : .problems,
            full ? "SQLite's integrity_check: every page, and every index against its table" : "SQLite's quick_check: every page read and its structure checked (--full: integrity_check)")
        report.run("schema", "the schema migrations recorded in grdb_migrations, against those this extrun knows") { report in
            let applied = try source.queue.read { db in
                try Set(String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations"))
            }
            schemaFindings(applied: applied, known: StoreDatabase.migrator.migrations, file: path, report: &report)
        }
        report.run("tables", "the rows of each table, read to the end") { report in
            for table in try source.queue.read({ db in try tableNames(db) }) {
                do {
                    report.rows[table] = try source.queue.read { db in
                        try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM \(table.quotedDatabaseIdentifier)") ?? 0
                    }
                } catch {
                    report.problems.append(
                        StoreError(
                            .corruptStore, "table \(table) cannot be read to the end: \(StoreDatabase.storeError(error, path: path).message)",
                            details: ["table": .string(table)]))
                }
            }
        }
        report.run("owners", ownersStepDetail) { report in
            try source.queue.read { db in
                try checkOwners(SQLiteCheckRows(db: db), keystore: keystore, file: path, report: &report)
            }
        }
        report.intact = report.sqlite == ["ok"] && report.problems.isEmpty
        return report
    }

    static let ownersStepDetail =
        "each owner: its key file against the fingerprint the store recorded, every sealed global, bookmark and donation opened with it, its usage counters against its rows"

    /// The schema's recorded migrations against `known`: unknown ones are `incompatibleStore`,
    /// missing ones a note (the next extrun to open the store applies them).
    static func schemaFindings(applied: Set<String>, known: [String], file: String, report: inout CheckReport) {
        let unknown = applied.subtracting(known).sorted()
        if !unknown.isEmpty {
            report.problems.append(
                StoreError(
                    .incompatibleStore,
                    "\(file) was written by a newer extrun (schema migrations \(unknown.joined(separator: ", ")) are unknown to this one); upgrade extrun",
                    details: ["file": .string(file), "unknown": .array(unknown.map(JSONValue.string))]))
        }
        let missing = known.filter { !applied.contains($0) }
        if !missing.isEmpty {
            report.notes.append(
                "\(file) lacks the schema migrations \(missing.joined(separator: ", ")): the next extrun to open the store applies them")
        }
    }

    // MARK: - Owners

    /// What the owners' check reads, from one snapshot (a read transaction) of either backend.
    protocol CheckRows {
        /// Every owner row's key fingerprint, by owner.
        func ownerFingerprints() throws -> [String: String]
        /// Each owner's rows of `kind`'s table, and their bytes as the usage counters count them
        /// (the name's or identifier's UTF-8 bytes plus the sealed value's).
        func counted(_ kind: SealKind) throws -> [String: (rows: Int64, bytes: Int64)]
        /// The usage rows, by owner.
        func recordedUsage() throws -> [String: OwnerUsage]
        /// Every sealed row of `owner` in `kind`'s table, by name (a donation's: its identifier).
        func forEachSealed(_ kind: SealKind, owner: String, _ body: (String, Data) throws -> Void) throws
    }

    struct SQLiteCheckRows: CheckRows {
        let db: Database

        func ownerFingerprints() throws -> [String: String] {
            var found: [String: String] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT name, keyFingerprint FROM owner") { found[row[0]] = row[1] }
            return found
        }

        func counted(_ kind: SealKind) throws -> [String: (rows: Int64, bytes: Int64)] {
            let name = kind == .donation ? "identifier" : "name"
            var found: [String: (rows: Int64, bytes: Int64)] = [:]
            for row in try Row.fetchAll(
                db,
                sql: "SELECT owner, COUNT(*), IFNULL(SUM(length(CAST(\(name) AS BLOB)) + length(sealed)), 0) FROM \(kind.rawValue) GROUP BY owner")
            {
                found[row[0]] = (row[1], row[2])
            }
            return found
        }

        func recordedUsage() throws -> [String: OwnerUsage] {
            var found: [String: OwnerUsage] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT owner, bytes, globals, bookmarks, donations FROM ownerUsage") {
                found[row[0]] = OwnerUsage(bytes: row[1], globals: row[2], bookmarks: row[3], donations: row[4])
            }
            return found
        }

        func forEachSealed(_ kind: SealKind, owner: String, _ body: (String, Data) throws -> Void) throws {
            let name = kind == .donation ? "identifier" : "name"
            let rows = try Row.fetchCursor(
                db, sql: "SELECT \(name), sealed FROM \(kind.rawValue) WHERE owner = ? ORDER BY \(name)", arguments: [owner])
            while let row = try rows.next() { try body(row[0], row[1]) }
        }
    }

    /// At most this many rows that do not open are listed in `problems` (each owner's count is whole).
    static let maxBrokenListed = 100

    /// Checks every owner the store knows (owner rows, rows of any table, usage rows): its key,
    /// its sealed rows opened with it, its usage counters against its rows.
    static func checkOwners(_ rows: some CheckRows, keystore: Keystore, file: String, report: inout CheckReport) throws {
        let fingerprints = try rows.ownerFingerprints()
        let tables: [SealKind] = [.global, .bookmark, .donation]
        var counted: [SealKind: [String: (rows: Int64, bytes: Int64)]] = [:]
        for kind in tables { counted[kind] = try rows.counted(kind) }
        let recorded = try rows.recordedUsage()
        var names = Set(fingerprints.keys).union(recorded.keys)
        for kind in tables { names.formUnion(counted[kind, default: [:]].keys) }
        var listed = 0
        for owner in names.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
            var usage = OwnerUsage()
            var rowCounts: [String: Int] = [:]
            for kind in tables {
                let found = counted[kind]?[owner] ?? (0, 0)
                rowCounts[kind.rawValue] = Int(found.rows)
                usage.bytes += found.bytes
                switch kind {
                case .global: usage.globals = found.rows
                case .bookmark: usage.bookmarks = found.rows
                case .donation: usage.donations = found.rows
                }
            }
            let hasRows = rowCounts.values.contains { $0 > 0 }
            var check = OwnerCheck(
                owner: owner, fingerprint: fingerprints[owner], key: "ok", rows: rowCounts, recordedUsage: recorded[owner] ?? OwnerUsage(),
                countedUsage: usage)
            let details: [String: JSONValue] = ["owner": .string(owner), "store": .string(file)]
            var key: OwnerKey?
            do {
                key = try keystore.load(owner)
                if key == nil, fingerprints[owner] != nil || hasRows {
                    check.key = StoreErrorKind.keyMissing.rawValue
                    report.problems.append(
                        StoreError(
                            .keyMissing,
                            "owner '\(owner)' has data in \(file) (\(rowCounts["global"] ?? 0) globals, \(rowCounts["bookmark"] ?? 0) bookmarks, \(rowCounts["donation"] ?? 0) donations, sealed with key \(fingerprints[owner] ?? "unknown")) but its key file \(keystore.path(for: owner)) is missing: restore it from a backup",
                            details: details.merging(["file": .string(keystore.path(for: owner))]) { $1 }))
                } else if let found = key, let recordedFingerprint = fingerprints[owner], found.fingerprint != recordedFingerprint {
                    check.key = StoreErrorKind.wrongKey.rawValue
                    key = nil
                    report.problems.append(
                        StoreError(
                            .wrongKey,
                            "key file \(keystore.path(for: owner)) holds key \(found.fingerprint), but the data of owner '\(owner)' in \(file) was sealed with key \(recordedFingerprint): restore the original key file from a backup",
                            details: details.merging([
                                "file": .string(keystore.path(for: owner)), "fingerprint": .string(found.fingerprint),
                                "expectedFingerprint": .string(recordedFingerprint),
                            ]) { $1 }))
                }
            } catch let error as StoreError {
                check.key = error.kind.rawValue
                report.problems.append(error)
            }
            if fingerprints[owner] == nil, hasRows {
                report.problems.append(
                    StoreError(
                        .corruptStore,
                        "owner '\(owner)' has rows in \(file) (\(rowCounts.filter { $0.value > 0 }.map { "\($0.value) in \($0.key)" }.sorted().joined(separator: ", "))) but no owner row: no key fingerprint is recorded for them",
                        details: details))
            }
            if let key {
                var opened = 0
                var broken = 0
                for kind in tables where (rowCounts[kind.rawValue] ?? 0) > 0 {
                    try rows.forEachSealed(kind, owner: owner) { name, sealed in
                        do {
                            _ = try Sealing.open(sealed, with: key, context: SealContext(owner: owner, kind: kind, name: name), file: file)
                            opened += 1
                        } catch let error as StoreError {
                            broken += 1
                            listed += 1
                            if listed <= maxBrokenListed { report.problems.append(error) }
                        }
                    }
                }
                check.opened = opened
                check.broken = broken
            }
            if !check.usageAgrees {
                let recordedUsage = check.recordedUsage
                report.problems.append(
                    StoreError(
                        .corruptStore,
                        "the usage counters of owner '\(owner)' in \(file) say \(recordedUsage.globals) globals, \(recordedUsage.bookmarks) bookmarks, \(recordedUsage.donations) donations and \(recordedUsage.bytes) bytes, but its rows count \(usage.globals), \(usage.bookmarks), \(usage.donations) and \(usage.bytes): its quotas are held against wrong figures",
                        details: details.merging(["usage": OwnerCheck.usage(recordedUsage), "countedUsage": OwnerCheck.usage(usage)]) { $1 }))
            }
            report.owners.append(check)
        }
        if listed > maxBrokenListed {
            report.notes.append("\(listed) rows do not open; the first \(maxBrokenListed) are listed under problems, each owner's count under owners")
        }
        let unused = try keystore.owners().filter { !names.contains($0) }
        if !unused.isEmpty {
            report.notes.append("key files of owners with nothing in the store (kept; a key is never deleted): \(unused.joined(separator: ", "))")
        }
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
    static func openSource(_ path: String, report: inout CheckReport, forRecovery: Bool = false) throws -> Source? {
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

    static func tableNames(_ db: Database) throws -> [String] {
        try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
    }
}
