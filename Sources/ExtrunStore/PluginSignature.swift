import Crypto
import ExtrunProtocol
import ExtrunSystem
import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#endif

/// `extrun-signature.json` in a plugin's folder: the owner's Ed25519 signature over the
/// plugin's id, its owner and the SHA-256 of every file it consists of
/// (docs/plugin-guide.md, "Signing your plugin"):
///
///     {"format": "extrun-plugin-signature", "version": 1, "owner": "EXAMPLETEAM",
///      "plugin": "com.example.x", "signed": "2026-11-25T10:00:00Z",
///      "signingKey": "<base64 Ed25519 public key>", "signingFingerprint": "<32 hex>",
///      "files": [{"path": "manifest.json", "sha256": "<hex>", "size": 812}, ...],
///      "signature": "<base64, 64 bytes>"}
///
/// The signature covers `"extrun-plugin-signature-v1\n"` followed by the compact JSON
/// (sorted keys) of every field but `signature`. The files are every regular file
/// under the folder (symbolic links followed, the signature file excepted) and the
/// manifest's executable when it lies outside the folder (or is reached through `..`).
/// A file that is a symbolic link also has `link`: where it leads (relative to the
/// folder when inside it, else absolute), since an interpreter or the dynamic loader
/// looks for the plugin's modules and libraries beside the file the link leads to.
public struct PluginSignature: Sendable, Equatable {
    public static let fileName = "extrun-signature.json"
    public static let formatName = "extrun-plugin-signature"
    /// The most files a signed plugin folder may hold.
    public static let maxFiles = 10_000
    /// The largest signature file read.
    public static let maxFileBytes = 4 << 20

    public struct File: Sendable, Equatable {
        /// Relative to the plugin folder, or absolute for an executable outside it.
        public var path: String
        public var sha256: String
        public var size: Int64
        /// Where the file, a symbolic link, leads (`PluginFiles.linkTarget`); nil for a file that is no link.
        public var link: String? = nil
    }

    public var owner: String
    public var plugin: String
    public var signed: String
    public var signingKey: Data
    public var files: [File]
    public var signature: Data

    public var signingFingerprint: String { SigningKeyFingerprint.of(signingKey) }

    /// What the signature covers.
    func payload() -> Data {
        var bytes = Array("extrun-plugin-signature-v1\n".utf8)
        JSONWriter.write(unsignedJSON, into: &bytes)
        return Data(bytes)
    }

    private var unsignedJSON: JSONValue {
        .object([
            "format": .string(Self.formatName), "version": 1, "owner": .string(owner), "plugin": .string(plugin), "signed": .string(signed),
            "signingKey": .string(signingKey.base64EncodedString()), "signingFingerprint": .string(signingFingerprint),
            "files": .array(files.map { file in
                var fields: [String: JSONValue] = ["path": .string(file.path), "sha256": .string(file.sha256), "size": .int(file.size)]
                if let link = file.link { fields["link"] = .string(link) }
                return .object(fields)
            }),
        ])
    }

    var fileJSON: JSONValue {
        guard case .object(var object) = unsignedJSON else { return unsignedJSON }
        object["signature"] = .string(signature.base64EncodedString())
        return .object(object)
    }

    /// Whether the Ed25519 signature holds for the signing key it names.
    public var isValid: Bool {
        SigningKeyFingerprint.isValid(signature: signature, of: payload(), by: signingKey)
    }

    /// Reads a signature file's bytes; `Problem` names what is wrong.
    public static func decode(_ data: Data) throws(PluginSignatureProblem) -> PluginSignature {
        do {
            let fields = try JSONFields(try JSONCoding.parse(json: data))
            let format = try fields.string("format")
            guard format == formatName else { throw PluginSignatureProblem.malformed("its format is '\(format)', expected '\(formatName)'") }
            let version = try fields.int("version")
            guard version == 1 else { throw PluginSignatureProblem.malformed("it is version \(version); this extrun reads version 1") }
            let signature = PluginSignature(
                owner: try fields.string("owner"), plugin: try fields.string("plugin"), signed: try fields.string("signed"),
                signingKey: try fields.base64("signingKey"),
                files: try fields.objects("files") { file in
                    File(
                        path: try file.string("path"), sha256: try file.string("sha256"), size: Int64(try file.int("size")),
                        link: try file.optionalString("link"))
                },
                signature: try fields.base64("signature"))
            guard signature.files.count <= maxFiles else {
                throw PluginSignatureProblem.malformed("it lists \(signature.files.count) files; the limit is \(maxFiles)")
            }
            return signature
        } catch let problem as PluginSignatureProblem {
            throw problem
        } catch {
            throw .malformed(JSONCoding.describe(error))
        }
    }
}

