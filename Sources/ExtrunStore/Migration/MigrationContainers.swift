import ExtrunProtocol
import ExtrunSystem
import Foundation

#if canImport(Glibc)
import Glibc
#endif

extension Store {
    /// `<home>/containers/<escaped owner>`: the owner's container, the folder
    /// for files that belong to the owner (its bookmarks may point into it).
    /// Nothing creates it but ops and `migrate` (docs/store.md, "Containers").
    public func containerDirectory(of owner: String) -> String {
        homePath + "/containers/" + Keystore.escape(owner)
    }
}

/// Rewrites bookmark paths from the old owner's container to the new owner's,
/// and copies what they point to (docs/migration.md, "Containers").
struct ContainerMap: Sendable {
    /// The old owner's container: as written (`<home>/containers/<old>`) and
    /// canonical (symlinks resolved), longest first.
    let sourceRoots: [String]
    /// The old owner's container as written (for reports).
    let sourceLiteral: String
    /// The old owner's container as files are read from it (canonical when it
    /// exists); nil for an import, whose files are on another machine.
    let sourceReadRoot: String?
    /// The new owner's container as written in bookmark `path`s.
    let targetRoot: String
    /// The new owner's container, canonical, for `lastKnownPath`.
    let targetCanonicalRoot: String

    static func canonical(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// `home/containers/<escaped owner>` resolved as far as it exists.
    static func canonicalContainer(home: String, owner: String) -> String {
        let literal = home + "/containers/" + Keystore.escape(owner)
        if let resolved = canonical(literal) { return resolved }
        if let containers = canonical(home + "/containers") { return containers + "/" + Keystore.escape(owner) }
        return (canonical(home) ?? home) + "/containers/" + Keystore.escape(owner)
    }

    init(sourceLiteral: String, sourceRoots: [String], sourceReadRoot: String?, targetRoot: String, targetCanonicalRoot: String) {
        self.sourceLiteral = sourceLiteral
        var roots: [String] = []
        for root in sourceRoots where !roots.contains(root) { roots.append(root) }
        self.sourceRoots = roots.sorted { $0.utf8.count > $1.utf8.count }
        self.sourceReadRoot = sourceReadRoot
        self.targetRoot = targetRoot
        self.targetCanonicalRoot = targetCanonicalRoot
    }

    /// For a migration within one store.
    static func local(store: Store, from: String, to: String) -> ContainerMap {
        let literal = store.containerDirectory(of: from)
        let canonical = canonicalContainer(home: store.homePath, owner: from)
        return ContainerMap(
            sourceLiteral: literal, sourceRoots: [literal, canonical], sourceReadRoot: canonical, targetRoot: store.containerDirectory(of: to),
            targetCanonicalRoot: canonicalContainer(home: store.homePath, owner: to))
    }

    /// The path relative to the old owner's container ("" for the container itself), or nil if it is outside.
    func relative(_ path: String) -> String? {
        for root in sourceRoots {
            if path == root { return "" }
            if path.hasPrefix(root + "/") { return String(path.dropFirst(root.utf8.count + 1)) }
        }
        return nil
    }

    static func join(_ root: String, _ relative: String) -> String {
        relative.isEmpty ? root : root + "/" + relative
    }
}

/// A copy that cannot be made without replacing something of the new owner's:
/// the item fails (it stays in the old owner), the run goes on.
struct CopyConflict: Error {
    var message: String
}

/// Copies files and folders from the old owner's container into the new
/// owner's, never replacing anything: each file is written as a temporary
/// file, fsynced and renamed into place with RENAME_NOREPLACE. Copying again
/// is harmless: a file already there with the same contents (a copy made by an
/// interrupted run) is accepted, anything else there is a `CopyConflict`.
struct ContainerCopier {
    static let temporaryPrefix = ".extrun-migrate-"
    /// Folders written into, to fsync before the batch that refers to them commits.
    var touchedFolders: Set<String> = []
    var files = 0
    var bytes: Int64 = 0

    /// Copies `source` (file, folder or symlink) to `destination`, creating
    /// the destination's missing parent folders (mode 0700) down from `root`.
    mutating func copy(_ source: String, to destination: String, root: String) throws {
        try makeFolders(root: root, upTo: (destination as NSString).deletingLastPathComponent)
        try copyItem(source, destination)
    }

