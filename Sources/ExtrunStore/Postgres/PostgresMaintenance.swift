import ExtrunProtocol
import Foundation
import PostgresNIO

/// `extrun store check` on PostgreSQL (StoreMaintenance.swift, docs/store.md "When the store is
/// damaged"): what the server offers in place of SQLite's file checks. Everything is read in one
/// `REPEATABLE READ, READ ONLY` transaction (one snapshot: counters and rows agree as of one
/// moment), each step under a savepoint of its own so that one step's error is a problem in the
/// report and the next step still runs. Nothing is written, the schema is not brought forward.
extension PostgresStore {
    /// Tables each migration creates, read from its statements (`CREATE TABLE name`).
    static func tablesCreated(by statements: [String]) -> [String] {
        statements.compactMap { statement in
            let words = statement.split(whereSeparator: { $0 == " " || $0 == "\n" || $0 == "(" })
            guard words.count > 2, words[0] == "CREATE", words[1] == "TABLE" else { return nil }
            return String(words[2])
        }
    }

    /// Names of the advisory locks this extrun takes, by key.
    static let advisoryLockNames: [Int64: String] = [schemaLockKey: "schema migrations"]

    func check(home: String, full: Bool, keystore: Keystore) throws -> StoreMaintenance.CheckReport {
        let display = location.display
        return try snapshot { session in
            var report = StoreMaintenance.CheckReport(file: display, intact: false, sqlite: [], problems: [], rows: [:])
            report.backend = "postgresql"
            report.run("permissions", "the home, keys/ and every key file: yours, closed to others (the rows are on the server)") { _ in
                try StorePermissions.checkHomeAndKeys(home: home)
            }
            let exists = try session.query("SELECT to_regclass('schemaVersion') IS NOT NULL").first?.decode(Bool.self) ?? false
            guard exists else {
                throw StoreError(
                    .storeMissing,
                    "\(display) holds no extrun store (no schemaVersion table): there is nothing to check; the first extrun that opens it there creates the schema",
                    details: ["store": .string(display)])
            }
            guarded(session, "server", "the server: its version, whether it is a standby, page checksums and the checksum failures it counted", &report) {
                try checkServer(session, &$0)
            }
            report.step(
                "header and log", .notApplicable,
                "SQLite's file header and write-ahead log: the rows are on the server, which keeps its own write-ahead log, folds it itself and replays it after a crash")
            report.step(
                full ? "integrity_check" : "quick_check", .notApplicable,
                "SQLite's page check: on PostgreSQL, the server's page checksums (step server) and amcheck (step amcheck, with --full)")
            var applied: Set<String> = []
            guarded(session, "schema", "the schema migrations recorded in schemaVersion, and their tables", &report) { report in
                applied = Set(try session.query("SELECT name FROM schemaVersion").map { try $0.decode(String.self) })
                StoreMaintenance.schemaFindings(applied: applied, known: PostgresStore.migrations.map(\.name), file: display, report: &report)
                try checkTables(session, applied: applied, &report)
            }
            guarded(session, "advisory locks", "the advisory locks held or awaited in this database, and transactions left idle", &report) {
                try checkLocks(session, &$0)
            }
            let tables = PostgresStore.migrations.filter { applied.contains($0.name) }.flatMap { PostgresStore.tablesCreated(by: $0.statements) }
            guarded(session, "tables", "the rows of each table", &report) { report in
                for table in tables + ["schemaVersion"] {
                    report.rows[table] = Int(try session.query(PostgresQuery(unsafeSQL: "SELECT COUNT(*) FROM \(table)")).first?.decode(Int64.self) ?? 0)
                }
            }
            if full {
                try checkPages(session, tables: tables, &report)
            } else {
                report.step("amcheck", .skipped, "the pages of every table and index (amcheck): with --full")
            }
            guarded(session, "owners", StoreMaintenance.ownersStepDetail, &report) { report in
                try StoreMaintenance.checkOwners(PostgresCheckRows(session: session), keystore: keystore, file: display, report: &report)
            }
            report.intact = report.problems.isEmpty
            return report
        }
    }

    /// Runs `body` as step `name` under a savepoint: a server error rolls back to it and is a
    /// problem of the step; a lost connection ends the check.
    private func guarded(
        _ session: PostgresSession, _ name: String, _ detail: String, _ report: inout StoreMaintenance.CheckReport,
        _ body: (inout StoreMaintenance.CheckReport) throws -> Void
    ) {
        report.run(name, detail) { report in
            try session.execute("SAVEPOINT extrun_check")
            do {
                try body(&report)
                try session.execute("RELEASE SAVEPOINT extrun_check")
            } catch {
                if PostgresStore.connectionLost(error) { throw storeError(error) }
                try session.execute("ROLLBACK TO SAVEPOINT extrun_check")
                throw storeError(error)
            }
        }
    }