/// Why a plugin's signature does not hold.
public enum PluginSignatureProblem: Error, Sendable, Equatable {
    /// The signature file cannot be read or is not one.
    case malformed(String)
    /// The Ed25519 signature does not verify: the signature file was edited.
    case badSignature
    /// The signature names another owner or plugin than the manifest.
    case otherPlugin(String)
    /// A file differs from the one signed (`reason`: changed, added, removed).
    case fileChanged(path: String, reason: String)
    /// Too many files, or a folder linked in: the numbers or the path in the message.
    case unsupported(String)
    /// A uid other than root and the host's own could change the file or folder at `path`
    /// (mode `mode`, octal): the signature cannot prove what would run (`PluginFilePermissions`).
    case writableByOthers(path: String, mode: String, reason: String)
}

/// A file's identity: device, inode, size, modification and change times (ns). Writing
/// to the file, replacing it, changing its mode or owner, or setting its times back
/// changes the change time, which the kernel alone sets: the same identity means the same
/// file as it was. Plugin files' digests (`PluginFiles.digest`) and the owners' key files
/// (`KeyFileCache`) are kept by it.
struct FileStamp: Equatable, Sendable {
    var device: UInt64, inode: UInt64, size: Int64, mtime: Int64, ctime: Int64

    /// Whether the file has not changed for 2 s. Linux stamps changes with a coarse clock
    /// (a tick, up to 10 ms), so a file changed again within the tick it was read in may
    /// keep its times: a stamp taken that soon ("racy", as Git calls such index entries)
    /// is not trusted by `KeyFileCache` nor by `PluginFiles.digest`, which read the file again until it has settled.
    var hasSettled: Bool {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        let nowNs = Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
        return nowNs - ctime >= 2_000_000_000 && nowNs - mtime >= 2_000_000_000
    }
}

extension FileStamp {
    init(_ info: stat) {
        self.init(
            device: UInt64(info.st_dev), inode: UInt64(info.st_ino), size: Int64(info.st_size),
            mtime: Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec),
            ctime: Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec))
    }
}

/// The files a plugin consists of, and their SHA-256, cached by file identity (`FileStamp`).
public enum PluginFiles {

