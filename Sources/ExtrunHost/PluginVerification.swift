import ExtrunProtocol
import ExtrunStore
import Foundation
import NIOConcurrencyHelpers
import Synchronization

/// The host proves a plugin's owner before it serves it (docs/sandbox.md, "Who a
/// plugin is"): a plugin folder with a signature file starts only if every file is
/// the one signed (else `signatureInvalid`, naming the file); what the owner thinks of
/// the signer (its own key, an author's it trusts) is asked on the plugin's first
/// store request (`StoreServices.authorize`). A folder without a signature runs, but
/// gets none of its owner's data.
///
/// A signed plugin runs from a private copy of the files that were checked
/// (`PluginCopies`), never from its folder: a file swapped in the folder after the check
/// is not the one that runs. A signed plugin whose folder, files, or a folder above
/// them, a uid other than root and the host's could change is refused
/// (`PluginFilePermissions`).
///
/// The files' digests are cached by identity (device, inode, size, modification and
/// change time) in the process and in `<home>/cache/plugin-digests.json`: a run reads
/// the signature file and `stat`s the plugin's files, and reads none of them whole
/// unless it changed. The cache only tells whether the folder still is as signed; what
/// runs is the copy, whose bytes were hashed as they were copied.
enum PluginVerification {
    /// The last answer per plugin folder and when it was found (monotonic ns).
    /// (The copy lies in a home: an answer is reused only for the same home.)
    private static let recent = NIOLockedValueBox<[String: (seal: PluginSeal, plugin: DiscoveredPlugin, manifest: PluginManifest, home: URL, at: UInt64)]>([:])
    /// The plugin (its folder) each private copy was made for, by the copy's folder, in this process.
    private static let copies = NIOLockedValueBox<[String: DiscoveredPlugin]>([:])

    /// The seal of `plugin`, checked now (no copy is made: `extrun plugins verify`, and the
    /// app's step of a run, whose plugin runs from its copy already: then the folder the copy
    /// was made from is checked again, so that a file changed there meanwhile is refused by name).
    static func seal(of plugin: DiscoveredPlugin, home: URL) throws(HostError) -> PluginSeal {
        if PluginCopies.contains(plugin.directory.path, home: home.path),
            let original = copies.withLockedValue({ $0[plugin.directory.path] })
        {
            return try verify(original, home: home, pin: false).seal
        }
        return try verify(plugin, home: home, pin: false).seal
    }

    /// The seal of `plugin`, and the plugin as it runs: a signed plugin's private copy
    /// (`PluginCopies`: its manifest, executable and modules, as checked), an unsigned
    /// plugin's own folder. `maxAgeNs`: an answer found that recently for the same
    /// folder is reused without looking at the files (a pool's 10 ms, as for its
    /// file identities: a change is seen by the intents that start 10 ms after it); 0 looks every time.
    static func running(_ plugin: DiscoveredPlugin, home: URL, maxAgeNs: UInt64 = 0) throws(HostError) -> (seal: PluginSeal, plugin: DiscoveredPlugin) {
        guard maxAgeNs > 0 else { return try verify(plugin, home: home, pin: true) }
        if let known = recentAnswer(for: plugin, home: home, maxAgeNs: maxAgeNs) { return known }
        // One check of a folder at a time in this process: the threads that find the last answer
        // too old while another thread looks at the files wait for its answer instead of checking
        // (and, for a new home, copying) the same files at the same moment. A pool's 8 callers
        // made the first copy of a plugin up to 8 times over, and checked a folder twice per 10 ms
        // (docs/benchmarks.md, "Warm dispatch in process"). A lock per folder: a slow check (the
        // first copy of a large plugin) holds up only the callers of that plugin.
        let check = checking.withLockedValue { checks in
            if let known = checks[plugin.manifestPath] { return known }
            if checks.count >= 256 { checks.removeAll() }
            let made = FolderCheck()
            checks[plugin.manifestPath] = made
            return made
        }
        check.lock.lock()
        defer { check.lock.unlock() }
        if let known = recentAnswer(for: plugin, home: home, maxAgeNs: maxAgeNs) { return known }
        let now = MonotonicClock.now()
        check.made.add(1, ordering: .relaxed)
        let found = try verify(plugin, home: home, pin: true)
        recent.withLockedValue { recent in
            if recent.count > 256 { recent.removeAll() }
            recent[plugin.manifestPath] = (found.seal, found.plugin, plugin.manifest, home, now)
        }
        return found
    }

