import ArgumentParser
import ExtrunStore
import ExtrunHost
import ExtrunProtocol
import Foundation

#if canImport(Glibc)
import Glibc
#endif

// `extrun migrate`: move an owner's globals and bookmarks to another owner
// (docs/migration.md is the ops guide; docs/cli.md the reference).

extension MigrationScope: ExpressibleByArgument {}
extension ConflictPolicy: ExpressibleByArgument {}

/// Exit status when a migration finished but left items behind (failed,
/// conflicting under `fail`, kept by --remove-source) or stopped before writing.
let migrationIncompleteExit: Int32 = 18

struct Migrate: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate",
        abstract: "Move an owner's globals and bookmarks to another owner, re-sealed with the new owner's key.",
        discussion: """
            For an app that changed hands: plugins of the new owner identity then see the old \
            owner's global variables and bookmarks. Each item is opened with the old owner's key \
            and sealed with the new owner's; bookmarks pointing into the old owner's container \
            ($EXTRUN_HOME/containers/<owner>/) are pointed into the new owner's, and the files \
            they point to are copied there. Nothing is lost whatever happens: an interrupted run \
            (killed, disk full) is finished by running the same command again.

            Same machine:
              extrun migrate --from OLD --to NEW --dry-run   # the plan; writes nothing
              extrun migrate --from OLD --to NEW             # copy; OLD keeps its data
              extrun migrate --from OLD --to NEW --remove-source
                                                  # verify, then remove from OLD
            Options of a run: --only globals|bookmarks, --dry-run,
            --on-conflict fail|skip|overwrite|rename, --remove-source
            (`extrun migrate run --help`).

            Two machines (the new owner's key never leaves its machine):
              new$ extrun owners pubkey NEW -o new.pub
              old$ extrun migrate export --from OLD --recipient new.pub \\
                     -o transfer.bundle
              new$ extrun migrate import transfer.bundle --to NEW \\
                     --sender-fingerprint <printed by export>

            A JSON summary goes to stdout (counts migrated, skipped, conflicting, failed, stale \
            bookmarks, and the items that need a look). Exit status: 0 all migrated; 18 finished \
            or stopped with items left behind (see the summary); store errors as for the other \
            store commands. docs/migration.md is the step-by-step guide.

            One migration of a pair runs at a time: a second one stops at once (exit 17), saying \
            which process runs it. Before writing, migrate and export check the whole store with \
            SQLite's quick_check (exit 16 if damaged: see `extrun store check`). A global changed \
            in OLD during a --remove-source run is kept there; running the same command again \
            carries it, unless NEW changed that global since.
            """,
        subcommands: [MigrateRun.self, MigrateExport.self, MigrateImport.self],
        defaultSubcommand: MigrateRun.self
    )
}

/// Options of a migration that writes into the store.
struct MigrationWriteOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Migrate only globals or only bookmarks (default: both).", valueName: "globals|bookmarks"))
    var only: MigrationScope?

    @Flag(help: "Plan only: open every item, report conflicts and stale bookmarks, write nothing.")
    var dryRun = false

    @Option(
        help: ArgumentHelp(
            """
            When the new owner already has a name with another value: fail (default: write nothing if there is any \
            conflict), skip (keep the new owner's), overwrite (replace it), rename (migrate as "NAME (from OLD)").
            """, valueName: "fail|skip|overwrite|rename"))
    var onConflict: ConflictPolicy = .fail

    @Option(help: .hidden) var batchSize: Int = 2_000

    func options(removeSource: Bool) throws -> MigrationOptions {
        guard batchSize >= 1, batchSize <= 100_000 else { throw ValidationError("--batch-size must be 1...100000") }
        return MigrationOptions(scope: only ?? .all, onConflict: onConflict, dryRun: dryRun, removeSource: removeSource, batchSize: batchSize)
    }
}

/// A progress bar on stderr when it is a terminal and the store is large.
final class ProgressBar {
    private let enabled: Bool
    private var lastDraw = Date.distantPast
    private var drawn = false
    static let threshold = 10_000

    init() { enabled = isatty(STDERR_FILENO) != 0 }

