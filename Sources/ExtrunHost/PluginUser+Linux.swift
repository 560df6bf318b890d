import ExtrunProtocol
import ExtrunStore
import ExtrunSystem
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Who a plugin runs as. When the host is root, a plugin never is: it runs
/// under an unprivileged uid and gid with no supplementary groups (the
/// policy's `pluginUser`; by default `extrun-plugin`, else `nobody`). When the
/// host is not root, the plugin keeps the host's uid and relies on the
/// namespaces and the filter (docs/sandbox.md, "Privileges"). Not to be confused
/// with ExtrunProtocol's `PluginIdentity`, the id and version a plugin gives in its handshake.
struct PluginCredentials: Sendable, Equatable {
    /// Whether the plugin's process changes uid and gid (the host is root).
    var dropsPrivileges: Bool
    var uid: uid_t
    var gid: gid_t
    /// The user's name, when it has one.
    var name: String?
    /// A uid of the run's own, held until the run's process is gone (see `PluginUidLease`).
    var lease: PluginUidLease? = nil

    /// The default users, in order, when the policy names none.
    static let defaultUsers = ["extrun-plugin", "nobody"]

    var description: String {
        let who = lease != nil ? "uid \(uid), gid \(gid), of this run alone (pluginUidRange: no pid namespace)" : "\(name.map { "\($0) " } ?? "")(uid \(uid), gid \(gid))"
        return dropsPrivileges
            ? "\(who), no supplementary groups; the host runs as root"
            : "the host's user \(who): the host is not root, so there is no other uid to give it"
    }

    /// Refuses, before anything is started, a plugin whose executable the plugin's
    /// user cannot reach, read and execute (plugins are often installed by root
    /// in folders only root may enter): a clear error naming the folder and the fix,
    /// rather than an interpreter's "Permission denied" from inside the sandbox.
    ///
    /// With a mount namespace, a folder above the plugin's directory that the
    /// user cannot enter (`/root` for plugins in root's `$EXTRUN_HOME/plugins`)
    /// is covered by a tmpfs with the plugin's directory bound back (see
    /// `PathAccess.coverableAncestor`), so only the plugin's directory and what
    /// is below it must be reachable.
    func checkAccess(toExecutable executable: URL, pluginDirectory: URL, mountNamespace: Bool, of pluginID: String) throws(HostError) {
        guard dropsPrivileges else { return }
        // Where the plugin finds its folder (through a link in it, if it is one) and its executable.
        let directory = SandboxSettings.logical(pluginDirectory.path) ?? pluginDirectory.path
        let given = executable.standardizedFileURL.path
        let inside = pluginDirectory.standardizedFileURL.path + "/"
        let path = given.hasPrefix(inside) ? directory + "/" + given.dropFirst(inside.count) : SandboxSettings.resolved(given) ?? given
        let covered = mountNamespace ? PathAccess.coverableAncestor(of: directory, identity: self) : nil
        if let blocked = PathAccess.firstBlocked(path, uid: uid, gid: gid, wanted: "rx", trustingAncestorsOf: covered == nil ? nil : directory) {
            throw HostError(
                .configurationError,
                "\(pluginID) cannot be started as the plugin's user: \(PathAccess.explain(blocked, identity: self))",
                details: ["executable": .string(executable.path), "file": .string(blocked.path)])
        }
    }

    static func resolve(policy: SandboxPolicy, hostIsRoot: Bool = geteuid() == 0) throws(HostError) -> PluginCredentials {
        guard hostIsRoot else {
            return PluginCredentials(dropsPrivileges: false, uid: geteuid(), gid: getegid(), name: PluginUser.name(of: geteuid()))
        }
        if !policy.namespaces.pid && policy.pluginUidRange.count > 0 {
            let lease = try PluginUidLease.take(from: policy.pluginUidRange)
            return PluginCredentials(dropsPrivileges: true, uid: lease.uid, gid: lease.uid, name: nil, lease: lease)
        }
        if let configured = policy.pluginUser {
            guard let identity = PluginUser.lookUp(configured) else {
                throw HostError(
                    .configurationError,
                    "the policy's pluginUser '\(configured)' is not a user on this machine; create it (useradd --system --user-group --no-create-home --shell /usr/sbin/nologin \(configured)) or name another",
                    details: ["field": "pluginUser"])
            }
            return identity
        }
        for candidate in defaultUsers {
            if let identity = PluginUser.lookUp(candidate) { return identity }
        }
        throw HostError(
            .configurationError,
            "the host runs as root and plugins never do, but neither \(defaultUsers.joined(separator: " nor ")) exists on this machine: run Scripts/bootstrap (it creates extrun-plugin) or set pluginUser in the policy",
            details: ["field": "pluginUser"])
    }
}

