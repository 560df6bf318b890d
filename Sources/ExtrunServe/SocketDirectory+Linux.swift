/// What `SocketDirectory` takes from Linux: an O_PATH descriptor for each directory it
/// walks, and the socket's path through the open directory in /proc/self/fd.
extension SocketDirectory {
    /// The path the kernel resolves through the open directory (bind, connect).
    var pinnedPath: String { "/proc/self/fd/\(descriptor)/\(name)" }

    /// O_PATH (Glibc's module leaves it out without _GNU_SOURCE): a descriptor that only names the directory.
    static let pathOnly: Int32 = 0o10000000
}
