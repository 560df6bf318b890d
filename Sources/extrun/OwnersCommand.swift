import ArgumentParser
import ExtrunHost
import ExtrunProtocol
import ExtrunStore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

// extrun owners: list, show, create, pubkey (trust, untrust and quota: OwnerTrustCommands.swift).

struct Owners: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List, show and create owner identities, their keys, the signing keys they trust and their quotas.",
        discussion: """
            An owner identity is the `owner` of a plugin's manifest (a developer team, an app \
            group). Each owner has a 256-bit key, created on first use, in \
            $EXTRUN_HOME/keys/ (readable only by you); everything plugins of that owner store \
            is sealed with it, and an Ed25519 signing key that signs its plugins \
            (`extrun plugins sign`). docs/store.md describes the layout.
            """,
        subcommands: [
            OwnersList.self, OwnersShow.self, OwnersCreate.self, OwnersPubkey.self, OwnersTrust.self, OwnersUntrust.self, OwnersQuota.self,
        ],
        defaultSubcommand: OwnersList.self
    )
}

extension OwnerInfo {
    var json: JSONValue {
        var object: [String: JSONValue] = [
            "owner": .string(owner), "keyFile": .string(keyFile), "globals": .int(Int64(globalCount)),
            "bookmarks": .int(Int64(bookmarkCount)), "usable": .bool(isUsable),
        ]
        if let recordedFingerprint { object["fingerprint"] = .string(recordedFingerprint) }
        if let problem { object["problem"] = problem.json }
        return .object(object)
    }
}

struct OwnersList: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List owners, their key files and how much each has stored.")
    @Option(help: "Output format: text or json.") var format: OutputFormat = .text

    func run() throws {
        try StoreExit.run { store in
            let owners = try store.owners()
            if format == .json {
                Output.printJSON(.array(owners.map(\.json)))
                if let problem = owners.lazy.compactMap(\.problem).first { throw problem }
                return
            }
            if owners.isEmpty { Output.printLine("No owners yet (\(store.keysDirectory) is empty).") }
            for info in owners {
                let state = info.problem.map { "PROBLEM: \($0.kind.rawValue)" } ?? "ok"
                Output.printLine("\(info.owner)  \(info.globalCount) globals, \(info.bookmarkCount) bookmarks  \(state)")
            }
            // A listing that shows a problem says so in its status too.
            if let problem = owners.lazy.compactMap(\.problem).first { throw problem }
        }
    }
}

struct OwnersShow: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show",
        abstract: "Show one owner: its key file, fingerprint, counts, signing key, trusted signing keys, quota and usage, and any problem.")
    @Argument(help: "The owner identity.") var owner: String

    func run() throws {
        try StoreExit.run { store in
            let info = try store.owner(owner)
            var object: [String: JSONValue] = [:]
            if case .object(let base) = info.json { object = base }
            object.merge(info.signingJSON) { a, _ in a }
            if case .object(let quota)? = (try? store.quota(of: owner))?.json { object["quota"] = quota["quota"] }
            Output.printJSON(.object(object))
            if let problem = info.problem {
                Output.printError("extrun: \(problem.kind.rawValue): \(problem.message)")
                throw ExitCode(StoreExit.code(for: problem.kind))
            }
        }
    }
}

struct OwnersCreate: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "create", abstract: "Create an owner's key now (it is otherwise created on first use).")
    @Argument(help: "The owner identity.") var owner: String

    func run() throws {
        try StoreExit.run { store in
            Output.printJSON(try store.createOwner(owner).json)
        }
    }
}

struct OwnersPubkey: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pubkey",
        abstract: "Print an owner's public key file (for `extrun migrate export --recipient` and `extrun owners trust`).",
        discussion: """
            Prints the owner's X25519 public key and its Ed25519 signing key as a small JSON \
            file: owner, publicKey (base64), fingerprint, signingKey (base64), \
            signingFingerprint. Creates the owner's keys first if it has none. Only the public \
            halves are printed; give the file to the machine that exports data for this owner \
            (publicKey), or to the hosts that should run plugins you sign (signingKey: \
            `extrun owners trust OWNER --signing-key FILE` there), and compare the fingerprints \
            with its operator over another channel.

            Example (on the new machine):
              extrun owners pubkey NEWTEAM -o newteam.pub
            """)
    @Argument(help: "The owner identity.") var owner: String
    @Option(name: .shortAndLong, help: ArgumentHelp("Write to this file instead of stdout (must not exist).", valueName: "file"))
    var output: String?

    func run() throws {
        try StoreExit.run { store in
            let key = try store.publicKey(of: owner)
            let data = try key.encoded()
            guard let output else {
                FileHandle.standardOutput.write(data)
                return
            }
            if FileManager.default.fileExists(atPath: output) { throw ValidationError("\(output) already exists; not replacing it") }
            guard FileManager.default.createFile(atPath: output, contents: nil, attributes: [.posixPermissions: 0o644]),
                let handle = FileHandle(forWritingAtPath: output)
            else { throw ValidationError("cannot write \(output)") }
            handle.write(data)
            try handle.close()
            Output.printError(
                "Wrote the public keys of \(owner) to \(output) (fingerprint \(key.fingerprint), signing fingerprint \(key.signingFingerprint ?? "none")).")
        }
    }
}
