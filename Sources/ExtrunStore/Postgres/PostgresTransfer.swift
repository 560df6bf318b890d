import ExtrunProtocol
import Foundation
import PostgresNIO

/// A transfer bundle's reads on PostgreSQL (TransferBundle.swift, docs/migration.md "Two
/// machines"): an owner's sealed rows, in key order, from one snapshot. The import side
/// writes through the migration engine, as a local migration does.
extension PostgresStore {
    /// Names and sizes are read in pages of this many rows...
    static let exportPageRows = 1_000
    /// ...and their sealed values in runs of at most this many bytes (or one row when a single
    /// value is larger), so that memory stays flat whatever the owner holds.
    static let exportRunBytes = 8 << 20

    /// Calls `total` with the number of the owner's rows of `kinds`, then `row` for each of
    /// them (kind by kind, each in byte order of the names), all read in one `REPEATABLE
    /// READ, READ ONLY` transaction: one snapshot, as the SQLite store's one read transaction.
    func forEachSealedRow(
        owner: String, kinds: [SealKind], total: (Int) throws -> Void, row: (SealKind, String, Data) throws -> Void
    ) throws {
        try snapshot { session in
            var count: Int64 = 0
            for kind in kinds {
                count += try session.query(
                    PostgresQuery(unsafeSQL: "SELECT COUNT(*) FROM \(kind.rawValue) WHERE owner = $1", binds: Self.binds(owner))
                ).first?.decode(Int64.self) ?? 0
            }
            try total(Int(count))
            for kind in kinds {
                try session.forEachSealed(kind, owner: owner) { name, sealed in try row(kind, name, sealed) }
            }
        }
    }

    /// `body` in one read-only transaction that sees one snapshot of the whole database.
    func snapshot<T>(_ body: (PostgresSession) throws -> T) throws -> T {
        try transaction { session in
            try session.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            return try body(session)
        }
    }

    static func binds(_ values: String...) -> PostgresBindings {
        var binds = PostgresBindings()
        for value in values { binds.append(value) }
        return binds
    }
}

extension PostgresSession {
    /// Every sealed row of `owner` in `kind`'s table, in byte order of the names (a donation's:
    /// its identifier). Names and sizes are read a page at a time, then the values in runs
    /// under `exportRunBytes`: memory stays flat whatever the owner holds.
    func forEachSealed(_ kind: SealKind, owner: String, _ body: (String, Data) throws -> Void) throws {
        let table = kind.rawValue
        let name = kind == .donation ? "identifier" : "name"
        var after = ""
        while true {
            let page = try query(
                PostgresQuery(
                    unsafeSQL: """
                        SELECT \(name), octet_length(sealed)::bigint FROM \(table) WHERE owner = $1 AND \(name) > $2
                        ORDER BY \(name) LIMIT \(PostgresStore.exportPageRows)
                        """, binds: PostgresStore.binds(owner, after))
            ).map { try $0.decode((String, Int64).self) }
            guard let last = page.last?.0 else { return }
            var index = 0
            while index < page.count {
                var bytes: Int64 = 0
                var end = index
                while end < page.count, end == index || bytes + page[end].1 <= Int64(PostgresStore.exportRunBytes) {
                    bytes += page[end].1
                    end += 1
                }
                let first = index == 0 ? after : page[index - 1].0
                let rows = try query(
                    PostgresQuery(
                        unsafeSQL: """
                            SELECT \(name), sealed FROM \(table) WHERE owner = $1 AND \(name) > $2 AND \(name) <= $3 ORDER BY \(name)
                            """, binds: PostgresStore.binds(owner, first, page[end - 1].0)))
                for found in rows {
                    let (rowName, sealed) = try found.decode((String, Data).self)
                    try body(rowName, sealed)
                }
                index = end
            }
            if page.count < PostgresStore.exportPageRows { return }
            after = last
        }
    }
}
