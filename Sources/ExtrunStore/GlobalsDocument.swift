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
        if let key = try store.readKey(owner) {
            try store.database.read { db in
                let rows = try Row.fetchCursor(
                    db, sql: "SELECT name, sealed FROM global WHERE owner = ? ORDER BY name", arguments: [owner])
                while let row = try rows.next() {
                    let name: String = row["name"]
                    let value = try open(row["sealed"], name: name, key: key)
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
            }
        }
        // An empty object is written "{", blank line, "}" (JSONEncoder's layout).
        out += Array((count == 0 ? "\n\n  }" : "\n  }").utf8)
        out += Array(",\n  \"owner\" : ".utf8) + string(owner)
        out += Array(",\n  \"version\" : \(Globals.documentVersion)\n}\n".utf8)
        try flush(always: true)
    }

    /// Imports a document made by `export()`. Everything is checked (format,
    /// owner, every name and value) before anything is written, then all of
    /// it is written in one transaction: either every global is imported or none.
    @discardableResult
    public func `import`(_ document: Data, mode: ImportMode) throws -> ImportSummary {
        let entries = try parse(document)
        var summary = ImportSummary()
        // Surfaces a missing or wrong key even when there is nothing to write.
        let existingKey = try store.readKey(owner)
        if entries.isEmpty, mode == .merge || existingKey == nil { return summary }
        let key = try existingKey ?? store.writeKey(owner)
        let sealed = try entries.map { name, plaintext in
            (name, plaintext, try Sealing.seal(plaintext, with: key, context: SealContext(owner: owner, kind: .global, name: name)))
        }
        let quota = try store.quotaDefaultsForWrite()
        try store.database.write { db in
            let before = try Quotas.usage(db, owner: owner)
            for (name, plaintext, blob) in sealed {
                let row = try Row.fetchOne(
                    db, sql: "SELECT sealed FROM global WHERE owner = ? AND name = ?", arguments: [owner, name])
                if let row {
                    if try openPlaintext(row["sealed"], name: name, key: key) == plaintext {
                        summary.unchanged += 1
                        continue
                    }
                    let version = try Globals.nextVersion(db, owner: owner)
                    try db.execute(
                        sql: "UPDATE global SET version = ?, sealed = ? WHERE owner = ? AND name = ?",
                        arguments: [version, blob, owner, name])
                    summary.updated += 1
                } else {
                    let version = try Globals.nextVersion(db, owner: owner)
                    try db.execute(
                        sql: "INSERT INTO global (owner, name, version, sealed) VALUES (?, ?, ?, ?)",
                        arguments: [owner, name, version, blob])
                    summary.created += 1
                }
            }
            if mode == .replace {
                let keep = Set(entries.map(\.0))
                let existing = try String.fetchAll(db, sql: "SELECT name FROM global WHERE owner = ?", arguments: [owner])
                for name in existing where !keep.contains(name) {
                    try db.execute(sql: "DELETE FROM global WHERE owner = ? AND name = ?", arguments: [owner, name])
                    summary.deleted += 1
                }
            }
            try Quotas.enforce(db, owner: owner, before: before, defaults: quota, what: "importing \(sealed.count) globals")
        }
        return summary
    }

    /// The document's globals as (name, serialized value), in byte order of the names; throws on the first problem.
    private func parse(_ document: Data) throws -> [(String, Data)] {
        func invalid(_ message: String) -> StoreError {
            StoreError(.invalidDocument, "the globals document is invalid: \(message); nothing was imported", details: ["owner": .string(owner)])
        }
        let value: JSONValue
        do {
            value = try JSONCoding.decode(JSONValue.self, fromJSON: document)
        } catch {
            throw invalid(JSONCoding.describe(error))
        }
        guard case .object(let object) = value else { throw invalid("expected a JSON object, found \(value.typeName)") }
        guard object["format"] == .string(Globals.documentFormat) else {
            throw invalid("\"format\" must be \"\(Globals.documentFormat)\"")
        }
        guard object["version"] == .int(Globals.documentVersion) else {
            throw invalid("\"version\" must be \(Globals.documentVersion) (a newer extrun may have written it)")
        }
        guard case .string(let documentOwner)? = object["owner"] else { throw invalid("\"owner\" must be a string") }
        guard documentOwner.utf8.elementsEqual(owner.utf8) else {
            throw invalid(
                "it was exported from owner '\(documentOwner)', not '\(owner)'; to import it into '\(owner)' on purpose, change its \"owner\" field")
        }
        guard case .object(let globals)? = object["globals"] else { throw invalid("\"globals\" must be an object of name: value") }
        var entries: [(String, Data)] = []
        for name in globals.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
            do {
                try NameRules.validateName(name, kind: .global)
                entries.append((name, try Globals.serialize(globals[name] ?? .null, name: name, owner: owner)))
            } catch let error as StoreError {
                throw StoreError(error.kind, "the globals document is invalid: \(error.message); nothing was imported", details: error.details)
            }
        }
        return entries
    }
}
