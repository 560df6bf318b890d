import ArgumentParser
import ExtrunHost
import ExtrunProtocol
import ExtrunStore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Options every store command shares.
struct OwnerOption: ParsableArguments {
    @Option(help: ArgumentHelp("The owner identity (the `owner` of a plugin's manifest, e.g. EXAMPLETEAM).", valueName: "owner"))
    var owner: String
}

/// Exit statuses of the store commands (docs/cli.md).
enum StoreExit {
    static func code(for kind: StoreErrorKind) -> Int32 {
        switch kind {
        case .notFound: 2
        case .versionConflict: 13
        case .invalidName, .invalidValue, .tooLarge, .invalidPath, .pathEscape, .wrongType, .alreadyExists, .readOnly, .staleBookmark,
            .invalidDocument, .notYours, .quotaExceeded:
            14
        case .keyMissing, .wrongKey, .invalidKeyFile, .insecurePermissions, .unsignedPlugin, .untrustedSigner: 15
        case .sealBroken, .corruptStore, .storeMissing, .incompatibleStore: 16
        case .storeBusy, .ioError, .databaseError: 17
        }
    }

    /// Runs a store operation; a store error is printed on stderr with its kind and exits with its status.
    static func run(_ body: (Store) throws -> Void) throws {
        do {
            let store = try Store(home: HostPaths.fromEnvironment().home)
            try body(store)
        } catch let error as StoreError {
            Output.printError("extrun: \(error.kind.rawValue): \(error.message)")
            throw ExitCode(code(for: error.kind))
        }
    }
}

// MARK: owners

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

// MARK: globals

struct GlobalsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "globals",
        abstract: "Read and change an owner's global variables; export and import them.",
        discussion: """
            Global variables are named JSON values (text, numbers, booleans, dates as ISO 8601 \
            text, lists, dictionaries) that plugins of one owner keep between runs, sealed \
            with the owner's key. Values up to 4 MiB (docs/store.md).

            Examples:
              extrun globals set lastOrder '"clam chowder"' --owner EXAMPLETEAM
              extrun globals set note --string 'plain text, no quotes' --owner EXAMPLETEAM
              extrun globals get lastOrder --owner EXAMPLETEAM
              extrun globals export --owner EXAMPLETEAM -o backup.json
            """,
        subcommands: [GlobalsGet.self, GlobalsSet.self, GlobalsDelete.self, GlobalsList.self, GlobalsExport.self, GlobalsImport.self]
    )
}

struct GlobalsGet: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "get", abstract: "Print a global's value as JSON (exit status 2 if there is none).")
    @Argument(help: "The global's name.") var name: String
    @OptionGroup var owner: OwnerOption
    @Flag(help: "Print {\"value\": ..., \"version\": N} instead of the value alone.") var withVersion = false

    func run() throws {
        try StoreExit.run { store in
            guard let global = try store.globals(of: owner.owner).get(name) else {
                Output.printError("extrun: notFound: owner '\(owner.owner)' has no global named '\(name)'")
                throw ExitCode(StoreExit.code(for: .notFound))
            }
            Output.printJSON(withVersion ? .object(["value": global.value, "version": .int(global.version)]) : global.value)
        }
    }
}

struct GlobalsSet: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "set", abstract: "Set a global. VALUE is JSON ('\"text\"', 42, true, [1,2], {\"a\":1}); --string takes it as plain text.")
    @Argument(help: "The global's name.") var name: String
    @Argument(help: "The value, as JSON (or plain text with --string).") var value: String
    @Flag(help: "Take VALUE as plain text rather than JSON.") var string = false
    @Option(help: ArgumentHelp("Only if the current version is exactly this (0: only if it does not exist yet).", valueName: "version"))
    var ifVersion: Int64?
    @OptionGroup var owner: OwnerOption

    func run() throws {
        let json: JSONValue
        if string {
            json = .string(value)
        } else {
            do {
                json = try JSONCoding.decode(JSONValue.self, fromJSON: Data(value.utf8))
            } catch {
                throw ValidationError(
                    "VALUE is not valid JSON (\(JSONCoding.describe(error))). Quote text as JSON ('\"text\"') or pass --string.")
            }
        }
        try StoreExit.run { store in
            let condition: VersionCondition = ifVersion.map { $0 == 0 ? .absent : .version($0) } ?? .any
            let version = try store.globals(of: owner.owner).set(name, to: json, ifVersion: condition)
            Output.printJSON(.object(["name": .string(name), "version": .int(version)]))
        }
    }
}

