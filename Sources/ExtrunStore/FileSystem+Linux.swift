import ExtrunSystem
import Foundation

#if canImport(Glibc)
import Glibc
#endif
#if canImport(CExtrunStoreShims)
import CExtrunStoreShims
#endif

/// Linux ABI constants Glibc does not export to Swift (they need _GNU_SOURCE or linux/openat2.h).
enum LinuxABI {
    static let O_PATH: Int32 = 0o10000000
    static let AT_EMPTY_PATH: Int32 = 0x1000
    static let RENAME_NOREPLACE: UInt32 = 1
    static let RESOLVE_NO_XDEV: UInt64 = 0x01
    static let RESOLVE_NO_MAGICLINKS: UInt64 = 0x02
    static let RESOLVE_NO_SYMLINKS: UInt64 = 0x04
    static let RESOLVE_BENEATH: UInt64 = 0x08
    /// The openat2 system call number; the same on every architecture (the unified table from 424 on).
    static let SYS_openat2: CLong = 437
}

/// `struct open_how` from linux/openat2.h.
struct OpenHow {
    var flags: UInt64
    var mode: UInt64
    var resolve: UInt64
}

/// The store's shims: system calls Swift cannot reach directly, `openat2` (only
/// through the variadic `syscall(2)`, which Swift does not import), `renameat2` and
/// `statx` (declared only under _GNU_SOURCE). They retry EINTR and name the call in
/// their errors through ExtrunSystem's `SystemCall`, as every other call does.
///
/// With the CExtrunStoreShims target in the package, they go through its C
/// wrappers. Without it, they are looked up with dlsym and called through
/// fixed-argument C function pointers: glibc's `syscall` is an assembly
/// trampoline that just moves integer registers, so a fixed-argument call of
/// integer/pointer arguments is ABI-compatible on x86_64 and aarch64.
enum StoreShims {
    #if !canImport(CExtrunStoreShims)
    private typealias SyscallOpenat2 = @convention(c) (CLong, Int32, UnsafePointer<CChar>, UnsafeRawPointer, Int) -> CLong
    private typealias Renameat2 = @convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32
    private typealias Statx = @convention(c) (Int32, UnsafePointer<CChar>, Int32, UInt32, UnsafeMutableRawPointer) -> Int32

    private static let syscallFunction: SyscallOpenat2? = dlsym(dlopen(nil, RTLD_NOW), "syscall").map {
        unsafeBitCast($0, to: SyscallOpenat2.self)
    }
    private static let renameat2Function: Renameat2? = dlsym(dlopen(nil, RTLD_NOW), "renameat2").map {
        unsafeBitCast($0, to: Renameat2.self)
    }
    private static let statxFunction: Statx? = dlsym(dlopen(nil, RTLD_NOW), "statx").map {
        unsafeBitCast($0, to: Statx.self)
    }
    #endif

    /// `openat2(dirfd, path, how)`: a new descriptor, or the errno.
    static func openat2(_ dirfd: Int32, _ path: String, flags: Int32, mode: mode_t = 0, resolve: UInt64) -> Result<Int32, SystemCallError> {
        var how = OpenHow(flags: UInt64(UInt32(bitPattern: flags | O_CLOEXEC)), mode: UInt64(mode), resolve: resolve)
        // The kernel answers EAGAIN when a rename raced with a RESOLVE_BENEATH
        // lookup (it refuses rather than risk an escape); trying again is the documented answer.
        for _ in 0..<64 {
            do throws(SystemCallError) {
                let fd = try SystemCall.retrying("openat2") { () -> CLong in
                    path.withCString { cPath in
                        withUnsafePointer(to: &how) { howPointer in
                            #if canImport(CExtrunStoreShims)
                            CLong(extrun_openat2(dirfd, cPath, UnsafeMutableRawPointer(mutating: howPointer), MemoryLayout<OpenHow>.size))
                            #else
                            guard let call = syscallFunction else {
                                errno = ENOSYS
                                return -1
                            }
                            return call(LinuxABI.SYS_openat2, dirfd, cPath, howPointer, MemoryLayout<OpenHow>.size)
                            #endif
                        }
                    }
                }
                return .success(Int32(fd))
            } catch {
                if error.errno != .resourceTemporarilyUnavailable { return .failure(error) }
            }
        }
        return .failure(SystemCallError(call: "openat2", code: EAGAIN))
    }

