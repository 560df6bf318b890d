import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Synchronization
import Testing

@testable import ExtrunStore

#if canImport(Glibc)
import Glibc
#endif

/// The backends a store test runs on (`@Test(arguments: StoreBackendKind.all)`): SQLite always,
/// PostgreSQL when `EXTRUN_TEST_POSTGRES` names a server (Scripts/test starts one per run).
enum StoreBackendKind: String, Sendable, CustomTestStringConvertible {
    case sqlite
    case postgres

    static let serverURL: String? = ProcessInfo.processInfo.environment["EXTRUN_TEST_POSTGRES"].flatMap { $0.isEmpty ? nil : $0 }
    static let all: [StoreBackendKind] = serverURL == nil ? [.sqlite] : [.sqlite, .postgres]
    /// PostgreSQL only (empty without a server).
    static let postgresOnly: [StoreBackendKind] = serverURL == nil ? [] : [.postgres]

    var testDescription: String { rawValue }
}

/// A store in a fresh temporary home, on `kind`: on PostgreSQL in a database of its own,
/// created for it and dropped when the value goes away (no leftovers on the server).
final class BackendStore: @unchecked Sendable {
    let kind: StoreBackendKind
    let directory: TempDirectory
    let location: StoreLocation
    let store: Store
    /// The server's own database (to create and drop this one from), and this one's name.
    private let admin: PostgresLocation?
    private let databaseName: String?
    private static let counter = Atomic<Int>(0)

    var home: String { directory.sub("home") }
    var homeURL: URL { URL(fileURLWithPath: home) }

    init(_ kind: StoreBackendKind) throws {
        self.kind = kind
        directory = try TempDirectory()
        switch kind {
        case .sqlite:
            location = .sqlite
            admin = nil
            databaseName = nil
        case .postgres:
            guard let url = StoreBackendKind.serverURL, case .postgres(let base) = try StoreLocation.parse(url) else {
                throw StoreError(.invalidDocument, "EXTRUN_TEST_POSTGRES is not set to a postgresql:// URL")
            }
            let number = BackendStore.counter.add(1, ordering: .relaxed).newValue
            let name = "extrun_test_\(getpid())_\(number)_\(UInt32.random(in: 0...UInt32.max))"
            try PostgresStore(location: base, migrating: false).run("CREATE DATABASE \(name)")
            admin = base
            databaseName = name
            location = .postgres(base.with(database: name))
        }
        store = try Store(home: URL(fileURLWithPath: directory.sub("home")), location: location)
    }

    deinit {
        if let admin, let databaseName {
            try? PostgresStore(location: admin, migrating: false).run("DROP DATABASE IF EXISTS \(databaseName) WITH (FORCE)")
        }
    }

    /// Another `Store` on the same home and rows: its own connection, as another process would have.
    func reopen() throws -> Store {
        try Store(home: homeURL, location: location)
    }

    /// What `EXTRUN_STORE` says for a child process to reach the same rows ("" for SQLite).
    var storeVariable: String {
        if case .postgres(let server) = location { return server.display }
        return ""
    }

    /// A number from the rows themselves (`$1`/`?` bound to `owner`), on either backend.
    func number(_ sql: String, owner: String) throws -> Int64 {
        switch store.backend {
        case .sqlite(let database):
            let sqlite = sql.replacingOccurrences(of: "$1", with: "?").replacingOccurrences(of: "octet_length", with: "length")
                .replacingOccurrences(of: "COALESCE", with: "IFNULL")
            return try database.read { db in try Int64.fetchOne(db, sql: sqlite, arguments: [owner]) ?? 0 }
        case .postgres(let server):
            return try server.number(sql, owner)
        }
    }

    /// The owner's usage recomputed from its rows (what the counters must keep), on either backend.
    func recomputedUsage(_ owner: String) throws -> OwnerUsage {
        func sum(_ table: String, _ nameColumn: String) throws -> Int64 {
            try number(
                "SELECT COALESCE(SUM(octet_length(CAST(\(nameColumn) AS BLOB_TYPE)) + octet_length(sealed)), 0) FROM \(table) WHERE owner = $1"
                    .replacingOccurrences(of: "BLOB_TYPE", with: kind == .sqlite ? "BLOB" : "bytea"), owner: owner)
        }
        return OwnerUsage(
            bytes: try sum("global", "name") + sum("bookmark", "name") + sum("donation", "identifier"),
            globals: try number("SELECT COUNT(*) FROM global WHERE owner = $1", owner: owner),
            bookmarks: try number("SELECT COUNT(*) FROM bookmark WHERE owner = $1", owner: owner),
            donations: try number("SELECT COUNT(*) FROM donation WHERE owner = $1", owner: owner))
    }
}
