import ExtrunProtocol
import Foundation

// The public vocabulary of owner-to-owner migration (docs/migration.md):
// what to migrate, what to do when the new owner already has a name, and
// the summary a run reports.

/// Which of an owner's data a migration moves.
public enum MigrationScope: String, Sendable, CaseIterable, Codable {
    case all
    case globals
    case bookmarks

    var kinds: [SealKind] {
        switch self {
        case .all: [.global, .bookmark]
        case .globals: [.global]
        case .bookmarks: [.bookmark]
        }
    }
}

/// What a migration does with an item whose name the new owner already uses
/// for another value. (The same value is not a conflict: it counts as
/// `alreadyPresent`, so that running a migration again changes nothing.)
public enum ConflictPolicy: String, Sendable, CaseIterable, Codable {
    /// Before writing anything, look for conflicts; if there is any, write
    /// nothing and report them. A conflict that appears later (a plugin of the
    /// new owner wrote the name meanwhile) leaves that item in the old owner.
    case fail
    /// Keep the new owner's value; the old owner's item is not migrated (and
    /// stays in the old owner, even with `removeSource`).
    case skip
    /// Replace the new owner's value by the old owner's.
    case overwrite
    /// Migrate under another name: `<name> (from <old owner>)`, then
    /// `<name> (from <old owner> 2)`, ... (shortened to fit 256 bytes).
    case rename
}

public struct MigrationOptions: Sendable, Equatable {
    public var scope: MigrationScope
    public var onConflict: ConflictPolicy
    /// Plan only: open every item, find conflicts and stale bookmarks, write nothing.
    public var dryRun: Bool
    /// After every migrated item was read back and verified under the new
    /// owner's key, delete it from the old owner.
    public var removeSource: Bool
    /// Items per transaction (a batch is also cut at about 8 MiB of values).
    public var batchSize: Int

    public init(
        scope: MigrationScope = .all, onConflict: ConflictPolicy = .fail, dryRun: Bool = false, removeSource: Bool = false,
        batchSize: Int = 2_000
    ) {
        self.scope = scope
        self.onConflict = onConflict
        self.dryRun = dryRun
        self.removeSource = removeSource
        self.batchSize = batchSize
    }
}

/// What happened to one kind of item (globals or bookmarks). Every item of the
/// old owner ends in exactly one of `migrated`, `skipped` or `failed`.
public struct MigrationCounts: Codable, Sendable, Equatable {
    /// Items of the old owner that were looked at.
    public var total = 0
    /// Readable under the new owner with the old owner's value: written now
    /// (new name, `overwritten` or `renamed`), or `alreadyPresent`.
    public var migrated = 0
    /// Part of `migrated`: the new owner already had the same name and value, nothing was written.
    public var alreadyPresent = 0
    /// The new owner had the name with another value.
    public var conflicting = 0
    /// Part of `conflicting` and `migrated`: the new owner's value was replaced.
    public var overwritten = 0
    /// Part of `conflicting` and `migrated`: migrated under another name.
    public var renamed = 0
    /// Part of `conflicting`: not migrated (policy `skip`, or `fail`); kept in the old owner.
    public var skipped = 0
    /// Could not be read (does not open with the old owner's key, not a valid
    /// record) or copied; reported in `items`, kept in the old owner.
    public var failed = 0
    /// Bookmarks only: stale in the old owner (migrated as they are).
    public var stale = 0
    /// Bookmarks only: pointed inside the old owner's container, now inside the new owner's.
    public var rewritten = 0
    /// Bookmarks only: files and folders copied from the old owner's container to the new owner's.
    public var filesCopied = 0
    public var bytesCopied: Int64 = 0
    /// With `removeSource`: deleted from the old owner after verification.
    public var removed = 0
    /// With `removeSource`: left in the old owner (skipped, failed, or not verified: see `items`).
    public var kept = 0

    public init() {}

    /// What a `fail` migration that stopped on conflicts reports: nothing was written, so
    /// nothing is counted as migrated or copied; the items looked at, the conflicts and the
    /// unreadable items stay (issue 17, item 8).
    var nothingWritten: MigrationCounts {
        var counts = MigrationCounts()
        counts.total = total
        counts.conflicting = conflicting
        counts.skipped = skipped
        counts.failed = failed
        return counts
    }

    var json: JSONValue {
        var object: [String: JSONValue] = [
            "total": .int(Int64(total)), "migrated": .int(Int64(migrated)), "alreadyPresent": .int(Int64(alreadyPresent)),
            "conflicting": .int(Int64(conflicting)), "overwritten": .int(Int64(overwritten)), "renamed": .int(Int64(renamed)),
            "skipped": .int(Int64(skipped)), "failed": .int(Int64(failed)), "removed": .int(Int64(removed)), "kept": .int(Int64(kept)),
        ]
        object["stale"] = .int(Int64(stale))
        object["rewritten"] = .int(Int64(rewritten))
        object["filesCopied"] = .int(Int64(filesCopied))
        object["bytesCopied"] = .int(bytesCopied)
        return .object(object)
    }

