import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Synchronization
import Testing

@testable import ExtrunStore

#if canImport(Glibc)
import Glibc
#endif

/// A folder bookmark "root" over `<tmp>/root`, next to `<tmp>/outside` holding a secret.
private struct Sandbox {
    let test: TestStore
    let access: BookmarkAccess
    var directory: TempDirectory { test.directory }

    init(readOnly: Bool = false) throws {
        test = try TestStore()
        try test.directory.write("root/hello.txt", "hello")
        try test.directory.write("root/sub/inner.txt", "inner")
        try test.directory.write("outside/secret.txt", "OUTSIDE")
        let bookmarks = try test.store.bookmarks(of: "TEAM")
        try bookmarks.add("root", path: test.directory.sub("root"), readOnly: readOnly)
        access = try bookmarks.access("root")
    }

    func link(_ relative: String, to destination: String) throws {
        try FileManager.default.createSymbolicLink(atPath: directory.sub("root/" + relative), withDestinationPath: destination)
    }

    func outsideEntries() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory.sub("outside")).sorted()
    }
}

private final class RunningFlag: Sendable {
    let value = Atomic<Bool>(true)
}

@Suite struct BookmarkAccessTests {
    @Test("writes through a bookmark count toward the owner's fileBytes quota: over it, quotaExceeded and nothing written")
    func writesCountTowardTheFileBytesQuota() throws {
        let box = try Sandbox()
        let access = box.access
        let store = box.test.store
        try store.setQuota(of: "TEAM", ["fileBytes": 1000])
        try access.write("a.txt", contents: Data(repeating: 65, count: 600))
        #expect(try store.quota(of: "TEAM").usage.fileBytes == 600)
        // Growing a file counts its growth; replacing it with the same size adds nothing.
        try access.write("a.txt", contents: Data(repeating: 66, count: 900))
        #expect(try store.quota(of: "TEAM").usage.fileBytes == 900)
        try access.write("a.txt", contents: Data(repeating: 67, count: 900))
        #expect(try store.quota(of: "TEAM").usage.fileBytes == 900)
        // Past the quota: refused with its numbers, and neither the file nor the usage changes.
        let error = try #require(throws: StoreError.self) { try access.write("b.txt", contents: Data(repeating: 68, count: 200)) }
        #expect(error.kind == .quotaExceeded)
        #expect(error.details["quota"] == "fileBytes")
        #expect(error.details["limit"] == 1000)
        #expect(error.details["usage"] == 900)
        #expect(error.details["adding"] == 200)
        #expect(error.message.contains("extrun owners quota TEAM --file-bytes"))
        #expect(!FileManager.default.fileExists(atPath: box.directory.sub("root/b.txt")))
        #expect(try store.quota(of: "TEAM").usage.fileBytes == 900)
        // Shrinking gives bytes back, and then the write fits.
        try access.write("a.txt", contents: Data(repeating: 69, count: 100))
        #expect(try store.quota(of: "TEAM").usage.fileBytes == 100)
        try access.write("b.txt", contents: Data(repeating: 68, count: 200))
        #expect(try store.quota(of: "TEAM").usage.fileBytes == 300)
        // A write refused (its folder is missing) counts nothing.
        expectStoreError(.notFound) { try access.write("missing/c.txt", contents: Data(repeating: 1, count: 50)) }
        #expect(try store.quota(of: "TEAM").usage.fileBytes == 300)
    }

    @Test func aBookmarkOverTheHomeNeverReachesTheStoreOrTheKeys() throws {
        // A bookmark of a folder that holds extrun's home (as a bookmark of the user's home folder would).
        let test = try TestStore()
        try test.store.globals(of: "TEAM").set("secret", to: "s")
        let bookmarks = try test.store.bookmarks(of: "TEAM")
        try bookmarks.add("everything", path: test.directory.path, readOnly: false)
        let access = try bookmarks.access("everything")
        let home = URL(fileURLWithPath: test.home).lastPathComponent
        for path in ["\(home)/store.sqlite", "\(home)/keys", "\(home)"] {
            do {
                _ = try access.read(path)
                Issue.record("\(path) was read through a bookmark")
            } catch let error as StoreError {
                #expect(error.kind == .pathEscape || error.kind == .wrongType, "\(path): \(error)")
                if error.kind == .wrongType { continue }
                #expect(error.message.contains("extrun's own home"), "\(error.message)")
            }
        }
        let keyFiles = try FileManager.default.contentsOfDirectory(atPath: test.home + "/keys")
        for key in keyFiles {
            #expect(throws: StoreError.self) { try access.read("\(home)/keys/\(key)") }
        }
        #expect(!keyFiles.isEmpty)
        #expect(throws: StoreError.self) { try access.write("\(home)/planted", contents: Data("x".utf8)) }
        #expect(!FileManager.default.fileExists(atPath: test.home + "/planted"))
        // The owner's own container is its files' place: reachable. Another owner's is not.
        try test.directory.write("home/containers/\(Keystore.escape("TEAM"))/mine.txt", "mine")
        try test.directory.write("home/containers/\(Keystore.escape("OTHER"))/theirs.txt", "theirs")
        #expect(try access.read("\(home)/containers/\(Keystore.escape("TEAM"))/mine.txt") == Data("mine".utf8))
        #expect(throws: StoreError.self) { try access.read("\(home)/containers/\(Keystore.escape("OTHER"))/theirs.txt") }
    }

