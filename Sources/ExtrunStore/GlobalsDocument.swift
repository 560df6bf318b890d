import ExtrunProtocol
import Foundation
import GRDB

/// How `Globals.import` treats globals that are not in the document.
public enum ImportMode: String, Sendable, CaseIterable {
    /// Keep them.
    case merge
    /// Delete them: afterwards the owner's globals are exactly the document's.
    case replace
}

/// What an import did.
public struct ImportSummary: Sendable, Equatable {
    public var created = 0
    public var updated = 0
    /// Globals whose value was already the document's: left alone, version unchanged.
    public var unchanged = 0
    /// Globals deleted by `ImportMode.replace`.
    public var deleted = 0

    public init(created: Int = 0, updated: Int = 0, unchanged: Int = 0, deleted: Int = 0) {
        self.created = created
        self.updated = updated
        self.unchanged = unchanged
        self.deleted = deleted
    }
}

/// The plaintext export document (docs/store.md, "Export documents"):
///
///     {"format": "extrun-globals", "version": 1, "owner": "EXAMPLETEAM",
///      "exported": "2026-11-22T10:30:00Z", "globals": {"name": value, ...}}
extension Globals {
    static let documentFormat = "extrun-globals"
    static let documentVersion: Int64 = 1

    /// All of the owner's globals as a plaintext JSON document (pretty-printed,
    /// sorted keys). Every value is opened, so a damaged row fails the export
    /// instead of being left out.
    public func export() throws -> Data {
        var document = Data()
        try export { document.append(contentsOf: $0) }
        return document
    }

    /// The same document as `export()`, handed to `write` in pieces of about 64 KiB as
    /// the rows are read: memory stays flat however many globals there are. On an error
    /// (a damaged row), part of the document may have been written already.
    public func export(to write: ([UInt8]) throws -> Void) throws {
        var out: [UInt8] = []
        out.reserveCapacity(80 << 10)
        func flush(always: Bool = false) throws {
            if always || out.count >= 64 << 10 {
                try write(out)
                out.removeAll(keepingCapacity: true)
            }
        }
        func string(_ text: String) -> [UInt8] { JSONWriter.bytes(.string(text)) }
        out += Array("{\n  \"exported\" : ".utf8) + string(ISODate.format(Date()))
        out += Array(",\n  \"format\" : ".utf8) + string(Globals.documentFormat)
        out += Array(",\n  \"globals\" : {".utf8)
        var count = 0
        func append(_ name: String, _ value: JSONValue) throws {
            out += Array((count == 0 ? "\n    " : ",\n    ").utf8) + string(name) + Array(" : ".utf8)
            // Pretty at the document's depth: every line of the value after its first is
            // indented by four more spaces, but the blank line of an empty container
            // (strings hold no raw line break: JSON escapes them).
            let pretty = JSONWriter.prettyBytes(value)
            for (index, byte) in pretty.enumerated() {
                out.append(byte)
                if byte == 0x0A, index + 1 < pretty.count, pretty[index + 1] != 0x0A { out += [0x20, 0x20, 0x20, 0x20] }
            }
            count += 1
            try flush()
        }
        if let key = try store.readKey(owner), case .postgres(let server) = store.backend {
            // Pages of 500 rows in name order: memory stays flat on the server's side too.
            var after = ""
            while true {
                let page = try server.globalRows(owner: owner, after: after, limit: 500)
                for row in page {
                    try append(row.name, try open(row.sealed, name: row.name, key: key))
                }
                guard page.count == 500, let last = page.last else { break }
                after = last.name
            }
        } else if let key = try store.readKey(owner) {
            try store.database.read { db in
                let rows = try Row.fetchCursor(
                    db, sql: "SELECT name, sealed FROM global WHERE owner = ? ORDER BY name", arguments: [owner])
                while let row = try rows.next() {
                    let name: String = row["name"]
                    try append(name, try open(row["sealed"], name: name, key: key))
                }
            }
        }
        // An empty object is written "{", blank line, "}" (JSONEncoder's layout).
        out += Array((count == 0 ? "\n\n  }" : "\n  }").utf8)
        out += Array(",\n  \"owner\" : ".utf8) + string(owner)
        out += Array(",\n  \"version\" : \(Globals.documentVersion)\n}\n".utf8)
        try flush(always: true)
    }

    /// Imports a document made by `export()` (in memory); see `import(from:mode:)`.
    @discardableResult
    public func `import`(_ document: Data, mode: ImportMode) throws -> ImportSummary {
        try self.import(from: .data(document), mode: mode)
    }

