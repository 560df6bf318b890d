import ExtrunSystem
import Foundation
import NIOConcurrencyHelpers

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
    /// The file a descriptor is shared for: its device and inode, so that two spellings
    /// of one path (a link to the home) share it too.
    struct FileKey: Hashable, Sendable {
        var device: UInt64
        var inode: UInt64
    }

    private struct Entry {
        var fd: Int32
        var users: Int
    }

    private static let open = NIOLockedValueBox<[FileKey: Entry]>([:])

    /// A read-only descriptor of the file `path` names now, for one more user; `release`
    /// its key once that user's SQLite connection is closed.
    static func acquire(_ path: String) throws(SystemCallError) -> (fd: Int32, key: FileKey) {
        try open.withLockedValue { (open) -> Result<(fd: Int32, key: FileKey), SystemCallError> in
            Result { () throws(SystemCallError) in try acquire(path, in: &open) }
        }.get()
    }

    private static func acquire(_ path: String, in open: inout [FileKey: Entry]) throws(SystemCallError) -> (fd: Int32, key: FileKey) {
        var named = stat()
        if stat(path, &named) == 0 {
            let key = FileKey(device: UInt64(named.st_dev), inode: UInt64(named.st_ino))
            if var entry = open[key] {
                entry.users += 1
                open[key] = entry
                return (entry.fd, key)
            }
        }
        let fd = try FileOps.open(path, O_RDONLY)
        guard let info = try? FileOps.fstat(fd) else { return (fd, FileKey(device: 0, inode: UInt64(UInt32(bitPattern: fd)))) }
        let key = FileKey(device: UInt64(info.st_dev), inode: UInt64(info.st_ino))
        if var entry = open[key] {
            // The file was replaced under the path between stat and open, by one that is
            // open here already: this descriptor must not be closed either; it stays.
            entry.users += 1
            open[key] = entry
            return (entry.fd, key)
        }
        open[key] = Entry(fd: fd, users: 1)
        return (fd, key)
    }

    /// One user less; the last one closes the descriptor.
    static func release(_ key: FileKey) {
        open.withLockedValue { open in
            guard var entry = open[key] else { return }
            entry.users -= 1
            if entry.users > 0 {
                open[key] = entry
            } else {
                open[key] = nil
                close(entry.fd)
            }
        }
    }
}