    /// (path as signed, absolute path) of each file of the plugin in `directory`, sorted by path.
    /// `permissions`: each folder in it must be one only root or the host's user can change (`PluginFilePermissions`).
    public static func list(directory: String, executable: String, permissions: Bool = false) throws(PluginSignatureProblem) -> [(String, String)] {
        var found: [(String, String)] = []
        func walk(_ relative: String) throws(PluginSignatureProblem) {
            let absolute = relative.isEmpty ? directory : directory + "/" + relative
            guard let dir = opendir(absolute) else {
                throw .unsupported("cannot read the folder \(absolute): \(SystemCall.lastReason)")
            }
            defer { closedir(dir) }
            var names: [String] = []
            while let entry = readdir(dir) {
                let bytes = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.prefix { $0 != 0 }) }
                // Decoding would turn the name into another one (U+FFFD), whose lstat fails: the file would be overlooked.
                guard let name = String(validating: bytes, as: UTF8.self) else {
                    let shown = String(decoding: bytes, as: UTF8.self)
                    throw .unsupported(
                        "\(absolute)/\(shown) has a name that is not UTF-8, which a signature cannot name; rename or remove that file")
                }
                if name == "." || name == ".." || (relative.isEmpty && name == PluginSignature.fileName) { continue }
                names.append(name)
            }
            for name in names.sorted() {
                let path = relative.isEmpty ? name : relative + "/" + name
                var link = stat()
                guard lstat(directory + "/" + path, &link) == 0 else { continue }
                if link.st_mode & S_IFMT == S_IFDIR {
                    if permissions, let problem = PluginFilePermissions.problem(entry: link, path: directory + "/" + path) { throw problem }
                    try walk(path)
                    continue
                }
                var info = stat()
                guard stat(directory + "/" + path, &info) == 0 else {
                    throw .unsupported("\(directory)/\(path) is a symbolic link to nothing; remove it or point it at the file")
                }
                if info.st_mode & S_IFMT == S_IFDIR {
                    throw .unsupported("\(directory)/\(path) is a symbolic link to a folder; copy the folder in, so that its files can be signed")
                }
                // A named pipe, socket or device has no contents to sign, yet the plugin can read from it.
                guard info.st_mode & S_IFMT == S_IFREG else {
                    throw .fileChanged(
                        path: directory + "/" + path,
                        reason: "it is not a regular file (a named pipe, socket or device), whose contents a signature cannot cover; remove it from the plugin's folder")
                }
                found.append((path, directory + "/" + path))
                if found.count > PluginSignature.maxFiles {
                    throw .unsupported("the plugin folder \(directory) holds over \(PluginSignature.maxFiles) files; the limit is \(PluginSignature.maxFiles)")
                }
            }
        }
        try walk("")
        // An executable outside the folder, or reached through `..` (`../bin/x` leads out of it
        // although its path starts with the folder's), is signed under its absolute path.
        if executable.hasPrefix("/"),
            !executable.hasPrefix(directory + "/") || executable.dropFirst(directory.count + 1).split(separator: "/").contains("..")
        {
            found.append((executable, executable))
        }
        return found.sorted { $0.0.utf8.lexicographicallyPrecedes($1.0.utf8) }
    }

    /// Where the file at `path` leads when it is a symbolic link (nil when it is none): its real
    /// path, relative to the folder's real path when it lies inside it. Python puts the
    /// directory of the script's real path first on its module path, and `$ORIGIN` is the
    /// real executable's directory: a link to a copy elsewhere brings that place's modules.
    static func linkTarget(_ path: String, directory: String) -> String? {
        var link = stat()
        guard lstat(path, &link) == 0, link.st_mode & S_IFMT == S_IFLNK else { return nil }
        guard let resolved = realpath(path, nil) else { return "" }
        defer { free(resolved) }
        let target = String(cString: resolved)
        if let folder = realpath(directory, nil) {
            defer { free(folder) }
            let root = String(cString: folder)
            if target.hasPrefix(root + "/") { return String(target.dropFirst(root.count + 1)) }
        }
        return target
    }

    /// Digests by absolute path and identity, for this process.
    private static let memory = NIOLockedValueBox<[String: (FileStamp, String)]>([:])

    /// The file's SHA-256 in hex and its size, from the cache when its identity is unchanged.
    /// `permissions`: the file (where a link leads, and the folders above that) must be one only root or the host's user can change.
    static func digest(
        _ path: String, cache slot: DigestCache.Slot, permissions: Bool = false
    ) throws(PluginSignatureProblem) -> (sha256: String, size: Int64, computed: Bool) {
        var info = stat()
        guard stat(path, &info) == 0 else { throw .fileChanged(path: path, reason: "it is missing") }
        if permissions {
            if let problem = PluginFilePermissions.problem(entry: info, path: path) { throw problem }
            var link = stat()
            if lstat(path, &link) == 0, link.st_mode & S_IFMT == S_IFLNK { try PluginFilePermissions.checkAncestors(of: path) }
        }
        let identity = FileStamp(info)
        if let known = memory.withLockedValue({ $0[path] }), known.0 == identity {
            // The home's cache learns it only if it was read anyway (signing reads it): a hit costs no file read.
            if let cache = slot.loaded, cache.entries[path]?.0 != identity {
                cache.entries[path] = known
                cache.changed = true
            }
            return (known.1, identity.size, false)
        }
        let cache = slot.get()
        if let known = cache?.entries[path], known.0 == identity {
            memory.withLockedValue { $0[path] = known }
            return (known.1, identity.size, false)
        }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw .fileChanged(path: path, reason: "it cannot be read (\(SystemCall.lastReason))") }
        defer { close(fd) }
        var hasher = SHA256()
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let count: Int
            do throws(SystemCallError) {
                count = try SystemCall.read(fd, into: &buffer)
            } catch {
                throw .fileChanged(path: path, reason: "it cannot be read (\(error.reason))")
            }
            if count == 0 { break }
            hasher.update(data: buffer[0..<count])
        }
        let hex = hex(hasher.finalize())
        // Identity after reading: a file written meanwhile is not cached under its old identity.
        // Nor is one changed less than 2 s ago (`FileStamp.hasSettled`): written again within
        // the same clock tick, it would keep this identity with other contents, and the
        // cached digest would vouch for them. Such a file is read whole at each check until
        // it has settled.
        var after = stat()
        if fstat(fd, &after) == 0, FileStamp(after) == identity, identity.hasSettled {
            memory.withLockedValue { cache in
                if cache.count > 4096 { cache.removeAll() }
                cache[path] = (identity, hex)
            }
            cache?.entries[path] = (identity, hex)
            cache?.changed = true
        }
        return (hex, identity.size, true)
    }

    static func hex(_ digest: SHA256.Digest) -> String {
        digest.map { byte in
            let digits = String(byte, radix: 16)
            return byte < 16 ? "0" + digits : digits
        }.joined()
    }

    /// Computes the signature's file list for signing.
    static func signedFiles(directory: String, executable: String, cache slot: DigestCache.Slot) throws(PluginSignatureProblem) -> [PluginSignature.File] {
        var files: [PluginSignature.File] = []
        for (signedPath, path) in try list(directory: directory, executable: executable) {
            let digest = try digest(path, cache: slot)
            files.append(
                PluginSignature.File(path: signedPath, sha256: digest.sha256, size: digest.size, link: linkTarget(path, directory: directory)))
        }
        return files
    }

    /// Checks the folder against the signature: the same files, each with its signed digest.
    /// The first difference is the error, naming the file.
    /// `permissions`: also refuse a file or folder that a uid other than root and the host's could change (`PluginFilePermissions`).
    static func check(
        _ signature: PluginSignature, directory: String, executable: String, cache: DigestCache.Slot, permissions: Bool = false
    ) throws(PluginSignatureProblem) {
        let present = try list(directory: directory, executable: executable, permissions: permissions)
        // Compared by their bytes: Swift's String equality would take "cafe\u{301}" for "caf\u{E9}",
        // two names, and two files, on Linux.
        let signedPaths = Set(signature.files.map { Array($0.path.utf8) })
        for (signedPath, path) in present where !signedPaths.contains(Array(signedPath.utf8)) {
            throw .fileChanged(path: path, reason: "it was added after signing")
        }
        let presentPaths = Set(present.map { Array($0.0.utf8) })
        for file in signature.files where !presentPaths.contains(Array(file.path.utf8)) {
            throw .fileChanged(path: file.path.hasPrefix("/") ? file.path : directory + "/" + file.path, reason: "it was removed after signing")
        }
        for file in signature.files {
            let path = file.path.hasPrefix("/") ? file.path : directory + "/" + file.path
            if permissions && file.path.hasPrefix("/") { try PluginFilePermissions.checkAncestors(of: path) }
            let digest = try digest(path, cache: cache, permissions: permissions)
            guard digest.sha256 == file.sha256.lowercased(), digest.size == file.size else {
                throw .fileChanged(path: path, reason: "its contents changed after signing (SHA-256 \(digest.sha256), signed \(file.sha256))")
            }
            let link = linkTarget(path, directory: directory)
            // By their bytes, as the paths are (two spellings of "é" are two places).
            guard link.map({ Array($0.utf8) }) == file.link.map({ Array($0.utf8) }) else {
                let now = link.map { "it is a symbolic link to \($0)" } ?? "it is not a symbolic link"
                let signed = file.link.map { "it was signed as a symbolic link to \($0)" } ?? "it was signed as a file, not a symbolic link"
                throw .fileChanged(path: path, reason: "\(now), but \(signed) (modules and libraries are looked for beside where a link leads)")
            }
        }
    }
}

