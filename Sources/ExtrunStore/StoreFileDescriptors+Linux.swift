import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Descriptors of `store.sqlite` that extrun opens itself (to check the header
/// before SQLite touches the file), kept open while any `StoreDatabase` of this
/// process has the file open.
///
/// Closing *any* descriptor of a file drops every POSIX record lock the process
/// holds on that file (fcntl(2)), SQLite's included. A connection of this process
/// (another `Store`, say the one answering a plugin's requests while the donation
/// log is opened on another thread) would lose its lock on the database; another
/// process, finding no other user, could then checkpoint and remove the WAL under
/// it, and writes would be lost. So the descriptor is shared by every store of the
/// process on that file and closed only after the last one has closed its connection.
enum StoreFileDescriptors {
    private struct Entry {
        var fd: Int32
        var users: Int
    }

    private static let open = Mutex<[String: Entry]>([:])

    /// A read-only descriptor of the file `path` names now, for one more user; `release` it
    /// once that user's SQLite connection is closed.
    static func acquire(_ path: String) throws(SystemCallError) -> Int32 {
        try open.withLock { (open) throws(SystemCallError) -> Int32 in
            if var entry = open[path], let known = try? FileOps.fstat(entry.fd) {
                var current = stat()
                if stat(path, &current) == 0, current.st_dev == known.st_dev, current.st_ino == known.st_ino {
                    entry.users += 1
                    open[path] = entry
                    return entry.fd
                }
                // Another file took its place. The old descriptor stays open (users of the
                // old file may hold locks on it); its entry is forgotten.
            }
            let fd = try FileOps.open(path, O_RDONLY)
            open[path] = Entry(fd: fd, users: 1)
            return fd
        }
    }

    /// One user less; the last one closes the descriptor.
    static func release(_ path: String, fd: Int32) {
        open.withLock { open in
            guard var entry = open[path], entry.fd == fd else { return }
            entry.users -= 1
            if entry.users > 0 {
                open[path] = entry
            } else {
                open[path] = nil
                close(fd)
            }
        }
    }
}