    mutating func add(_ other: MigrationCounts) {
        total += other.total
        migrated += other.migrated
        alreadyPresent += other.alreadyPresent
        conflicting += other.conflicting
        overwritten += other.overwritten
        renamed += other.renamed
        skipped += other.skipped
        failed += other.failed
        stale += other.stale
        rewritten += other.rewritten
        filesCopied += other.filesCopied
        bytesCopied += other.bytesCopied
        removed += other.removed
        kept += other.kept
    }
}

/// One item worth reporting: a failure, a conflict and what was done about
/// it, or an item kept in the old owner by `removeSource`.
public struct MigrationItemReport: Sendable, Equatable {
    /// `global` or `bookmark`.
    public var kind: String
    public var name: String
    /// `failed`, `conflict` (policy fail: not migrated), `skipped`, `overwritten`, `renamed`.
    public var outcome: String
    /// The name under the new owner, for `renamed`.
    public var targetName: String?
    /// The error's kind (`sealBroken`, ...) for `failed`.
    public var errorKind: String?
    public var message: String?
    /// With `removeSource`: why the item was kept in the old owner although it was migrated.
    public var kept: String?

    var json: JSONValue {
        var object: [String: JSONValue] = ["kind": .string(kind), "name": .string(name), "outcome": .string(outcome)]
        if let targetName { object["targetName"] = .string(targetName) }
        if let errorKind { object["error"] = .string(errorKind) }
        if let message { object["message"] = .string(message) }
        if let kept { object["keptBecause"] = .string(kept) }
        return .object(object)
    }
}

/// Reported after every batch, for a progress bar.
public struct MigrationProgress: Sendable, Equatable {
    /// `plan`, `copy globals`, `copy bookmarks`, `verify`, `remove globals`, `remove bookmarks`, `read bundle`.
    public var phase: String
    public var done: Int
    public var total: Int
}

/// What a migration (or its dry run) did, cumulated over every run of it (an
/// interrupted migration that was run again reports the whole migration).
public struct MigrationSummary: Sendable {
    public var from: String
    public var to: String
    /// `local`, or `bundle <id>` for an import.
    public var origin: String
    public var options: MigrationOptions
    /// This run continued a migration that had been interrupted.
    public var resumed: Bool
    /// Every phase finished (copy, and with `removeSource` verify and remove).
    public var complete: Bool
    /// Why the migration stopped before the end (e.g. conflicts under `fail`, verification failures).
    public var stoppedBecause: String?
    public var globals: MigrationCounts
    public var bookmarks: MigrationCounts
    /// Failures, conflicts and kept items; at most `itemLimit` of them.
    public var items: [MigrationItemReport]
    /// Items left out of `items` (all of them are in the store's migration record).
    public var itemsOmitted: Int
    public var sourceContainer: String
    public var targetContainer: String
    public var seconds: Double

    public static let itemLimit = 1_000

    /// Nothing failed, no conflict was left unresolved, and the migration finished (a dry run: would finish so).
    public var isClean: Bool {
        (complete || options.dryRun) && stoppedBecause == nil && globals.failed == 0 && bookmarks.failed == 0
            && (options.onConflict != .fail || (globals.skipped == 0 && bookmarks.skipped == 0))
            && (!options.removeSource || (items.allSatisfy { $0.kept == nil } && itemsOmitted == 0))
    }

    public var json: JSONValue {
        var object: [String: JSONValue] = [
            "from": .string(from), "to": .string(to), "origin": .string(origin),
            "dryRun": .bool(options.dryRun), "only": .string(options.scope.rawValue), "onConflict": .string(options.onConflict.rawValue),
            "removeSource": .bool(options.removeSource), "resumed": .bool(resumed), "complete": .bool(complete),
            "clean": .bool(isClean),
            "migrated": .int(Int64(globals.migrated + bookmarks.migrated)),
            "skipped": .int(Int64(globals.skipped + bookmarks.skipped)),
            "conflicting": .int(Int64(globals.conflicting + bookmarks.conflicting)),
            "failed": .int(Int64(globals.failed + bookmarks.failed)),
            "staleBookmarks": .int(Int64(bookmarks.stale)),
            "globals": globals.json, "bookmarks": bookmarks.json,
            "items": .array(items.map(\.json)), "itemsOmitted": .int(Int64(itemsOmitted)),
            "containers": .object(["from": .string(sourceContainer), "to": .string(targetContainer)]),
            "seconds": .double((seconds * 1000).rounded() / 1000),
        ]
        if options.removeSource {
            object["removed"] = .int(Int64(globals.removed + bookmarks.removed))
            object["kept"] = .int(Int64(globals.kept + bookmarks.kept))
        }
        if let stoppedBecause { object["stoppedBecause"] = .string(stoppedBecause) }
        return .object(object)
    }
}