    /// Imports a document made by `export()`, read as a stream: what is held at once is one
    /// global (at most `StoreLimits.maxValueBytes` as compact JSON), however large the
    /// document (issue 14). All of it is written in one transaction: either every global is
    /// imported or none, and any problem (format, owner, a name, a value, a quota) is an error
    /// saying "nothing was imported".
    ///
    /// A file or bytes are read twice: first every check, with nothing written (so a refused
    /// document changes nothing, not even by creating the owner's key), then again as it is
    /// written, checking everything again. A pipe is read once, checked as it is written, and
    /// a problem rolls the transaction back; if the owner had no key yet, it keeps the one
    /// made for the import.
    @discardableResult
    public func `import`(from source: GlobalsDocumentSource, mode: ImportMode) throws -> ImportSummary {
        var count: Int?
        if source.canReadTwice {
            count = try readDocument(source) { _, _ in }
        }
        var summary = ImportSummary()
        // Surfaces a missing or wrong key even when there is nothing to write.
        let existingKey = try store.readKey(owner)
        if count == 0, mode == .merge || existingKey == nil { return summary }
        let key = try existingKey ?? store.writeKey(owner)
        let quota = try store.quotaDefaultsForWrite()
        if case .postgres(let server) = store.backend {
            try server.importGlobals(owner: owner, replace: mode == .replace, quota: quota) { rows in
                let imported = try readDocument(source) { name, plaintext in
                    let current = try rows.current(name)
                    if let current, try openPlaintext(current, name: name, key: key) == plaintext {
                        summary.unchanged += 1
                        return
                    }
                    let blob = try Sealing.seal(plaintext, with: key, context: SealContext(owner: owner, kind: .global, name: name))
                    try rows.put(name, blob, current)
                    if current != nil { summary.updated += 1 } else { summary.created += 1 }
                }
                return "importing \(imported) globals"
            } deleted: { summary.deleted = $0 }
            return summary
        }
        try store.database.write { db in
            let before = try Quotas.usage(db, owner: owner)
            // The document's names, for `replace` and to find a name given twice: a
            // temporary table, which SQLite keeps on disk past its page cache, not in memory.
            try db.execute(sql: "CREATE TEMP TABLE importedName (name TEXT PRIMARY KEY) WITHOUT ROWID")
            // Prepared once for the whole document (preparing them for each global was an eighth of the time).
            let remember = try db.cachedStatement(sql: "INSERT INTO temp.importedName (name) VALUES (?)")
            let current = try db.cachedStatement(sql: "SELECT sealed FROM global WHERE owner = ? AND name = ?")
            let update = try db.cachedStatement(sql: "UPDATE global SET version = ?, sealed = ? WHERE owner = ? AND name = ?")
            let insert = try db.cachedStatement(sql: "INSERT INTO global (owner, name, version, sealed) VALUES (?, ?, ?, ?)")
            let imported = try readDocument(source) { name, plaintext in
                do {
                    try remember.execute(arguments: [name])
                } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
                    throw StoreError(
                        .invalidDocument, "the globals document is invalid: global '\(name)' is in it twice; nothing was imported",
                        details: ["owner": .string(owner), "name": .string(name)])
                }
                let row = try Row.fetchOne(current, arguments: [owner, name])
                if let row, try openPlaintext(row["sealed"], name: name, key: key) == plaintext {
                    summary.unchanged += 1
                    return
                }
                let blob = try Sealing.seal(plaintext, with: key, context: SealContext(owner: owner, kind: .global, name: name))
                let version = try Globals.nextVersion(db, owner: owner)
                if row != nil {
                    try update.execute(arguments: [version, blob, owner, name])
                    summary.updated += 1
                } else {
                    try insert.execute(arguments: [owner, name, version, blob])
                    summary.created += 1
                }
            }
            if mode == .replace {
                try db.execute(
                    sql: "DELETE FROM global WHERE owner = ? AND name NOT IN (SELECT name FROM temp.importedName)", arguments: [owner])
                summary.deleted = db.changesCount
            }
            try db.execute(sql: "DROP TABLE temp.importedName")
            try Quotas.enforce(db, owner: owner, before: before, defaults: quota, what: "importing \(imported) globals")
        }
        return summary
    }

    /// Reads the document through, checking everything, and hands each global to `entry`
    /// as (name, value as compact JSON with sorted keys) in the document's order; returns how
    /// many there were. Throws on the first problem.
    private func readDocument(_ source: GlobalsDocumentSource, _ entry: (String, Data) throws -> Void) throws -> Int {
        func invalid(_ message: String) -> StoreError {
            StoreError(.invalidDocument, "the globals document is invalid: \(message); nothing was imported", details: ["owner": .string(owner)])
        }
        var reader = GlobalsDocumentReader(source, invalid: invalid)
        try reader.read { name, text, line in
            let plaintext: Data
            do {
                try NameRules.validateName(name, kind: .global)
                let value: JSONValue
                do throws(JSONParseError) {
                    // A value is at most maxValueBytes as compact JSON, and each of its values takes 2 bytes or more.
                    value = try JSONParser.parse(text, maxNodes: StoreLimits.maxValueBytes / 2 + 1)
                } catch {
                    throw invalid("global '\(name)': \(error.reason) (line \(line + error.line - 1))")
                }
                plaintext = try Globals.serialize(value, name: name, owner: owner)
            } catch let error as StoreError where error.kind != .invalidDocument {
                throw StoreError(error.kind, "the globals document is invalid: \(error.message); nothing was imported", details: error.details)
            }
            try entry(name, plaintext)
        }
        let header = reader.header
        guard header["format"] == .string(Globals.documentFormat) else {
            throw invalid("\"format\" must be \"\(Globals.documentFormat)\"")
        }
        guard header["version"] == .int(Globals.documentVersion) else {
            throw invalid("\"version\" must be \(Globals.documentVersion) (a newer extrun may have written it)")
        }
        guard case .string(let documentOwner)? = header["owner"] else { throw invalid("\"owner\" must be a string") }
        guard documentOwner.utf8.elementsEqual(owner.utf8) else {
            throw invalid(
                "it was exported from owner '\(documentOwner)', not '\(owner)'; to import it into '\(owner)' on purpose, change its \"owner\" field")
        }
        guard reader.sawGlobals else { throw invalid("\"globals\" must be an object of name: value") }
        return reader.count
    }
}
