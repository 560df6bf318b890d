import ArgumentParser
import ExtrunHost
import ExtrunProtocol
import ExtrunStore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

// extrun bookmarks: add, list, show, remove.

struct BookmarksCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bookmarks",
        abstract: "Manage an owner's file and folder bookmarks.",
        discussion: """
            A bookmark is a named, sealed reference to a file or folder outside the plugins' \
            sandbox. Plugins of the owner reach it by name and a path relative to it; they \
            cannot leave it (.., absolute paths and symlinks leading out are refused). A \
            bookmark whose target moved or vanished is listed as stale with its last known path.

            A bookmark records who made it (the uid running `bookmarks add`, or root's \
            --creator): only that user (or root) gets its files through a plugin, and a root \
            process (`extrun serve` as root) opens them with that user's rights, never its own \
            (docs/store.md, "Who made a bookmark").

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
        var creator: [String: JSONValue] = ["uid": .int(Int64(bookmark.creator.uid)), "recorded": .bool(bookmark.creator.recorded)]
        if let principal = bookmark.creator.principal { creator["principal"] = .string(principal) }
        object["creator"] = .object(creator)
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
    @Option(
        help: ArgumentHelp(
            "Root only: the user (name or uid) the bookmark is made for, whose rights its files are opened with (default: yourself).",
            valueName: "user"))
    var creator: String?

    func run() throws {
        var maker: BookmarkCreator?
        if let creator {
            guard let uid = UInt32(creator) ?? LocalUsers.uid(named: creator) else {
                throw ValidationError("--creator: no user '\(creator)' in /etc/passwd")
            }
            maker = BookmarkCreator(uid: uid)
        }
        try StoreExit.run { store in
            let bookmarks = try store.bookmarks(of: owner.owner)
            try bookmarks.add(name, path: path, readOnly: readOnly, creator: maker)
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