    /// One folder's check in `running`: its lock, and how many times it looked at the files (tests).
    final class FolderCheck: Sendable {
        let lock = NIOLock()
        let made = Atomic<Int>(0)
    }

    /// Each folder's check, by its manifest's path. (Forgetting them all at 256 folders costs at
    /// most a second check of a folder at that moment.)
    private static let checking = NIOLockedValueBox<[String: FolderCheck]>([:])

    /// How many times `running` looked at the files of the folder whose manifest is at `manifestPath` (tests).
    static func checksMade(manifestPath: String) -> Int {
        checking.withLockedValue { $0[manifestPath]?.made.load(ordering: .relaxed) ?? 0 }
    }

    /// The answer found for `plugin`'s folder in this home less than `maxAgeNs` ago (when its
    /// check began), if any. Keyed by the manifest's path, which is kept (a URL's `path` costs
    /// microseconds per intent).
    private static func recentAnswer(for plugin: DiscoveredPlugin, home: URL, maxAgeNs: UInt64) -> (seal: PluginSeal, plugin: DiscoveredPlugin)? {
        guard let known = recent.withLockedValue({ $0[plugin.manifestPath] }) else { return nil }
        let now = MonotonicClock.now()
        guard now >= known.at, now - known.at <= maxAgeNs, known.home == home, known.manifest == plugin.manifest else { return nil }
        return (known.seal, known.plugin)
    }

    /// `argument` with a path in the plugin's folder (as written or its real path; the whole
    /// argument, or what follows an option's `=`) replaced by the same path in the copy.
    static func inCopy(_ argument: String, directory: String, copy: String) -> String {
        var folders = [directory]
        if let real = realpath(directory, nil) {
            folders.append(String(cString: real))
            free(real)
        }
        for folder in folders {
            if argument == folder { return copy }
            if argument.hasPrefix(folder + "/") { return copy + argument.dropFirst(folder.count) }
            if let equals = argument.firstIndex(of: "="), argument.hasPrefix("-") {
                let value = argument[argument.index(after: equals)...]
                if value == folder { return argument[...equals] + copy }
                if value.hasPrefix(folder + "/") { return argument[...equals] + copy + value.dropFirst(folder.count) }
            }
        }
        return argument
    }