enum PluginUser {
    /// What is wrong with a `pluginUser` value, or nil.
    static func problem(with value: String) -> String? {
        if value.isEmpty { return "must not be empty" }
        let parts = value.split(separator: ":", omittingEmptySubsequences: false)
        if parts.count > 2 { return "'\(value)' is neither a user name, a uid nor uid:gid" }
        if parts.allSatisfy({ UInt32($0) != nil }) {
            if parts.contains(where: { UInt32($0) == 0 }) { return "'\(value)' is root; plugins never run as root" }
            return nil
        }
        if parts.count == 2 { return "'\(value)': uid:gid must be two numbers" }
        if value == "root" { return "'root': plugins never run as root" }
        return nil
    }

    /// A user name, `uid` or `uid:gid`, resolved; nil if there is no such user (or it is root).
    static func lookUp(_ value: String) -> PluginCredentials? {
        guard problem(with: value) == nil else { return nil }
        let parts = value.split(separator: ":")
        if let uid = UInt32(parts[0]) {
            let entry = passwordEntry(uid: uid)
            let gid = parts.count == 2 ? UInt32(parts[1]) : entry?.gid
            guard let gid, uid != 0, gid != 0 else { return nil }
            return PluginCredentials(dropsPrivileges: true, uid: uid, gid: gid, name: entry?.name)
        }
        guard let entry = passwordEntry(name: value), entry.uid != 0, entry.gid != 0 else { return nil }
        return PluginCredentials(dropsPrivileges: true, uid: entry.uid, gid: entry.gid, name: value)
    }

    static func name(of uid: uid_t) -> String? { passwordEntry(uid: uid)?.name }

    private static func passwordEntry(name: String) -> (name: String, uid: uid_t, gid: gid_t)? {
        passwordEntry { String(cString: $0.pw_name) == name }
    }

    private static func passwordEntry(uid: uid_t) -> (name: String, uid: uid_t, gid: gid_t)? {
        passwordEntry { $0.pw_uid == uid }
    }

    /// The first entry of /etc/passwd that `matches`, read with `fgetpwent_r` (the file
    /// itself, not NSS: the CLI is a static executable, and glibc's getpwnam_r would load
    /// NSS modules of the machine's glibc at run time, which the linker warns of). The
    /// plugin user is a local user: `useradd` puts it there.
    private static func passwordEntry(_ matches: (passwd) -> Bool) -> (name: String, uid: uid_t, gid: gid_t)? {
        guard let file = fopen("/etc/passwd", "re") else { return nil }
        defer { fclose(file) }
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        return buffer.withUnsafeMutableBufferPointer { buffer -> (name: String, uid: uid_t, gid: gid_t)? in
            guard let base = buffer.baseAddress else { return nil }
            while fgetpwent_r(file, &entry, base, buffer.count, &result) == 0, result != nil {
                guard entry.pw_name != nil, matches(entry) else { continue }
                return (String(cString: entry.pw_name), entry.pw_uid, entry.pw_gid)
            }
            return nil
        }
    }
}

/// Whether a user (by uid and gid, without supplementary groups) can reach a
/// path: search permission on every folder down to it, and the access wanted
/// on the path itself. By mode bits (ACLs are not read); for error messages.
enum PathAccess {
    struct Blocked: Equatable {
        var path: String
        var mode: mode_t
        var owner: uid_t
        var wanted: String
    }

    /// The first component that stops `uid`/`gid`, or nil when nothing does.
    /// `wanted`: "r", "x", "rx" or "wx" for the path itself. Folders above
    /// `trusted` are not checked (the sandbox replaces them).
    static func firstBlocked(_ path: String, uid: uid_t, gid: gid_t, wanted: String, trustingAncestorsOf trusted: String? = nil) -> Blocked? {
        let components = path.split(separator: "/").map(String.init)
        var current = ""
        for (index, component) in components.enumerated() {
            current += "/" + component
            if let trusted, trusted.hasPrefix(current + "/") { continue }
            var info = stat()
            guard stat(current, &info) == 0 else { return nil }
            let isLast = index == components.count - 1
            let need = isLast ? wanted : "x"
            let bits = permissionBits(info, uid: uid, gid: gid)
            for letter in need {
                let bit: mode_t = letter == "r" ? 4 : letter == "w" ? 2 : 1
                if bits & bit == 0 { return Blocked(path: current, mode: info.st_mode & 0o7777, owner: info.st_uid, wanted: isLast ? need : "x") }
            }
        }
        return nil
    }

    /// The outermost folder above `directory` (resolved) that `identity` cannot
    /// enter, when the sandbox may cover it with a tmpfs and bind `directory`
    /// back: not `/` and nothing holding the system's programs (`/usr`).
    static func coverableAncestor(of directory: String, identity: PluginCredentials) -> String? {
        guard identity.dropsPrivileges,
            let blocked = firstBlocked(directory, uid: identity.uid, gid: identity.gid, wanted: "x"),
            directory.hasPrefix(blocked.path + "/"), blocked.path != "/", !"/usr/bin".hasPrefix(blocked.path + "/")
        else { return nil }
        return blocked.path
    }

    private static func permissionBits(_ info: stat, uid: uid_t, gid: gid_t) -> mode_t {
        if info.st_uid == uid { return (info.st_mode >> 6) & 7 }
        if info.st_gid == gid { return (info.st_mode >> 3) & 7 }
        return info.st_mode & 7
    }