/// `<home>/cache/plugin-digests.json`: the SHA-256 of plugin files by identity, and the
/// digests of signature files whose Ed25519 signature held, so that a new `extrun handle`
/// process reads no plugin file whole. Only the host's user can write it (the home is 0700);
/// a cache that is unreadable or not private is ignored and rewritten.
final class DigestCache {
    /// The home's cache, read on first need.
    final class Slot {
        let home: String?
        private(set) var loaded: DigestCache?
        init(home: String?) { self.home = home }
        func get() -> DigestCache? {
            if loaded == nil, let home { loaded = DigestCache(home: home) }
            return loaded
        }
    }

    /// Signature files (their SHA-256) whose Ed25519 signature held, in this process.
    static let verifiedInProcess = NIOLockedValueBox<Set<String>>([])

    var entries: [String: (FileStamp, String)] = [:]
    var verifiedSignatures: Set<String> = []
    let path: String
    static let maxEntries = 4096
    /// The file's format: 2 holds only digests of files that had settled when read.
    static let version: Int64 = 2

    init(home: String) {
        path = home + "/cache/plugin-digests.json"
        var info = stat()
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { close(fd) }
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_uid == geteuid(), info.st_mode & 0o077 == 0,
            info.st_size < 8 << 20,
            let data = try? FileOps.readAll(fd, limit: 8 << 20, expectedSize: Int(info.st_size)), let value = try? JSONParser.parse(data), case .object(let root) = value
        else { return }
        // Entries of version 2 on: earlier ones may hold identities taken within a clock
        // tick of the file's last change (`PluginFiles.digest`), so they are computed again.
        if case .int(let version)? = root["version"], version >= Self.version, case .array(let files)? = root["files"] {
            for file in files {
                guard case .object(let f) = file, case .string(let p)? = f["path"], case .string(let hex)? = f["sha256"],
                    case .int(let dev)? = f["dev"], case .int(let ino)? = f["ino"], case .int(let size)? = f["size"],
                    case .int(let mtime)? = f["mtime"], case .int(let ctime)? = f["ctime"]
                else { continue }
                entries[p] = (FileStamp(device: UInt64(bitPattern: dev), inode: UInt64(bitPattern: ino), size: size, mtime: mtime, ctime: ctime), hex)
            }
        }
        if case .array(let signatures)? = root["signatures"] {
            for case .string(let digest) in signatures { verifiedSignatures.insert(digest) }
        }
    }

