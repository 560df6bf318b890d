import ArgumentParser
import ExtrunHost
import ExtrunProtocol
import ExtrunStore
import Foundation

/// `extrun store check` and `extrun store recover` (docs/store.md, "When the store is damaged").
struct StoreCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "store",
        abstract: "Check the store file, and copy what is readable out of a damaged one.",
        discussion: """
            Neither command writes to $EXTRUN_HOME/store.sqlite or its -wal and -shm files. \
            When extrun reports the store damaged: keep a copy of those files first (while no \
            extrun runs), then `extrun store check`, then `extrun store recover NEW-FILE`.
            """,
        subcommands: [StoreCheck.self, StoreRecover.self, StoreCopyCommand.self]
    )
}

struct StoreCheck: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Ask SQLite whether the store is intact (exit status 0 if it is, 16 if not).",
        discussion: """
            Opens the store read-only, with its write-ahead log, and runs SQLite's quick_check \
            (every page read and its structure checked) or, with --full, integrity_check (also \
            every index against its table: slower). Prints a JSON report: SQLite's findings, \
            problems found before SQLite could judge (a missing write-ahead log), and the rows \
            of each table. Seals are not opened: `extrun owners list` and the lists of globals \
            and bookmarks name rows whose seal is broken.
            """)
    @Flag(help: "Run integrity_check instead of quick_check (also checks every index; slower).") var full = false

    func run() throws {
        let report: StoreMaintenance.CheckReport
        do {
            report = try StoreMaintenance.check(home: HostPaths.fromEnvironment().home, full: full)
        } catch let error as StoreError {
            Output.printError("extrun: \(error.kind.rawValue): \(error.message)")
            throw ExitCode(StoreExit.code(for: error.kind))
        }
        Output.printJSON(report.json)
        guard report.intact else {
            Output.printError(
                "extrun: \(report.file) is not intact (see the report above). Keep a copy of it with its -wal and -shm files; `extrun store recover NEW-FILE` copies every readable row into a new file.")
            throw ExitCode(StoreExit.code(for: .corruptStore))
        }
    }
}

struct StoreRecover: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "recover",
        abstract: "Copy every readable row of the store into a new store file; the store is left as it is.",
        discussion: """
            Writes NEW-FILE (which must not exist): a complete extrun store holding every row \
            SQLite can read from $EXTRUN_HOME/store.sqlite, still sealed with the owners' keys \
            in $EXTRUN_HOME/keys. Damaged stretches are stepped over and named in the JSON \
            report. When the write-ahead log is missing, a copy of store.sqlite alone is read \
            (the writes that were only in the log are not in it). Exit status 0 when every row \
            was read, 16 when some could not be (NEW-FILE still holds all the others).

            To use the recovered file, with no extrun running: move store.sqlite and its -wal and \
            -shm files together into a folder of their own (keep them), then move NEW-FILE to \
            $EXTRUN_HOME/store.sqlite. docs/store.md, "When the store is damaged".
            """)
    @Argument(help: ArgumentHelp("The new store file to write (must not exist).", valueName: "new-file")) var destination: String

    func run() throws {
        let report: StoreMaintenance.RecoveryReport
        do {
            report = try StoreMaintenance.recover(home: HostPaths.fromEnvironment().home, into: destination)
        } catch let error as StoreError {
            Output.printError("extrun: \(error.kind.rawValue): \(error.message)")
            throw ExitCode(StoreExit.code(for: error.kind))
        }
        Output.printJSON(report.json)
        let total = report.copied.values.reduce(0, +)
        if report.complete {
            Output.printError("Copied all \(total) rows of \(report.source) into \(report.destination).")
        } else {
            Output.printError(
                "extrun: copied \(total) readable rows of \(report.source) into \(report.destination); what could not be read is named under \"unreadable\" and \"problems\" above. \(report.source) was not changed.")
            throw ExitCode(StoreExit.code(for: .corruptStore))
        }
    }
}

struct StoreCopyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "copy",
        abstract: "Copy the store's rows into a PostgreSQL server, or from one back into store.sqlite.",
        discussion: """
            Copies owners, globals, bookmarks, donations and quotas from the store this home uses \
            (EXTRUN_STORE, store in policy.json, else $EXTRUN_HOME/store.sqlite) into URL: a \
            postgresql:// URL (libpq's forms; the password from PGPASSFILE), or `sqlite` for \
            $EXTRUN_HOME/store.sqlite. The sealed bytes are copied unchanged: the keys in \
            $EXTRUN_HOME/keys open them there. Each batch of 1,000 rows is one transaction; run \
            again after a stop, the copy goes on. At the end every table is compared row for row \
            (exit 16 if the destination held other rows). The source is not changed; point \
            EXTRUN_STORE (or policy.json's store) at the destination to use it. docs/store.md, "PostgreSQL".
            """)
    @Option(help: ArgumentHelp("Where to copy to: a postgresql:// URL, or sqlite.", valueName: "url")) var to: String

    func run() throws {
        try StoreExit.run { store in
            let report = try store.copy(to: StoreLocation.parse(to, origin: "--to"))
            Output.printJSON(report.json)
            let total = report.copied.values.reduce(0, +)
            Output.printError("Copied \(total) rows from \(report.source) into \(report.destination), and compared every table row for row.")
        }
    }
}