    private func checkServer(_ session: PostgresSession, _ report: inout StoreMaintenance.CheckReport) throws {
        guard
            let row = try session.query(
                """
                SELECT current_setting('server_version'), version(), current_database()::text, current_user::text, pg_is_in_recovery(),
                    current_setting('data_checksums'), (SELECT checksum_failures FROM pg_stat_database WHERE datname = current_database()),
                    pg_database_size(current_database()), pg_postmaster_start_time()::text, current_setting('default_transaction_read_only')
                """
            ).first
        else { return }
        let (version, description, database, user, inRecovery, checksums, failures, size, started, readOnly) = try row.decode(
            (String, String, String, String, Bool, String, Int64?, Int64, String, String).self)
        report.server = [
            "version": .string(version), "description": .string(description), "database": .string(database), "user": .string(user),
            "address": .string(location.socketPath ?? "\(location.host ?? "localhost"):\(location.port)"), "inRecovery": .bool(inRecovery),
            "dataChecksums": .bool(checksums == "on"), "checksumFailures": failures.map(JSONValue.int) ?? .null,
            "databaseBytes": .int(size), "started": .string(started),
        ]
        if let failures, failures > 0 {
            report.problems.append(
                StoreError(
                    .corruptStore,
                    "the server counted \(failures) page checksum failure(s) in database '\(database)' (pg_stat_database.checksum_failures): pages of its files were damaged on disk. Its log names them; `extrun store check --full` with amcheck installed checks every page",
                    details: ["store": .string(location.display), "checksumFailures": .int(failures)]))
        }
        if checksums != "on" {
            report.notes.append(
                "the server's page checksums are off (initdb --data-checksums turns them on): a page damaged on disk is found only where a row then fails to open, or by --full with amcheck")
        }
        if inRecovery {
            report.notes.append("the server is a standby (in recovery): it answers reads only, and every write of extrun fails there")
        } else if readOnly == "on" {
            report.notes.append("default_transaction_read_only is on for database '\(database)': every write of extrun fails there")
        }
    }

    /// The tables of the migrations recorded must all be there.
    private func checkTables(_ session: PostgresSession, applied: Set<String>, _ report: inout StoreMaintenance.CheckReport) throws {
        let present = Set(
            try session.query(
                "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')"
            ).map { try $0.decode(String.self) })
        for migration in PostgresStore.migrations where applied.contains(migration.name) {
            for table in PostgresStore.tablesCreated(by: migration.statements) where !present.contains(table.lowercased()) {
                report.problems.append(
                    StoreError(
                        .corruptStore,
                        "\(location.display) has no table \(table), although schemaVersion records migration \(migration.name), which creates it: it was dropped outside extrun",
                        details: ["store": .string(location.display), "table": .string(table)]))
            }
        }
    }

    private func checkLocks(_ session: PostgresSession, _ report: inout StoreMaintenance.CheckReport) throws {
        // A migration's lock is named by its pair, for the pairs the migration records know.
        var names = PostgresStore.advisoryLockNames
        let records = try session.query("SELECT to_regclass('ownerMigration') IS NOT NULL").first?.decode(Bool.self) ?? false
        for row in try records ? session.query("SELECT DISTINCT source, target FROM ownerMigration") : [] {
            let (source, target) = try row.decode((String, String).self)
            names[PostgresStore.migrationLockKey(from: source, to: target)] = "migration '\(source)' -> '\(target)'"
        }
        let rows = try session.query(
            """
            SELECT l.pid, l.granted, l.classid::bigint, l.objid::bigint, l.objsubid::bigint, COALESCE(a.application_name, ''),
                COALESCE(a.state, ''), COALESCE(EXTRACT(EPOCH FROM clock_timestamp() - a.xact_start)::float8, 0)
            FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.locktype = 'advisory' AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
            ORDER BY l.granted DESC, l.pid
            """)
        var locks: [JSONValue] = []
        for row in rows {
            let (pid, granted, classid, objid, objsubid, application, state, seconds) = try row.decode(
                (Int32, Bool, Int64, Int64, Int64, String, String, Double).self)
            // A bigint key is (classid, objid) as its high and low halves (objsubid 1); two int keys are objsubid 2.
            let key = objsubid == 1 ? (classid << 32) | objid : nil
            let name = key.flatMap { names[$0] } ?? "key \(key.map(String.init) ?? "(\(classid), \(objid))")"
            locks.append(
                .object([
                    "pid": .int(Int64(pid)), "granted": .bool(granted), "key": key.map(JSONValue.int) ?? .null, "name": .string(name),
                    "application": .string(application), "state": .string(state), "transactionSeconds": .double((seconds * 10).rounded() / 10),
                ]))
            let since = String(format: "%.1f", seconds)
            report.notes.append(
                granted
                    ? "advisory lock \(name) is held by server process \(pid) (\(application.isEmpty ? "no application name" : application), \(state)), in a transaction of \(since) s"
                    : "server process \(pid) waits for advisory lock \(name), in a transaction of \(since) s")
        }
        report.server["advisoryLocks"] = .array(locks)
        for row in try session.query(
            """
            SELECT pid, EXTRACT(EPOCH FROM clock_timestamp() - state_change)::float8 FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'
                AND state_change < clock_timestamp() - interval '60 seconds'
            """)
        {
            let (pid, seconds) = try row.decode((Int32, Double).self)
            report.notes.append(
                "server process \(pid) has been idle in a transaction for \(Int(seconds)) s: the row locks it holds make other writers wait (and end with storeBusy)")
        }
    }

