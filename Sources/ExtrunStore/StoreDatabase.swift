import ExtrunProtocol
import ExtrunSystem
import Foundation
import CExtrunStoreShims
import GRDB
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// `<home>/store.sqlite`: one SQLite database in WAL mode, opened through a
/// GRDB `DatabaseQueue` (one connection per process; processes share the file
/// through SQLite's locks, with a busy timeout).
///
/// The file is checked before SQLite touches it, and never repaired,
/// reset or recreated: a damaged file is an error that names it.
package final class StoreDatabase: Sendable {
    let path: String
    package let queue: DatabaseQueue
    /// The file the header was checked through (StoreFileDescriptors).
    private let headerFile: StoreFileDescriptors.FileKey
    /// Whether closing the connection folds the write-ahead log into the file (SQLite's
    /// default). When not, every write keeps the log short itself (`keepLogShort`).
    let checkpointsOnClose: Bool
    /// The size past which a write folds the log back (`keepLogShort`), when not checkpointing at close.
    let logLimitBytes: Int
    /// Whether the connection was left at `synchronous = NORMAL` by a relaxed `access`
    /// (read and written only on the connection's serial queue).
    private let relaxed = Atomic<Bool>(false)
    /// A long-lived host's store (`StoreLimits.maxLogBytesLongLived`) folds its log on a
    /// connection and thread of its own (`LogFolder`), while its writes go on.
    private let folder: LogFolder?
    /// The folds its `LogFolder` made; nil without one (for tests).
    var logFolds: Int? { folder?.folds }

    /// `PRAGMA application_id` of an extrun store: "EXTR".
    static let applicationID: UInt32 = 0x4558_5452

    private init(
        path: String, queue: DatabaseQueue, headerFile: StoreFileDescriptors.FileKey, checkpointsOnClose: Bool, logLimitBytes: Int,
        folder: LogFolder?
    ) {
        self.path = path
        self.queue = queue
        self.headerFile = headerFile
        self.checkpointsOnClose = checkpointsOnClose
        self.logLimitBytes = logLimitBytes
        self.folder = folder
    }

    deinit {
        // The folder's connection, then this one: the shared descriptor may be closed
        // next, which would drop the locks of a connection still open in this process.
        folder?.close()
        try? queue.close()
        StoreFileDescriptors.release(headerFile)
    }

    // MARK: - Opening

    /// Opens the store under `home`, creating it only when there is no sign that one existed.
    /// - Parameter newFile: creates a missing file even though keys show that a store
    ///   existed (`extrun store copy` into a home whose rows were on a PostgreSQL server).
    static func open(
        home: String, keystore: Keystore, checkpointOnClose: Bool = true, logLimitBytes: Int = StoreLimits.maxLogBytes, newFile: Bool = false
    ) throws -> StoreDatabase {
        let path = home + "/store.sqlite"
        var info = stat()
        if stat(path, &info) != 0 {
            let code = errno
            guard code == ENOENT else {
                throw StoreError(.ioError, "cannot open \(path): \(SystemCall.reason(code))", details: ["file": .string(path)])
            }
            if !newFile, FileManager.default.fileExists(atPath: path + "-wal") || keystore.hasAnyKey() {
                throw StoreError(
                    .storeMissing,
                    "\(path) is missing, but \(keystore.directory) holds owners' keys (or \(path)-wal exists), so a store existed: it was moved or deleted. Restore it from a backup (with its -wal file if there was one); extrun changes nothing and never starts an empty store in its place.",
                    details: ["file": .string(path)])
            }
            try create(path: path, home: home)
        }
        let (fd, file): (Int32, StoreFileDescriptors.FileKey)
        do {
            (fd, file) = try StoreFileDescriptors.acquire(path)
        } catch {
            throw StoreError(.ioError, "cannot open \(path): \(error.reason)", details: ["file": .string(path)])
        }
        let queue: DatabaseQueue
        var sizeNote: String?
        let folder = !checkpointOnClose && logLimitBytes >= StoreLimits.maxLogBytesLongLived ? LogFolder(path: path, limitBytes: logLimitBytes) : nil
        do {
            sizeNote = try checkHeader(path, fd: fd)
            try checkLog(path)
            queue = try DatabaseQueue(path: path, configuration: configuration(checkpointOnClose: checkpointOnClose, folder: folder))
            // The file's size disagrees with its header: normal while the log holds pages a
            // checkpoint has not finished copying (a crash, a full disk, another process
            // checkpointing now). SQLite, which reads the log, judges.
            if sizeNote != nil { try confirmIntact(queue, path: path) }
        } catch {
            StoreFileDescriptors.release(file)
            var failure = StoreDatabase.storeError(error, path: path)
            if failure.kind == .corruptStore, let sizeNote {
                failure.message += " (\(sizeNote), and the write-ahead log does not hold the rest: it was truncated)"
            }
            throw failure
        }
        let database = StoreDatabase(
            path: path, queue: queue, headerFile: file, checkpointsOnClose: checkpointOnClose, logLimitBytes: logLimitBytes, folder: folder)
        try database.migrateIfNeeded()
        return database
    }

    /// - Parameter folder: the `LogFolder` of a long-lived host's store: it replaces
    ///   SQLite's own checkpoint after a commit (`LogFolder.watch`).
    static func configuration(checkpointOnClose: Bool = true, folder: LogFolder? = nil) -> Configuration {
        var configuration = Configuration()
        configuration.label = "ExtrunStore"
        // At most busyTimeoutSeconds, and never past the caller's StoreDeadline.
        configuration.busyMode = .callback(StoreDeadline.busyCallback)
        configuration.foreignKeysEnabled = true
        // REPLACE (the migrations' bulk copy) fires delete triggers, which keep the quota counters (Quotas.swift).
        configuration.prepareDatabase { db in try db.execute(sql: "PRAGMA recursive_triggers = ON") }
        if let folder { configuration.prepareDatabase { db in folder.watch(db) } }
        if !checkpointOnClose {
            configuration.prepareDatabase { db in
                guard let connection = db.sqliteConnection else { return }
                let code = extrun_sqlite_no_checkpoint_on_close(UnsafeMutableRawPointer(connection))
                if code != 0 { throw StoreError(.databaseError, "SQLite refused SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE (result code \(code))") }
            }
        }
        return configuration
    }

    /// Creates the store as a temporary file (mode 0600, schema applied, WAL
    /// mode set) and renames it into place, so `store.sqlite` never exists
    /// half-made: an empty or truncated `store.sqlite` is always damage.
    static func create(path: String, home: String) throws {
        let temporary = home + "/" + FileOps.temporaryName("store.sqlite-creating")
        var renamed = false
        defer {
            if !renamed {
                for suffix in ["", "-wal", "-shm", "-journal"] { unlink(temporary + suffix) }
            }
        }
        do {
            let fd = try FileOps.open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o600)
            fchmod(fd, 0o600)
            close(fd)
        } catch {
            throw StoreError(.ioError, "cannot create \(temporary): \(error.reason)", details: ["file": .string(path)])
        }
        do {
            let queue = try DatabaseQueue(path: temporary, configuration: configuration())
            try queue.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA application_id = \(Int32(bitPattern: applicationID))")
            }
            try migrator.migrate(queue)
            try queue.writeWithoutTransaction { db in
                let mode = try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL")
                if mode != "wal" {
                    throw StoreError(.databaseError, "SQLite refused WAL mode for \(temporary) (journal mode is \(mode ?? "unknown"))")
                }
            }
            try queue.close()
        } catch {
            throw storeError(error, path: temporary)
        }
        do {
            // Synced and closed before the rename: once it is store.sqlite, closing a
            // descriptor of it would drop the locks of a connection that opened it meanwhile.
            let fd = try FileOps.open(temporary, O_RDONLY)
            do {
                defer { close(fd) }
                try FileOps.fsync(fd)
            }
            do {
                try StoreShims.renameat2(AT_FDCWD, temporary, AT_FDCWD, path, flags: LinuxABI.RENAME_NOREPLACE)
                renamed = true
            } catch where error.code == EEXIST {
                return  // Another process created it a moment ago: use theirs.
            }
            let dirfd = try FileOps.open(home, O_RDONLY | O_DIRECTORY)
            defer { close(dirfd) }
            try FileOps.fsync(dirfd)
        } catch {
            throw StoreError(.ioError, "cannot create \(path): \(error.reason)", details: ["file": .string(path)])
        }
    }

    /// What to do with a store SQLite finds damaged. Never: delete it, reset it, or start
    /// an empty one (that loses every owner's data).
    static func damageAdvice(_ path: String) -> String {
        "extrun changes nothing in it. Keep a copy first (store.sqlite with its -wal and -shm files if present, copied while no extrun runs); `extrun store check` lists what SQLite finds; `extrun store recover NEW-FILE` copies every readable row into a new store file and leaves this one as it is; a backup restores what cannot be read"
    }

    /// Reads the 100-byte SQLite header before SQLite opens (and might write to) the
    /// file: catches an empty or overwritten file, and another program's SQLite file.
    ///
    /// Returns a note when the file's size disagrees with its header (not a whole number
    /// of pages, or fewer pages than the header counts). That alone is not damage: a
    /// checkpoint writes page 1 (the header) first, then the other pages from the
    /// write-ahead log, so a checkpoint that was killed, ran out of disk, or is running
    /// in another process right now leaves exactly that, with the log holding the rest.
    /// The caller lets SQLite judge (`confirmIntact`).
    static func checkHeader(_ path: String, fd: Int32) throws -> String? {
        let details: [String: JSONValue] = ["file": .string(path)]
        let header: Data
        let size: Int64
        do {
            let info = try FileOps.fstat(fd)
            guard info.isRegularFile else {
                throw StoreError(
                    .corruptStore, "\(path) is not a regular file: extrun opens only a regular file there and changes nothing; if the store was moved, put it back",
                    details: details)
            }
            size = Int64(info.st_size)
            var bytes = [UInt8](repeating: 0, count: 100)
            let count = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, 100, 0) }
            if count < 0 { throw SystemCallError(call: "pread", code: errno) }
            header = Data(bytes[0..<count])
        } catch let error as SystemCallError {
            throw StoreError(.ioError, "cannot read \(path): \(error.reason)", details: details)
        }
        // store.sqlite is created complete and renamed into place, and no checkpoint empties it.
        if size == 0 {
            throw StoreError(
                .corruptStore,
                "\(path) is empty (0 bytes): it was truncated, and nothing in it can be read. extrun changes nothing and never starts an empty store in its place; restore it from a backup (with its -wal file if there was one)",
                details: details)
        }
        guard header.count == 100, header.prefix(16).elementsEqual(Array("SQLite format 3".utf8) + [0]) else {
            throw StoreError(
                .corruptStore,
                "\(path) is not a SQLite database (its first bytes are not the SQLite header): it was overwritten or damaged; \(damageAdvice(path))",
                details: details)
        }
        func uint32(_ offset: Int) -> UInt32 {
            header[offset..<offset + 4].reduce(0) { $0 << 8 | UInt32($1) }
        }
        let rawPageSize = Int(header[16]) << 8 | Int(header[17])
        let pageSize = rawPageSize == 1 ? 65536 : rawPageSize
        guard pageSize >= 512, pageSize <= 65536, pageSize & (pageSize - 1) == 0 else {
            throw StoreError(.corruptStore, "\(path) has a damaged header (page size \(rawPageSize)); \(damageAdvice(path))", details: details)
        }
        let applicationID = uint32(68)
        guard applicationID == StoreDatabase.applicationID else {
            throw StoreError(
                .incompatibleStore,
                "\(path) is a SQLite database but not an extrun store (application_id 0x\(String(applicationID, radix: 16)), expected 0x\(String(StoreDatabase.applicationID, radix: 16))): EXTRUN_HOME names another program's folder, or the file was replaced. extrun changes nothing in it; point EXTRUN_HOME at the extrun home",
                details: details)
        }
        if size % Int64(pageSize) != 0 {
            return "it is \(size) bytes, not a whole number of \(pageSize)-byte pages"
        }
        // The in-header page count is valid when "version-valid-for" matches the change counter.
        if uint32(92) == uint32(24), size < Int64(uint32(28)) * Int64(pageSize) {
            return "its header says \(uint32(28)) pages (\(Int64(uint32(28)) * Int64(pageSize)) bytes) but the file has \(size) bytes"
        }
        return nil
    }

    /// SQLite's verdict on a file whose size disagrees with its header: it opens the file
    /// with its write-ahead log and reads every page (`PRAGMA quick_check`).
    private static func confirmIntact(_ queue: DatabaseQueue, path: String) throws {
        let findings = try queue.read { db in try String.fetchAll(db, sql: "PRAGMA quick_check(20)") }
        guard findings == ["ok"] else {
            throw StoreError(
                .corruptStore,
                "\(path) is damaged (SQLite's quick_check: \(findings.prefix(5).joined(separator: "; "))); \(damageAdvice(path))",
                details: ["file": .string(path), "findings": .array(findings.map(JSONValue.string))])
        }
    }

    /// Refuses a store whose write-ahead log vanished while its index (`-shm`) records
    /// committed pages in it that store.sqlite does not have yet: SQLite would open the
    /// file without them, silently undoing those writes (a connection that does not
    /// checkpoint at close, as `extrun handle`'s, leaves its writes there; docs/store.md).
    /// Costs one stat(2) when the log is there.
    static func checkLog(_ path: String) throws {
        let log = path + "-wal"
        func logSize() -> Int64? {
            var info = stat()
            return stat(log, &info) == 0 ? Int64(info.st_size) : nil
        }
        if let size = logSize(), size >= 32 { return }
        let fd = Glibc.open(path + "-shm", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { close(fd) }
        func index() -> [UInt8]? {
            var bytes = [UInt8](repeating: 0, count: 100)
            let count = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, 100, 0) }
            return count == 100 ? bytes : nil
        }
        // Another process may be writing the log and its index meanwhile: judge only an
        // index that stayed the same across the look at the log.
        for _ in 0..<20 {
            guard let before = index() else { return }
            let size = logSize()
            guard let after = index() else { return }
            if before != after { continue }
            func native32(_ offset: Int) -> UInt32 {
                before[offset..<offset + 4].reversed().reduce(0) { $0 << 8 | UInt32($1) }
            }
            let isInitialized = before[12] != 0
            let frames = native32(16)
            let copied = native32(96)
            guard isInitialized, frames > copied else { return }
            let rawPageSize = Int(before[14]) | Int(before[15]) << 8
            let pageSize = Int64(rawPageSize == 1 ? 65536 : rawPageSize)
            if let size, size >= 32 + Int64(frames) * (24 + pageSize) { return }
            throw StoreError(
                .corruptStore,
                "\(log), the store's write-ahead log, is \(size.map { "cut to \($0) bytes" } ?? "missing"), but \(path)-shm records \(frames - copied) committed pages in it that \(path) does not hold yet: the log was deleted, moved or truncated. Opening the store now would silently undo those writes, so extrun refuses and changes nothing. Put the -wal file back (from where it went, or from the backup that holds this store.sqlite). If it is lost for good, `extrun store recover NEW-FILE` copies what \(path) holds without it into a new store file",
                details: ["file": .string(path), "log": .string(log), "pagesMissing": .int(Int64(frames - copied))])
        }
    }

    // MARK: - Schema

    /// The schema's migrations, in order. Never edit a shipped migration: add one.
    static let migrator: DatabaseMigrator = {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1-owners-globals-bookmarks") { db in
            // One row per owner that has a key: the key's fingerprint (to tell
            // a wrong key from damaged rows) and the last version handed out.
            try db.execute(
                sql: """
                    CREATE TABLE owner (
                        name TEXT NOT NULL PRIMARY KEY,
                        keyFingerprint TEXT NOT NULL,
                        lastVersion INTEGER NOT NULL DEFAULT 0 CHECK (lastVersion >= 0),
                        created TEXT NOT NULL
                    ) WITHOUT ROWID;

                    CREATE TABLE global (
                        id INTEGER PRIMARY KEY,
                        owner TEXT NOT NULL REFERENCES owner(name),
                        name TEXT NOT NULL,
                        version INTEGER NOT NULL CHECK (version > 0),
                        sealed BLOB NOT NULL,
                        UNIQUE (owner, name)
                    );

                    CREATE TABLE bookmark (
                        id INTEGER PRIMARY KEY,
                        owner TEXT NOT NULL REFERENCES owner(name),
                        name TEXT NOT NULL,
                        sealed BLOB NOT NULL,
                        UNIQUE (owner, name)
                    );
                    """)
        }
        // Owner-to-owner migrations (`extrun migrate`): their phases, cursors
        // and the items worth reporting. See MigrationRecord and docs/store.md.
        migrator.registerMigration("v2-owner-migrations") { db in
            try db.execute(sql: MigrationRecord.schemaSQL)
        }
        // Donated interactions (docs/store.md, "Donations"): selectable fields in
        // clear, parameters and response sealed with the owner's key.
        migrator.registerMigration("v3-donations") { db in
            try db.execute(
                sql: """
                    CREATE TABLE donation (
                        id INTEGER PRIMARY KEY,
                        owner TEXT NOT NULL REFERENCES owner(name),
                        identifier TEXT NOT NULL,
                        groupIdentifier TEXT,
                        intent TEXT NOT NULL,
                        plugin TEXT NOT NULL,
                        source TEXT NOT NULL,
                        created TEXT NOT NULL,
                        sealed BLOB NOT NULL,
                        UNIQUE (owner, identifier)
                    );
                    CREATE INDEX donation_group ON donation (owner, groupIdentifier);
                    CREATE INDEX donation_identifier ON donation (identifier);
                    """)
        }
        // Per-owner usage counters kept by triggers, and quota overrides (Quotas.swift).
        migrator.registerMigration("v4-owner-quotas") { db in
            try db.execute(sql: Quotas.schemaSQL)
        }
        // The global versions each migration wrote into the new owner, one range per batch
        // (MigrationRecord.writtenSQL): what re-running a --remove-source migration compares against.
        migrator.registerMigration("v5-migration-writes") { db in
            try db.execute(sql: MigrationRecord.writtenSQL)
        }
        // The bytes an owner's plugins added to files through its bookmarks, and their quota (Quotas.swift).
        migrator.registerMigration("v6-bookmark-file-bytes") { db in
            try db.execute(sql: Quotas.fileBytesSQL)
        }
        // A donation's write made cheaper: two indexes changed, its usage counted by one upsert (Quotas.swift).
        // No row changes, so no foreign key check of every row at its end: a recovered store whose
        // rows lost their owner row (`recover` keeps them) migrates as any other.
        migrator.registerMigration("v7-donation-writes", foreignKeyChecks: .immediate) { db in
            try db.execute(sql: Quotas.donationWritesSQL)
        }
        return migrator
    }()

    private func migrateIfNeeded() throws {
        let (superseded, complete, unknown) = try read { db in
            let migrator = StoreDatabase.migrator
            let applied = try migrator.appliedIdentifiers(db)
            return (
                try migrator.hasBeenSuperseded(db), try migrator.hasCompletedMigrations(db),
                applied.subtracting(migrator.migrations).sorted()
            )
        }
        if superseded || !unknown.isEmpty {
            throw StoreError(
                .incompatibleStore,
                "\(path) was written by a newer extrun (schema migrations \(unknown.joined(separator: ", ")) are unknown to this one); upgrade extrun",
                details: ["file": .string(path)])
        }
        if !complete {
            do {
                try StoreDatabase.migrator.migrate(queue)
            } catch {
                throw StoreDatabase.storeError(error, path: path)
            }
        }
    }

    // MARK: - Access

    func read<T>(_ body: (Database) throws -> T) throws -> T {
        do {
            return try queue.read(body)
        } catch {
            throw StoreDatabase.storeError(error, path: path)
        }
    }

    /// An IMMEDIATE transaction: it takes the write lock up front (waiting up
    /// to the busy timeout), so a read-modify-write never fails half-way on
    /// a stale snapshot. Durable: the connection is back at `synchronous = FULL`
    /// first when donations left it relaxed (`access(durable:)`).
    package func write<T>(_ body: (Database) throws -> T) throws -> T {
        try access(durable: true) { db in
            var result: T?
            try db.inTransaction(.immediate) {
                result = try body(db)
                return .commit
            }
            guard let result else { throw StoreError(.databaseError, "\(path): a committed write left no result") }
            return result
        }
    }

    /// Outside any transaction (pragmas), durable as `write`.
    func withoutTransaction<T>(_ body: (Database) throws -> T) throws -> T {
        try access(durable: true, body)
    }

    /// Outside any transaction. Durable: at `synchronous = FULL` (`makeDurable`). Not
    /// durable: at `synchronous = NORMAL`, where a commit does not wait for the disk (in
    /// WAL mode a crash of the process loses nothing; a power cut may lose the last
    /// commits, never damage the file). Only donations write that way
    /// (`Donations.donate(durable: false)`); the connection stays relaxed until the next
    /// durable access sets it back, so that a stream of donations runs no pragma at all
    /// (two per batch before: docs/benchmarks.md, "The donation's own cost").
    func access<T>(durable: Bool, _ body: (Database) throws -> T) throws -> T {
        defer { keepLogShort() }
        do {
            return try queue.writeWithoutTransaction { db in
                if durable {
                    try makeDurable(db)
                } else if !relaxed.load(ordering: .relaxed) {
                    try db.cachedStatement(sql: "PRAGMA synchronous = NORMAL").execute()
                    relaxed.store(true, ordering: .relaxed)
                }
                return try body(db)
            }
        } catch {
            throw StoreDatabase.storeError(error, path: path)
        }
    }

    /// Sets the connection back to `synchronous = FULL` when a relaxed `access` left it
    /// at NORMAL (on the connection's queue). Code that sets the pragma itself
    /// (a migration's FULL, a benchmark fill's OFF then FULL) leaves it at FULL,
    /// so `relaxed` false always means FULL; true may mean FULL already, and costs one more pragma.
    private func makeDurable(_ db: Database) throws {
        guard relaxed.load(ordering: .relaxed) else { return }
        try db.cachedStatement(sql: "PRAGMA synchronous = FULL").execute()
        relaxed.store(false, ordering: .relaxed)
    }

    /// SQLite's `quick_check` of the whole file (every page read, its structure checked),
    /// run before bulk work (`migrate`, `migrate export`) so that damage anywhere stops it
    /// before anything is written, rather than after thousands of items (issue 17, item 5).
    func verifyBeforeBulkWork(_ what: String) throws {
        let findings: [String]
        do {
            findings = try read { db in try String.fetchAll(db, sql: "PRAGMA quick_check(20)") }
        } catch let error as StoreError where error.kind == .corruptStore {
            // Damage in a page the check itself needs (an interior page of a table): SQLite
            // stops the check with an error instead of listing findings.
            _ = error
            findings = ["the check stopped: database disk image is malformed"]
        }
        guard findings == ["ok"] else {
            throw StoreError(
                .corruptStore,
                "\(path) is damaged (SQLite's quick_check, run before \(what): \(findings.prefix(5).joined(separator: "; "))); nothing was written. \(StoreDatabase.damageAdvice(path))",
                details: ["file": .string(path), "findings": .array(findings.map(JSONValue.string))])
        }
    }

    /// For a connection that does not checkpoint when it closes: copies the write-ahead
    /// log into the file and empties it once it is over `StoreLimits.maxLogBytes`,
    /// waiting at most 50 ms for other connections (busy: a later write does it). The
    /// next process to open the store rebuilds its index of the log by reading all of
    /// it, so the log must stay short (docs/store.md).
    ///
    /// A store with a `LogFolder` leaves the folding to it (its commits ask for it), and
    /// folds here itself only when the log's file has grown to `LogFolder.inlineFactor`
    /// times the limit: the folder fell behind a stream of writes, or fails.
    private func keepLogShort() {
        guard !checkpointsOnClose else { return }
        var info = stat()
        let limit = folder == nil ? logLimitBytes : logLimitBytes * LogFolder.inlineFactor
        guard stat(path + "-wal", &info) == 0, info.st_size > limit else { return }
        foldLog()
    }

    /// Copies the write-ahead log into the file and empties it, waiting at most 50 ms for
    /// other connections (busy: it stays for a later write or fold). Returns whether it did.
    @discardableResult
    func foldLog() -> Bool {
        // A fold of the folder's under way ends first (it holds SQLite's checkpoint lock).
        folder?.settle()
        // At most 50 ms, through the connection's own busy handler (StoreDeadline), and
        // never past a deadline the caller has bound.
        let soon = StoreDeadline.now() + 50_000_000
        let bound = min(StoreDeadline.current ?? soon, soon)
        let folded = StoreDeadline.$current.withValue(bound) {
            queue.writeWithoutTransaction { db -> Bool in
                guard let connection = db.sqliteConnection else { return false }
                return extrun_sqlite_checkpoint_truncate(UnsafeMutableRawPointer(connection)) == 0
            }
        }
        return folded
    }

    /// A `StoreError` for anything thrown while using the database at `path`.
    package static func storeError(_ error: any Error, path: String) -> StoreError {
        if let error = error as? StoreError { return error }
        let details: [String: JSONValue] = ["file": .string(path)]
        guard let error = error as? DatabaseError else {
            return StoreError(.databaseError, "\(path): \(error)", details: details)
        }
        let reason = error.message ?? "\(error.resultCode)"
        switch error.resultCode {
        case .SQLITE_CORRUPT, .SQLITE_NOTADB:
            return StoreError(
                .corruptStore,
                "\(path) is damaged (SQLite: \(reason)); \(damageAdvice(path))",
                details: details)
        case .SQLITE_BUSY, .SQLITE_LOCKED:
            return StoreError(
                .storeBusy,
                StoreDeadline.current.map { $0 <= StoreDeadline.now() } == true
                    ? "\(path) stayed locked by another process until the run's deadline (SQLite: \(reason)); nothing was changed, try again"
                    : "\(path) stayed locked by another process for more than \(Int(StoreLimits.busyTimeoutSeconds)) s (SQLite: \(reason)); nothing was changed, try again",
                details: details)
        case .SQLITE_FULL:
            return StoreError(.ioError, "\(path): the disk is full (SQLite: \(reason)); nothing was changed", details: details)
        case .SQLITE_READONLY, .SQLITE_PERM, .SQLITE_CANTOPEN, .SQLITE_IOERR, .SQLITE_AUTH:
            return StoreError(.ioError, "\(path): cannot read or write the file (SQLite: \(reason))", details: details)
        default:
            return StoreError(.databaseError, "\(path): SQLite error \(error.resultCode.rawValue): \(reason)", details: details)
        }
    }
}
