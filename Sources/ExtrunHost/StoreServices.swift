import ExtrunProtocol
import ExtrunStore
import Foundation

/// Answers a plugin's service requests (globals, bookmarks, donations) from its
/// owner's part of the store. The store is opened on the first request only, so a
/// plugin that never asks costs nothing; every answer is bound to the owner
/// in the plugin's manifest, and only when the plugin's signature proves that owner:
/// signed with the owner's key or a key it trusts (`authorize`). Otherwise every store
/// request is refused (`unsignedPlugin`, `untrustedSigner`), and nothing is read or written.
final class StoreServices {
    let home: URL
    let owner: String
    /// The plugin's manifest: the intents it may donate.
    let plugin: PluginManifest
    /// False with `--no-donate`: donations are answered but not stored.
    let donate: Bool
    /// The plugin's folder and what its signature proves (PluginVerification).
    let directory: URL
    let seal: PluginSeal
    /// Set once the owner's trust in the signer was found (per run).
    private var authorized = false
    private var store: Store?
    /// The last store failure of this run that was the store's, not the plugin's (a server
    /// that cannot be reached, a store busy past its retries): a plugin that fails after it
    /// is reported with it (`IntentLifecycle.call`, details `store`).
    private(set) var storeFailure: StoreError?
    /// Lines for `--verbose`.
    let log: (@Sendable (String) -> Void)?
    /// The largest answer the connection sends (its `maxMessageBytes`): a file read is refused
    /// from its size when its answer could not fit.
    var maxAnswerBytes = SandboxPolicy.default.maxMessageBytes
    /// Who asked for the run (`HandleOptions.caller`; nil: this process's uid). A bookmark
    /// answers only its creator (or root), and as root with the creator's rights (`Bookmarks.access`).
    var caller: CallerIdentity?

    init(
        home: URL, owner: String, plugin: PluginManifest, directory: URL, seal: PluginSeal, donate: Bool = true,
        log: (@Sendable (String) -> Void)?
    ) {
        self.home = home
        self.owner = owner
        self.plugin = plugin
        self.directory = directory
        self.seal = seal
        self.donate = donate
        self.log = log
    }

    func answer(_ method: String, _ params: JSONValue?) -> Result<JSONValue, RPCError> {
        do {
            let result = try dispatch(method, params ?? .object([:]))
            return .success(result)
        } catch let error as RPCError {
            return .failure(error)
        } catch let error as StoreError {
            log?("[extrun] \(method) refused: \(error.message)")
            if [.storeUnavailable, .storeBusy, .ioError, .databaseError].contains(error.kind) { storeFailure = error }
            var data: [String: JSONValue] = ["kind": .string(error.kind.rawValue)]
            if error.kind == .quotaExceeded {
                // The numbers, so that a plugin can say how far over it is (no paths: those are the host's).
                for field in ["quota", "limit", "usage", "adding"] { data[field] = error.details[field] }
            }
            return .failure(RPCError(code: RPCError.serviceError, message: error.message, data: .object(data)))
        } catch {
            return .failure(RPCError(code: RPCError.internalError, message: "\(error)"))
        }
    }

    /// Where the store comes from when the intent has one being opened (`PendingStore`).
    /// Nil: taken from `StoreConnections` on first use (one connection per process and home).
    var storeSource: (() throws -> Store)?

    private func openStore() throws -> Store {
        if let store { return store }
        let opened = try storeSource?() ?? StoreConnections.store(home: home)
        store = opened
        return opened
    }

    private func decode<T: Decodable>(_ type: T.Type, _ params: JSONValue, _ method: String) throws -> T {
        do {
            return try JSONCoding.decode(type, from: params)
        } catch {
            throw RPCError(code: RPCError.invalidParams, message: "invalid params for \(method): \(JSONCoding.describe(error))")
        }
    }

    /// Whether the plugin's files are signed (whether the owner trusts the key is `authorize`'s question).
    var isSigned: Bool {
        if case .signed = seal { return true }
        return false
    }

