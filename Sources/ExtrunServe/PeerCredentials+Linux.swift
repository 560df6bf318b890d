import NIOCore

#if canImport(Glibc)
import Glibc
#endif

/// `struct ucred` of SO_PEERCRED (Glibc shows it only with _GNU_SOURCE): the same layout.
/// Who is at the other end of a Unix socket: the caller's pid, uid and gid, as the kernel saw them at connect.
struct PeerCredentials: Sendable {
    var pid: Int32 = 0
    var uid: UInt32 = 0
    var gid: UInt32 = 0

    /// The socket option that reads them (`getsockopt(fd, SOL_SOCKET, SO_PEERCRED)`).
    static let level = NIOBSDSocket.OptionLevel(rawValue: SOL_SOCKET)
    static let option = NIOBSDSocket.Option(rawValue: SO_PEERCRED)
}