    func update(_ progress: MigrationProgress) {
        guard enabled, progress.total >= ProgressBar.threshold || (progress.total == 0 && progress.done >= ProgressBar.threshold) else { return }
        let now = Date()
        guard now.timeIntervalSince(lastDraw) >= 0.1 || progress.done >= progress.total && progress.total > 0 else { return }
        lastDraw = now
        let width = 30
        let line: String
        if progress.total > 0 {
            let fraction = min(1, Double(progress.done) / Double(progress.total))
            let filled = Int(fraction * Double(width))
            line = "\(progress.phase) [\(String(repeating: "#", count: filled))\(String(repeating: ".", count: width - filled))] \(Int(fraction * 100))% \(progress.done)/\(progress.total)"
        } else {
            line = "\(progress.phase) \(progress.done)"
        }
        FileHandle.standardError.write(Data(("\r\u{1B}[K" + line).utf8))
        drawn = true
    }

    func finish() {
        if drawn { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
    }
}

/// Prints a summary and exits 18 when it is not clean.
func finishMigration(_ summary: MigrationSummary) throws {
    Output.printJSON(summary.options.dryRun ? planJSON(summary.json) : summary.json)
    if !summary.isClean {
        let reason = summary.stoppedBecause ?? "some items were not migrated or were kept in the old owner; see \"items\" in the summary"
        Output.printError("extrun: \(summary.options.dryRun ? "the migration plan is" : "the migration is") incomplete: \(reason)")
        throw ExitCode(migrationIncompleteExit)
    }
}

struct MigrateRun: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Migrate from one owner to another in this store (the default: `extrun migrate --from OLD --to NEW`).",
        discussion: """
            Copies every global and bookmark of OLD to NEW, re-sealed with NEW's key (created \
            first if NEW has none, and written to disk before anything is sealed with it). \
            OLD keeps its data unless --remove-source: then, once everything is copied, every \
            migrated item is read back under NEW's key and compared, and only then removed from \
            OLD. Items that fail to open, conflicts left by `skip`, and items changed during the \
            migration stay in OLD and are listed in the summary.

            Run the same command again after any interruption: the migration resumes where it \
            stopped (the store records its progress) and finishes; nothing is copied twice.
            """)

    @Option(help: ArgumentHelp("The owner the data belongs to now.", valueName: "owner")) var from: String
    @Option(help: ArgumentHelp("The owner to move it to.", valueName: "owner")) var to: String
    @OptionGroup var write: MigrationWriteOptions
    @Flag(help: "After verifying every migrated item under NEW's key, delete it from OLD.") var removeSource = false

    func run() throws {
        let options = try write.options(removeSource: removeSource)
        try StoreExit.run { store in
            let bar = ProgressBar()
            let summary = try store.migrate(from: from, to: to, options: options) { bar.update($0) }
            bar.finish()
            try finishMigration(summary)
        }
    }
}

struct MigrateExport: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Write OLD's globals and bookmarks to a bundle sealed to another machine's owner key.",
        discussion: """
            The bundle is sealed with HPKE (X25519, AES-256-GCM) to the public key in KEYFILE \
            (made by `extrun owners pubkey NEW` on the other machine) and authenticated by OLD's \
            own key: only NEW's machine can open it, and it can check it came from OLD. The \
            summary prints OLD's key fingerprint: give it to the importer (--sender-fingerprint). \
            Nothing in this store changes. Files inside OLD's container are not in the bundle: \
            copy $EXTRUN_HOME/containers/<OLD>/ to the other machine's $EXTRUN_HOME/containers/<NEW>/ \
            yourself (docs/migration.md).

            Example:
              extrun migrate export --from OLD --recipient new.pub -o transfer.bundle
            """)

    @Option(help: ArgumentHelp("The owner whose data to export.", valueName: "owner")) var from: String
    @Option(help: ArgumentHelp("The recipient's public key file (`extrun owners pubkey`).", valueName: "keyfile")) var recipient: String
    @Option(name: .shortAndLong, help: ArgumentHelp("The bundle to write (must not exist; created with mode 0600).", valueName: "file"))
    var output: String
    @Option(help: ArgumentHelp("Export only globals or only bookmarks.", valueName: "globals|bookmarks")) var only: MigrationScope?

    func run() throws {
        guard let data = FileManager.default.contents(atPath: recipient) else {
            throw ValidationError("cannot read the recipient's key file \(recipient)")
        }
        try StoreExit.run { store in
            let key = try OwnerPublicKey.decode(data, file: recipient)
            let bar = ProgressBar()
            let summary = try store.exportTransfer(from: from, recipient: key, to: output, scope: only ?? .all) { bar.update($0) }
            bar.finish()
            Output.printJSON(summary.json)
            Output.printError(
                "Exported \(summary.globals) globals and \(summary.bookmarks) bookmarks of \(from) to \(output) for \(key.owner) (key \(key.fingerprint)). Sender fingerprint: \(summary.senderFingerprint)")
            if summary.failed > 0 {
                Output.printError("extrun: \(summary.failed) item(s) did not open and were left out; see \"items\"")
                throw ExitCode(migrationIncompleteExit)
            }
        }
    }
}

