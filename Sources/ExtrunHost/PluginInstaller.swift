import ExtrunProtocol
import ExtrunStore
import ExtrunSystem
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Installs a plugin folder as `$EXTRUN_HOME/plugins/<id>` (found by every `extrun`
/// command without a flag: the catalog searches that folder last) and removes it again
/// (docs/plugin-guide.md, "Installing a plugin").
///
/// An install is a copy made in `$EXTRUN_HOME/plugins/.incoming/` (a folder the catalog
/// does not search: it holds no manifest.json and the catalog looks one level down only)
/// and renamed into place, or exchanged with the installed version in one `renameat2`,
/// so that a failed install leaves the old one as it was and nothing else behind.
///
/// The copy is what the plugin's user can run: folders 0755, files 0644, 0755 for the
/// executable and any file that was executable. A symbolic link that leads inside the
/// folder is made again, relative, to the same file; one that leads out of it is refused,
/// naming the link and its target: the install reads nothing from outside the folder, where
/// it would read with its own rights (root's) what the folder's owner may not read. When the
/// installer is not the folder's owner, a file of another user in it (a hard link) is
/// copied only when others may read it, with its own mode (`FolderCopy`).
/// `extrun plugins check` runs the same walk without copying (`layoutProblems`).
public struct PluginInstaller: Sendable {
    public var host: Host

    public init(host: Host = Host()) {
        self.host = host
    }

    /// `$EXTRUN_HOME/plugins`.
    public var pluginsDirectory: URL { host.paths.home.appendingPathComponent("plugins", isDirectory: true) }

    /// What an install did.
    public struct Installed: Sendable {
        /// The plugin as installed (its new folder).
        public var plugin: DiscoveredPlugin
        /// The version it replaced (`--replace`), if any.
        public var replacedVersion: String?
        /// The installed copy's signature as this host sees it.
        public var signature: PluginSignatureStatus
        /// Files and links copied.
        public var files: Int
        /// Things the author should know (a link replaced by its file, a plugin on
        /// EXTRUN_PLUGIN_PATH with the same id that comes first...).
        public var notes: [String]
    }

    /// Installs the plugin in `source`. `replace`: an installed plugin with the same id is
    /// replaced (else that is an error). `store`: for the signature's trust (nil: `storeProblem` says why).
    public func install(from source: URL, replace: Bool, store: Store?, storeProblem: String? = nil) throws(HostError) -> Installed {
        let source = source.standardizedFileURL
        if let problem = Self.manifestLinkProblem(in: source) { throw problem }
        var plugin = try PluginCatalog.plugin(in: source)
        let manifest = plugin.manifest
        var notes: [String] = []
        if let hidden = Self.hiddenID(plugin) { throw hidden }
        let executable = try Self.executableInside(plugin)
        if let problem = plugin.problem {
            // Not executable here: the copy gets its executable bit. Missing: nothing to copy.
            guard FileManager.default.fileExists(atPath: plugin.executablePath) else {
                throw HostError(.configurationError, "\(plugin.manifestPath): \(problem)", details: ["file": .string(plugin.manifestPath)])
            }
            if executable != nil { notes.append("\(manifest.executable) was not executable; the installed copy is (mode 0755)") }
            plugin.problem = nil
        }
        let signed = FileManager.default.fileExists(atPath: source.appendingPathComponent(PluginSignature.fileName).path)
        if signed, case .broken(let file, let message) = host.signatureStatus(of: plugin, store: store, storeProblem: storeProblem) {
            throw HostError(.signatureInvalid, "\(source.path) is not installed: \(message)", details: ["file": .string(file)])
        }
        let destination = pluginsDirectory.appendingPathComponent(manifest.id, isDirectory: true)
        try checkClaims(of: plugin, destination: destination, notes: &notes)

        try makePluginsDirectory()
        let lock = try InstallLock(directory: pluginsDirectory)
        defer { lock.release() }
        // Looked at again under the lock: another install may have finished meanwhile.
        let existing = try? PluginCatalog.plugin(in: destination)
        let exists = FileManager.default.fileExists(atPath: destination.path)
        if exists && !replace {
            throw HostError(
                .configurationError,
                "\(manifest.id)\(existing.map { " \($0.manifest.version)" } ?? "") is already installed in \(destination.path); install with --replace to update it, or remove it first (extrun plugins remove \(manifest.id))",
                details: ["file": .string(destination.path)])
        }

        let incoming = try Self.incomingFolder(in: pluginsDirectory)
        let staging = try Self.temporaryFolder(in: incoming, name: manifest.id)
        var stagingLeft = true
        defer {
            if stagingLeft { try? FileManager.default.removeItem(at: staging) }
            rmdir(incoming.path)  // only when empty: another install may be using it
        }
        var copier = FolderCopy(source: source.path, destination: staging.path, executable: executable, signed: signed)
        try copier.copy()
        notes += copier.notes
        chmod(staging.path, 0o755)

        // The copy must be what was checked: readable, its signature still holding.
        var copy = try PluginCatalog.plugin(in: staging)
        if let problem = copy.problem {
            throw HostError(.configurationError, "the installed copy would not run: \(problem)", details: ["file": .string(source.path)])
        }
        if signed, case .broken(_, let message) = host.signatureStatus(of: copy, store: store, storeProblem: storeProblem) {
            throw HostError(.signatureInvalid, "the copy of \(source.path) does not hold its signature: \(message)", details: ["file": .string(source.path)])
        }
        let policy = try SandboxPolicy.load(home: host.paths.home).0
        let identity = try PluginCredentials.resolve(policy: policy)
        try identity.checkAccess(
            toExecutable: copy.executableURL, pluginDirectory: staging, mountNamespace: policy.namespaces.mount, of: manifest.id)

        if exists {
            if let failure = AtomicRename.exchange(staging.path, destination.path) {
                throw HostError(.internalError, "cannot put \(manifest.id) in place of the installed one (\(destination.path)): \(failure); the installed one is unchanged")
            }
            // `staging` now holds the old version; the deferred removal takes it.
        } else {
            if let failure = AtomicRename.moveNoReplace(staging.path, destination.path) {
                throw HostError(.internalError, "cannot move \(manifest.id) into \(destination.path): \(failure)")
            }
            stagingLeft = false
        }
        copy.directory = destination
        copy.executableURL =
            manifest.executable.hasPrefix("/") ? URL(fileURLWithPath: manifest.executable) : destination.appendingPathComponent(manifest.executable)
        let status = signed ? host.signatureStatus(of: copy, store: store, storeProblem: storeProblem) : .unsigned
        return Installed(
            plugin: copy, replacedVersion: exists ? (existing?.manifest.version ?? "?") : nil, signature: status, files: copier.count,
            notes: notes)
    }

    /// Removes the installed plugin `id` (its folder in `$EXTRUN_HOME/plugins`). Its owner's
    /// globals, bookmarks and donations are the owner's and stay. Returns the folder it was in.
    @discardableResult
    public func remove(id: String) throws(HostError) -> URL {
        guard !id.isEmpty, !id.hasPrefix("."), !id.contains("/") else {
            throw HostError(.configurationError, "'\(id)' is not a plugin id (use the id of `extrun plugins`, e.g. com.example.uppercase)")
        }
        let folder = try installedFolder(of: id)
        let lock = try InstallLock(directory: pluginsDirectory)
        defer { lock.release() }
        let incoming = try Self.incomingFolder(in: pluginsDirectory)
        defer { rmdir(incoming.path) }
        let removed = try Self.temporaryFolder(in: incoming, name: id + ".removed")
        // Out of the catalog's sight in one step, then deleted.
        if rename(folder.path, removed.path) != 0 {
            let reason = SystemCall.lastReason
            rmdir(removed.path)
            throw HostError(.internalError, "cannot remove \(folder.path): \(reason)")
        }
        do {
            try FileManager.default.removeItem(at: removed)
        } catch {
            throw HostError(
                .internalError, "\(id) is no longer installed, but its old files could not all be deleted from \(removed.path): \(error)",
                details: ["file": .string(removed.path)])
        }
        return folder
    }

    // MARK: Checks

    /// What `install` would refuse in the folder of `plugin`, in install's own words and by
    /// its own code (`FolderCopy` walking without copying): `extrun plugins check`'s `files`.
    /// Nothing is written. `broken`: those that break the plugin where it is too (a link to
    /// nothing); the others only keep it from being installed. Also the number of entries walked.
    public static func layoutProblems(of plugin: DiscoveredPlugin) -> (problems: [String], broken: [String], entries: Int) {
        var problems: [String] = []
        if let hidden = hiddenID(plugin) { problems.append(hidden.message) }
        var executable: String?
        do throws(HostError) {
            executable = try executableInside(plugin)
        } catch {
            problems.append(error.message)
        }
        let source = plugin.directory.standardizedFileURL.path
        let signed = FileManager.default.fileExists(atPath: plugin.directory.appendingPathComponent(PluginSignature.fileName).path)
        var walk = FolderCopy(source: source, destination: nil, executable: executable, signed: signed)
        do throws(HostError) {
            try walk.copy()
        } catch {
            problems.append(error.message)
        }
        return (problems + walk.problems.map(\.message), walk.broken.map(\.message), walk.count)
    }

    /// A manifest.json that is a link leading out of `folder`: refused before it is read, as
    /// the walk refuses any such link, so that root's install or check never parses (and
    /// quotes in its errors) a file the folder's owner may not read.
    public static func manifestLinkProblem(in folder: URL) -> HostError? {
        let path = folder.appendingPathComponent("manifest.json").path
        var info = stat()
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFLNK else { return nil }
        guard let folderReal = realpath(folder.path, nil) else { return nil }
        let inside = String(cString: folderReal)
        free(folderReal)
        guard let resolved = realpath(path, nil) else { return nil }  // a link to nothing: the catalog says the manifest is missing
        let target = String(cString: resolved)
        free(resolved)
        if target.hasPrefix(inside + "/") { return nil }
        return HostError(
            .configurationError,
            "\(path) is a symbolic link to \(target), outside the plugin's folder: it is not read (install and check read nothing from outside the folder, with rights the folder's owner may not have); put the manifest itself in the folder",
            details: ["file": .string(path), "target": .string(target)])
    }

    /// An id starting with "." would be a hidden folder in `$EXTRUN_HOME/plugins`.
    static func hiddenID(_ plugin: DiscoveredPlugin) -> HostError? {
        guard plugin.manifest.id.hasPrefix(".") else { return nil }
        return HostError(
            .configurationError, "\(plugin.manifestPath): id: '\(plugin.manifest.id)' cannot be installed: it would be a hidden folder (use reverse-DNS, e.g. com.example.uppercase)",
            details: ["file": .string(plugin.manifestPath)])
    }

    /// The folder in `$EXTRUN_HOME/plugins` that holds `id`: `<id>`, or another folder whose manifest says `id`.
    func installedFolder(of id: String) throws(HostError) -> URL {
        let named = pluginsDirectory.appendingPathComponent(id, isDirectory: true)
        if FileManager.default.fileExists(atPath: named.appendingPathComponent("manifest.json").path) { return named }
        let catalog = host.catalog()
        let installed = pluginsDirectory.standardizedFileURL.path + "/"
        if let other = catalog.plugins.first(where: { $0.manifest.id == id && $0.directory.standardizedFileURL.path.hasPrefix(installed) }) {
            return other.directory
        }
        if let elsewhere = (catalog.plugins + catalog.shadowed).first(where: { $0.manifest.id == id }) {
            throw HostError(
                .configurationError,
                "\(id) is not installed in \(pluginsDirectory.path): it is found in \(elsewhere.directory.path), on the plugin path, which extrun does not manage; take it off EXTRUN_PLUGIN_PATH or delete that folder yourself",
                details: ["file": .string(elsewhere.directory.path)])
        }
        let ids = catalog.plugins.filter { $0.directory.standardizedFileURL.path.hasPrefix(installed) }.map(\.manifest.id).sorted()
        throw HostError(
            .configurationError,
            "\(id) is not installed in \(pluginsDirectory.path)" + (ids.isEmpty ? " (no plugin is)" : " (installed: \(ids.joined(separator: ", ")))"),
            details: ["file": .string(named.path)])
    }

    /// The executable's path relative to the folder, or nil when the manifest names a
    /// program outside it by its absolute path (an interpreter such as /usr/bin/python3,
    /// which stays the system's). A relative path that leads out of the folder is refused:
    /// after the copy it would lead somewhere else.
    static func executableInside(_ plugin: DiscoveredPlugin) throws(HostError) -> String? {
        let executable = plugin.manifest.executable
        let components = executable.split(separator: "/", omittingEmptySubsequences: true)
        if executable.hasPrefix("/") {
            let folder = plugin.directory.standardizedFileURL.path + "/"
            guard !URL(fileURLWithPath: executable).standardizedFileURL.path.hasPrefix(folder) else {
                throw HostError(
                    .configurationError,
                    "\(plugin.manifestPath): executable '\(executable)' is an absolute path into the plugin's own folder, which the installed copy is not; name it relative to the manifest ('\(URL(fileURLWithPath: executable).standardizedFileURL.path.dropFirst(folder.count))')",
                    details: ["file": .string(plugin.manifestPath), "field": "executable"])
            }
            return nil
        }
        var depth = 0
        for component in components {
            if component == ".." { depth -= 1 } else if component != "." { depth += 1 }
            if depth < 0 {
                throw HostError(
                    .configurationError,
                    "\(plugin.manifestPath): executable '\(executable)' lies outside the plugin's folder, so an installed copy cannot bring it along; copy the program into the folder and name it there (\"executable\": \"\(components.last.map(String.init) ?? executable)\"), or give an absolute path to a program installed on this machine",
                    details: ["file": .string(plugin.manifestPath), "field": "executable"])
            }
        }
        return components.filter { $0 != "." }.joined(separator: "/")
    }

    /// Refuses a plugin that would claim an intent or activity type another plugin on the
    /// plugin path already handles (`extrun handle` would then refuse both), or whose id is installed already.
    func checkClaims(of plugin: DiscoveredPlugin, destination: URL, notes: inout [String]) throws(HostError) {
        let catalog = host.catalog()
        let manifest = plugin.manifest
        for other in catalog.plugins where other.manifest.id != manifest.id {
            let intents = manifest.intents.map(\.name).filter { other.manifest.intent(named: $0) != nil }
            if let intent = intents.first {
                throw HostError(
                    .configurationError,
                    "\(manifest.id) (\(plugin.directory.path)) is not installed: its intent '\(intent)' is already handled by \(other.manifest.id) (\(other.directory.path)), and an intent has one plugin; remove that one first (extrun plugins remove \(other.manifest.id)) or rename the intent",
                    details: ["intent": .string(intent), "plugin": .string(other.manifest.id), "file": .string(other.manifestPath)])
            }
            if let type = manifest.activityTypes.first(where: { other.manifest.activityTypes.contains($0) }) {
                throw HostError(
                    .configurationError,
                    "\(manifest.id) (\(plugin.directory.path)) is not installed: its activity type '\(type)' is already declared by \(other.manifest.id) (\(other.directory.path)); remove that one first (extrun plugins remove \(other.manifest.id)) or rename the type",
                    details: ["activityType": .string(type), "plugin": .string(other.manifest.id), "file": .string(other.manifestPath)])
            }
        }
        let installed = destination.standardizedFileURL.path
        if let first = catalog.plugins.first(where: { $0.manifest.id == manifest.id }),
            first.directory.standardizedFileURL.path != installed, first.directory.standardizedFileURL.path != plugin.directory.path
        {
            notes.append(
                "\(first.directory.path) holds a plugin with the same id earlier on the plugin path (EXTRUN_PLUGIN_PATH): extrun uses that one while it is there")
        }
    }

    func makePluginsDirectory() throws(HostError) {
        HomeProtection.makeIfMissing(host.paths.home)
        if mkdir(pluginsDirectory.path, 0o755) != 0 && errno != EEXIST {
            throw HostError(.internalError, "cannot make \(pluginsDirectory.path): \(SystemCall.lastReason)")
        }
    }

    /// `plugins/.incoming`, made if missing. Called with the install lock held: whatever is
    /// in it was left by an install or removal that was killed midway, and goes now.
    static func incomingFolder(in plugins: URL) throws(HostError) -> URL {
        let incoming = plugins.appendingPathComponent(".incoming", isDirectory: true)
        if mkdir(incoming.path, 0o755) != 0 && errno != EEXIST {
            throw HostError(.internalError, "cannot make \(incoming.path): \(SystemCall.lastReason)")
        }
        for name in (try? FileManager.default.contentsOfDirectory(atPath: incoming.path)) ?? [] {
            try? FileManager.default.removeItem(at: incoming.appendingPathComponent(name))
        }
        return incoming
    }

    /// A new empty folder `<name>.XXXXXX` in `parent`.
    static func temporaryFolder(in parent: URL, name: String) throws(HostError) -> URL {
        var template = Array("\(parent.path)/\(name).XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else {
            throw HostError(.internalError, "cannot make a folder in \(parent.path): \(SystemCall.lastReason)")
        }
        return URL(fileURLWithPath: String(cString: made), isDirectory: true)
    }
}

/// `$EXTRUN_HOME/plugins/.install.lock`, held (flock) while one install or removal runs.
struct InstallLock {
    private let fd: Int32

    init(directory: URL) throws(HostError) {
        let path = directory.appendingPathComponent(".install.lock").path
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else { throw HostError(.internalError, "cannot open \(path): \(SystemCall.lastReason)") }
        _ = SystemCall.retryingInterrupts { flock(fd, LOCK_EX) }
    }

    func release() {
        close(fd)
    }
}

/// Walks a plugin folder as `PluginInstaller` describes and copies it file by file, or, with
/// no destination, only checks it (`extrun plugins check`, in the same words).
///
/// Every entry is reached from its folder's descriptor without following links (`openat`
/// with `O_NOFOLLOW`), so that a folder or file swapped for a link meanwhile is never
/// followed. What is read is what the folder's owner could read: a link leading out of the
/// folder is refused (its target may be a file only the installer can read), and when the
/// installer is not the folder's owner (root installing a user's folder), a file of the folder
/// that belongs to another user (a hard link) must be readable by others, and keeps its mode.
struct FolderCopy {
    let source: String
    /// Where the copy goes; nil: the folder is only checked.
    let destination: String?
    /// The manifest's executable, relative to the folder (nil: outside it).
    let executable: String?
    let signed: Bool
    private(set) var count = 0
    private(set) var notes: [String] = []
    /// Every problem found when only checking (an install stops at the first).
    private(set) var problems: [HostError] = []
    /// Those of `problems` that break the plugin where it is too (a link to nothing), not only its install.
    private(set) var broken: [HostError] = []
    private var realSource = ""
    /// The folder's owner, when it is not the installer's own uid nor root: files that are not
    /// that owner's must be readable by others.
    private var foreignOwner: uid_t?

    init(source: String, destination: String?, executable: String?, signed: Bool) {
        self.source = source
        self.destination = destination
        self.executable = executable
        self.signed = signed
    }

    mutating func copy() throws(HostError) {
        guard let real = realpath(source, nil) else {
            throw HostError(.configurationError, "cannot read \(source): \(SystemCall.lastReason)", details: ["file": .string(source)])
        }
        realSource = String(cString: real)
        free(real)
        let folder = open(realSource, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard folder >= 0 else { throw Self.failure("cannot read the folder", source) }
        defer { close(folder) }
        var info = stat()
        guard fstat(folder, &info) == 0 else { throw Self.failure("cannot read the folder", source) }
        foreignOwner = info.st_uid != geteuid() && info.st_uid != 0 ? info.st_uid : nil
        try walk(folder, "")
    }

    /// An install throws `problem`; a check notes it and goes on with the next entry.
    private mutating func refuse(_ problem: HostError) throws(HostError) {
        if destination != nil { throw problem }
        problems.append(problem)
    }

    private mutating func walk(_ folder: Int32, _ relative: String) throws(HostError) {
        let from = relative.isEmpty ? source : source + "/" + relative
        let listing = dup(folder)
        guard listing >= 0, let dir = fdopendir(listing) else {
            if listing >= 0 { close(listing) }
            throw HostError(.configurationError, "cannot read the folder \(from): \(SystemCall.lastReason)", details: ["file": .string(from)])
        }
        var names: [String] = []
        var problem: HostError?
        while let entry = readdir(dir) {
            let bytes = withUnsafeBytes(of: entry.pointee.d_name) { raw in Array(raw.prefix { $0 != 0 }) }
            guard let name = String(validating: bytes, as: UTF8.self) else {
                problem = HostError(
                    .configurationError,
                    "\(from)/\(String(decoding: bytes, as: UTF8.self)) has a name that is not UTF-8; rename or remove that file before installing",
                    details: ["file": .string(from)])
                continue
            }
            if name != "." && name != ".." { names.append(name) }
        }
        closedir(dir)
        if let problem { try refuse(problem) }
        for name in names.sorted() {
            try entry(folder, name, relative.isEmpty ? name : relative + "/" + name)
        }
    }

    private mutating func entry(_ folder: Int32, _ name: String, _ path: String) throws(HostError) {
        let from = source + "/" + path
        let to = destination.map { $0 + "/" + path }
        count += 1
        if count > PluginSignature.maxFiles {
            throw HostError(.configurationError, "\(source) holds over \(PluginSignature.maxFiles) files; the limit is \(PluginSignature.maxFiles)", details: ["file": .string(source)])
        }
        var info = stat()
        guard fstatat(folder, name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { throw Self.failure("cannot read", from) }
        switch info.st_mode & S_IFMT {
        case S_IFDIR:
            let inner = openat(folder, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard inner >= 0 else { throw Self.failure("cannot read the folder", from) }
            defer { close(inner) }
            if let to {
                guard mkdir(to, 0o755) == 0 else { throw Self.failure("cannot make", to) }
                chmod(to, 0o755)
            }
            try walk(inner, path)
        case S_IFREG:
            // O_NONBLOCK: a file swapped for a named pipe meanwhile is not waited on (fstat refuses it below).
            let input = openat(folder, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
            guard input >= 0 else {
                if errno == ELOOP { return try refuse(Self.changed(from)) }
                throw Self.failure("cannot read", from)
            }
            defer { close(input) }
            var opened = stat()
            guard fstat(input, &opened) == 0 else { throw Self.failure("cannot read", from) }
            guard opened.st_mode & S_IFMT == S_IFREG else { return try refuse(Self.changed(from)) }
            var mode: mode_t = opened.st_mode & 0o111 != 0 || path == executable ? 0o755 : 0o644
            if let owner = foreignOwner, opened.st_uid != owner {
                guard opened.st_mode & 0o004 != 0 else {
                    return try refuse(
                        HostError(
                            .configurationError,
                            "\(from) belongs to uid \(opened.st_uid), not to the folder's owner (uid \(owner)), and others cannot read it (mode \(String(opened.st_mode & 0o777, radix: 8))): install copies only what the folder's owner could read; remove it from the folder (a hard link to another user's file, say) or make it readable by others",
                            details: ["file": .string(from)]))
                }
                // Not the owner's: its mode is kept (at most rwxr-xr-x), never widened.
                mode = opened.st_mode & 0o755
            }
            if let to { try copyFile(input, from, to, mode: mode) }
        case S_IFLNK:
            try link(path, from, to)
        default:
            try refuse(
                HostError(
                    .configurationError,
                    "\(from) is not a regular file, folder or link (a named pipe, socket or device), which cannot be installed; remove it from the plugin's folder",
                    details: ["file": .string(from)]))
        }
    }

    private static func changed(_ from: String) -> HostError {
        HostError(.configurationError, "\(from) changed while it was read (it is no longer a regular file); install again once the folder is left alone", details: ["file": .string(from)])
    }

    private mutating func link(_ path: String, _ from: String, _ to: String?) throws(HostError) {
        guard let resolved = realpath(from, nil) else {
            let problem = HostError(
                .configurationError, "\(from) is a symbolic link to nothing; remove it or point it at the file", details: ["file": .string(from)])
            if destination == nil { broken.append(problem) }
            return try refuse(problem)
        }
        let target = String(cString: resolved)
        free(resolved)
        if target == realSource || target.hasPrefix(realSource + "/") {
            // Inside the folder: the same link, relative, so that it leads to the copy's file.
            guard let to else { return }
            let inside = target == realSource ? "" : String(target.dropFirst(realSource.count + 1))
            let depth = path.split(separator: "/").count - 1
            let link = String(repeating: "../", count: depth) + (inside.isEmpty ? "." : inside)
            guard symlink(link, to) == 0 else { throw Self.failure("cannot make the link", to) }
            return
        }
        if signed {
            return try refuse(
                HostError(
                    .configurationError,
                    "\(from) is a symbolic link to \(target), outside the plugin's folder, and the plugin's signature covers it as that link: an installed copy cannot keep it (it would depend on a file elsewhere) nor replace it with the file (the signature would no longer hold). Replace the link with the file (cp --remove-destination '\(target)' '\(from)'), sign again (extrun plugins sign), then install",
                    details: ["file": .string(from), "target": .string(target)]))
        }
        try refuse(
            HostError(
                .configurationError,
                "\(from) is a symbolic link to \(target), outside the plugin's folder: an installed copy cannot keep it (it would depend on a file elsewhere), and install copies nothing from outside the folder (it would read the file with the installer's rights, not the folder owner's). Put the file itself in the folder (cp --remove-destination '\(target)' '\(from)'), or copy the folder with its links followed (cp -RL)",
                details: ["file": .string(from), "target": .string(target)]))
    }

    private func copyFile(_ input: Int32, _ from: String, _ to: String, mode: mode_t) throws(HostError) {
        let output = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode)
        guard output >= 0 else { throw Self.failure("cannot write", to) }
        defer { close(output) }
        // The descriptor was opened non-blocking; a regular file reads the same either way.
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count: Int
            do throws(SystemCallError) {
                count = try SystemCall.read(input, into: &buffer)
            } catch {
                throw Self.failure("cannot read", from, error)
            }
            if count == 0 { break }
            do throws(SystemCallError) {
                try SystemCall.writeAll(output, buffer[0..<count])
            } catch {
                throw Self.failure("cannot write", to, error)
            }
        }
        // The umask may have taken bits the plugin's user needs.
        guard fchmod(output, mode) == 0, fsync(output) == 0 else { throw Self.failure("cannot write", to) }
    }

    private static func failure(_ what: String, _ path: String, _ error: SystemCallError = .last("")) -> HostError {
        HostError(.internalError, "\(what) \(path): \(error.reason)", details: ["file": .string(path)])
    }
}