    /// `renameat2(olddirfd, oldname, newdirfd, newname, flags)`.
    static func renameat2(_ fromDir: Int32, _ fromName: String, _ toDir: Int32, _ toName: String, flags: UInt32) throws(SystemCallError) {
        _ = try SystemCall.retrying("renameat2") { () -> Int32 in
            fromName.withCString { from in
                toName.withCString { to in
                    #if canImport(CExtrunStoreShims)
                    extrun_renameat2(fromDir, from, toDir, to, flags)
                    #else
                    guard let call = renameat2Function else {
                        errno = ENOSYS
                        return -1
                    }
                    return call(fromDir, from, toDir, to, flags)
                    #endif
                }
            }
        }
    }

    /// `statx(dirfd, path, flags, mask, buffer)` into a 256-byte `struct statx`.
    static func statx(_ dirfd: Int32, _ path: String, flags: Int32, into buffer: UnsafeMutableRawPointer) throws(SystemCallError) {
        let mask: UInt32 = 0xFFF  // STATX_BASIC_STATS | STATX_BTIME
        _ = try SystemCall.retrying("statx") { () -> Int32 in
            path.withCString { cPath in
                #if canImport(CExtrunStoreShims)
                extrun_statx(dirfd, cPath, flags, mask, buffer)
                #else
                guard let call = statxFunction else {
                    errno = ENOSYS
                    return -1
                }
                return call(dirfd, cPath, flags, mask, buffer)
                #endif
            }
        }
    }
}

/// What the store needs to know about a file, from statx(2).
struct FileStatus {
    var device: UInt64
    var inode: UInt64
    /// Nanoseconds since 1970 when the file was created, if the file system records it.
    var birth: Int64?
    /// Type and permission bits (`st_mode`).
    var mode: UInt32
    var size: Int64
    var modified: Date

    var isDirectory: Bool { mode & UInt32(S_IFMT) == UInt32(S_IFDIR) }
    var isRegularFile: Bool { mode & UInt32(S_IFMT) == UInt32(S_IFREG) }
    var isSymlink: Bool { mode & UInt32(S_IFMT) == UInt32(S_IFLNK) }
    var permissions: mode_t { mode_t(mode & 0o7777) }

    /// Reads a `struct statx` (linux/stat.h offsets).
    init(statx buffer: UnsafeRawPointer) {
        func u32(_ offset: Int) -> UInt32 { buffer.loadUnaligned(fromByteOffset: offset, as: UInt32.self) }
        func u64(_ offset: Int) -> UInt64 { buffer.loadUnaligned(fromByteOffset: offset, as: UInt64.self) }
        func timestamp(_ offset: Int) -> (Int64, UInt32) {
            (buffer.loadUnaligned(fromByteOffset: offset, as: Int64.self), u32(offset + 8))
        }
        let returned = u32(0)
        mode = UInt32(buffer.loadUnaligned(fromByteOffset: 28, as: UInt16.self))
        inode = u64(32)
        size = Int64(bitPattern: u64(40))
        let (birthSeconds, birthNanoseconds) = timestamp(80)
        birth = returned & 0x800 != 0 ? birthSeconds &* 1_000_000_000 &+ Int64(birthNanoseconds) : nil
        let (seconds, nanoseconds) = timestamp(112)
        modified = Date(timeIntervalSince1970: TimeInterval(seconds) + TimeInterval(nanoseconds) / 1_000_000_000)
        // gnu_dev_makedev(major, minor): the same number as st_dev.
        let major = UInt64(u32(136))
        let minor = UInt64(u32(140))
        device = ((major & 0xFFFF_F000) << 32) | ((major & 0xFFF) << 8) | ((minor & 0xFFFF_FF00) << 12) | (minor & 0xFF)
    }
}

