import ArgumentParser
import ExtrunHost
import ExtrunProtocol
import ExtrunStore
import Foundation

/// `extrun store check` and `extrun store recover` (docs/store.md, "When the store is damaged").
struct StoreCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "store",
        abstract: "Check the store, copy what is readable out of a damaged store file, copy a store to a server.",
        discussion: """
            check and recover write nothing to the store ($EXTRUN_HOME/store.sqlite with its -wal \
            and -shm files, or the PostgreSQL server; recover reads a store file only). \
            When extrun reports the store damaged: keep a copy of those files first (while no \
            extrun runs), then `extrun store check`, then `extrun store recover NEW-FILE`.
            """,
        subcommands: [StoreCheck.self, StoreRecover.self, StoreCopyCommand.self]
    )
}

struct StoreCheck: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Check the store: its file or server, its schema, and each owner's key and rows (exit status 0 if intact, 16 if not).",
        discussion: """
            Reads only. On store.sqlite: the file's header and write-ahead log, SQLite's \
            quick_check (every page read and its structure checked) or, with --full, \
            integrity_check (also every index against its table: slower). On a PostgreSQL \
            server (EXTRUN_STORE or policy.json's store): the server (version, a standby, page \
            checksums and the failures it counted), the advisory locks held, and with --full \
            amcheck's page and index checks when the database has the extension; SQLite's file \
            checks are listed as not applying. On both: the permissions of the home and keys, \
            the schema's migrations, the rows of each table, and each owner: its key file \
            against the fingerprint the store recorded, every sealed global, bookmark and \
            donation opened with it, its usage counters against its rows. Prints a JSON report \
            (steps, problems, owners, notes). One snapshot: run it while extrun writes, if need be.
            """)
    @Flag(help: "SQLite: integrity_check instead of quick_check. PostgreSQL: amcheck on every table and index, when installed.") var full = false

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
            if report.backend == "sqlite" {
                Output.printError(
                    "extrun: \(report.file) is not intact (see the report above). Keep a copy of it with its -wal and -shm files; `extrun store recover NEW-FILE` copies every readable row into a new file.")
            } else {
                Output.printError(
                    "extrun: the store on \(report.file) is not intact: \(report.problems.count) problem(s) in the report above. Keep the key files as they are; rows that do not open are named by owner, kind and name.")
            }
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

            A store on a PostgreSQL server has no file to read past its damage: recover refuses \
            it (exit 14, wrongType). The server repairs its own files from its write-ahead log; \
            `extrun store copy --to sqlite` copies its rows into a store file.
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
