import ExtrunProtocol
import Foundation
import Testing

@testable import ExtrunStore

#if canImport(Glibc)
import Glibc
#endif

@Suite struct BookmarkTests {
    @Test(arguments: StoreBackendKind.all)
    func addListShowRemove(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let folder = try test.directory.makeFolder("Documents")
        let file = try test.directory.write("notes.txt", "hello").path
        let bookmarks = try test.store.bookmarks(of: "TEAM")
        let docs = try bookmarks.add("docs", path: folder, readOnly: false)
        let notes = try bookmarks.add("notes", path: file, readOnly: true)
        #expect(docs.kind == .folder && !docs.readOnly)
        #expect(notes.kind == .file && notes.readOnly)
        #expect(docs.path == folder)
        #expect(docs.lastKnownPath == folder)
        var info = stat()
        stat(folder, &info)
        #expect(docs.identity.device == UInt64(info.st_dev))
        #expect(docs.identity.inode == UInt64(info.st_ino))
        #expect(docs.identity.birth != nil, "the test file system records birth times")
        #expect(abs(docs.created.timeIntervalSinceNow) < 60)

        let listed = try bookmarks.list()
        #expect(listed.map(\.bookmark) == [docs, notes])
        #expect(listed.allSatisfy { $0.status == .ok })
        #expect(try bookmarks.show("docs") == BookmarkEntry(bookmark: docs, status: .ok))
        // Through a fresh connection: the sealed record round-trips.
        #expect(try test.reopen().bookmarks(of: "TEAM").show("notes").bookmark == notes)

        expectStoreError(.alreadyExists) { try bookmarks.add("docs", path: file, readOnly: true) }
        expectStoreError(.notFound) { try bookmarks.add("nothing", path: test.directory.sub("missing"), readOnly: true) }
        expectStoreError(.invalidName) { try bookmarks.add("bad\nname", path: folder, readOnly: true) }
        try bookmarks.remove("docs")
        expectStoreError(.notFound) { try bookmarks.remove("docs") }
        expectStoreError(.notFound) { try bookmarks.show("docs") }
        expectStoreError(.notFound) { try bookmarks.access("docs") }
        #expect(FileManager.default.fileExists(atPath: folder), "removing a bookmark leaves its target alone")
    }

    @Test(arguments: StoreBackendKind.all)
    func aSymlinkedPathRecordsItsTarget(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let folder = try test.directory.makeFolder("real")
        try FileManager.default.createSymbolicLink(atPath: test.directory.sub("link"), withDestinationPath: folder)
        let bookmark = try test.store.bookmarks(of: "TEAM").add("b", path: test.directory.sub("link"), readOnly: false)
        #expect(bookmark.path == test.directory.sub("link"))
        #expect(bookmark.lastKnownPath == folder)
        // Re-pointing the link does not re-point the bookmark.
        try FileManager.default.removeItem(atPath: test.directory.sub("link"))
        try FileManager.default.createSymbolicLink(atPath: test.directory.sub("link"), withDestinationPath: "/")
        #expect(try test.store.bookmarks(of: "TEAM").show("b").status == .ok)
    }

    @Test(arguments: StoreBackendKind.all)
    func ownersDoNotSeeEachOthersBookmarks(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let folder = try test.directory.makeFolder("private")
        try test.store.bookmarks(of: "ALICE").add("mine", path: folder, readOnly: false)
        let bob = try test.store.bookmarks(of: "BOB")
        try bob.add("other", path: folder, readOnly: true)
        #expect(try bob.list().map(\.bookmark.name) == ["other"])
        expectStoreError(.notFound) { try bob.show("mine") }
        expectStoreError(.notFound) { try bob.access("mine") }
        expectStoreError(.notFound) { try bob.remove("mine") }
        #expect(try test.store.bookmarks(of: "ALICE").show("mine").status == .ok)
    }