/// Small wrappers over the descriptor-based calls the store uses.
package enum FileOps {
    static func check(_ result: Int32, _ call: String) throws(SystemCallError) {
        if result < 0 { throw SystemCallError(call: call, code: errno) }
    }

    static func open(_ path: String, _ flags: Int32, mode: mode_t = 0) throws(SystemCallError) -> Int32 {
        try SystemCall.retrying("open") { Glibc.open(path, flags | O_CLOEXEC, mode) }
    }

    static func openat(_ dirfd: Int32, _ name: String, _ flags: Int32, mode: mode_t = 0) throws(SystemCallError) -> Int32 {
        try SystemCall.retrying("openat") { Glibc.openat(dirfd, name, flags | O_CLOEXEC, mode) }
    }

    static func fstat(_ fd: Int32) throws(SystemCallError) -> stat {
        var info = stat()
        try check(Glibc.fstat(fd, &info), "fstat")
        return info
    }

    /// The status of an open file (an O_PATH descriptor will do).
    static func status(_ fd: Int32) throws(SystemCallError) -> FileStatus {
        try withUnsafeTemporaryAllocation(byteCount: 256, alignment: 8) { (buffer) throws(SystemCallError) -> FileStatus in
            guard let base = buffer.baseAddress else { throw SystemCallError(call: "statx", code: ENOMEM) }
            try StoreShims.statx(fd, "", flags: LinuxABI.AT_EMPTY_PATH, into: base)
            return FileStatus(statx: base)
        }
    }

    /// The status of `name` in the directory `dirfd`, not following a symlink; nil if nothing is there.
    static func status(in dirfd: Int32, _ name: String) throws(SystemCallError) -> FileStatus? {
        try withUnsafeTemporaryAllocation(byteCount: 256, alignment: 8) { (buffer) throws(SystemCallError) -> FileStatus? in
            guard let base = buffer.baseAddress else { throw SystemCallError(call: "statx", code: ENOMEM) }
            do throws(SystemCallError) {
                try StoreShims.statx(dirfd, name, flags: AT_SYMLINK_NOFOLLOW, into: base)
            } catch {
                if error.code == ENOENT { return nil }
                throw error
            }
            return FileStatus(statx: base)
        }
    }

    static func fsync(_ fd: Int32) throws(SystemCallError) {
        _ = try SystemCall.retrying("fsync") { Glibc.fsync(fd) }
    }

    static func writeAll(_ fd: Int32, _ data: Data) throws(SystemCallError) {
        try SystemCall.writeAll(fd, data)
    }

    /// Reads to the end of the file, refusing more than `limit` bytes (nil means over the limit).
    /// `expectedSize` (the size `fstat` gave) sizes the read buffer: a key file of a few
    /// hundred bytes, read on every donation until it has settled, zeroed 64 KiB each time.
    static func readAll(_ fd: Int32, limit: Int, expectedSize: Int? = nil) throws(SystemCallError) -> Data? {
        var data = Data()
        let chunk = expectedSize.map { min(1 << 16, max(512, $0 + 1)) } ?? 1 << 16
        var buffer = [UInt8](repeating: 0, count: chunk)
        while true {
            let count = try SystemCall.read(fd, into: &buffer)
            if count == 0 { return data }
            if data.count + count > limit { return nil }
            data.append(contentsOf: buffer[0..<count])
        }
    }

    /// A random name for a temporary file: `.<prefix>-<16 hex digits>.tmp`.
    static func temporaryName(_ prefix: String) -> String {
        ".\(prefix)-\(String(UInt64.random(in: 0...UInt64.max), radix: 16)).tmp"
    }

    /// Writes `data` as `name` in the directory `dirfd` atomically: a new temporary
    /// file in the same directory, fsync, rename over `name` (or next to it if
    /// `replace` is false: EEXIST when `name` exists), fsync of the directory.
    /// The directory must be open for reading (fsync needs a real descriptor).
    /// The new file is created with `createMode` (the umask applies), then
    /// set to `exactMode` if given (the umask does not apply). Returns its status.
    @discardableResult
    static func writeAtomically(
        dirfd: Int32, name: String, data: Data, createMode: mode_t, exactMode: mode_t?, replace: Bool
    ) throws(SystemCallError) -> FileStatus {
        let temporary = temporaryName("extrun-write")
        let fd = try openat(dirfd, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: createMode)
        var renamed = false
        defer {
            Glibc.close(fd)
            if !renamed { Glibc.unlinkat(dirfd, temporary, 0) }
        }
        if let exactMode { try check(Glibc.fchmod(fd, exactMode), "fchmod") }
        try writeAll(fd, data)
        try fsync(fd)
        let info = try status(fd)
        if replace {
            try check(Glibc.renameat(dirfd, temporary, dirfd, name), "renameat")
        } else {
            try StoreShims.renameat2(dirfd, temporary, dirfd, name, flags: LinuxABI.RENAME_NOREPLACE)
        }
        renamed = true
        try fsync(dirfd)
        return info
    }

    /// Creates the directory at `path` with mode 0700 (and its missing parents), or checks it exists.
    package static func makePrivateDirectory(_ path: String) throws(SystemCallError) {
        var info = stat()
        if stat(path, &info) == 0 {
            if info.st_mode & S_IFMT != S_IFDIR { throw SystemCallError(call: "mkdir", code: ENOTDIR) }
            return
        }
        if errno != ENOENT { throw SystemCallError(call: "stat", code: errno) }
        let parent = (path as NSString).deletingLastPathComponent
        if !parent.isEmpty, parent != path { try makePrivateDirectory(parent) }
        if Glibc.mkdir(path, 0o700) != 0 {
            if errno == EEXIST { return }
            throw SystemCallError(call: "mkdir", code: errno)
        }
        try check(Glibc.chmod(path, 0o700), "chmod")
    }

    /// `mkdirat(dirfd, name, 0700)` unless it exists; then an open descriptor of it (O_RDONLY|O_DIRECTORY, no symlinks).
    static func openPrivateDirectory(in dirfd: Int32, _ name: String) throws(SystemCallError) -> Int32 {
        if Glibc.mkdirat(dirfd, name, 0o700) == 0 {
            let fd = try openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
            try check(Glibc.fchmod(fd, 0o700), "fchmod")
            try? fsync(dirfd)
            return fd
        }
        if errno != EEXIST { throw SystemCallError(call: "mkdirat", code: errno) }
        return try openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW)
    }
}

extension stat {
    var isDirectory: Bool { st_mode & S_IFMT == S_IFDIR }
    var isRegularFile: Bool { st_mode & S_IFMT == S_IFREG }
}

/// Renames for callers outside the store (the plugin installer): a folder moved into a
/// place that must be empty, or two folders exchanged in one step, so that a reader sees
/// the old or the new one and never neither.
public enum AtomicRename {
    /// `rename(from, to)` that fails with EEXIST instead of replacing `to`. Nil, or the errno's text.
    public static func moveNoReplace(_ from: String, _ to: String) -> String? {
        do {
            try StoreShims.renameat2(AT_FDCWD, from, AT_FDCWD, to, flags: LinuxABI.RENAME_NOREPLACE)
            return nil
        } catch {
            return error.reason
        }
    }

    /// Exchanges `a` and `b` (both must exist) atomically (`RENAME_EXCHANGE`). Nil, or the errno's text.
    public static func exchange(_ a: String, _ b: String) -> String? {
        do {
            try StoreShims.renameat2(AT_FDCWD, a, AT_FDCWD, b, flags: 2)
            return nil
        } catch {
            return error.reason
        }
    }
}