    /// Whether the plugin may have its owner's data: signed (files checked at launch) with
    /// the owner's own key or an author's key the owner trusts. Throws why not.
    func authorize() throws {
        if authorized { return }
        switch seal {
        case .unsigned:
            throw StoreError(
                .unsignedPlugin,
                "\(plugin.id) is not signed, so it gets none of owner '\(owner)''s globals, bookmarks or donations; the owner signs it with: extrun plugins sign '\(directory.path)' --owner \(owner) (docs/plugin-guide.md, \"Signing your plugin\")",
                details: ["owner": .string(owner), "plugin": .string(plugin.id), "directory": .string(directory.path)])
        case .signed(_, let signingKey):
            let standing = try openStore().standing(of: signingKey, for: owner)
            if case .trustedAuthor(let author) = standing {
                log?("[extrun] \(plugin.id) is signed by \(author.author)'s key \(author.fingerprint), which \(owner) trusts")
            }
            authorized = true
        }
    }

    private static let storeMethodPrefixes = ["globals.", "bookmarks.", "donations."]

    private func dispatch(_ method: String, _ params: JSONValue) throws -> JSONValue {
        if Self.storeMethodPrefixes.contains(where: method.hasPrefix) { try authorize() }
        switch method {
        case ServiceMethod.globalsGet:
            let p = try decode(GlobalNameParams.self, params, method)
            guard let global = try openStore().globals(of: owner).get(p.name) else { return .null }
            // Built directly (GlobalValue's two fields): through JSONEncoder, a 4 MiB value took seconds in a debug build.
            return .object(["value": global.value, "version": .int(global.version)])
        case ServiceMethod.globalsSet:
            let p = try decode(GlobalSetParams.self, params, method)
            let version = try openStore().globals(of: owner).set(p.name, to: p.value, ifVersion: condition(p.ifVersion))
            return try JSONCoding.value(of: GlobalVersion(version: version))
        case ServiceMethod.globalsDelete:
            let p = try decode(GlobalDeleteParams.self, params, method)
            let deleted = try openStore().globals(of: owner).delete(p.name, ifVersion: condition(p.ifVersion))
            return try JSONCoding.value(of: GlobalDeleted(deleted: deleted))
        case ServiceMethod.globalsList:
            let p = try decode(GlobalListParams.self, params, method)
            let entries = try openStore().globals(of: owner).list(after: p.after, limit: p.limit)
            return try JSONCoding.value(of: GlobalList(globals: entries.map { GlobalListEntry(name: $0.name, version: $0.version, byteCount: $0.byteCount) }))
        case ServiceMethod.bookmarksList:
            let entries = try openStore().bookmarks(of: owner).list()
            return try JSONCoding.value(of: BookmarkList(bookmarks: entries.map {
                BookmarkSummary(name: $0.bookmark.name, kind: $0.bookmark.kind.rawValue, readOnly: $0.bookmark.readOnly, stale: $0.status.isStale)
            }))
        case ServiceMethod.bookmarksStat:
            let p = try decode(BookmarkPathParams.self, params, method)
            return try entry(try access(p.bookmark).stat(p.path))
        case ServiceMethod.bookmarksListFolder:
            let p = try decode(BookmarkListFolderParams.self, params, method)
            let infos = try access(p.bookmark).list(p.path ?? "", matching: p.glob, recursive: p.recursive ?? false)
            return try JSONCoding.value(of: FileEntryList(entries: infos.map(Self.fileEntry)))
        case ServiceMethod.bookmarksRead:
            let p = try decode(BookmarkPathParams.self, params, method)
            // A file whose answer (base64: 4 bytes for 3) cannot fit a message is refused from its
            // size, unread: reading and encoding it first cost up to ~250 MB and seconds (issue 14).
            let fitting = max(0, (maxAnswerBytes - 256) / 4 * 3)
            let access = try access(p.bookmark)
            let size = try access.stat(p.path).size
            if size > Int64(fitting) && size <= Int64(StoreLimits.maxReadBytes) {
                throw RPCError(
                    code: RPCError.serviceError,
                    message: "'\(p.path)' is \(size) bytes: its answer (base64) would be over the limit of \(maxAnswerBytes) bytes on a message (maxMessageBytes); it was not read",
                    data: [
                        "kind": "tooLarge", "limit": "maxMessageBytes", "limitValue": .int(Int64(maxAnswerBytes)),
                        "measured": .int((size + 2) / 3 * 4),
                    ])
            }
            return try JSONCoding.value(of: FileData(data: try access.read(p.path, maxBytes: fitting)))
        case ServiceMethod.bookmarksWrite:
            let p = try decode(BookmarkWriteParams.self, params, method)
            return try entry(try access(p.bookmark).write(p.path, contents: p.data, overwrite: p.overwrite ?? true))
        case ServiceMethod.bookmarksCreateFolder:
            let p = try decode(BookmarkPathParams.self, params, method)
            return try entry(try access(p.bookmark).createFolder(p.path))
        case ServiceMethod.bookmarksMove:
            let p = try decode(BookmarkMoveParams.self, params, method)
            return try entry(try access(p.bookmark).move(p.from, to: p.to))
        case ServiceMethod.bookmarksTrash:
            let p = try decode(BookmarkPathParams.self, params, method)
            let trashed = try access(p.bookmark).trash(p.path)
            return try JSONCoding.value(of: TrashResult(path: trashed.path))
        case ServiceMethod.donationsDonate:
            return try JSONCoding.value(of: try donateInteraction(decode(DonateParams.self, params, method)))
        case ServiceMethod.donationsDelete:
            let p = try decode(DonationDeleteParams.self, params, method)
            let donations = try openStore().donations(of: owner)
            var deleted = 0
            do {
                switch (p.identifier, p.groupIdentifier, p.all ?? false) {
                case (let identifier?, nil, false): deleted = try donations.delete(identifier: identifier) ? 1 : 0
                case (nil, let group?, false): deleted = try donations.delete(group: group)
                case (nil, nil, true): deleted = try donations.deleteAll()
                default:
                    throw RPCError(
                        code: RPCError.invalidParams, message: "invalid params for \(method): give exactly one of identifier, groupIdentifier, all: true")
                }
            } catch let error as StoreError where error.kind == .notYours {
                // A plugin learns nothing of other owners' donations (not even that one exists): none of its own was deleted.
                deleted = 0
            }
            return try JSONCoding.value(of: DonationDeleteResult(deleted: deleted))
        default:
            throw RPCError(code: RPCError.methodNotFound, message: "the host does not offer '\(method)'")
        }
    }

