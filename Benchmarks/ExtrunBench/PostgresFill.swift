import ExtrunProtocol
import ExtrunStore
import ExtrunStoreFill
import Foundation
import NIOCore
import PostgresNIO

/// `ExtrunBench populate` on a PostgreSQL store (`EXTRUN_STORE`, Scripts/bench): the globals
/// ExtrunStoreFill writes into store.sqlite (the same names and values, sealed for the owner
/// with its key), 10,000 to a transaction sent as two arrays (one `INSERT ... SELECT FROM
/// unnest`), the owner's version counter and usage row kept as a write keeps them. Existing
/// names are replaced (their usage is not subtracted: fill a fresh owner).
func populatePostgres(_ store: Store, _ server: PostgresStore, owner: String, globals count: Int, valueBytes: Int) throws {
    try NameRules.validateOwner(owner)
    let key = try store.writeKey(owner)
    let step = 10_000
    var start = 0
    while start < count {
        let end = min(count, start + step)
        var names: [String] = []
        var sealed: [ByteBuffer] = []
        var bytes: Int64 = 0
        names.reserveCapacity(end - start)
        sealed.reserveCapacity(end - start)
        for index in start..<end {
            let name = BulkFill.globalName(index)
            let plaintext = try Globals.serialize(.string(BulkFill.value(index, bytes: valueBytes)), name: name, owner: owner)
            let blob = try Sealing.seal(plaintext, with: key, context: SealContext(owner: owner, kind: .global, name: name))
            names.append(name)
            sealed.append(ByteBuffer(bytes: blob))
            bytes += Int64(name.utf8.count + blob.count)
        }
        let rows = Int64(end - start)
        try server.transaction { session in
            guard
                let last = try session.query(
                    "UPDATE owner SET lastVersion = lastVersion + \(rows) WHERE name = \(owner) RETURNING lastVersion"
                ).first?.decode(Int64.self)
            else { throw StoreError(.databaseError, "owner '\(owner)' has no row") }
            let first = last - rows + 1
            try session.execute(
                """
                INSERT INTO global (owner, name, version, sealed)
                SELECT \(owner), t.name, \(first) + t.position - 1, t.sealed
                FROM unnest(\(names)::text[], \(sealed)::bytea[]) WITH ORDINALITY AS t(name, sealed, position)
                ON CONFLICT (owner, name) DO UPDATE SET version = EXCLUDED.version, sealed = EXCLUDED.sealed
                """)
            try session.execute(
                """
                INSERT INTO ownerUsage (owner, globals, bytes) VALUES (\(owner), \(rows), \(bytes))
                ON CONFLICT (owner) DO UPDATE SET globals = ownerUsage.globals + EXCLUDED.globals, bytes = ownerUsage.bytes + EXCLUDED.bytes
                """)
        }
        start = end
    }
}