    private static func verify(_ plugin: DiscoveredPlugin, home: URL, pin: Bool) throws(HostError) -> (seal: PluginSeal, plugin: DiscoveredPlugin) {
        let directory = String(plugin.manifestPath.dropLast("/manifest.json".count))
        func refusal(_ text: String, file: String?) -> HostError {
            var details: [String: JSONValue] = ["plugin": .string(plugin.manifest.id), "directory": .string(directory)]
            details["file"] = .string(file ?? directory + "/" + PluginSignature.fileName)
            return HostError(
                .signatureInvalid,
                "\(plugin.manifest.id) (\(directory)) is not started: \(text). Sign it again if the change is yours (extrun plugins sign '\(directory)' --owner \(plugin.manifest.owner)), or reinstall it",
                details: details)
        }
        let seal: PluginSeal
        let copy: PinnedPlugin?
        do {
            if pin {
                (seal, copy) = try PluginSignature.checkAndPin(
                    directory: directory, owner: plugin.manifest.owner, plugin: plugin.manifest.id, executable: plugin.executablePath,
                    home: home.path)
            } else {
                seal = try PluginSignature.check(
                    directory: directory, owner: plugin.manifest.owner, plugin: plugin.manifest.id, executable: plugin.executablePath,
                    home: home.path)
                copy = nil
            }
        } catch {
            throw refusal(error.text, file: error.file)
        }
        guard let copy else { return (seal, plugin) }
        // The manifest the catalog read is the one in the copy (else it was read before or
        // after a change of the folder's, which the copy would not run).
        let manifestPath = copy.directory + "/manifest.json"
        let copied: PluginManifest
        do {
            copied = try ManifestLoader.load(URL(fileURLWithPath: manifestPath))
        } catch {
            throw refusal("its signed manifest cannot be read from its copy \(manifestPath): \(error.message)", file: directory + "/manifest.json")
        }
        guard copied == plugin.manifest else {
            throw refusal("manifest.json changed while it was read and checked: the manifest read is not the one signed", file: directory + "/manifest.json")
        }
        // An argument naming a path in the folder (a script given to `/usr/bin/python3`) names it
        // in the copy: else the program, run from the copy, would read that file from the folder.
        var manifest = plugin.manifest
        manifest.arguments = manifest.arguments.map { inCopy($0, directory: directory, copy: copy.directory) }
        var executable = copy.executable
        // A `#!` line naming an interpreter in the folder by its path: the kernel would execute
        // the folder's. The copy's is started instead, with the line's argument and the script,
        // as the kernel passes them.
        if let line = Shebang.firstLine(of: URL(fileURLWithPath: copy.executable)), line.hasPrefix("#!") {
            let rest = line.dropFirst(2).trimmingCharacters(in: .whitespaces)
            let interpreter = String(rest.prefix { $0 != " " && $0 != "\t" })
            let mapped = inCopy(interpreter, directory: directory, copy: copy.directory)
            if !interpreter.isEmpty, mapped != interpreter {
                let argument = rest.dropFirst(interpreter.count).trimmingCharacters(in: .whitespaces)
                manifest.arguments = (argument.isEmpty ? [] : [argument]) + [copy.executable] + manifest.arguments
                executable = mapped
            }
        }
        let running = DiscoveredPlugin(
            manifest: manifest, directory: URL(fileURLWithPath: copy.directory, isDirectory: true),
            executableURL: URL(fileURLWithPath: executable))
        // The program started outside the copy (a script's interpreter, found on the plugin's
        // PATH or named by its `#!` line) is not signed: only root and the host's user may be able to change it.
        // The kernel runs a `#!` line's interpreter itself (up to 4 deep).
        var program = (try? PluginSession.launchProgram(running))?.executable.path
        for _ in 0..<5 {
            guard let path = program else { break }
            program = Shebang.firstLine(of: URL(fileURLWithPath: path)).flatMap { line in
                line.hasPrefix("#!") ? String(line.dropFirst(2).trimmingCharacters(in: .whitespaces).prefix { $0 != " " && $0 != "\t" }) : nil
            }
            if PluginCopies.contains(path, home: home.path) { continue }
            do throws(PluginSignatureProblem) {
                try PluginFilePermissions.checkProgram(path)
            } catch {
                throw refusal("its interpreter \(path) is not one only root and the host's user can change: \(error.text)", file: error.file)
            }
        }
        copies.withLockedValue { copies in
            if copies.count > 256 { copies.removeAll() }
            copies[copy.directory] = plugin
        }
        return (seal, running)
    }
}

/// What `extrun plugins` and `extrun plugins verify` say of a plugin's signature.
public enum PluginSignatureStatus: Sendable, Equatable {
    /// No signature file: the plugin runs but gets none of its owner's data.
    case unsigned
    /// The signature holds and the owner trusts the key: `author` nil for the owner's own key.
    case verified(owner: String, signingFingerprint: String, author: String?)
    /// The signature holds, but the owner does not trust the key here (or its keys cannot be read: `reason`).
    case untrusted(owner: String, signingFingerprint: String, reason: String)
    /// The plugin is not started: `file` changed, or the signature is malformed or another plugin's.
    case broken(file: String, message: String)

