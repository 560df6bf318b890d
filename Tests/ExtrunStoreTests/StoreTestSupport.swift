import ExtrunProtocol
import Foundation
import GRDB
import Testing

@testable import ExtrunStore

#if canImport(Glibc)
import Glibc
#endif

/// A temporary directory, removed (with everything in it) when the value goes away.
final class TemporaryDirectory: Sendable {
    let path: String
    var url: URL { URL(fileURLWithPath: path, isDirectory: true) }

    init(_ label: String = "store") throws {
        var base = NSTemporaryDirectory()
        while base.count > 1, base.hasSuffix("/") { base.removeLast() }
        var template = Array("\(base)/extrun-\(label)-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
        path = String(cString: made)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    func sub(_ relative: String) -> String { path + "/" + relative }

    @discardableResult
    func makeFolder(_ relative: String) throws -> String {
        try FileManager.default.createDirectory(atPath: sub(relative), withIntermediateDirectories: true)
        return sub(relative)
    }

    @discardableResult
    func write(_ relative: String, _ contents: String) throws -> String {
        let file = sub(relative)
        try FileManager.default.createDirectory(
            atPath: (file as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try Data(contents.utf8).write(to: URL(fileURLWithPath: file))
        return file
    }

    func read(_ relative: String) throws -> String {
        String(decoding: try Data(contentsOf: URL(fileURLWithPath: sub(relative))), as: UTF8.self)
    }

    func exists(_ relative: String) -> Bool {
        var info = stat()
        return lstat(sub(relative), &info) == 0
    }
}

/// A store in a fresh temporary home.
struct TestStore {
    let directory: TemporaryDirectory
    let store: Store
    var home: String { directory.sub("home") }
    var databasePath: String { store.databasePath }

    init() throws {
        directory = try TemporaryDirectory()
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