    /// fsyncs every folder written into since the last call.
    mutating func syncFolders() throws {
        for folder in touchedFolders.sorted() {
            do {
                let fd = try FileOps.open(folder, O_RDONLY | O_DIRECTORY)
                defer { close(fd) }
                try FileOps.fsync(fd)
            } catch {
                throw StoreError(.ioError, "cannot sync \(folder): \(error.reason)", details: ["file": .string(folder)])
            }
        }
        touchedFolders.removeAll()
    }

    private static func ioError(_ path: String, _ error: SystemCallError) -> StoreError {
        StoreError(.ioError, "cannot copy into \(path): \(error.reason); nothing was lost, run the migration again once fixed", details: ["file": .string(path)])
    }

    private mutating func makeFolders(root: String, upTo folder: String) throws {
        guard folder.count >= root.count else { return }
        if folder != root { try makeFolders(root: root, upTo: (folder as NSString).deletingLastPathComponent) }
        var info = stat()
        if lstat(folder, &info) == 0 {
            if info.st_mode & S_IFMT == S_IFDIR { return }
            if folder == root, info.st_mode & S_IFMT == S_IFLNK, stat(folder, &info) == 0, info.st_mode & S_IFMT == S_IFDIR { return }
            throw CopyConflict(message: "\(folder) exists in the new owner's container and is not a folder")
        }
        if folder == root {
            do { try FileOps.makePrivateDirectory(folder) } catch { throw Self.ioError(folder, error) }
        } else if mkdir(folder, 0o700) != 0, errno != EEXIST {
            throw Self.ioError(folder, SystemCallError(call: "mkdir", code: errno))
        }
        touchedFolders.insert((folder as NSString).deletingLastPathComponent)
    }

    private mutating func copyItem(_ source: String, _ destination: String) throws {
        var info = stat()
        guard lstat(source, &info) == 0 else {
            let code = errno
            if code == ENOENT { return }  // Vanished meanwhile: nothing to copy.
            throw StoreError(.ioError, "cannot read \(source): \(SystemCall.reason(code))", details: ["file": .string(source)])
        }
        switch info.st_mode & S_IFMT {
        case S_IFDIR: try copyFolder(source, destination, mode: info.st_mode & 0o777)
        case S_IFREG: try copyFile(source, destination, mode: info.st_mode & 0o777, size: Int64(info.st_size))
        case S_IFLNK: try copyLink(source, destination)
        default: return  // FIFOs, sockets, devices hold no data to carry.
        }
    }

    private mutating func copyFolder(_ source: String, _ destination: String, mode: mode_t) throws {
        var info = stat()
        if lstat(destination, &info) == 0 {
            guard info.st_mode & S_IFMT == S_IFDIR else {
                throw CopyConflict(message: "\(destination) exists in the new owner's container and is not a folder")
            }
        } else {
            if mkdir(destination, 0o700) != 0, errno != EEXIST { throw Self.ioError(destination, SystemCallError(call: "mkdir", code: errno)) }
            chmod(destination, mode | 0o700)
            touchedFolders.insert((destination as NSString).deletingLastPathComponent)
        }
        removeStrayTemporaries(in: destination)
        let entries: [String]
        do {
            entries = try FileManager.default.contentsOfDirectory(atPath: source).sorted()
        } catch {
            throw StoreError(.ioError, "cannot list \(source): \(error.localizedDescription)", details: ["file": .string(source)])
        }
        for entry in entries where !(entry.hasPrefix(Self.temporaryPrefix) && entry.hasSuffix(".tmp")) {
            try copyItem(source + "/" + entry, destination + "/" + entry)
        }
    }

    /// A new temporary name, naming this process.
    static func temporaryName() -> String { ProcessTemporaries.name("extrun-migrate") }

    /// Temporary files of a run that was killed while copying into `folder`; those of a
    /// migration still running (another pair's, or another home's) are left alone.
    private func removeStrayTemporaries(in folder: String) {
        ProcessTemporaries.removeStale(in: folder, prefix: "extrun-migrate")
    }