    @Test(arguments: StoreBackendKind.all)
    func movedDeletedAndReplacedTargetsAreStaleNotDropped(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let moved = try test.directory.makeFolder("moved")
        let replaced = try test.directory.makeFolder("replaced")
        let deleted = try test.directory.write("deleted.txt", "x").path
        let bookmarks = try test.store.bookmarks(of: "TEAM")
        try bookmarks.add("moved", path: moved, readOnly: false)
        try bookmarks.add("replaced", path: replaced, readOnly: false)
        try bookmarks.add("deleted", path: deleted, readOnly: false)

        try FileManager.default.moveItem(atPath: moved, toPath: test.directory.sub("elsewhere"))
        try FileManager.default.removeItem(atPath: replaced)
        try test.directory.makeFolder("replaced")
        try FileManager.default.removeItem(atPath: deleted)

        let statuses = Dictionary(uniqueKeysWithValues: try bookmarks.list().map { ($0.bookmark.name, $0) })
        #expect(statuses.count == 3)
        #expect(statuses["moved"]?.status == .stale(.missing))
        #expect(statuses["moved"]?.bookmark.lastKnownPath == moved)
        #expect(statuses["replaced"]?.status == .stale(.replaced))
        #expect(statuses["deleted"]?.status == .stale(.missing))

        for name in ["moved", "replaced", "deleted"] {
            let access = try bookmarks.access(name)
            let path = name == "deleted" ? "" : "x.txt"
            let error = expectStoreError(.staleBookmark) { try access.read(path) }
            #expect(error?.details["lastKnownPath"] == .string(statuses[name]?.bookmark.lastKnownPath ?? "?"))
            expectStoreError(.staleBookmark) { try access.stat("") }
            expectStoreError(.staleBookmark) { try access.write(path, contents: Data()) }
        }
        #expect(!test.directory.exists("replaced/x.txt"), "nothing was written into the replacement")

        // Refresh records what is there now; a vanished target cannot be refreshed.
        let refreshed = try bookmarks.refresh("replaced")
        #expect(try bookmarks.show("replaced").status == .ok)
        #expect(refreshed.identity != statuses["replaced"]?.bookmark.identity)
        expectStoreError(.notFound) { try bookmarks.refresh("moved") }
        #expect(try bookmarks.show("moved").status == .stale(.missing))
    }

    @Test(arguments: StoreBackendKind.all)
    func fileBookmarks(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let file = try test.directory.write("config.json", "{}").path
        chmod(file, 0o640)
        let bookmarks = try test.store.bookmarks(of: "TEAM")
        try bookmarks.add("config", path: file, readOnly: false)
        let access = try bookmarks.access("config")
        #expect(try access.read("") == Data("{}".utf8))
        #expect(try access.stat("").kind == .file)
        #expect(try access.stat(".").size == 2)
        try access.write("", contents: Data(#"{"a":1}"#.utf8))
        #expect(try test.directory.read("config.json") == #"{"a":1}"#)
        #expect(permissions(file) == 0o640, "the file keeps its permissions")
        // The atomic write made a new inode: the bookmark follows it.
        #expect(try bookmarks.show("config").status == .ok)
        #expect(try access.read("") == Data(#"{"a":1}"#.utf8))
        expectStoreError(.invalidPath) { try access.read("other") }
        expectStoreError(.wrongType) { try access.list() }
        expectStoreError(.wrongType) { try access.trash("") }
        expectStoreError(.wrongType) { try access.move("", to: "x") }
        expectStoreError(.alreadyExists) { try access.write("", contents: Data(), overwrite: false) }
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: test.directory.path).filter { $0.hasPrefix(".") }
        #expect(leftovers.isEmpty)
    }

    @Test(arguments: StoreBackendKind.all)
    func readOnlyBookmarksRefuseChanges(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let folder = try test.directory.makeFolder("ro")
        try test.directory.write("ro/a.txt", "original")
        let file = try test.directory.write("ro-file.txt", "original").path
        let bookmarks = try test.store.bookmarks(of: "TEAM")
        try bookmarks.add("ro", path: folder, readOnly: true)
        try bookmarks.add("ro-file", path: file, readOnly: true)
        let access = try bookmarks.access("ro")
        #expect(try access.read("a.txt") == Data("original".utf8))
        #expect(try access.list().map(\.path) == ["a.txt"])
        #expect(try access.stat("a.txt").size == 8)
        let error = expectStoreError(.readOnly) { try access.write("a.txt", contents: Data("changed".utf8)) }
        #expect(error?.message.contains("read-only") == true)
        expectStoreError(.readOnly) { try access.write("new.txt", contents: Data()) }
        expectStoreError(.readOnly) { try access.move("a.txt", to: "b.txt") }
        expectStoreError(.readOnly) { try access.trash("a.txt") }
        expectStoreError(.readOnly) { try access.createFolder("sub") }
        expectStoreError(.readOnly) { try bookmarks.access("ro-file").write("", contents: Data("changed".utf8)) }
        #expect(try test.directory.read("ro/a.txt") == "original")
        #expect(try test.directory.read("ro-file.txt") == "original")
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder) == ["a.txt"])
        #expect(!test.directory.exists("home/trash"))
    }

    @Test func theReadOnlyFlagIsSealed() throws {
        let test = try TestStore()
        let folder = try test.directory.makeFolder("ro")
        try test.store.bookmarks(of: "TEAM").add("ro", path: folder, readOnly: true)
        try test.store.bookmarks(of: "TEAM").add("rw", path: folder, readOnly: false)
        // Swap the two records in the database: neither opens any more.
        try test.tamper("UPDATE bookmark SET name = 'tmp' WHERE name = 'ro'")
        try test.tamper("UPDATE bookmark SET name = 'ro' WHERE name = 'rw'")
        expectStoreError(.sealBroken) { try test.store.bookmarks(of: "TEAM").access("ro").write("x", contents: Data()) }
        #expect(!test.directory.exists("ro/x"))
    }
}
