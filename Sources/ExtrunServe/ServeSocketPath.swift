import ExtrunHost
import ExtrunSystem
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The directory of `--socket`, opened one component at a time without following a link
/// another user could have made (issue 30: a root service given a path through another
/// user's symbolic link created its socket where the link pointed). A link is followed only
/// when root or the service's own user owns it (as `/var/run -> /run`); a missing directory
/// is made (mode 700) under the one opened before it. The service then binds, removes and
/// checks its socket through this descriptor (`/proc/self/fd/N/NAME`, `unlinkat`), never
/// through the path again, so a component swapped after the walk changes nothing.
final class SocketDirectory: Sendable {
    let descriptor: Int32
    let name: String
    let path: String

    private init(descriptor: Int32, name: String, path: String) {
        self.descriptor = descriptor
        self.name = name
        self.path = path
    }

    deinit { close(descriptor) }

    static func open(_ path: String, owner: uid_t = geteuid()) throws(HostError) -> SocketDirectory {
        func fail(_ message: String, _ file: String) -> HostError {
            HostError(.configurationError, message, details: ["file": .string(file)])
        }
        let name = (path as NSString).lastPathComponent
        guard !name.isEmpty, name != ".", name != "..", !path.hasSuffix("/") else {
            throw fail("the socket path \(path) does not end in a file name", path)
        }
        let parent = (path as NSString).deletingLastPathComponent
        // The components still to walk (a trusted link's target is put in front of them).
        var pending: [Substring] = parent.split(separator: "/", omittingEmptySubsequences: true)
        var current = Glibc.open(parent.hasPrefix("/") || path.hasPrefix("/") ? "/" : ".", Self.pathOnly | O_DIRECTORY | O_CLOEXEC)
        guard current >= 0 else { throw fail("cannot open the socket's directory \(parent): \(SystemCall.lastReason)", parent) }
        var walked = path.hasPrefix("/") ? "" : "."
        var links = 0
        while !pending.isEmpty {
            let component = String(pending.removeFirst())
            if component == "." { continue }
            let here = walked + "/" + component
            var info = stat()
            if fstatat(current, component, &info, AT_SYMLINK_NOFOLLOW) != 0 {
                guard errno == ENOENT else {
                    close(current)
                    throw fail("cannot reach the socket's directory \(here): \(SystemCall.lastReason)", here)
                }
                guard mkdirat(current, component, 0o700) == 0 || errno == EEXIST else {
                    close(current)
                    throw fail("cannot create \(here) for the socket: \(SystemCall.lastReason)", here)
                }
                // Opened below like any other directory (a link put there meanwhile is checked).
                pending.insert(Substring(component), at: 0)
                links += 1
                guard links <= 40 else {
                    close(current)
                    throw fail("cannot create \(here) for the socket: it keeps changing", here)
                }
                continue
            }
            if (info.st_mode & S_IFMT) == S_IFLNK {
                guard info.st_uid == 0 || info.st_uid == owner else {
                    close(current)
                    throw fail(
                        "the socket path \(path) goes through \(here), a symbolic link owned by uid \(info.st_uid) (not root, not the service's user): the service does not follow it; name a path without it in --socket",
                        here)
                }
                links += 1
                var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
                let length = readlinkat(current, component, &target, target.count - 1)
                guard links <= 40, length > 0 else {
                    close(current)
                    throw fail("cannot follow the link \(here) on the socket's path: \(links > 40 ? "too many links" : SystemCall.lastReason)", here)
                }
                let text = String(decoding: target.prefix(length).map { UInt8(bitPattern: $0) }, as: UTF8.self)
                pending.insert(contentsOf: text.split(separator: "/", omittingEmptySubsequences: true), at: 0)
                if text.hasPrefix("/") {
                    close(current)
                    current = Glibc.open("/", Self.pathOnly | O_DIRECTORY | O_CLOEXEC)
                    walked = ""
                }
                continue
            }
            guard (info.st_mode & S_IFMT) == S_IFDIR else {
                close(current)
                throw fail("\(here) on the socket's path is not a directory", here)
            }
            let next = openat(current, component, Self.pathOnly | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            close(current)
            guard next >= 0 else { throw fail("cannot open \(here) on the socket's path: \(SystemCall.lastReason)", here) }
            current = next
            walked = component == ".." ? (walked as NSString).deletingLastPathComponent : here
        }
        return SocketDirectory(descriptor: current, name: name, path: path)
    }

    /// What is at the socket's name now (lstat through the directory), or nil.
    func status() -> stat? {
        var info = stat()
        return fstatat(descriptor, name, &info, AT_SYMLINK_NOFOLLOW) == 0 ? info : nil
    }

    func unlinkSocket() { unlinkat(descriptor, name, 0) }
}
