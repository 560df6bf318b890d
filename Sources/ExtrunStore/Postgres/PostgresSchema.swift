import ExtrunProtocol
import Foundation
import PostgresNIO

/// The PostgreSQL schema: the SQLite store's tables (StoreDatabase.migrator), table for table
/// and under the same migration names, in PostgreSQL's types (docs/scaling.md). Names are
/// compared in byte order (`COLLATE "C"`), as SQLite's are. The usage counters are kept by
/// the writes themselves, each a conditional UPDATE of the owner's usage row (PostgresStore+Rows).
extension PostgresStore {
    /// The migrations, in order; each a list of single statements. Never edit a shipped one: add one.
    static let migrations: [(name: String, statements: [String])] = [
        (
            "v1-owners-globals-bookmarks",
            [
                """
                CREATE TABLE owner (
                    name text COLLATE "C" PRIMARY KEY,
                    keyFingerprint text NOT NULL,
                    lastVersion bigint NOT NULL DEFAULT 0 CHECK (lastVersion >= 0),
                    created text NOT NULL
                )
                """,
                """
                CREATE TABLE global (
                    id bigserial PRIMARY KEY,
                    owner text COLLATE "C" NOT NULL REFERENCES owner(name),
                    name text COLLATE "C" NOT NULL,
                    version bigint NOT NULL CHECK (version > 0),
                    sealed bytea NOT NULL,
                    UNIQUE (owner, name)
                )
                """,
                """
                CREATE TABLE bookmark (
                    id bigserial PRIMARY KEY,
                    owner text COLLATE "C" NOT NULL REFERENCES owner(name),
                    name text COLLATE "C" NOT NULL,
                    host text NOT NULL DEFAULT '',
                    sealed bytea NOT NULL,
                    UNIQUE (owner, name, host)
                )
                """,
            ]
        ),
        (
            "v2-owner-migrations",
            [
                """
                CREATE TABLE ownerMigration (
                    id bigserial PRIMARY KEY, source text NOT NULL, target text NOT NULL, origin text NOT NULL,
                    options text NOT NULL, phase text NOT NULL, cursor text NOT NULL DEFAULT '',
                    sourceStartVersion bigint NOT NULL, targetCopiedVersion bigint, counts text NOT NULL,
                    started text NOT NULL, updated text NOT NULL, finished text
                )
                """,
                "CREATE UNIQUE INDEX ownerMigration_unfinished ON ownerMigration (source, target, origin) WHERE finished IS NULL",
                """
                CREATE TABLE ownerMigrationItem (
                    migration bigint NOT NULL REFERENCES ownerMigration(id) ON DELETE CASCADE,
                    kind text NOT NULL CHECK (kind IN ('global', 'bookmark')), name text COLLATE "C" NOT NULL, outcome text NOT NULL,
                    targetName text, errorKind text, message text, kept text,
                    PRIMARY KEY (migration, kind, name)
                )
                """,
            ]
        ),
        (
            "v3-donations",
            [
                """
                CREATE TABLE donation (
                    id bigserial PRIMARY KEY,
                    owner text COLLATE "C" NOT NULL REFERENCES owner(name),
                    identifier text COLLATE "C" NOT NULL,
                    groupIdentifier text COLLATE "C",
                    intent text NOT NULL,
                    plugin text NOT NULL,
                    source text NOT NULL,
                    created text NOT NULL,
                    sealed bytea NOT NULL,
                    UNIQUE (owner, identifier)
                )
                """,
                "CREATE INDEX donation_group ON donation (owner, groupIdentifier)",
                "CREATE INDEX donation_identifier ON donation (identifier)",
            ]
        ),
        (
            "v4-owner-quotas",
            [
                """
                CREATE TABLE ownerUsage (
                    owner text COLLATE "C" PRIMARY KEY, bytes bigint NOT NULL DEFAULT 0, globals bigint NOT NULL DEFAULT 0,
                    bookmarks bigint NOT NULL DEFAULT 0, donations bigint NOT NULL DEFAULT 0
                )
                """,
                """
                CREATE TABLE ownerQuota (
                    owner text COLLATE "C" PRIMARY KEY, bytes bigint CHECK (bytes >= 0), globals bigint CHECK (globals >= 0),
                    bookmarks bigint CHECK (bookmarks >= 0), donations bigint CHECK (donations >= 0)
                )
                """,
            ]
        ),
        (
            "v5-migration-writes",
            [
                """
                CREATE TABLE ownerMigrationWrite (
                    migration bigint NOT NULL REFERENCES ownerMigration(id) ON DELETE CASCADE,
                    first bigint NOT NULL, last bigint NOT NULL CHECK (last >= first),
                    PRIMARY KEY (migration, first)
                )
                """
            ]
        ),
        (
            "v6-bookmark-file-bytes",
            [
                "ALTER TABLE ownerUsage ADD COLUMN fileBytes bigint NOT NULL DEFAULT 0",
                "ALTER TABLE ownerQuota ADD COLUMN fileBytes bigint CHECK (fileBytes >= 0)",
            ]
        ),
        (
            // As the SQLite store's (Quotas.donationWritesSQL): only donations with a group in
            // the group's index, the group first. The usage counts are the writer's own here.
            "v7-donation-writes",
            [
                "DROP INDEX donation_group",
                "CREATE INDEX donation_group ON donation (groupIdentifier, owner) WHERE groupIdentifier IS NOT NULL",
            ]
        ),
    ]

    /// `pg_advisory_lock`'s key for the schema migrations: "EXTR".
    static let schemaLockKey: Int64 = 0x4558_5452

    /// Brings the schema forward (never backward) under an advisory lock, so that hosts
    /// starting together migrate once; `incompatibleStore` for a schema a newer extrun wrote.
    func migrate() throws {
        let known = Set(PostgresStore.migrations.map(\.name))
        // Most opens find the schema complete: one SELECT, no lock.
        let applied: Set<String>? = try read { session in
            do {
                return Set(try session.query("SELECT name FROM schemaVersion").map { try $0.decode(String.self) })
            } catch let error where PostgresStore.sqlState(error) == "42P01" {
                return nil  // No schema yet.
            }
        }
        if let applied {
            try checkKnown(applied, known: known)
            if known.isSubset(of: applied) { return }
        }
        // Held until this transaction ends: hosts starting together migrate once, in turn.
        try transaction { session in
            try session.execute("SELECT pg_advisory_xact_lock(\(PostgresStore.schemaLockKey))")
            try session.execute("CREATE TABLE IF NOT EXISTS schemaVersion (name text PRIMARY KEY)")
            let applied = Set(try session.query("SELECT name FROM schemaVersion").map { try $0.decode(String.self) })
            try checkKnown(applied, known: known)
            for migration in PostgresStore.migrations where !applied.contains(migration.name) {
                for statement in migration.statements {
                    try session.execute(PostgresQuery(unsafeSQL: statement))
                }
                try session.execute("INSERT INTO schemaVersion (name) VALUES (\(migration.name))")
            }
        }
    }

    private func checkKnown(_ applied: Set<String>, known: Set<String>) throws {
        let unknown = applied.subtracting(known).sorted()
        guard unknown.isEmpty else {
            throw StoreError(
                .incompatibleStore,
                "\(location.display) was written by a newer extrun (schema migrations \(unknown.joined(separator: ", ")) are unknown to this one); upgrade extrun",
                details: ["store": .string(location.display)])
        }
    }
}
