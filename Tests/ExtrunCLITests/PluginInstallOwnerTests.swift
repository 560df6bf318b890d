import ExtrunProtocol
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Root's `extrun plugins install` of a folder another user owns copies only what that user
/// could read (issue 30, item 3): a link leading out of the folder is refused, naming the link
/// and its target, and a file of the folder that is not the owner's and that others cannot
/// read (a hard link to a root-only file) is refused too.
@Suite struct PluginInstallOwnerTests {
    /// The uid and gid of the ordinary user `extrun-test` (Scripts/test makes it), nil when missing.
    static func testUser() -> (uid: uid_t, gid: gid_t)? {
        guard let entry = getpwnam("extrun-test") else { return nil }
        return (entry.pointee.pw_uid, entry.pointee.pw_gid)
    }

    /// Every entry of `folder` (itself included) handed to `uid`, links themselves, not what they lead to.
    static func chownTree(_ folder: URL, uid: uid_t, gid: gid_t) {
        _ = lchown(folder.path, uid, gid)
        let enumerator = FileManager.default.enumerator(atPath: folder.path)
        while let relative = enumerator?.nextObject() as? String {
            _ = lchown(folder.appendingPathComponent(relative).path, uid, gid)
        }
    }

    @Test("As root: a link in extrun-test's folder to a root-only 0600 file is refused, naming the link and its target")
    func aLinkToAFileTheOwnerCannotReadIsRefused() throws {
        let work = try TempDirectory("install-owner")
        chmod(work.url.path, 0o711)
        let secret = try work.write("secret", "root only\n")
        chmod(secret.path, 0o600)
        let source = try PluginInstallCLITests.pythonPlugin(in: work, name: "theirs", id: "com.test.theirs", intent: "TheirShout")
        let link = source.appendingPathComponent("notes.txt")
        #expect(symlink(secret.path, link.path) == 0)
        if geteuid() == 0, let user = Self.testUser() { Self.chownTree(source, uid: user.uid, gid: user.gid) }
        var cli = try CLI()
        cli.pluginPath = []
        let refused = try cli.run(["plugins", "install", source.path])
        #expect(refused.status == 11, "\(refused)")
        #expect(refused.stderr.contains("\(link.path) is a symbolic link to \(secret.path), outside the plugin's folder"), "\(refused)")
        #expect(PluginInstallCLITests.installedEntries(cli).isEmpty, "\(PluginInstallCLITests.installedEntries(cli))")
        let installed = cli.home.url.appendingPathComponent("plugins/com.test.theirs/notes.txt").path
        #expect(!FileManager.default.fileExists(atPath: installed))
        // `plugins check` names the same problem in the same words (under a pass: it runs from where it is).
        let checked = try cli.run(["plugins", "check", source.path])
        #expect(checked.stdout.contains("extrun plugins install would refuse it"), "\(checked)")
        #expect(checked.stdout.contains("\(link.path) is a symbolic link to \(secret.path), outside the plugin's folder"), "\(checked)")
    }

    @Test("As root: a hard link in extrun-test's folder to a root-only 0600 file is refused; a file others may read is copied")
    func aHardLinkToAFileTheOwnerCannotReadIsRefused() throws {
        guard geteuid() == 0, let user = Self.testUser() else { return }  // only root can make the link and read the file
        let work = try TempDirectory("install-owner")
        chmod(work.url.path, 0o711)
        let source = try PluginInstallCLITests.pythonPlugin(in: work, name: "theirs", id: "com.test.theirs", intent: "TheirShout")
        // The same folder, so that the hard link is on the same file system as the secret.
        let secret = try work.write("theirs/.secret-of-root", "root only\n")
        chmod(secret.path, 0o600)
        Self.chownTree(source, uid: user.uid, gid: user.gid)
        _ = lchown(secret.path, 0, 0)
        #expect(link(secret.path, source.appendingPathComponent("notes.txt").path) == 0)
        try FileManager.default.removeItem(at: secret)
        var cli = try CLI()
        cli.pluginPath = []
        let refused = try cli.run(["plugins", "install", source.path])
        #expect(refused.status == 11, "\(refused)")
        #expect(refused.stderr.contains("notes.txt belongs to uid 0, not to the folder's owner (uid \(user.uid))"), "\(refused)")
        #expect(PluginInstallCLITests.installedEntries(cli).isEmpty, "\(PluginInstallCLITests.installedEntries(cli))")

        // Readable by others, it is no secret: copied, at a mode no wider than its own.
        chmod(source.appendingPathComponent("notes.txt").path, 0o604)
        let copied = try cli.run(["plugins", "install", source.path])
        #expect(copied.status == 0, "\(copied)")
        #expect(PluginInstallCLITests.mode(cli.home.url.appendingPathComponent("plugins/com.test.theirs/notes.txt").path) == 0o604)
    }

    @Test("A manifest.json linked to a file outside the folder is not read by install or check (its errors would quote it)")
    func aManifestLinkedOutIsNotRead() throws {
        let work = try TempDirectory("install-owner")
        chmod(work.url.path, 0o711)
        let secret = try work.write("secret", "secret-line: not json\n")
        chmod(secret.path, 0o600)
        let folder = try work.directory("theirs")
        #expect(symlink(secret.path, folder.appendingPathComponent("manifest.json").path) == 0)
        if geteuid() == 0, let user = Self.testUser() { Self.chownTree(folder, uid: user.uid, gid: user.gid) }
        var cli = try CLI()
        cli.pluginPath = []
        let words = "manifest.json is a symbolic link to \(secret.path), outside the plugin's folder: it is not read"
        let refused = try cli.run(["plugins", "install", folder.path])
        #expect(refused.status == 11, "\(refused)")
        #expect(refused.stderr.contains(words), "\(refused)")
        #expect(!refused.stderr.contains("unexpected"), "\(refused)")
        let checked = try cli.run(["plugins", "check", folder.path])
        #expect(checked.stdout.contains(words), "\(checked)")
        #expect(!checked.stdout.contains("unexpected"), "\(checked)")
    }
}
