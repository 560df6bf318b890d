import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Descriptors of `store.sqlite` that extrun opens itself (to check the header
/// before SQLite touches the file), kept open for the life of the process.
///
/// Closing *any* descriptor of a file drops every POSIX record lock the process
/// holds on that file (fcntl(2)), SQLite's included. A connection of this process
/// (another `Store`, say the one answering a plugin's requests while the donation
/// log is opened on another thread) would lose its lock on the database; another
/// process, finding no other user, could then checkpoint and remove the WAL under
/// it, and writes would be lost. So such a descriptor is opened once per file and
/// never closed: a handful of descriptors per process, at most.
enum StoreFileDescriptors {
    private static let open = Mutex<[String: Int32]>([:])

    /// A read-only descriptor of the file `path` names now (a file that replaced an
    /// earlier one at that path gets a descriptor of its own).
    static func descriptor(for path: String) throws(SystemCallError) -> Int32 {
        try open.withLock { (open) throws(SystemCallError) -> Int32 in
            if let fd = open[path], let known = try? FileOps.fstat(fd) {
                var current = stat()
                if stat(path, &current) == 0, current.st_dev == known.st_dev, current.st_ino == known.st_ino {
                    return fd
                }
            }
            let fd = try FileOps.open(path, O_RDONLY)
            open[path] = fd
            return fd
        }
    }
}