    @Test func statListReadWrite() throws {
        let box = try Sandbox()
        let access = box.access
        #expect(try access.stat("").kind == .folder)
        #expect(try access.stat("hello.txt") == access.stat("./hello.txt"))
        #expect(try access.stat("hello.txt").size == 5)
        #expect(try access.read("hello.txt") == Data("hello".utf8))
        #expect(try access.read("sub//inner.txt") == Data("inner".utf8))

        let written = try access.write("sub/new.txt", contents: Data("new".utf8))
        #expect(written.path == "sub/new.txt" && written.kind == .file && written.size == 3)
        #expect(try box.directory.read("root/sub/new.txt") == "new")
        try access.write("sub/new.txt", contents: Data())
        #expect(try access.read("sub/new.txt").isEmpty)
        expectStoreError(.alreadyExists) { try access.write("sub/new.txt", contents: Data("x".utf8), overwrite: false) }
        expectStoreError(.notFound) { try access.write("missing/new.txt", contents: Data()) }
        expectStoreError(.wrongType) { try access.write("sub", contents: Data()) }
        expectStoreError(.wrongType) { try access.read("sub") }
        expectStoreError(.wrongType) { try access.read("") }
        expectStoreError(.notFound) { try access.read("nope.txt") }
        expectStoreError(.wrongType) { try access.read("hello.txt/x") }

        try access.createFolder("sub/deeper")
        expectStoreError(.alreadyExists) { try access.createFolder("sub/deeper") }
        expectStoreError(.notFound) { try access.createFolder("a/b/c") }
        #expect(try access.stat("sub/deeper").kind == .folder)
        // No temporary files left anywhere.
        let all = try access.list(recursive: true).map(\.path)
        #expect(all == ["hello.txt", "sub", "sub/deeper", "sub/inner.txt", "sub/new.txt"])
    }

    @Test func writesKeepPermissionsAndReplaceSymlinksInsteadOfFollowingThem() throws {
        let box = try Sandbox()
        chmod(box.directory.sub("root/hello.txt"), 0o604)
        try box.access.write("hello.txt", contents: Data("bye".utf8))
        #expect(permissions(box.directory.sub("root/hello.txt")) == 0o604)
        try box.link("to-inner", to: "sub/inner.txt")
        #expect(try box.access.read("to-inner") == Data("inner".utf8), "symlinks inside are followed for reading")
        #expect(try box.access.stat("to-inner").kind == .symlink)
        try box.access.write("to-inner", contents: Data("replaced".utf8))
        #expect(try box.access.stat("to-inner").kind == .file)
        #expect(try box.directory.read("root/sub/inner.txt") == "inner", "the link was replaced, its target untouched")
    }

    @Test func listingWithGlobAndRecursion() throws {
        let box = try Sandbox()
        try box.directory.write("root/a.md", "")
        try box.directory.write("root/.hidden.md", "")
        try box.directory.write("root/sub/b.md", "")
        try box.directory.write("root/sub/deep/c.md", "")
        try box.link("sub-link", to: "sub")
        #expect(try box.access.list().map(\.path) == [".hidden.md", "a.md", "hello.txt", "sub", "sub-link"])
        #expect(try box.access.list(matching: "*.md").map(\.path) == ["a.md"])
        #expect(try box.access.list(matching: ".*").map(\.path) == [".hidden.md"])
        #expect(try box.access.list(matching: "*.md", recursive: true).map(\.path) == ["a.md", "sub/b.md", "sub/deep/c.md"])
        #expect(try box.access.list("sub", recursive: true).map(\.path) == ["sub/b.md", "sub/deep", "sub/deep/c.md", "sub/inner.txt"])
        #expect(try box.access.list("sub-link").map(\.path) == ["sub-link/b.md", "sub-link/deep", "sub-link/inner.txt"])
        let kinds = Dictionary(uniqueKeysWithValues: try box.access.list().map { ($0.path, $0.kind) })
        #expect(kinds["sub"] == .folder && kinds["sub-link"] == .symlink && kinds["a.md"] == .file)
        expectStoreError(.wrongType) { try box.access.list("hello.txt") }
        expectStoreError(.invalidPath) { try box.access.list(matching: "") }
    }

