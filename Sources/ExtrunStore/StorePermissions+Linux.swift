import ExtrunProtocol
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The check made whenever the store is opened and at the start of every
/// `extrun handle`: what holds owners' secrets is readable only by the host's
/// user, so that a plugin (which never runs as that user when the host is
/// root) cannot open it even where a mount namespace does not hide it.
///
/// - the home must belong to the host's user and not be writable by group or others;
/// - `keys/` must belong to the host's user with no access for group or others (0700);
/// - every key file, `store.sqlite` and its `-wal` and `-shm` files must belong
///   to the host's user with no access for group or others (0600).
///
/// A violation is `insecurePermissions`, naming the file and the fix. Nothing
/// is changed: a store left readable by others may already have been read,
/// which a person should know about rather than have silently repaired.
public enum StorePermissions {
    public static func check(home: String) throws {
        try check(home: home, database: true)
    }

    private static func check(home: String, database: Bool) throws {
        var info = stat()
        // The folder itself (the home may be a link to it).
        guard stat(home, &info) == 0 else { return }  // not there yet: the store makes it 0700
        let me = geteuid()
        if info.st_uid != me {
            throw insecure(home, info, "the extrun home \(home) belongs to uid \(info.st_uid), not to you (uid \(me)); fix: chown \(me) '\(home)' && chmod 700 '\(home)'")
        }
        if info.st_mode & 0o022 != 0 {
            throw insecure(home, info, "the extrun home \(home) has mode \(octal(info)): others may replace the store or the keys in it; fix: chmod 700 '\(home)'")
        }
        let keys = home + "/keys"
        if lstat(keys, &info) == 0 {
            try requirePrivate(keys, info, what: "the keys folder", fix: "chmod 700")
            if let names = try? FileManager.default.contentsOfDirectory(atPath: keys) {
                for name in names where name.hasSuffix(".key") {
                    let path = keys + "/" + name
                    if lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG {
                        try requirePrivate(path, info, what: "key file", fix: "chmod 600")
                    }
                }
            }
        }
        // SQLite's -wal and -shm before SQLite opens (and possibly replaces) them;
        // store.sqlite itself after its header says it is an extrun store.
        try checkDatabase(home: home, suffixes: database ? ["", "-wal", "-shm"] : ["-wal", "-shm"])
    }

    /// `store.sqlite` and its `-wal` and `-shm` files only (the store checks them
    /// after it has made sure the file is an extrun store at all).
    public static func checkDatabase(home: String) throws {
        try checkDatabase(home: home, suffixes: ["", "-wal", "-shm"])
    }

    private static func checkDatabase(home: String, suffixes: [String]) throws {
        var info = stat()
        for suffix in suffixes {
            let path = home + "/store.sqlite" + suffix
            if lstat(path, &info) == 0 { try requirePrivate(path, info, what: "the store", fix: "chmod 600") }
        }
    }

    /// The owners' containers (`containers/<owner>/`): none may be open to group or
    /// others, so that where no mount namespace hides them, a plugin running under
    /// its own uid cannot read another owner's files. Checked by the host at the
    /// start of a run (the store itself never reads containers).
    public static func checkContainers(home: String) throws {
        let containers = home + "/containers"
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: containers) else { return }
        var info = stat()
        for name in names {
            let path = containers + "/" + name
            if lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR {
                try requirePrivate(path, info, what: "the container", fix: "chmod 700")
            }
        }
    }

    /// The home, the keys and SQLite's -wal and -shm (what the store checks before it opens the database).
    public static func checkHomeAndKeys(home: String) throws {
        try check(home: home, database: false)
    }

    private static func requirePrivate(_ path: String, _ info: stat, what: String, fix: String) throws {
        let me = geteuid()
        if info.st_uid != me {
            throw insecure(path, info, "\(what) \(path) belongs to uid \(info.st_uid), not to you (uid \(me)); fix: chown \(me) '\(path)' && \(fix) '\(path)'")
        }
        if info.st_mode & 0o077 != 0 {
            throw insecure(path, info, "\(what) \(path) has mode \(octal(info)): it is readable by others and must be readable only by you; fix: \(fix) '\(path)'")
        }
    }

    private static func octal(_ info: stat) -> String { String(info.st_mode & 0o7777, radix: 8) }

    private static func insecure(_ path: String, _ info: stat, _ message: String) -> StoreError {
        StoreError(.insecurePermissions, message, details: ["file": .string(path), "mode": .string(octal(info)), "ownerUid": .int(Int64(info.st_uid))])
    }
}