    /// One line: `verified owner EXAMPLETEAM (own key 1a2b...)`, `unsigned`, `signature broken: FILE`.
    public var summary: String {
        switch self {
        case .unsigned: "unsigned"
        case .verified(let owner, let fingerprint, let author):
            "verified owner \(owner) (\(author.map { "trusted author \($0)'s key" } ?? "its own key") \(fingerprint))"
        case .untrusted(let owner, let fingerprint, _): "signed with key \(fingerprint), which \(owner) does not trust"
        case .broken(let file, _): "signature broken: \(file)"
        }
    }

    public var json: JSONValue {
        switch self {
        case .unsigned: .object(["status": "unsigned"])
        case .verified(let owner, let fingerprint, let author):
            .object([
                "status": "verified", "owner": .string(owner), "signingFingerprint": .string(fingerprint),
                "signedBy": .string(author.map { "trusted author \($0)" } ?? "owner"),
            ])
        case .untrusted(let owner, let fingerprint, let reason):
            .object(["status": "untrusted", "owner": .string(owner), "signingFingerprint": .string(fingerprint), "message": .string(reason)])
        case .broken(let file, let message): .object(["status": "broken", "file": .string(file), "message": .string(message)])
        }
    }
}

extension Host {
    /// The plugin's signature as this host sees it: checked against its files now, and
    /// against the keys its owner trusts in `store` (nil: the store could not be opened, `storeProblem` says why).
    public func signatureStatus(of plugin: DiscoveredPlugin, store: Store?, storeProblem: String? = nil) -> PluginSignatureStatus {
        let seal: PluginSeal
        do {
            seal = try PluginVerification.seal(of: plugin, home: paths.home)
        } catch {
            return .broken(file: error.details["file"]?.stringValue ?? plugin.directory.path, message: error.message)
        }
        switch seal {
        case .unsigned:
            return .unsigned
        case .signed(let owner, let signingKey):
            let fingerprint = SigningKeyFingerprint.of(signingKey)
            guard let store else { return .untrusted(owner: owner, signingFingerprint: fingerprint, reason: storeProblem ?? "the store is not open") }
            do {
                switch try store.standing(of: signingKey, for: owner) {
                case .ownKey: return .verified(owner: owner, signingFingerprint: fingerprint, author: nil)
                case .trustedAuthor(let key): return .verified(owner: owner, signingFingerprint: fingerprint, author: key.author)
                }
            } catch let error as StoreError {
                return .untrusted(owner: owner, signingFingerprint: fingerprint, reason: error.message)
            } catch {
                return .untrusted(owner: owner, signingFingerprint: fingerprint, reason: "\(error)")
            }
        }
    }
}

extension Host {
    /// Signs the plugin in `directory` for its manifest's owner with that owner's signing key
    /// in this host's home (made on first need), as `extrun plugins sign` does. It first
    /// takes write access away from group and others on the folder and what it holds (links
    /// not followed): a signed plugin that another uid could change is not started
    /// (docs/sandbox.md, "Who a plugin is").
    @discardableResult
    public func sign(pluginIn directory: URL, store: Store? = nil) throws -> PluginSignature {
        let plugin = try PluginCatalog.plugin(in: directory)
        Self.removeOthersWrite(plugin.directory.path)
        return try PluginSignature.sign(
            directory: plugin.directory.path, owner: plugin.manifest.owner, plugin: plugin.manifest.id, executable: plugin.executablePath,
            store: store ?? Store(home: paths.home))
    }
}

extension Host {
    /// `chmod -R go-w` on `path`, links not followed.
    static func removeOthersWrite(_ path: String) {
        var info = stat()
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT != S_IFLNK else { return }
        if info.st_mode & 0o022 != 0 { _ = chmod(path, info.st_mode & 0o7755) }
        guard info.st_mode & S_IFMT == S_IFDIR, let names = try? FileManager.default.contentsOfDirectory(atPath: path) else { return }
        for name in names { removeOthersWrite(path + "/" + name) }
    }
}
