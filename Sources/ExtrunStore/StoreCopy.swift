import ExtrunProtocol
import Foundation
import GRDB
import PostgresNIO

/// What `Store.copy(to:)` did, table by table.
public struct StoreCopyReport: Sendable {
    public var source: String
    public var destination: String
    /// Rows written, by table.
    public var copied: [String: Int] = [:]
    /// Rows already there, identical (a copy run again after it stopped), by table.
    public var alreadyThere: [String: Int] = [:]

    public var json: JSONValue {
        .object([
            "source": .string(source), "destination": .string(destination),
            "copied": .object(copied.mapValues { .int(Int64($0)) }), "alreadyThere": .object(alreadyThere.mapValues { .int(Int64($0)) }),
            "verified": true,
        ])
    }
}

/// `extrun store copy --to URL` (docs/store.md, "PostgreSQL"): the rows of one backend into the
/// other, the sealed bytes unchanged (a row opens with the same key wherever it is), in batches
/// of `batchSize` rows, each batch one transaction. A copy that stopped is run again: the
/// rows already there are kept. At the end every table is compared row for row; the usage
/// counters are the destination's own, counted from the rows it holds.
enum StoreCopy {
    enum Value: Equatable, Sendable {
        case text(String)
        case int(Int64)
        case blob(Data)
        case null
    }

    enum Kind { case text, int, blob }

    struct Table {
        let name: String
        let columns: [(name: String, kind: Kind)]
        /// The columns rows are read in order of (the source's insertion order for donations: their listing order).
        let order: String
        /// The columns that identify a row (what is compared).
        let key: String
    }

    /// The owners first (the others refer to them). The migration journal is not copied:
    /// an unfinished `extrun migrate` is finished (or left) where it ran.
    static let tables: [Table] = [
        Table(
            name: "owner", columns: [("name", .text), ("keyFingerprint", .text), ("lastVersion", .int), ("created", .text)], order: "name",
            key: "name"),
        Table(
            name: "global", columns: [("owner", .text), ("name", .text), ("version", .int), ("sealed", .blob)], order: "owner, name",
            key: "owner, name"),
        Table(name: "bookmark", columns: [("owner", .text), ("name", .text), ("sealed", .blob)], order: "owner, name", key: "owner, name"),
        Table(
            name: "donation",
            columns: [
                ("owner", .text), ("identifier", .text), ("groupIdentifier", .text), ("intent", .text), ("plugin", .text), ("source", .text),
                ("created", .text), ("sealed", .blob),
            ], order: "id", key: "owner, identifier"),
        Table(
            name: "ownerQuota",
            columns: [("owner", .text), ("bytes", .int), ("globals", .int), ("bookmarks", .int), ("donations", .int), ("fileBytes", .int)],
            order: "owner", key: "owner"),
    ]

    static let batchSize = 1000

    // MARK: - Reading

    static func rows(_ table: Table, from store: Store, orderedBy order: String) throws -> [[Value]] {
        let columns = table.columns.map(\.name).joined(separator: ", ")
        switch store.backend {
        case .sqlite(let database):
            return try database.read { db in
                try Row.fetchAll(db, sql: "SELECT \(columns) FROM \(table.name) ORDER BY \(order)").map { row in
                    (0..<table.columns.count).map { index -> Value in
                        let value: DatabaseValue = row[index]
                        switch table.columns[index].kind {
                        case .text: return String.fromDatabaseValue(value).map(Value.text) ?? .null
                        case .int: return Int64.fromDatabaseValue(value).map(Value.int) ?? .null
                        case .blob: return Data.fromDatabaseValue(value).map(Value.blob) ?? .null
                        }
                    }
                }
            }
        case .postgres(let server):
            let host = table.name == "bookmark" ? " WHERE host = ''" : ""
            return try server.read { session in
                try session.query(PostgresQuery(unsafeSQL: "SELECT \(columns) FROM \(table.name)\(host) ORDER BY \(order)")).map { row in
                    var values: [Value] = []
                    for (index, cell) in row.enumerated() {
                        switch table.columns[index].kind {
                        case .text: values.append(try cell.decode(String?.self).map(Value.text) ?? .null)
                        case .int: values.append(try cell.decode(Int64?.self).map(Value.int) ?? .null)
                        case .blob: values.append(try cell.decode(Data?.self).map(Value.blob) ?? .null)
                        }
                    }
                    return values
                }
            }
        }
    }

    // MARK: - Writing

    /// Writes `rows` into the table in one transaction; returns how many were new.
    static func write(_ rows: ArraySlice<[Value]>, into table: Table, of store: Store) throws -> Int {
        let columns = table.columns.map(\.name).joined(separator: ", ")
        switch store.backend {
        case .sqlite(let database):
            let placeholders = Array(repeating: "?", count: table.columns.count).joined(separator: ", ")
            return try database.write { db in
                let statement = try db.makeStatement(sql: "INSERT OR IGNORE INTO \(table.name) (\(columns)) VALUES (\(placeholders))")
                var written = 0
                for row in rows {
                    let arguments = StatementArguments(
                        row.map { value -> (any DatabaseValueConvertible)? in
                            switch value {
                            case .text(let text): text
                            case .int(let number): number
                            case .blob(let data): data
                            case .null: nil
                            }
                        })
                    try statement.execute(arguments: arguments)
                    written += db.changesCount
                }
                return written
            }
        case .postgres(let server):
            let placeholders = (1...table.columns.count).map { "$\($0)" }.joined(separator: ", ")
            let sql = "INSERT INTO \(table.name) (\(columns)) VALUES (\(placeholders)) ON CONFLICT DO NOTHING"
            return try server.transaction { session in
                var written = 0
                for row in rows {
                    var binds = PostgresBindings()
                    for value in row {
                        switch value {
                        case .text(let text): binds.append(text)
                        case .int(let number): binds.append(number)
                        case .blob(let data): try binds.append(data)
                        case .null: binds.appendNull()
                        }
                    }
                    written += try session.execute(PostgresQuery(unsafeSQL: sql, binds: binds))
                }
                return written
            }
        }
    }