    private mutating func copyFile(_ source: String, _ destination: String, mode: mode_t, size: Int64) throws {
        var info = stat()
        if lstat(destination, &info) == 0 {
            try expectSameFile(source, destination, info)
            // Most likely copied by a run that was killed before its batch committed: counted
            // here, so that the summary of the migration counts every file it brought.
            files += 1
            bytes += Int64(info.st_size)
            return
        }
        let folder = (destination as NSString).deletingLastPathComponent
        let name = (destination as NSString).lastPathComponent
        removeStrayTemporaries(in: folder)
        let input: Int32
        do { input = try FileOps.open(source, O_RDONLY | O_NOFOLLOW | O_NONBLOCK) } catch {
            throw StoreError(.ioError, "cannot read \(source): \(error.reason)", details: ["file": .string(source)])
        }
        defer { close(input) }
        let dirfd: Int32
        do { dirfd = try FileOps.open(folder, O_RDONLY | O_DIRECTORY) } catch { throw Self.ioError(folder, error) }
        defer { close(dirfd) }
        let temporary = Self.temporaryName()
        let output: Int32
        do { output = try FileOps.openat(dirfd, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: 0o600) } catch {
            throw Self.ioError(destination, error)
        }
        var renamed = false
        defer {
            close(output)
            if !renamed { unlinkat(dirfd, temporary, 0) }
        }
        var copied: Int64 = 0
        do throws(SystemCallError) {
            var buffer = [UInt8](repeating: 0, count: 1 << 20)
            while true {
                let count = try SystemCall.read(input, into: &buffer)
                if count == 0 { break }
                try FileOps.writeAll(output, Data(buffer[0..<count]))
                copied += Int64(count)
            }
            try FileOps.check(fchmod(output, mode), "fchmod")
            try FileOps.fsync(output)
        } catch {
            throw Self.ioError(destination, error)
        }
        do {
            try StoreShims.renameat2(dirfd, temporary, dirfd, name, flags: LinuxABI.RENAME_NOREPLACE)
            renamed = true
        } catch where error.code == EEXIST {
            guard lstat(destination, &info) == 0 else { throw Self.ioError(destination, error) }
            try expectSameFile(source, destination, info)
            return
        } catch {
            throw Self.ioError(destination, error)
        }
        touchedFolders.insert(folder)
        files += 1
        bytes += copied
    }

    /// Accepts an existing destination only if it is a regular file with the source's contents.
    private func expectSameFile(_ source: String, _ destination: String, _ info: stat) throws {
        guard info.st_mode & S_IFMT == S_IFREG, sameContents(source, destination) else {
            throw CopyConflict(message: "\(destination) already exists in the new owner's container with other contents; it was not replaced")
        }
    }

    private func sameContents(_ a: String, _ b: String) -> Bool {
        guard let fa = try? FileOps.open(a, O_RDONLY | O_NOFOLLOW | O_NONBLOCK) else { return false }
        defer { close(fa) }
        guard let fb = try? FileOps.open(b, O_RDONLY | O_NOFOLLOW | O_NONBLOCK) else { return false }
        defer { close(fb) }
        guard let sa = try? FileOps.fstat(fa), let sb = try? FileOps.fstat(fb), sa.st_size == sb.st_size else { return false }
        var bufferA = [UInt8](repeating: 0, count: 1 << 16)
        var bufferB = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let countA = bufferA.withUnsafeMutableBytes { read(fa, $0.baseAddress, $0.count) }
            guard countA >= 0 else { return false }
            var filled = 0
            while filled < countA {
                let countB = bufferB.withUnsafeMutableBytes { read(fb, $0.baseAddress! + filled, countA - filled) }
                guard countB > 0 else { return false }
                filled += countB
            }
            if countA == 0 { return true }
            if bufferA[0..<countA] != bufferB[0..<countA] { return false }
        }
    }

    private mutating func copyLink(_ source: String, _ destination: String) throws {
        guard let target = Self.readLink(source) else {
            throw StoreError(.ioError, "cannot read the symbolic link \(source)", details: ["file": .string(source)])
        }
        var info = stat()
        if lstat(destination, &info) == 0 {
            guard info.st_mode & S_IFMT == S_IFLNK, Self.readLink(destination) == target else {
                throw CopyConflict(message: "\(destination) already exists in the new owner's container and is not the same symbolic link")
            }
            return
        }
        let folder = (destination as NSString).deletingLastPathComponent
        let temporary = folder + "/" + Self.temporaryName()
        guard symlink(target, temporary) == 0 else { throw Self.ioError(destination, SystemCallError(call: "symlink", code: errno)) }
        do {
            try StoreShims.renameat2(AT_FDCWD, temporary, AT_FDCWD, destination, flags: LinuxABI.RENAME_NOREPLACE)
        } catch {
            unlink(temporary)
            if error.code == EEXIST, Self.readLink(destination) == target { return }
            if error.code == EEXIST {
                throw CopyConflict(message: "\(destination) already exists in the new owner's container and is not the same symbolic link")
            }
            throw Self.ioError(destination, error)
        }
        touchedFolders.insert(folder)
        files += 1
    }

    static func readLink(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(path, &buffer, buffer.count - 1)
        guard count >= 0 else { return nil }
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