struct GlobalsDelete: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "delete", abstract: "Delete a global (exit status 2 if there was none).")
    @Argument(help: "The global's name.") var name: String
    @Option(help: ArgumentHelp("Only if the current version is exactly this.", valueName: "version")) var ifVersion: Int64?
    @OptionGroup var owner: OwnerOption

    func run() throws {
        try StoreExit.run { store in
            let condition: VersionCondition = ifVersion.map { .version($0) } ?? .any
            guard try store.globals(of: owner.owner).delete(name, ifVersion: condition) else {
                Output.printError("extrun: notFound: owner '\(owner.owner)' has no global named '\(name)'")
                throw ExitCode(StoreExit.code(for: .notFound))
            }
        }
    }
}

struct GlobalsList: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List an owner's globals: names, versions, sizes (values stay sealed).")
    @OptionGroup var owner: OwnerOption
    @Option(help: "Output format: text or json.") var format: OutputFormat = .text

    func run() throws {
        try StoreExit.run { store in
            let globals = try store.globals(of: owner.owner).list()
            if format == .json {
                return Output.printJSON(.array(globals.map {
                    .object(["name": .string($0.name), "version": .int($0.version), "byteCount": .int(Int64($0.byteCount))])
                }))
            }
            for global in globals { Output.printLine("\(global.name)  v\(global.version)  \(global.byteCount) bytes") }
        }
    }
}

struct GlobalsExport: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Write an owner's globals, in plaintext, as a JSON document that `import` reads.",
        discussion: """
            The document holds the values unsealed: it refuses to write to a terminal or to a \
            file other users can read, unless --force. With -o, the file is created readable \
            only by you.
            """)
    @OptionGroup var owner: OwnerOption
    @Option(name: .shortAndLong, help: ArgumentHelp("Write to this file (created with mode 0600) instead of stdout.", valueName: "file"))
    var output: String?
    @Flag(help: "Write even to a terminal or a file others can read.") var force = false

    func run() throws {
        if output == nil && !force {
            if isatty(STDOUT_FILENO) != 0 {
                throw ValidationError("refusing to print plaintext globals to a terminal; use -o FILE, redirect, or --force")
            }
            var info = stat()
            if fstat(STDOUT_FILENO, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, info.st_mode & 0o004 != 0 {
                throw ValidationError("refusing to write plaintext globals to a world-readable file; chmod o-r it, use -o FILE, or --force")
            }
        }
        if let output, !force {
            var info = stat()
            if stat(output, &info) == 0, info.st_mode & 0o004 != 0 {
                throw ValidationError("refusing to write plaintext globals to \(output): other users can read it (chmod o-r it, or --force)")
            }
        }
        try StoreExit.run { store in
            // Streamed as the rows are read (memory stays flat in the number of globals).
            let globals = try store.globals(of: owner.owner)
            guard let output else {
                try globals.export { Output.write($0, to: STDOUT_FILENO) }
                return
            }
            let fd = open(output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw ValidationError("cannot write \(output): \(String(cString: strerror(errno)))") }
            defer { close(fd) }
            do {
                try globals.export { piece in
                    var left = piece.count
                    try piece.withUnsafeBytes { raw in
                        guard var pointer = raw.baseAddress else { return }
                        while left > 0 {
                            let written = write(fd, pointer, left)
                            if written < 0 && errno == EINTR { continue }
                            guard written > 0 else { throw ValidationError("cannot write \(output): \(String(cString: strerror(errno)))") }
                            left -= written
                            pointer += written
                        }
                    }
                }
            } catch {
                // No half document: the file is left empty, the error says why.
                _ = ftruncate(fd, 0)
                throw error
            }
            Output.printError("Exported the globals of \(owner.owner) to \(output).")
        }
    }
}

extension ImportMode: ExpressibleByArgument {}

struct GlobalsImport: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Import a document written by `export`: all of it or nothing.",
        discussion: """
            --mode merge keeps globals the document does not name; --mode replace deletes them. \
            The document is streamed, one global held at a time, so memory stays flat whatever its \
            size. A file is checked through before anything is written, then written in one \
            transaction; standard input is checked as it is written, and any problem rolls it all back.
            """)
    @Argument(help: "The document (- reads standard input).") var file: String
    @OptionGroup var owner: OwnerOption
    @Option(help: "merge (default) or replace.") var mode: ImportMode = .merge

    func run() throws {
        // Streamed: read 64 KiB at a time, one global held at once (memory stays flat in the
        // document's size); a file is read twice, checked through before anything is written.
        let fd = file == "-" ? STDIN_FILENO : open(file, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw ValidationError("cannot read \(file): \(String(cString: strerror(errno)))") }
        defer { if fd != STDIN_FILENO { close(fd) } }
        try StoreExit.run { store in
            let summary = try store.globals(of: owner.owner).import(
                from: .fileDescriptor(fd, name: file == "-" ? "standard input" : file), mode: mode)
            Output.printJSON(.object([
                "created": .int(Int64(summary.created)), "updated": .int(Int64(summary.updated)),
                "unchanged": .int(Int64(summary.unchanged)), "deleted": .int(Int64(summary.deleted)),
            ]))
        }
    }
}