    /// The destination's usage counters from the rows it holds (SQLite's triggers kept them as
    /// the rows came in; on PostgreSQL they are counted here), and the bytes written through
    /// bookmarks, which no row holds, from the source.
    static func settleUsage(of destination: Store, from source: Store) throws {
        let owners = try rows(tables[0], from: source, orderedBy: "name").compactMap { row -> String? in
            if case .text(let name) = row[0] { return name }
            return nil
        }
        var fileBytes: [String: Int64] = [:]
        for owner in owners { fileBytes[owner] = try source.quota(of: owner).usage.fileBytes }
        switch destination.backend {
        case .sqlite(let database):
            try database.write { db in
                for (owner, bytes) in fileBytes where bytes > 0 {
                    try db.execute(
                        sql: "INSERT INTO ownerUsage (owner) SELECT ? WHERE NOT EXISTS (SELECT 1 FROM ownerUsage WHERE owner = ?)", arguments: [owner, owner])
                    try db.execute(sql: "UPDATE ownerUsage SET fileBytes = ? WHERE owner = ?", arguments: [bytes, owner])
                }
            }
        case .postgres(let server):
            try server.transaction { session in
                for (owner, bytes) in fileBytes {
                    try session.execute(
                        """
                        INSERT INTO ownerUsage (owner, bytes, globals, bookmarks, donations, fileBytes) VALUES (\(owner),
                            (SELECT COALESCE(SUM(octet_length(name) + octet_length(sealed)), 0) FROM global WHERE owner = \(owner))
                            + (SELECT COALESCE(SUM(octet_length(name) + octet_length(sealed)), 0) FROM bookmark WHERE owner = \(owner))
                            + (SELECT COALESCE(SUM(octet_length(identifier) + octet_length(sealed)), 0) FROM donation WHERE owner = \(owner)),
                            (SELECT COUNT(*) FROM global WHERE owner = \(owner)), (SELECT COUNT(*) FROM bookmark WHERE owner = \(owner)),
                            (SELECT COUNT(*) FROM donation WHERE owner = \(owner)), \(bytes))
                        ON CONFLICT (owner) DO UPDATE SET bytes = excluded.bytes, globals = excluded.globals,
                            bookmarks = excluded.bookmarks, donations = excluded.donations, fileBytes = excluded.fileBytes
                        """)
                }
            }
        }
    }
}

extension Store {
    /// Copies every owner's rows into the store at `destination` (docs/store.md, "PostgreSQL"),
    /// leaving this one as it is: owners, globals, bookmarks, donations and quotas, the sealed
    /// bytes unchanged, then compares every table row for row (`corruptStore` naming the first
    /// difference: the destination held other rows). Run again after a stop, it goes on.
    /// `destination` `.sqlite` is this home's `store.sqlite` (from a PostgreSQL store).
    public func copy(to destination: StoreLocation) throws -> StoreCopyReport {
        switch (backend, destination) {
        case (.sqlite, .sqlite):
            throw StoreError(.invalidDocument, "the store is already \(databasePath): copy it to a postgresql:// URL, or from one")
        case (.postgres(let server), .postgres(let target)) where server.location == target:
            throw StoreError(.invalidDocument, "the store is already \(databasePath): give another server or database")
        default:
            break
        }
        let target = try Store(home: home, location: destination, checkpointOnClose: true, logLimitBytes: StoreLimits.maxLogBytes, newFile: true)
        var report = StoreCopyReport(source: databasePath, destination: target.databasePath)
        for table in StoreCopy.tables {
            let rows = try StoreCopy.rows(table, from: self, orderedBy: table.order)
            var written = 0
            var start = 0
            while start < rows.count {
                let end = min(start + StoreCopy.batchSize, rows.count)
                written += try StoreCopy.write(rows[start..<end], into: table, of: target)
                start = end
            }
            report.copied[table.name] = written
            report.alreadyThere[table.name] = rows.count - written
        }
        try StoreCopy.settleUsage(of: target, from: self)
        // Row for row: every table the same on both sides.
        for table in StoreCopy.tables {
            let mine = try StoreCopy.rows(table, from: self, orderedBy: table.key)
            let theirs = try StoreCopy.rows(table, from: target, orderedBy: table.key)
            guard mine != theirs else { continue }
            let index = zip(mine, theirs).enumerated().first { $0.element.0 != $0.element.1 }?.offset ?? min(mine.count, theirs.count)
            throw StoreError(
                .corruptStore,
                "the copy into \(target.databasePath) differs from \(databasePath) in table \(table.name) (\(mine.count) rows here, \(theirs.count) there; the first difference at row \(index + 1) in (\(table.key)) order): the destination held other rows before the copy. Nothing here was changed; copy into an empty database",
                details: ["table": .string(table.name), "store": .string(target.databasePath)])
        }
        return report
    }
}