    /// Writes the cache back when it learnt something (atomically; a failure only costs a later recomputation).
    func saveIfChanged() {
        guard changed else { return }
        if entries.count > Self.maxEntries { entries.removeAll() }
        if verifiedSignatures.count > Self.maxEntries { verifiedSignatures.removeAll() }
        let files: [JSONValue] = entries.sorted { $0.key < $1.key }.map { path, value in
            .object([
                "path": .string(path), "sha256": .string(value.1), "dev": .int(Int64(bitPattern: value.0.device)),
                "ino": .int(Int64(bitPattern: value.0.inode)), "size": .int(value.0.size), "mtime": .int(value.0.mtime),
                "ctime": .int(value.0.ctime),
            ])
        }
        let root = JSONValue.object([
            "version": .int(Self.version), "files": .array(files), "signatures": .array(verifiedSignatures.sorted().map { .string($0) }),
        ])
        let directory = (path as NSString).deletingLastPathComponent
        do {
            try FileOps.makePrivateDirectory(directory)
            let dirfd = try FileOps.open(directory, O_RDONLY | O_DIRECTORY)
            defer { close(dirfd) }
            try FileOps.writeAtomically(
                dirfd: dirfd, name: "plugin-digests.json", data: Data(JSONWriter.bytes(root)), createMode: 0o600, exactMode: 0o600, replace: true)
        } catch {
            return
        }
    }

    /// Set when an entry was replaced (same count, other contents).
    var changed = false
}

/// What a plugin folder's signature proves, before any owner's trust is asked.
public enum PluginSeal: Sendable, Equatable {
    /// No signature file: the plugin runs, but gets none of its owner's data.
    case unsigned
    /// The signature holds: the files are those `signingKey` signed for `owner`.
    case signed(owner: String, signingKey: Data)
}

extension PluginSignature {
    /// Checks the plugin in `directory` (whose manifest names `owner` and `plugin` and
    /// `executable`) against its signature file. `home`: where the digest cache is kept (nil: none).
    public static func check(
        directory: String, owner: String, plugin: String, executable: String, home: String?
    ) throws(PluginSignatureProblem) -> PluginSeal {
        try verify(directory: directory, owner: owner, plugin: plugin, executable: executable, home: home, pin: false).seal
    }

    /// Checks the plugin as `check` does and, when it is signed, runs it from a private copy
    /// of what was checked (`PluginCopies`, under `home`): the copy is nil for an unsigned plugin.
    public static func checkAndPin(
        directory: String, owner: String, plugin: String, executable: String, home: String
    ) throws(PluginSignatureProblem) -> (seal: PluginSeal, copy: PinnedPlugin?) {
        try verify(directory: directory, owner: owner, plugin: plugin, executable: executable, home: home, pin: true)
    }

