import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// An owner's bookmark of a shared, world-writable folder never hands a caller a file its
/// own uid cannot read (issue 30, item 4): through `extrun handle` and through a root
/// `extrun serve --socket-mode 666`, with the Bookmarks example plugin. And a shared
/// service runs an owner's intents only for the callers serve.json grants it.
///
/// As root: `extrun-test` calls, `extrun-test2` (made with useradd when missing) owns a
/// 0600 file in the shared folder that EXAMPLETEAM's bookmark covers.
@Suite("Bookmarks of a shared folder, and grants, on a shared service", .serialized)
struct SharedBookmarkTests {
    static var isRoot: Bool { getuid() == 0 }
    static let caller = "extrun-test"
    static let stranger = "extrun-test2"

    /// A shared folder (mode 1777) holding the stranger's 0600 secret and the caller's own
    /// 0644 file, and intent files every user can read; all removed with `directory`.
    struct SharedFolder {
        let directory: TempDirectory
        let shared: URL
        let secretText = "SECRET-\(UUID().uuidString)-of-extrun-test2"
        let readSecret: String
        let readMine: String

        init() throws {
            let callerUID = try ServeSharedTests.ensureUser(SharedBookmarkTests.caller)
            let strangerUID = try ServeSharedTests.ensureUser(SharedBookmarkTests.stranger)
            directory = try TempDirectory("shared-bookmark")
            chmod(directory.url.path, 0o755)
            shared = try directory.directory("shared")
            chmod(shared.path, 0o1777)
            let secret = try directory.write("shared/secret.txt", secretText, mode: 0o600)
            chown(secret.path, strangerUID, strangerUID)
            let mine = try directory.write("shared/mine.txt", "the caller's own words", mode: 0o644)
            chown(mine.path, callerUID, callerUID)
            readSecret = try directory.write(
                "read-secret.json", #"{"intent": "ReadBookmarkFile", "parameters": {"bookmark": "shared", "path": "secret.txt"}}"#, mode: 0o644
            ).path
            readMine = try directory.write(
                "read-mine.json", #"{"intent": "ReadBookmarkFile", "parameters": {"bookmark": "shared", "path": "mine.txt"}}"#, mode: 0o644
            ).path
        }
    }

    /// `POST /v1/handle` with the intent file, as `user`: the status and the body.
    static func post(_ socket: String, _ file: String, as user: String) throws -> (status: Int, body: String) {
        let script = """
            import socket, sys
            body = open(sys.argv[2], "rb").read()
            s = socket.socket(socket.AF_UNIX)
            s.connect(sys.argv[1])
            s.sendall(b"POST /v1/handle HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/json\\r\\nContent-Length: %d\\r\\nConnection: close\\r\\n\\r\\n" % len(body) + body)
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            sys.stdout.write(data.decode("utf-8", "replace"))
            """
        let result = try ProgramRun.program("/usr/sbin/runuser", ["-u", user, "--", "/usr/bin/python3", "-B", "-c", script, socket, file])
        let statusLine = result.stdout.split(separator: "\r\n").first ?? ""
        let status = statusLine.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? -1
        return (status, result.stdout + result.stderr)
    }

    /// A root service with `--socket-mode 666` on the CLI's home, its folder open to others.
    static func service(_ cli: CLI, policy: String?) throws -> RunningService {
        let service = try RunningService(cli: cli, policy: policy, arguments: ["--socket-mode", "666"])
        chmod(service.directory.url.path, 0o711)
        return service
    }