// MARK: bookmarks

struct BookmarksCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bookmarks",
        abstract: "Manage an owner's file and folder bookmarks.",
        discussion: """
            A bookmark is a named, sealed reference to a file or folder outside the plugins' \
            sandbox. Plugins of the owner reach it by name and a path relative to it; they \
            cannot leave it (.., absolute paths and symlinks leading out are refused). A \
            bookmark whose target moved or vanished is listed as stale with its last known path.

            Example:
              extrun bookmarks add examples Examples/intents --owner EXAMPLETEAM --read-only
            """,
        subcommands: [BookmarksAdd.self, BookmarksList.self, BookmarksShow.self, BookmarksRemove.self]
    )
}

extension BookmarkEntry {
    var json: JSONValue {
        var object: [String: JSONValue] = [
            "name": .string(bookmark.name), "path": .string(bookmark.path), "lastKnownPath": .string(bookmark.lastKnownPath),
            "kind": .string(bookmark.kind.rawValue), "readOnly": .bool(bookmark.readOnly),
            "created": .string(ISODate.format(bookmark.created)),
        ]
        switch status {
        case .ok: object["status"] = "ok"
        case .stale(let reason):
            object["status"] = "stale"
            object["staleReason"] = .string(reason.rawValue)
        }
        return .object(object)
    }
}

struct BookmarksAdd: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "add", abstract: "Bookmark a file or folder for an owner's plugins.")
    @Argument(help: "The bookmark's name.") var name: String
    @Argument(help: "The file or folder.") var path: String
    @OptionGroup var owner: OwnerOption
    @Flag(help: "Plugins may read but not change anything beneath it.") var readOnly = false

    func run() throws {
        try StoreExit.run { store in
            let bookmarks = try store.bookmarks(of: owner.owner)
            try bookmarks.add(name, path: path, readOnly: readOnly)
            Output.printJSON(try bookmarks.show(name).json)
        }
    }
}

struct BookmarksList: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List an owner's bookmarks, stale ones included.")
    @OptionGroup var owner: OwnerOption
    @Option(help: "Output format: text or json.") var format: OutputFormat = .text

    func run() throws {
        var damaged: [StoreError] = []
        try StoreExit.run { store in
            let entries: [BookmarkEntry]
            (entries, damaged) = try store.bookmarks(of: owner.owner).listReadable()
            if format == .json {
                let named = damaged.map { error -> JSONValue in
                    .object(["name": error.details["name"] ?? .null, "status": "damaged", "error": error.json])
                }
                return Output.printJSON(.array(entries.map(\.json) + named))
            }
            for entry in entries {
                let state: String
                switch entry.status {
                case .ok: state = ""
                case .stale(let reason): state = "  STALE (\(reason.rawValue)); last known at \(entry.bookmark.lastKnownPath)"
                }
                Output.printLine("\(entry.bookmark.name)  \(entry.bookmark.kind.rawValue)\(entry.bookmark.readOnly ? " read-only" : "")  \(entry.bookmark.path)\(state)")
            }
            for error in damaged { Output.printLine("\(error.details["name"]?.stringValue ?? "?")  DAMAGED (\(error.kind.rawValue))") }
        }
        // Every readable one was printed; each damaged one is named, and the status says so.
        for error in damaged { Output.printError("extrun: \(error.kind.rawValue): \(error.message)") }
        if let first = damaged.first { throw ExitCode(StoreExit.code(for: first.kind)) }
    }
}

struct BookmarksShow: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "show", abstract: "Show one bookmark and whether it is stale.")
    @Argument(help: "The bookmark's name.") var name: String
    @OptionGroup var owner: OwnerOption

    func run() throws {
        try StoreExit.run { store in Output.printJSON(try store.bookmarks(of: owner.owner).show(name).json) }
    }
}

struct BookmarksRemove: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "remove", abstract: "Remove a bookmark (its target is not touched).")
    @Argument(help: "The bookmark's name.") var name: String
    @OptionGroup var owner: OwnerOption

    func run() throws {
        try StoreExit.run { store in try store.bookmarks(of: owner.owner).remove(name) }
    }
}
