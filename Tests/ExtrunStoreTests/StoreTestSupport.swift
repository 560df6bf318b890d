import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import GRDB
import Testing

@testable import ExtrunStore

#if canImport(Glibc)
import Glibc
#endif

/// A store in a fresh temporary home.
struct TestStore {
    let directory: TempDirectory
    let store: Store
    var home: String { directory.sub("home") }
    var databasePath: String { store.databasePath }

    init() throws {
        directory = try TempDirectory()
        store = try Store(home: URL(fileURLWithPath: directory.sub("home")))
    }

    /// Another `Store` on the same home: its own SQLite connection, as another process would have.
    func reopen() throws -> Store {
        try Store(home: URL(fileURLWithPath: home))
    }

    /// Runs SQL on store.sqlite through a separate connection, as a tamperer with file access would.
    func tamper(_ sql: String, _ arguments: StatementArguments = StatementArguments()) throws {
        let queue = try DatabaseQueue(path: databasePath)
        try queue.write { db in try db.execute(sql: sql, arguments: arguments) }
        try queue.close()
    }

    func sealedBlob(kind: String, owner: String, name: String) throws -> Data? {
        let queue = try DatabaseQueue(path: databasePath)
        defer { try? queue.close() }
        return try queue.read { db in
            try Data.fetchOne(db, sql: "SELECT sealed FROM \(kind) WHERE owner = ? AND name = ?", arguments: [owner, name])
        }
    }
}

/// Expects `body` to throw a `StoreError` of `kind`, and returns it.
@discardableResult
func expectStoreError<T>(
    _ kind: StoreErrorKind, sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> T
) -> StoreError? {
    do {
        let value = try body()
        Issue.record("expected a \(kind.rawValue) error, got \(value)", sourceLocation: sourceLocation)
        return nil
    } catch let error as StoreError {
        #expect(error.kind == kind, "\(error)", sourceLocation: sourceLocation)
        return error
    } catch {
        Issue.record("expected a StoreError \(kind.rawValue), got \(error)", sourceLocation: sourceLocation)
        return nil
    }
}

/// The permission bits of a file or folder.
func permissions(_ path: String) -> mode_t {
    var info = stat()
    guard lstat(path, &info) == 0 else { return 0xFFFF }
    return info.st_mode & 0o7777
}

/// The whole contents of a file, to compare before and after.
func fileBytes(_ path: String) -> Data? {
    FileManager.default.contents(atPath: path)
}
