import CExtrunStoreShims
import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

@testable import ExtrunStore

#if canImport(Glibc)
import Glibc
#endif

/// Who made a bookmark, and whose rights its files are opened with (issue 30, item 4;
/// docs/store.md, "Who made a bookmark").
@Suite("Bookmarks: who made it, whose rights", .serialized)
struct BookmarkCreatorTests {
    static var isRoot: Bool { geteuid() == 0 }

    @Test("a new bookmark records its maker's uid, sealed; `show` reports it")
    func creatorRecorded() throws {
        let test = try TestStore()
        try test.directory.write("root/a.txt", "a")
        let bookmarks = try test.store.bookmarks(of: "TEAM")
        try bookmarks.add("root", path: test.directory.sub("root"), readOnly: false)
        let shown = try bookmarks.show("root").bookmark.creator
        #expect(shown == BookmarkCreator(uid: getuid()))
        #expect(try bookmarks.load("root").creatorUID == getuid())
    }

    @Test("a record sealed before creators were recorded is the home owner's: `recorded` false, and the home's owner still gets its files")
    func oldRecordMeansHomeOwner() throws {
        let test = try TestStore()
        try test.directory.write("root/a.txt", "hello")
        let bookmarks = try test.store.bookmarks(of: "TEAM")
        try bookmarks.add("root", path: test.directory.sub("root"), readOnly: false)
        var record = try bookmarks.load("root")
        record.creatorUID = nil
        record.creatorPrincipal = nil
        try bookmarks.update("root", record)
        // The sealed JSON has no creator field at all, as an old record.
        let plain = String(decoding: try JSONCoding.encoder().encode(record), as: UTF8.self)
        #expect(!plain.contains("creator"), "\(plain)")
        var info = Glibc.stat()
        #expect(lstat(test.home, &info) == 0)
        let creator = try bookmarks.show("root").bookmark.creator
        #expect(creator.uid == info.st_uid && !creator.recorded, "\(creator)")
        #expect(try bookmarks.access("root", caller: BookmarkCaller(uid: getuid())).read("a.txt") == Data("hello".utf8))
    }

    @Test("another caller than the maker gets accessDenied naming the bookmark, the maker and the caller, never the file; a TCP caller (no uid) too; the maker and root get it")
    func otherCallerDenied() throws {
        let test = try TestStore()
        try test.directory.write("root/a.txt", "hello")
        let bookmarks = try test.store.bookmarks(of: "TEAM")
        try bookmarks.add("root", path: test.directory.sub("root"), readOnly: false)
        let stranger = getuid() == 0 ? UInt32(54_321) : getuid() &+ 12_345
        let error = expectStoreError(.accessDenied) { try bookmarks.access("root", caller: BookmarkCaller(uid: stranger)).read("a.txt") }
        #expect(error?.details["bookmark"] == "root")
        #expect(error?.details["creator"] == .int(Int64(getuid())))
        #expect(error?.details["caller"] == .int(Int64(stranger)))
        #expect(error?.message.contains("uid \(stranger)") == true && error?.message.contains("uid \(getuid())") == true)
        let tcp = expectStoreError(.accessDenied) { try bookmarks.access("root", caller: BookmarkCaller(uid: nil, principal: "tcp")) }
        #expect(tcp?.details["caller"] == "tcp")
        #expect(try bookmarks.access("root", caller: BookmarkCaller(uid: getuid())).read("a.txt") == Data("hello".utf8))
        #expect(try bookmarks.access("root", caller: BookmarkCaller(uid: 0)).read("a.txt") == Data("hello".utf8))
    }

    @Test(
        "only root makes a bookmark for another user: anyone else is refused accessDenied and nothing is added",
        .enabled(if: !isRoot, "as root, a bookmark for another user is allowed"))
    func onlyRootMakesForOthers() throws {
        let test = try TestStore()
        try test.directory.write("root/a.txt", "a")
        let bookmarks = try test.store.bookmarks(of: "TEAM")
        expectStoreError(.accessDenied) {
            try bookmarks.add("root", path: test.directory.sub("root"), readOnly: false, creator: BookmarkCreator(uid: 0))
        }
        #expect(try bookmarks.list().isEmpty)
    }

    @Test(
        "as root, a bookmark's files are opened with its maker's rights: another user's 0600 file in a shared folder is refused, never read; the maker's own file is read, a new file is the maker's, another's file cannot be trashed from a sticky folder; the thread gets root's rights back",
        .enabled(if: isRoot, "needs root: opening with another uid's rights is what a root process does"))
    func rootUsesTheMakersRights() throws {
        let maker = try SecondUsers.ensure("extrun-test")
        let other = try SecondUsers.ensure("extrun-test2")
        let test = try TestStore()
        chmod(test.directory.url.path, 0o711)
        let shared = try test.directory.directory("shared")
        chmod(shared.path, 0o1777)
        let text = "SECRET-\(UUID().uuidString)"
        let secret = try test.directory.write("shared/secret.txt", text, mode: 0o600)
        chown(secret.path, other, other)
        let mine = try test.directory.write("shared/mine.txt", "mine", mode: 0o644)
        chown(mine.path, maker, maker)
        let bookmarks = try test.store.bookmarks(of: "TEAM")
        try bookmarks.add("shared", path: shared.path, readOnly: false, creator: BookmarkCreator(uid: maker))
        let access = try bookmarks.access("shared", caller: BookmarkCaller(uid: 0))
        do {
            let data = try access.read("secret.txt")
            Issue.record("read another user's 0600 file with root's rights: \(data.count) bytes")
        } catch let error as StoreError {
            #expect(error.kind == .ioError && error.message.contains("Permission denied"), "\(error)")
            #expect(!error.message.contains(text))
        }
        #expect(try access.read("mine.txt") == Data("mine".utf8))
        try access.write("new.txt", contents: Data("new".utf8))
        var info = Glibc.stat()
        #expect(lstat(shared.appendingPathComponent("new.txt").path, &info) == 0 && info.st_uid == maker, "uid \(info.st_uid)")
        expectStoreError(.accessDenied) { try access.trash("secret.txt") }
        #expect(FileManager.default.fileExists(atPath: secret.path))
        _ = try access.trash("mine.txt")
        #expect(!FileManager.default.fileExists(atPath: mine.path))
        // Back to root's own rights on this thread: root reads the 0600 file of another user.
        #expect(extrun_thread_fsuid() == 0)
        #expect(FileManager.default.contents(atPath: secret.path) == Data(text.utf8))
    }
}

/// The local users the root tests act as (made with useradd when missing, as Scripts/test does).
enum SecondUsers {
    static func ensure(_ name: String) throws -> UInt32 {
        if let uid = LocalUsers.uid(named: name) { return uid }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/sbin/useradd")
        process.arguments = ["--user-group", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", name]
        try process.run()
        process.waitUntilExit()
        guard let uid = LocalUsers.uid(named: name) else {
            throw StoreError(.notFound, "cannot make the user \(name): useradd exited \(process.terminationStatus)")
        }
        return uid
    }
}
