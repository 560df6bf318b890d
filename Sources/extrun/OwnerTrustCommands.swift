import ArgumentParser
import ExtrunHost
import ExtrunProtocol
import ExtrunStore
import Foundation

// `extrun owners trust | untrust | quota`, and what `owners show` adds: the signing
// key, the authors' keys trusted, usage against the quota.

extension OwnerInfo {
    /// The signing key, the trusted authors' keys (docs/store.md, "Signing keys").
    var signingJSON: [String: JSONValue] {
        var object: [String: JSONValue] = ["signingKeyFile": .string(signingKeyFile)]
        if let signingKey {
            object["signingKey"] = .string(signingKey.base64EncodedString())
            object["signingFingerprint"] = .string(SigningKeyFingerprint.of(signingKey))
        }
        object["trustedSigningKeys"] = .array(trustedSigningKeys.map { key in
            .object([
                "author": .string(key.author), "fingerprint": .string(key.fingerprint),
                "publicKey": .string(key.publicKey.base64EncodedString()), "added": .string(ISODate.format(key.added)),
            ])
        })
        return object
    }
}

struct OwnersTrust: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "trust",
        abstract: "Trust an author's signing key for an owner, so that plugins the author signed get the owner's data.",
        discussion: """
            FILE is the public key file the author printed on their machine with \
            `extrun owners pubkey OWNER -o FILE` (its signingKey is what is trusted; compare its \
            signingFingerprint with the author over another channel). A plugin signed with that \
            key for OWNER (`extrun plugins sign DIR --owner OWNER` on the author's machine) then \
            gets OWNER's globals, bookmarks and donations here. `extrun owners show OWNER` lists \
            the keys trusted; `extrun owners untrust` revokes one.

            The trust is a file of this home, keys/OWNER.trusted, like the owner's key: hosts \
            that share a PostgreSQL store each read their own, so copy the file to every host (as \
            the owners' keys are; docs/scaling.md, "Per host, and shared").

            Example:
              extrun owners trust BANKTEAM --signing-key alice.pub
            """)
    @Argument(help: "The owner identity.") var owner: String
    @Option(help: ArgumentHelp("The author's public key file (from `extrun owners pubkey`).", valueName: "file"))
    var signingKey: String

    func run() throws {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: signingKey))
        } catch {
            throw ValidationError("cannot read \(signingKey): \(error.localizedDescription)")
        }
        try StoreExit.run { store in
            let file = try OwnerPublicKey.decode(data, file: signingKey)
            guard let key = file.signingKey else {
                throw StoreError(
                    .invalidKeyFile,
                    "\(signingKey) has no signingKey (it was printed by an extrun without signing keys); ask the author for a new one: extrun owners pubkey \(file.owner) -o FILE",
                    details: ["file": .string(signingKey)])
            }
            let trusted = try store.trust(owner, author: file.owner, signingKey: key)
            Output.printLine("\(owner) trusts \(trusted.author)'s signing key \(trusted.fingerprint).")
            if store.isOnServer {
                Output.printError(
                    "Only this home trusts it (\(store.trustFilePath(of: owner))): the other hosts of the store \(store.databasePath) need the same file.")
            }
        }
    }
}

struct OwnersUntrust: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "untrust",
        abstract: "Stop trusting an author's signing key for an owner.",
        discussion: """
            Plugins signed with that key get none of the owner's data from their next store \
            request on (a process already running keeps what it was given). The key is named \
            by its fingerprint (at least 8 leading hex digits), as `extrun owners show` lists it. \
            It is revoked in this home's keys/OWNER.trusted only: on hosts that share a PostgreSQL \
            store, revoke it on every host (or copy this file to each).

            Example:
              extrun owners untrust BANKTEAM --signing-key 3f2a9c01
            """)
    @Argument(help: "The owner identity.") var owner: String
    @Option(help: ArgumentHelp("The fingerprint of the trusted key (or its first 8+ hex digits).", valueName: "fingerprint"))
    var signingKey: String

    func run() throws {
        try StoreExit.run { store in
            let key = try store.untrust(owner, fingerprint: signingKey)
            Output.printLine("\(owner) no longer trusts \(key.author)'s signing key \(key.fingerprint).")
            if store.isOnServer {
                Output.printError(
                    "Revoked in this home only (\(store.trustFilePath(of: owner))): the other hosts of the store \(store.databasePath) still trust it until their file is the same.")
            }
        }
    }
}