    @Test func moveAndTrash() throws {
        let box = try Sandbox()
        let access = box.access
        let moved = try access.move("hello.txt", to: "sub/hello-moved.txt")
        #expect(moved.path == "sub/hello-moved.txt")
        #expect(!box.directory.exists("root/hello.txt"))
        #expect(try box.directory.read("root/sub/hello-moved.txt") == "hello")
        expectStoreError(.alreadyExists) { try access.move("sub/inner.txt", to: "sub/hello-moved.txt") }
        expectStoreError(.notFound) { try access.move("nope", to: "nope2") }
        expectStoreError(.invalidPath) { try access.move("sub", to: "sub/inside") }
        expectStoreError(.invalidPath) { try access.move("", to: "x") }
        expectStoreError(.invalidPath) { try access.move("sub", to: "") }

        let trashed = try access.trash("sub/inner.txt")
        #expect(!box.directory.exists("root/sub/inner.txt"))
        let home = box.test.home
        #expect(trashed.trashPath.hasPrefix(home + "/trash/TEAM/files/"))
        #expect(trashed.originalPath == box.directory.sub("root/sub/inner.txt"))
        #expect(String(decoding: try #require(fileBytes(trashed.trashPath)), as: UTF8.self) == "inner")
        let info = try JSONCoding.decode(JSONValue.self, fromJSON: try #require(fileBytes(trashed.infoPath)))
        #expect(info["originalPath"] == .string(trashed.originalPath))
        #expect(info["bookmark"] == "root")
        #expect(permissions(home + "/trash") == 0o700)
        #expect(permissions(home + "/trash/TEAM") == 0o700)
        #expect(permissions(home + "/trash/TEAM/files") == 0o700)
        #expect(permissions(trashed.infoPath) == 0o600)
        // A second item of the same name, and a whole folder.
        try access.write("sub/inner.txt", contents: Data("again".utf8))
        let again = try access.trash("sub/inner.txt")
        #expect(again.trashPath != trashed.trashPath)
        try access.trash("sub")
        #expect(try access.list().map(\.path) == [])
        expectStoreError(.notFound) { try access.trash("sub") }
        expectStoreError(.invalidPath) { try access.trash("") }
        // Another owner's trash is its own.
        let otherFolder = try box.directory.makeFolder("other")
        try box.directory.write("other/x", "x")
        let other = try box.test.store.bookmarks(of: "OTHER")
        try other.add("o", path: otherFolder, readOnly: false)
        #expect(try other.access("o").trash("x").trashPath.hasPrefix(home + "/trash/OTHER/files/"))
    }

    // MARK: - Escapes

    @Test func dotDotAndAbsolutePathsAreRefused() throws {
        let box = try Sandbox()
        let access = box.access
        for path in ["..", "../outside/secret.txt", "sub/../../outside/secret.txt", "sub/..", "/etc/passwd", "/"] {
            let error = expectStoreError(.pathEscape) { try access.read(path) }
            #expect(error?.details["path"] == .string(path))
            expectStoreError(.pathEscape) { try access.stat(path) }
            expectStoreError(.pathEscape) { try access.list(path) }
            expectStoreError(.pathEscape) { try access.write(path, contents: Data("x".utf8)) }
            expectStoreError(.pathEscape) { try access.createFolder(path) }
            expectStoreError(.pathEscape) { try access.trash(path) }
            expectStoreError(.pathEscape) { try access.move("hello.txt", to: path) }
            expectStoreError(.pathEscape) { try access.move(path, to: "stolen") }
        }
        expectStoreError(.invalidPath) { try access.read("nul\u{0}byte") }
        #expect(try box.outsideEntries() == ["secret.txt"])
        #expect(try box.directory.read("outside/secret.txt") == "OUTSIDE")
    }

    @Test func symlinksPointingOutAreRefused() throws {
        let box = try Sandbox()
        let access = box.access
        try box.link("abs-out", to: box.directory.sub("outside"))
        try box.link("rel-out", to: "../outside")
        try box.link("abs-file", to: box.directory.sub("outside/secret.txt"))
        try box.link("sub/deep-out", to: "../../outside/secret.txt")
        try box.link("root-of-fs", to: "/")
        try box.link("proc", to: "/proc/self/root")
        for path in ["abs-out/secret.txt", "rel-out/secret.txt", "abs-file", "sub/deep-out", "root-of-fs/etc/passwd", "proc/etc/passwd"] {
            expectStoreError(.pathEscape) { try access.read(path) }
        }
        for path in ["abs-out", "rel-out"] {
            expectStoreError(.pathEscape) { try access.list(path) }
            expectStoreError(.pathEscape) { try access.write(path + "/planted.txt", contents: Data("x".utf8)) }
            expectStoreError(.pathEscape) { try access.createFolder(path + "/planted") }
            expectStoreError(.pathEscape) { try access.trash(path + "/secret.txt") }
            expectStoreError(.pathEscape) { try access.move("hello.txt", to: path + "/hello.txt") }
            expectStoreError(.pathEscape) { try access.move(path + "/secret.txt", to: "stolen.txt") }
        }
        // The links themselves are entries of the folder: they can be listed, trashed or replaced.
        #expect(try access.stat("rel-out").kind == .symlink)
        try access.trash("abs-file")
        #expect(try box.outsideEntries() == ["secret.txt"])
        #expect(try box.directory.read("outside/secret.txt") == "OUTSIDE")
    }

    @Test func symlinkLoopsAreAnErrorNotAHang() throws {
        let box = try Sandbox()
        try box.link("loop", to: "loop")
        try box.link("ping", to: "pong")
        try box.link("pong", to: "ping")
        for path in ["loop", "ping", "loop/x"] {
            let error = expectStoreError(.invalidPath) { try box.access.read(path) }
            #expect(error?.message.contains("symbolic links") == true)
        }
        expectStoreError(.invalidPath) { try box.access.write("ping/x", contents: Data()) }
        #expect(try box.access.list(recursive: true).count == 6)
    }

    @Test func aFolderSwappedForASymlinkAfterResolutionCannotRedirectTheWrite() throws {
        let box = try Sandbox()
        let root = box.directory.sub("root")
        var access = box.access
        access.afterResolving = {
            // Between resolving "sub" and writing into it, "sub" becomes a link out.
            rename(root + "/sub", root + "/sub-moved")
            symlink("../outside", root + "/sub")
        }
        try access.write("sub/planted.txt", contents: Data("planted".utf8))
        #expect(try box.outsideEntries() == ["secret.txt"])
        #expect(try box.directory.read("root/sub-moved/planted.txt") == "planted", "the write went to the folder that was resolved")

        // The same for a read: the descriptor is already open on the inside file.
        unlink(root + "/sub")
        rename(root + "/sub-moved", root + "/sub")
        try box.directory.write("outside/inner.txt", "OUTSIDE")
        access.afterResolving = {
            rename(root + "/sub", root + "/sub-moved")
            symlink("../outside", root + "/sub")
        }
        #expect(try access.read("sub/inner.txt") == Data("inner".utf8))
    }

    @Test func aRacingSwapNeverLetsAWriteOrReadEscape() throws {
        let box = try Sandbox()
        let root = box.directory.sub("root")
        try box.directory.write("outside/inner.txt", "OUTSIDE")
        let running = RunningFlag()
        let swapper = Thread {
            while running.value.load(ordering: .relaxed) {
                rename(root + "/sub", root + "/sub-real")
                symlink("../outside", root + "/sub")
                unlink(root + "/sub")
                rename(root + "/sub-real", root + "/sub")
            }
        }
        swapper.start()
        defer { running.value.store(false, ordering: .relaxed) }
        var wrote = 0
        var read = 0
        let deadline = Date().addingTimeInterval(1.5)
        var index = 0
        while Date() < deadline {
            index += 1
            do {
                try box.access.write("sub/f\(index).txt", contents: Data("x".utf8))
                wrote += 1
            } catch let error as StoreError {
                #expect([.notFound, .pathEscape].contains(error.kind), "\(error)")
            }
            do {
                let data = try box.access.read("sub/inner.txt")
                #expect(data == Data("inner".utf8), "read escaped to \(String(decoding: data, as: UTF8.self))")
                read += 1
            } catch let error as StoreError {
                #expect([.notFound, .pathEscape].contains(error.kind), "\(error)")
            }
        }
        running.value.store(false, ordering: .relaxed)
        Thread.sleep(forTimeInterval: 0.05)
        #expect(try box.outsideEntries() == ["inner.txt", "secret.txt"], "nothing was written outside")
        #expect(wrote > 0 && read > 0, "the race ran both ways (wrote \(wrote), read \(read))")
    }
}