    private static func verify(
        directory: String, owner: String, plugin: String, executable: String, home: String?, pin: Bool
    ) throws(PluginSignatureProblem) -> (seal: PluginSeal, copy: PinnedPlugin?) {
        let path = directory + "/" + fileName
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        if fd < 0 {
            if errno == ENOENT { return (.unsigned, nil) }
            throw .malformed("cannot open \(path): \(SystemCall.lastReason)")
        }
        let data: Data
        do {
            defer { close(fd) }
            var info = stat()
            guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
                throw PluginSignatureProblem.malformed("\(path) is not a regular file")
            }
            if let problem = PluginFilePermissions.problem(entry: info, path: path) { throw problem }
            guard let read = try? FileOps.readAll(fd, limit: maxFileBytes, expectedSize: Int(info.st_size)) else {
                throw PluginSignatureProblem.malformed("cannot read \(path), or it is over \(maxFileBytes) bytes")
            }
            data = read
        }
        // Who can change the folder: root and the host's user only (else no signature can say what runs).
        try PluginFilePermissions.checkFolder(directory)
        let signature = try decode(data)
        guard signature.owner.utf8.elementsEqual(owner.utf8) else {
            throw .otherPlugin("it was signed for owner '\(signature.owner)', but the manifest names owner '\(owner)'")
        }
        guard signature.plugin.utf8.elementsEqual(plugin.utf8) else {
            throw .otherPlugin("it was signed for plugin '\(signature.plugin)', but the manifest's id is '\(plugin)'")
        }
        let cache = DigestCache.Slot(home: home)
        let digest = PluginFiles.hex(SHA256.hash(data: data))
        if !DigestCache.verifiedInProcess.withLockedValue({ $0.contains(digest) }) {
            if cache.get()?.verifiedSignatures.contains(digest) != true {
                guard signature.isValid else { throw .badSignature }
                cache.loaded?.verifiedSignatures.insert(digest)
                cache.loaded?.changed = true
            }
            DigestCache.verifiedInProcess.withLockedValue { known in
                if known.count > 4096 { known.removeAll() }
                known.insert(digest)
            }
        }
        // The folder as it is now, against the signature (from the digest cache): a file
        // changed, added or removed after signing is refused, naming it.
        try PluginFiles.check(signature, directory: directory, executable: executable, cache: cache, permissions: true)
        cache.loaded?.saveIfChanged()
        let seal = PluginSeal.signed(owner: owner, signingKey: signature.signingKey)
        guard pin, let home else { return (seal, nil) }
        // What runs: the private copy of the files, hashed from the descriptors they were copied from.
        let copy = try PluginCopies.pin(
            signature: signature, signatureData: data, digest: digest, directory: directory, executable: executable, home: home)
        return (seal, copy)
    }

    /// Signs the plugin in `directory` for `owner` with the owner's signing key in `store`
    /// (made on first need) and writes the signature file (replacing one that is there).
    public static func sign(directory: String, owner: String, plugin: String, executable: String, store: Store) throws -> PluginSignature {
        let key = try store.signingKey(of: owner)
        let files: [File]
        // The digests go to the home's cache too: the first run after signing reads no file whole.
        let cache = DigestCache.Slot(home: store.homePath)
        _ = cache.get()
        do {
            files = try PluginFiles.signedFiles(directory: directory, executable: executable, cache: cache)
        } catch {
            throw StoreError(.invalidDocument, "cannot sign \(directory): \(error.text)", details: ["file": .string(directory)])
        }
        var signature = PluginSignature(
            owner: owner, plugin: plugin, signed: ISODate.format(Date()), signingKey: key.publicKey, files: files, signature: Data())
        signature.signature = try key.signature(for: signature.payload())
        cache.loaded?.saveIfChanged()
        let data = Data(JSONWriter.prettyBytes(signature.fileJSON)) + Data("\n".utf8)
        do {
            let dirfd = try FileOps.open(directory, O_RDONLY | O_DIRECTORY)
            defer { close(dirfd) }
            try FileOps.writeAtomically(dirfd: dirfd, name: fileName, data: data, createMode: 0o644, exactMode: 0o644, replace: true)
        } catch {
            throw StoreError(.ioError, "cannot write \(directory)/\(fileName): \(error.reason)", details: ["file": .string(directory + "/" + fileName)])
        }
        return signature
    }
}

extension PluginSignatureProblem {
    /// A sentence for people.
    public var text: String {
        switch self {
        case .malformed(let why): "the signature file is not valid: \(why)"
        case .badSignature: "the signature does not verify: \(PluginSignature.fileName) was altered after signing"
        case .otherPlugin(let why): "the signature is not this plugin's: \(why)"
        case .fileChanged(let path, let reason): "\(path) does not match the signature: \(reason)"
        case .unsupported(let why): why
        case .writableByOthers(let path, let mode, let reason):
            "\(path) (mode \(mode)) can be changed by someone other than root and the host's user: \(reason); a signed plugin runs only from files and folders no one else can change"
        }
    }

    /// The file the problem is about, if one.
    public var file: String? {
        switch self {
        case .fileChanged(let path, _), .writableByOthers(let path, _, _): return path
        default: return nil
        }
    }
}