struct MigrateImport: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Import a bundle made by `migrate export` into owner NEW of this store.",
        discussion: """
            The bundle must be sealed to NEW's key here and by the expected sender: pass the \
            old owner's public key file (--sender, from `extrun owners pubkey OLD` on the old \
            machine) or its fingerprint (--sender-fingerprint, printed by `export`). The whole \
            bundle is checked before anything is written: a tampered, truncated or \
            wrong-recipient bundle is refused and nothing changes. Bookmarks are re-recorded \
            against this machine's files; those pointing into the old owner's container are \
            pointed into NEW's container. An interrupted import resumes when run again.

            Example:
              extrun migrate import transfer.bundle --to NEWTEAM --sender-fingerprint 3f2a...
            """)

    @Argument(help: "The bundle.") var bundle: String
    @Option(help: ArgumentHelp("The owner to import into (the bundle's recipient).", valueName: "owner")) var to: String
    @Option(help: ArgumentHelp("The old owner's public key file, to check who sealed the bundle.", valueName: "keyfile")) var sender: String?
    @Option(help: ArgumentHelp("The old owner's key fingerprint, to check who sealed the bundle.", valueName: "hex"))
    var senderFingerprint: String?
    @OptionGroup var write: MigrationWriteOptions

    func validate() throws {
        if (sender == nil) == (senderFingerprint == nil) {
            throw ValidationError("pass --sender KEYFILE or --sender-fingerprint HEX (one of them) so the bundle's origin is checked")
        }
    }

    func run() throws {
        let options = try write.options(removeSource: false)
        var senderKeyData: Data?
        if let sender {
            guard let data = FileManager.default.contents(atPath: sender) else { throw ValidationError("cannot read the sender's key file \(sender)") }
            senderKeyData = data
        }
        try StoreExit.run { store in
            let expected: TransferSender
            if let senderKeyData, let sender {
                expected = .publicKey(try OwnerPublicKey.decode(senderKeyData, file: sender))
            } else {
                expected = .fingerprint(senderFingerprint ?? "")
            }
            let bar = ProgressBar()
            let summary = try store.importTransfer(from: bundle, to: to, sender: expected, options: options) { bar.update($0) }
            bar.finish()
            try finishMigration(summary)
        }
    }
}

/// A dry run's summary says what the migration would do: `wouldMigrate` (and `wouldRemove`,
/// `wouldKeep`) in place of `migrated` (`removed`, `kept`), per kind too, and no `complete`
/// (nothing ran, so nothing is complete or incomplete; `clean` says whether it would finish
/// cleanly). docs/migration.md, "The summary".
func planJSON(_ summary: JSONValue) -> JSONValue {
    guard case .object(var object) = summary else { return summary }
    let renamed = ["migrated": "wouldMigrate", "removed": "wouldRemove", "kept": "wouldKeep"]
    func rename(_ fields: inout [String: JSONValue]) {
        for (old, new) in renamed {
            if let value = fields.removeValue(forKey: old) { fields[new] = value }
        }
    }
    rename(&object)
    object.removeValue(forKey: "complete")
    for kind in ["globals", "bookmarks"] {
        if case .object(var counts)? = object[kind] {
            rename(&counts)
            object[kind] = .object(counts)
        }
    }
    return .object(object)
}