    /// With `--full`: amcheck's `verify_heapam` on every table and `bt_index_check` (with
    /// `heapallindexed`) on every index, when the database has the extension.
    private func checkPages(_ session: PostgresSession, tables: [String], _ report: inout StoreMaintenance.CheckReport) throws {
        let installed = try session.query("SELECT extversion FROM pg_extension WHERE extname = 'amcheck'").first?.decode(String.self)
        guard let installed else {
            report.step(
                "amcheck", .skipped,
                "the pages of every table and index: the amcheck extension is not installed in this database (a superuser's `CREATE EXTENSION amcheck;` there lets --full use it)")
            return
        }
        let heap = installed.split(separator: ".").compactMap { Int($0) }.lexicographicallyPrecedes([1, 3]) == false
        guarded(
            session, "amcheck",
            "amcheck \(installed): \(heap ? "verify_heapam on every table's pages, " : "")bt_index_check (heapallindexed) on every index", &report
        ) { report in
            for table in tables {
                if heap {
                    for row in try session.query(
                        PostgresQuery(
                            unsafeSQL: "SELECT blkno, offnum, attnum, msg FROM verify_heapam($1::regclass)", binds: PostgresStore.binds(table)))
                    {
                        let (block, offset, attribute, message) = try row.decode((Int64, Int32?, Int32?, String).self)
                        report.problems.append(
                            StoreError(
                                .corruptStore,
                                "table \(table), page \(block)\(offset.map { " item \($0)" } ?? "")\(attribute.map { " column \($0)" } ?? ""): \(message) (amcheck)",
                                details: ["store": .string(location.display), "table": .string(table)]))
                    }
                }
                let indexes = try session.query(
                    PostgresQuery(
                        unsafeSQL: """
                            SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam
                            WHERE i.indrelid = $1::regclass AND am.amname = 'btree' ORDER BY c.relname
                            """, binds: PostgresStore.binds(table))
                ).map { try $0.decode(String.self) }
                for index in indexes {
                    try session.execute("SAVEPOINT extrun_index")
                    do {
                        try session.execute(
                            PostgresQuery(unsafeSQL: "SELECT bt_index_check($1::regclass, true)", binds: PostgresStore.binds(index)))
                        try session.execute("RELEASE SAVEPOINT extrun_index")
                    } catch let error where PostgresStore.sqlState(error) != nil && !PostgresStore.connectionLost(error) {
                        try session.execute("ROLLBACK TO SAVEPOINT extrun_index")
                        report.problems.append(
                            StoreError(
                                .corruptStore, "index \(index) of table \(table): \(storeError(error).message) (amcheck)",
                                details: ["store": .string(location.display), "table": .string(table), "index": .string(index)]))
                    }
                }
            }
        }
    }
}

/// The owners' check's reads on PostgreSQL (StoreMaintenance.CheckRows), in the check's snapshot.
struct PostgresCheckRows: StoreMaintenance.CheckRows {
    let session: PostgresSession

    func ownerFingerprints() throws -> [String: String] {
        var found: [String: String] = [:]
        for row in try session.query("SELECT name, keyFingerprint FROM owner") {
            let (name, fingerprint) = try row.decode((String, String).self)
            found[name] = fingerprint
        }
        return found
    }

    func counted(_ kind: SealKind) throws -> [String: (rows: Int64, bytes: Int64)] {
        let name = kind == .donation ? "identifier" : "name"
        var found: [String: (rows: Int64, bytes: Int64)] = [:]
        for row in try session.query(
            PostgresQuery(
                unsafeSQL:
                    "SELECT owner, COUNT(*)::bigint, COALESCE(SUM(octet_length(\(name)) + octet_length(sealed)), 0)::bigint FROM \(kind.rawValue) GROUP BY owner"
            ))
        {
            let (owner, rows, bytes) = try row.decode((String, Int64, Int64).self)
            found[owner] = (rows, bytes)
        }
        return found
    }

    func recordedUsage() throws -> [String: OwnerUsage] {
        var found: [String: OwnerUsage] = [:]
        for row in try session.query("SELECT owner, bytes, globals, bookmarks, donations FROM ownerUsage") {
            let (owner, bytes, globals, bookmarks, donations) = try row.decode((String, Int64, Int64, Int64, Int64).self)
            found[owner] = OwnerUsage(bytes: bytes, globals: globals, bookmarks: bookmarks, donations: donations)
        }
        return found
    }

    func forEachSealed(_ kind: SealKind, owner: String, _ body: (String, Data) throws -> Void) throws {
        try session.forEachSealed(kind, owner: owner, body)
    }
}