struct OwnersQuota: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "quota",
        abstract: "Show or set an owner's quota: stored bytes, counts of globals, bookmarks, donations, and bytes written through bookmarks.",
        discussion: """
            Without options, prints the owner's limits, where each comes from (the owner's own, \
            or the default: `quota` in $EXTRUN_HOME/policy.json, else the built-in one) and its \
            usage. A write that would go over a limit is refused with quotaExceeded (the limit \
            and the usage), for plugins and for these commands alike; nothing of it is written. \
            Lowering a limit below the usage deletes nothing: writes that add are refused until \
            the owner is under it again. `default` puts a limit back to the default.

            Examples:
              extrun owners quota BANKTEAM
              extrun owners quota BANKTEAM --bytes 64MiB --globals 5000
              extrun owners quota BANKTEAM --bytes default
            """)
    @Argument(help: "The owner identity.") var owner: String
    @Option(help: ArgumentHelp("Stored bytes (e.g. 64MiB, 1GiB, or a number), or `default`.", valueName: "size")) var bytes: String?
    @Option(help: ArgumentHelp("Most globals, or `default`.", valueName: "count")) var globals: String?
    @Option(help: ArgumentHelp("Most bookmarks, or `default`.", valueName: "count")) var bookmarks: String?
    @Option(help: ArgumentHelp("Most donations, or `default`.", valueName: "count")) var donations: String?
    @Option(
        name: .customLong("file-bytes"),
        help: ArgumentHelp("Bytes its plugins may add to files through its bookmarks (e.g. 1GiB), or `default`.", valueName: "size"))
    var fileBytes: String?
    @Option(help: "Output format: text or json.") var format: OutputFormat = .text

    func changes() throws -> [String: Int64?] {
        var changes: [String: Int64?] = [:]
        for (field, text) in [("bytes", bytes), ("globals", globals), ("bookmarks", bookmarks), ("donations", donations), ("fileBytes", fileBytes)] {
            guard let text else { continue }
            let isSize = OwnerQuota.isByteField(field)
            if text == "default" {
                changes[field] = .some(nil)
            } else if let value = isSize ? ByteCount.parse(text) : Int64(text), value >= 0 {
                changes[field] = value
            } else {
                throw ValidationError(
                    "--\(OwnerQuota.option(for: field)) \(text): expected \(isSize ? "a size such as 64MiB or 1000000" : "a whole number of 0 or more") or `default`")
            }
        }
        return changes
    }

    func run() throws {
        let changes = try changes()
        try StoreExit.run { store in
            let report = changes.isEmpty ? try store.quota(of: owner) : try store.setQuota(of: owner, changes)
            if format == .json { return Output.printJSON(report.json) }
            for line in report.lines { Output.printLine(line) }
        }
    }
}

extension OwnerQuotaReport {
    /// One line per limit: `BANKTEAM bytes: 1.2 MiB of 256 MiB (default)`.
    var lines: [String] {
        OwnerQuota.fieldNames.map { field in
            let limit = OwnerQuota.isByteField(field) ? ByteCount.format(quota[field]) : "\(quota[field])"
            let used = OwnerQuota.isByteField(field) ? ByteCount.format(usage[field]) : "\(usage[field])"
            return "\(owner) \(field): \(used) of \(limit) (\(overridden.contains(field) ? "set for \(owner)" : "default"))"
        }
    }
}