    /// A plugin's own donation: an intent it declares, with parameters that fit the manifest.
    private func donateInteraction(_ p: DonateParams) throws -> DonateResult {
        guard let definition = plugin.intent(named: p.intent) else {
            throw RPCError(
                code: RPCError.invalidParams,
                message: "invalid params for \(ServiceMethod.donationsDonate): '\(p.intent)' is not an intent of \(plugin.id) (it declares \(plugin.intents.map(\.name).joined(separator: ", ")))")
        }
        for (name, value) in p.parameters.sorted(by: { $0.key < $1.key }) {
            guard let parameter = definition.parameter(named: name) else {
                throw RPCError(code: RPCError.invalidParams, message: "invalid params for \(ServiceMethod.donationsDonate): \(p.intent) has no parameter '\(name)'")
            }
            if !value.isNull, let problem = ParameterValueCheck.problem(value, for: parameter) {
                throw RPCError(code: RPCError.invalidParams, message: "invalid params for \(ServiceMethod.donationsDonate): parameters.\(name): \(problem)")
            }
        }
        if let response = p.response, !definition.isKnownResponseCode(response.code) {
            throw RPCError(
                code: RPCError.invalidParams,
                message: "invalid params for \(ServiceMethod.donationsDonate): '\(response.code)' is neither a standard code nor one \(p.intent) declares")
        }
        let identifier = p.identifier ?? Host.newIdentifier()
        guard donate else {
            log?("[extrun] \(plugin.id) donated \(p.intent) (\(identifier)); not stored: --no-donate")
            return DonateResult(identifier: identifier, donated: false)
        }
        try openStore().donations(of: owner).donate(
            Donation(
                identifier: identifier, owner: owner, plugin: plugin.id, intent: p.intent, groupIdentifier: p.groupIdentifier, source: "plugin",
                parameters: p.parameters.mapValues(Host.withoutFileData), response: p.response))
        log?("[extrun] \(plugin.id) donated \(p.intent) (\(identifier))")
        return DonateResult(identifier: identifier, donated: true)
    }

    private func access(_ bookmark: String) throws -> BookmarkAccess {
        try openStore().bookmarks(of: owner).access(bookmark, caller: (caller ?? .process).bookmarkCaller)
    }

    private func condition(_ version: Int64?) -> VersionCondition {
        switch version {
        case nil: .any
        case 0?: .absent
        case let v?: .version(v)
        }
    }

    private func entry(_ info: FileInfo) throws -> JSONValue {
        try JSONCoding.value(of: Self.fileEntry(info))
    }

    static func fileEntry(_ info: FileInfo) -> FileEntry {
        FileEntry(
            path: info.path, kind: info.kind.rawValue, size: info.size, modified: ISODate.format(info.modified),
            permissions: Int(info.permissions))
    }
}
