// Filling a store fast, for the benchmarks (`ExtrunBench populate`, Scripts/bench) and the
// migration tests: not part of the product. It writes sealed rows through the store's
// `package` internals (the database, the owner's key, sealing, bookmark records).
import ExtrunProtocol
import ExtrunStore
import ExtrunSystem
import Foundation
import GRDB

#if canImport(Glibc)
import Glibc
#endif

/// How `Store.populateForBenchmark` fills an owner.
public struct BulkFill: Sendable {
    /// Globals `g0000000`, `g0000001`, ... with JSON string values of about `valueBytes` bytes.
    public var globals: Int
    public var valueBytes: Int
    /// Bookmarks `b0000000`, ... to `bookmarkTarget` (a file or folder), except the last `containerFiles` of them.
    public var bookmarks: Int
    public var bookmarkTarget: String?
    /// Small files made in the owner's container (`files/f0000000.txt`, ...), each with a bookmark `c0000000`, ...
    public var containerFiles: Int

    public init(globals: Int = 0, valueBytes: Int = 32, bookmarks: Int = 0, bookmarkTarget: String? = nil, containerFiles: Int = 0) {
        self.globals = globals
        self.valueBytes = valueBytes
        self.bookmarks = bookmarks
        self.bookmarkTarget = bookmarkTarget
        self.containerFiles = containerFiles
    }

    /// The value `populateForBenchmark` gives global number `index`.
    public static func value(_ index: Int, bytes: Int) -> String {
        let head = "value-\(index)-"
        return head + String(repeating: "x", count: max(0, bytes - head.utf8.count))
    }

    public static func globalName(_ index: Int) -> String { "g" + padded(index) }
    public static func bookmarkName(_ index: Int) -> String { "b" + padded(index) }
    public static func containerBookmarkName(_ index: Int) -> String { "c" + padded(index) }

    public static func padded(_ index: Int) -> String {
        let digits = String(index)
        return String(repeating: "0", count: max(0, 7 - digits.count)) + digits
    }
}

extension Store {
    /// Fills an owner with many globals and bookmarks fast (10,000 rows per
    /// transaction, synchronous=OFF), for benchmarks and tests of migration.
    /// Existing names are replaced.
    public func populateForBenchmark(owner: String, _ fill: BulkFill) throws {
        try NameRules.validateOwner(owner)
        let key = try writeKey(owner)
        do {
            try database.queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = OFF") }
        } catch {
            throw StoreDatabase.storeError(error, path: databasePath)
        }
        defer { try? database.queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") } }
        let step = 10_000
        var start = 0
        while start < fill.globals {
            let end = min(fill.globals, start + step)
            try database.write { db in
                guard let last = try Int64.fetchOne(
                    db, sql: "UPDATE owner SET lastVersion = lastVersion + ? WHERE name = ? RETURNING lastVersion", arguments: [end - start, owner])
                else { throw StoreError(.databaseError, "owner '\(owner)' has no row") }
                var version = last - Int64(end - start)
                let statement = try db.cachedStatement(sql: "INSERT OR REPLACE INTO global (owner, name, version, sealed) VALUES (?, ?, ?, ?)")
                for index in start..<end {
                    let name = BulkFill.globalName(index)
                    let plaintext = try Globals.serialize(.string(BulkFill.value(index, bytes: fill.valueBytes)), name: name, owner: owner)
                    let sealed = try Sealing.seal(plaintext, with: key, context: SealContext(owner: owner, kind: .global, name: name))
                    version += 1
                    try statement.execute(arguments: [owner, name, version, sealed])
                }
            }
            start = end
        }
        var records: [(String, BookmarkRecord)] = []
        let created = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
        if fill.bookmarks > 0 {
            guard let path = fill.bookmarkTarget else {
                throw StoreError(.invalidPath, "bookmarks need a target file or folder")
            }
            let target = try Bookmarks.locate(path)
            let record = BookmarkRecord(
                path: target.absolute, lastKnownPath: target.canonical, kind: target.kind, readOnly: false, created: created,
                device: target.identity.device, inode: target.identity.inode, birth: target.identity.birth)
            for index in 0..<max(0, fill.bookmarks - fill.containerFiles) { records.append((BulkFill.bookmarkName(index), record)) }
        }
        if fill.containerFiles > 0 {
            let folder = containerDirectory(of: owner) + "/files"
            do { try FileOps.makePrivateDirectory(folder) } catch {
                throw StoreError(.ioError, "cannot create \(folder): \(error.reason)")
            }
            for index in 0..<fill.containerFiles {
                let file = folder + "/f" + BulkFill.padded(index) + ".txt"
                let fd: Int32
                do { fd = try SystemCall.retrying("open") { open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600) } } catch {
                    throw StoreError(.ioError, "cannot write \(file): \(error.reason)")
                }
                defer { close(fd) }
                do { try SystemCall.writeAll(fd, Data("contents of file \(index)\n".utf8)) } catch {
                    throw StoreError(.ioError, "cannot write \(file): \(error.reason)")
                }
                let target = try Bookmarks.locate(file)
                records.append((
                    BulkFill.containerBookmarkName(index),
                    BookmarkRecord(
                        path: file, lastKnownPath: target.canonical, kind: target.kind, readOnly: index % 2 == 0, created: created,
                        device: target.identity.device, inode: target.identity.inode, birth: target.identity.birth)
                ))
            }
        }
        start = 0
        while start < records.count {
            let end = min(records.count, start + step)
            try database.write { db in
                let statement = try db.cachedStatement(sql: "INSERT OR REPLACE INTO bookmark (owner, name, sealed) VALUES (?, ?, ?)")
                for (name, record) in records[start..<end] {
                    let plaintext = try JSONCoding.encoder().encode(record)
                    let sealed = try Sealing.seal(plaintext, with: key, context: SealContext(owner: owner, kind: .bookmark, name: name))
                    try statement.execute(arguments: [owner, name, sealed])
                }
            }
            start = end
        }
    }
}
