import ArgumentParser
import ExtrunHost
import ExtrunProtocol
import ExtrunStore
import ExtrunSystem
import Foundation

#if canImport(Glibc)
import Glibc
#endif

// extrun globals: get, set, delete, list, export, import.

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
            guard fd >= 0 else { throw ValidationError("cannot write \(output): \(SystemCall.lastReason)") }
            defer { close(fd) }
            do {
                try globals.export { piece in
                    do throws(SystemCallError) {
                        try SystemCall.writeAll(fd, piece)
                    } catch {
                        throw ValidationError("cannot write \(output): \(error.reason)")
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
        guard fd >= 0 else { throw ValidationError("cannot read \(file): \(SystemCall.lastReason)") }
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