    @Test(
        "A root service: a caller granted EXAMPLETEAM, who is not the maker of its bookmark of a shared folder, gets accessDenied through the Bookmarks plugin, never another user's 0600 file",
        .enabled(if: isRoot, "needs root: a second and third local user call a root service"))
    func serviceRefusesAnotherMakersBookmark() throws {
        let folder = try SharedFolder()
        let cli = try CLI()
        let added = try cli.run(["bookmarks", "add", "shared", folder.shared.path, "--owner", "EXAMPLETEAM", "--read-only"])
        #expect(added.status == 0, "\(added)")
        let callerUID = try ServeSharedTests.ensureUser(Self.caller)
        let service = try Self.service(cli, policy: #"{"grants": {"\#(callerUID)": ["EXAMPLETEAM"]}}"#)
        defer { service.stop() }
        let answer = try Self.post(service.socket, folder.readSecret, as: Self.caller)
        #expect(!answer.body.contains(folder.secretText), "\(answer.body)")
        #expect(answer.body.contains("accessDenied") && answer.body.contains("only its maker may use it"), "\(answer.body)")
        // Its own file in the same folder, through the same bookmark: refused alike (root made it).
        let mine = try Self.post(service.socket, folder.readMine, as: Self.caller)
        #expect(mine.body.contains("accessDenied") && !mine.body.contains("the caller's own words"), "\(mine.body)")
    }

    @Test(
        "A root service opens a bookmark made for a user with that user's rights: its maker reads its own file through it, and another user's 0600 file in the same shared folder is refused, never read",
        .enabled(if: isRoot, "needs root: a root service takes on the maker's rights"))
    func serviceOpensWithTheMakersRights() throws {
        let folder = try SharedFolder()
        let cli = try CLI()
        let added = try cli.run(["bookmarks", "add", "shared", folder.shared.path, "--owner", "EXAMPLETEAM", "--creator", Self.caller])
        #expect(added.status == 0, "\(added)")
        let callerUID = try ServeSharedTests.ensureUser(Self.caller)
        #expect(try added.json()["creator"]?["uid"] == .int(Int64(callerUID)), "\(added)")
        let service = try Self.service(cli, policy: #"{"grants": {"\#(callerUID)": ["EXAMPLETEAM"]}}"#)
        defer { service.stop() }
        let secret = try Self.post(service.socket, folder.readSecret, as: Self.caller)
        #expect(!secret.body.contains(folder.secretText), "\(secret.body)")
        #expect(secret.body.contains("Permission denied"), "\(secret.body)")
        let mine = try Self.post(service.socket, folder.readMine, as: Self.caller)
        #expect(mine.status == 200 && mine.body.contains("the caller's own words"), "\(mine.body)")
        // The stranger, granted nothing, is refused before anything runs.
        let stranger = try Self.post(service.socket, folder.readSecret, as: Self.stranger)
        #expect(stranger.status == 403 && !stranger.body.contains(folder.secretText), "\(stranger.body)")
    }

    @Test(
        "Grants: by default a root service runs an owner's intents only for itself (and root); another uid gets 403 notPermitted naming it and the owner, and nothing runs; a grant in serve.json lets it in",
        .enabled(if: isRoot, "needs root: another local user calls a root service"))
    func grantsDefaultAndExplicit() throws {
        let folder = try SharedFolder()
        let cli = try CLI()
        let callerUID = try ServeSharedTests.ensureUser(Self.caller)
        #expect(try cli.run(["bookmarks", "add", "shared", folder.shared.path, "--owner", "EXAMPLETEAM", "--creator", Self.caller]).status == 0)
        do {
            let service = try Self.service(cli, policy: nil)
            defer { service.stop() }
            let refused = try Self.post(service.socket, folder.readMine, as: Self.caller)
            #expect(refused.status == 403, "\(refused.body)")
            #expect(refused.body.contains(#""kind":"notPermitted""#) && refused.body.contains(#""owner":"EXAMPLETEAM""#), "\(refused.body)")
            #expect(refused.body.contains(#""uid":\#(callerUID)"#) && !refused.body.contains("the caller's own words"), "\(refused.body)")
            // Root, the service's own user, is granted everything.
            let own = try cli.run(["handle", "--server", service.socket, folder.readMine])
            #expect(own.status == 0 && own.stdout.contains("the caller's own words"), "\(own)")
        }
        let service = try Self.service(cli, policy: #"{"grants": {"*": ["OTHERTEAM"], "\#(callerUID)": ["EXAMPLETEAM"]}}"#)
        defer { service.stop() }
        let granted = try Self.post(service.socket, folder.readMine, as: Self.caller)
        #expect(granted.status == 200 && granted.body.contains("the caller's own words"), "\(granted.body)")
    }

    @Test(
        "extrun handle as another user than the bookmark's maker (runuser -u extrun-test, on a home root set up): accessDenied naming both, never another user's 0600 file",
        .enabled(if: isRoot, "needs root: the bookmark is made by root and used by another user"))
    func handleRefusesAnotherMakersBookmark() throws {
        let folder = try SharedFolder()
        let cli = try CLI()
        #expect(try cli.run(["bookmarks", "add", "shared", folder.shared.path, "--owner", "EXAMPLETEAM"]).status == 0)
        let callerUID = try ServeSharedTests.ensureUser(Self.caller)
        // Its temporary folder its own too (the runner's TMPDIR, root's, is not readable by it).
        let scratch = try cli.home.directory("tmp")
        // The home becomes the caller's, as if it had set it up itself, but with root's bookmark in it.
        let chowned = try ProgramRun.program("/bin/chown", ["-R", "\(callerUID):\(callerUID)", cli.home.url.path])
        #expect(chowned.status == 0, "\(chowned)")
        chmod(cli.home.url.path, 0o700)
        let env = cli.environmentForRun(["TMPDIR": scratch.path]).map { "\($0.key)=\($0.value)" }.sorted()
        let result = try ProgramRun.program(
            "/usr/sbin/runuser", ["-u", Self.caller, "--", "/usr/bin/env"] + env + [try ExtrunBinary.url().path, "handle", folder.readSecret])
        #expect(!result.stdout.contains(folder.secretText) && !result.stderr.contains(folder.secretText), "\(result)")
        #expect(result.stdout.contains("accessDenied") && result.stdout.contains("uid \(callerUID)") && result.stdout.contains("uid 0"), "\(result)")
        // Root takes its home back, so that the test's cleanup removes it.
        _ = try ProgramRun.program("/bin/chown", ["-R", "0:0", cli.home.url.path])
    }
}