    /// "/a/b has mode 700 and belongs to uid 0, so extrun-plugin (uid 999) cannot enter it"
    static func explain(_ blocked: Blocked, identity: PluginCredentials) -> String {
        let who = "\(identity.name ?? "uid \(identity.uid)") (uid \(identity.uid))"
        let verb = blocked.wanted == "x" ? "enter" : blocked.wanted.contains("x") ? "execute" : blocked.wanted.contains("w") ? "write into" : "read"
        let fix = blocked.wanted == "x" ? "chmod o+x '\(blocked.path)'" : "chmod o+\(blocked.wanted) '\(blocked.path)'"
        return "\(blocked.path) has mode \(String(blocked.mode, radix: 8)) and belongs to uid \(blocked.owner), so the plugin's user \(who) cannot \(verb) it (fix: \(fix), or move it)"
    }
}

/// Files only the host's user may read or write (the policy file).
enum PrivateFile {
    static func check(_ path: String, what: String) throws(HostError) {
        var info = stat()
        // The file itself (a link to it is fine; what it holds is what matters).
        guard stat(path, &info) == 0 else {
            throw HostError(.configurationError, "cannot read \(what) \(path): \(SystemCall.lastReason)", details: ["file": .string(path)])
        }
        let mode = info.st_mode & 0o7777
        if info.st_uid != geteuid() {
            throw HostError(
                .configurationError,
                "\(what) \(path) belongs to uid \(info.st_uid), not to the host's user (uid \(geteuid())): only the host's user may control it; fix: chown \(geteuid()) '\(path)' && chmod 600 '\(path)'",
                details: ["file": .string(path), "problem": "insecurePermissions"])
        }
        if mode & 0o077 != 0 {
            throw HostError(
                .configurationError,
                "\(what) \(path) has mode \(String(mode, radix: 8)): others may read or change it, and it must be readable only by the host's user; fix: chmod 600 '\(path)'",
                details: ["file": .string(path), "problem": "insecurePermissions"])
        }
    }
}

/// The start-of-run check of `$EXTRUN_HOME`: the store and the keys readable
/// only by the host's user (ExtrunStore's `StorePermissions`), as a host error.
enum HomeProtection {
    /// Makes the home (mode 0700, as the store would) before a plugin starts, so
    /// that the mount namespace has it to cover: a home the host made during the
    /// run (a plugin's first global) would otherwise be in plain view. Best effort:
    /// where the host cannot make it, it cannot put anything in it either.
    static func makeIfMissing(_ home: URL) {
        guard !FileManager.default.fileExists(atPath: home.path) else { return }
        try? FileManager.default.createDirectory(at: home, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
    }

    static func check(home: URL) throws(HostError) {
        do {
            try StorePermissions.check(home: home.path)
            try StorePermissions.checkContainers(home: home.path)
        } catch let error as StoreError {
            throw HostError(.configurationError, from: error, keepingKindAs: "problem")
        } catch {
            throw HostError(.internalError, "cannot check \(home.path): \(error)")
        }
    }
}

/// A uid of `pluginUidRange` held by one run: an exclusive lock (`flock`) on
/// `/run/extrun/uids/<uid>`, which every root host on the machine takes before it
/// uses that uid, released (and the file removed) when the run's process is gone;
/// a host that dies leaves the file, unlocked.
final class PluginUidLease: Sendable, Equatable {
    let uid: uid_t
    private let fd: Int32

    static let directory = "/run/extrun/uids"

    private init(uid: uid_t, fd: Int32) {
        self.uid = uid
        self.fd = fd
    }

    /// The lock file goes while still locked: a host that opened it meanwhile finds, once it
    /// has the lock, that the path no longer names its file, and tries again (`take`).
    deinit {
        unlink("\(Self.directory)/\(uid)")
        close(fd)
    }

    static func == (a: PluginUidLease, b: PluginUidLease) -> Bool { a === b }

    static func take(from range: SandboxPolicy.UidRange) throws(HostError) -> PluginUidLease {
        for folder in ["/run/extrun", directory] where mkdir(folder, 0o700) != 0 && errno != EEXIST {
            throw HostError(.internalError, "cannot make \(folder) for the plugins' uids: \(SystemCall.lastReason)")
        }
        let start = UInt32.random(in: 0..<range.count)
        for step in 0..<min(range.count, 4096) {
            let uid = range.first + (start &+ step) % range.count
            let fd = open("\(directory)/\(uid)", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
            guard fd >= 0 else { continue }
            var held = stat()
            var named = stat()
            if flock(fd, LOCK_EX | LOCK_NB) == 0, fstat(fd, &held) == 0, stat("\(directory)/\(uid)", &named) == 0,
                held.st_ino == named.st_ino, held.st_dev == named.st_dev
            {
                return PluginUidLease(uid: uid, fd: fd)
            }
            close(fd)
        }
        throw HostError(
            .internalError, "no uid of pluginUidRange (\(range.first), \(range.count) uids) is free: that many runs are going on at once",
            details: ["field": "pluginUidRange"])
    }
}
