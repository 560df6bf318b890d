import ExtrunProtocol
import Foundation

extension Store {
    /// Migrates the globals and bookmarks of owner `from` to owner `to` in this
    /// store: each item is opened with `from`'s key and sealed with `to`'s
    /// (authenticated data rebound to `to`), bookmarks inside `from`'s container
    /// are pointed (and their files copied) into `to`'s. Resumable: run it again
    /// after any interruption and it finishes (docs/migration.md).
    ///
    /// Throws for problems with the store or the keys (nothing is written
    /// then); problems with single items are in the summary.
    public func migrate(
        from: String, to: String, options: MigrationOptions = MigrationOptions(), progress: ((MigrationProgress) -> Void)? = nil
    ) throws -> MigrationSummary {
        try NameRules.validateOwner(from)
        try NameRules.validateOwner(to)
        guard !from.utf8.elementsEqual(to.utf8) else {
            throw StoreError(.invalidName, "the old and the new owner are both '\(from)'; a migration needs two owners", details: ["owner": .string(from)])
        }
        guard let oldKey = try readKey(from) else {
            throw StoreError(
                .notFound, "owner '\(from)' has nothing to migrate: no key file \(keystore.path(for: from)) and nothing in \(databasePath)",
                details: ["owner": .string(from)])
        }
        let lock = options.dryRun ? nil : try MigrationLock.acquire(home: homePath, from: from, to: to)
        defer { withExtendedLifetime(lock) {} }
        // One migration of the pair at a time among every host sharing the server, too.
        let serverLock = try options.dryRun ? nil : migrationServerLock(from: from, to: to)
        defer { withExtendedLifetime(serverLock) {} }
        if case .sqlite(let database) = backend {
            try database.verifyBeforeBulkWork("migrating '\(from)' to '\(to)'")
        }
        let run = MigrationRun(
            store: self, from: from, to: to, origin: "local", options: options, containers: .local(store: self, from: from, to: to),
            copiesFiles: true, progress: progress)
        return try LocalMigration(run: run, oldKey: oldKey).perform()
    }
}

/// A migration within one store: copy phases, then with removeSource a
/// verification of everything and the removal phases.
struct LocalMigration {
    let run: MigrationRun
    let oldKey: OwnerKey

    var store: Store { run.store }
    var options: MigrationOptions { run.options }
    /// Bytes of sealed values read into one batch, at most (plus one value).
    static let batchBytes = 8 << 20

    typealias Row = MigrationRowRead

    func perform() throws -> MigrationSummary {
        if options.dryRun { return try dryRun() }
        if try run.findUnfinished() == nil, options.onConflict == .fail {
            run.targetKey = try store.readKey(run.to)
            let conflicts = try findConflicts()
            if conflicts > 0 {
                run.dryCounts.global = run.dryCounts.global.nothingWritten
                run.dryCounts.bookmark = run.dryCounts.bookmark.nothingWritten
                return try run.summary(
                    stoppedBecause: "\(conflicts) item(s) of '\(run.from)' conflict with the new owner's under --on-conflict fail; nothing was written")
            }
            run.dryCounts = MigrationRecord.Counts()
            run.dryItems = []
            run.dryItemCount = 0
        }
        let sourceStart = try store.migrationRead { rows in try rows.lastVersion(owner: run.from) }
        try run.begin(sourceStartVersion: sourceStart)
        while let record = run.record, record.phase != .done {
            switch record.phase {
            case .copyGlobals, .copyBookmarks:
                try copyPhase(record.phase)
            case .verify:
                let (failures, reports) = try verifyAll()
                if failures > 0 {
                    run.dryItems = reports
                    run.dryItemCount = failures
                    return try run.summary(
                        stoppedBecause: "\(failures) migrated item(s) do not open under the new owner's key; nothing was removed from '\(run.from)'")
                }
                try run.advance(from: .verify)
            case .removeGlobals, .removeBookmarks:
                try removePhase(record.phase)
            case .done:
                break
            }
        }
        return try run.summary()
    }

    // MARK: - Reading the old owner

    func readBatch(_ rows: any MigrationRows, kind: SealKind, after cursor: String, conflictingWith target: String? = nil) throws -> [Row] {
        try rows.readBatch(
            kind, owner: run.from, after: cursor, limit: options.batchSize, maxBytes: LocalMigration.batchBytes, conflictingWith: target)
    }

    func open(_ row: Row, kind: SealKind) -> MigrationSourceItem {
        open(row, BatchSealing(key: oldKey, kind: kind))
    }

    /// Opens a batch on every core.
    func open(_ rows: [Row], kind: SealKind) -> [MigrationSourceItem] {
        let sealing = BatchSealing(key: oldKey, kind: kind)
        return Parallel.map(rows.count) { open(rows[$0], sealing) }
    }

    func open(_ row: Row, _ sealing: BatchSealing) -> MigrationSourceItem {
        do {
            let plaintext = try sealing.open(row.sealed, name: row.name, file: store.databasePath)
            return MigrationSourceItem(name: row.name, plaintext: plaintext, version: row.version)
        } catch let error as StoreError {
            return MigrationSourceItem(name: row.name, version: row.version, failure: error)
        } catch {
            return MigrationSourceItem(name: row.name, version: row.version, failure: StoreError(.sealBroken, "\(error)"))
        }
    }

    func count(_ kind: SealKind) throws -> Int {
        try store.migrationRead { rows in try rows.count(kind, owner: run.from) }
    }

    static func phaseName(_ phase: MigrationRecord.Phase) -> String {
        switch phase {
        case .copyGlobals: "copy globals"
        case .copyBookmarks: "copy bookmarks"
        case .verify: "verify"
        case .removeGlobals: "remove globals"
        case .removeBookmarks: "remove bookmarks"
        case .done: "done"
        }
    }

    // MARK: - Plans without writing

    private func dryRun() throws -> MigrationSummary {
        run.targetKey = try store.readKey(run.to)
        run.record = try run.findUnfinished()
        run.resumed = run.record != nil
        let phases = options.scope.kinds.map(MigrationRecord.Phase.copy)
        let startIndex = run.record.map { record in phases.firstIndex(of: record.phase) ?? phases.count } ?? 0
        for (index, phase) in phases.enumerated() where index >= startIndex {
            guard let kind = phase.kind else { continue }
            var cursor = index == startIndex ? (run.record?.cursor ?? "") : ""
            let total = try count(kind)
            var done = 0
            while true {
                let rows = try store.migrationRead { rows in try readBatch(rows, kind: kind, after: cursor) }
                guard let last = rows.last else { break }
                try run.simulate(run.prepare(open(rows, kind: kind), kind: kind), kind: kind)
                cursor = last.name
                done += rows.count
                run.report(phase: "plan", done: done, total: total)
            }
        }
        return try run.summary()
    }

    /// Under `fail`, before anything is written: the items whose name the new
    /// owner uses for another value (recorded in the run's dry plan).
    private func findConflicts() throws -> Int {
        guard run.targetKey != nil else { return 0 }
        for kind in options.scope.kinds {
            var cursor = ""
            while true {
                let rows = try store.migrationRead { rows in try readBatch(rows, kind: kind, after: cursor, conflictingWith: run.to) }
                guard let last = rows.last else { break }
                try run.simulate(run.prepare(open(rows, kind: kind), kind: kind), kind: kind)
                cursor = last.name
            }
        }
        // Only conflicts count here: items that fail to open are reported by the migration itself.
        run.dryItems = run.dryItems.filter { $0.outcome == "conflict" }
        let conflicts = run.dryCounts.global.skipped + run.dryCounts.bookmark.skipped
        run.dryItemCount = conflicts
        return conflicts
    }

    // MARK: - Copying

    private func copyPhase(_ phase: MigrationRecord.Phase) throws {
        guard let kind = phase.kind else { return }
        let total = try count(kind) + (run.record?.counts[kind].total ?? 0)
        while let record = run.record, record.phase == phase {
            let cursor = record.cursor
            let rows = try store.migrationRead { rows in try readBatch(rows, kind: kind, after: cursor) }
            if rows.isEmpty {
                try run.advance(from: phase)
                return
            }
            let items = run.prepare(open(rows, kind: kind), kind: kind)
            if try run.commit(items, kind: kind, expectedCursor: cursor) {
                run.report(phase: LocalMigration.phaseName(phase), done: run.record?.counts[kind].total ?? 0, total: total)
            }
        }
    }

    // MARK: - Verifying and removing

    enum Verdict {
        /// Readable under the new owner with the old owner's value (or changed there since): may be removed.
        case verified
        /// Not migrated (failed, skipped, conflict): stays, already reported.
        case notMigrated
        /// Migrated, but stays in the old owner: the reason.
        case keep(String)
        /// The new owner's item does not open: something is wrong, remove nothing.
        case broken(StoreError)
    }

    /// The new owner's row for a migrated item: its version (globals) and sealed value.
    struct Target {
        var version: Int64?
        var sealed: Data
    }

    /// The verdicts of a batch: the new owner's rows are read in order, then
    /// both sides are opened and compared on every core.
    func verdicts(
        _ access: any MigrationRows, kind: SealKind, rows: [Row], items: [String: MigrationItemReport], record: MigrationRecord.Row,
        sealing: BatchSealing
    ) throws -> [Verdict] {
        let found = try access.rows(kind, owner: run.to, names: rows.map { items[$0.name]?.targetName ?? $0.name })
        let targets: [Target?] = rows.map { row in
            found[items[row.name]?.targetName ?? row.name].map { Target(version: $0.version, sealed: $0.sealed) }
        }
        let newSealing = run.targetKey.map { BatchSealing(key: $0, kind: kind) }
        return Parallel.map(rows.count) { index in
            judge(kind: kind, row: rows[index], item: items[rows[index].name], target: targets[index], record: record, sealing: sealing,
                  newSealing: newSealing)
        }
    }

    /// Whether the old owner's item may be removed (reads only: safe on any thread).
    func judge(
        kind: SealKind, row: Row, item: MigrationItemReport?, target: Target?, record: MigrationRecord.Row, sealing: BatchSealing,
        newSealing: BatchSealing?
    ) -> Verdict {
        if let item, ["failed", "conflict", "skipped"].contains(item.outcome) { return .notMigrated }
        let source = open(row, sealing)
        guard source.failure == nil, source.plaintext != nil else {
            return .keep("it no longer opens with the old owner's key (modified after it was copied)")
        }
        let targetName = item?.targetName ?? row.name
        guard let newSealing, let target else {
            return .keep("the new owner has no \(kind.rawValue) '\(targetName)' (deleted since, or never copied)")
        }
        let plaintext: Data
        do {
            plaintext = try newSealing.open(target.sealed, name: targetName, file: store.databasePath)
        } catch let error as StoreError {
            return .broken(error)
        } catch {
            return .broken(StoreError(.sealBroken, "\(error)"))
        }
        guard let prepared = run.prepare([source], kind: kind).first, prepared.failure == nil else {
            return .keep("it is not a valid \(kind.rawValue) record")
        }
        if kind == .global {
            if prepared.plaintext == plaintext { return .verified }
            if let targetVersion = target.version, let copied = record.targetCopiedVersion, targetVersion > copied { return .verified }
            if let version = row.version, version > record.sourceStartVersion {
                return .keep(MigrationRecord.changedDuringMigration)
            }
            return .keep("the new owner's value of '\(targetName)' differs")
        }
        guard let expected = prepared.record, let actual = try? JSONCoding.decode(BookmarkRecord.self, fromJSON: plaintext) else {
            return .keep("the new owner's bookmark '\(targetName)' is not a valid record")
        }
        if expected.path == actual.path && expected.readOnly == actual.readOnly { return .verified }
        return .keep("the new owner's bookmark '\(targetName)' points elsewhere")
    }

    /// Reads every migrated item back under the new owner's key before anything
    /// is removed. Returns the items that do not open there (and reports of the first ones).
    private func verifyAll() throws -> (Int, [MigrationItemReport]) {
        guard let record = run.record else { return (0, []) }
        var failures = 0
        var reports: [MigrationItemReport] = []
        // The cursor is "<kind>:<last name verified>"; it only moves while nothing
        // broken was found, so a run that resumes finds any broken item again.
        let saved = record.cursor.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
        let startKind = saved.count == 2 ? SealKind(rawValue: saved[0]) : nil
        let kinds = options.scope.kinds
        for kind in kinds {
            if let startKind, let start = kinds.firstIndex(of: startKind), let index = kinds.firstIndex(of: kind), index < start { continue }
            let total = try count(kind)
            let sealing = BatchSealing(key: oldKey, kind: kind)
            var cursor = kind == startKind && saved.count == 2 ? saved[1] : ""
            var done = 0
            while true {
                let (rows, found) = try store.migrationRead { access -> ([Row], [(String, StoreError)]) in
                    let rows = try readBatch(access, kind: kind, after: cursor)
                    guard let first = rows.first?.name, let last = rows.last?.name else { return (rows, []) }
                    let items = try MigrationRecord.items(access, migration: record.id, kind: kind, from: first, through: last)
                    var found: [(String, StoreError)] = []
                    let verdicts = try verdicts(access, kind: kind, rows: rows, items: items, record: record, sealing: sealing)
                    for (row, verdict) in zip(rows, verdicts) {
                        if case .broken(let error) = verdict { found.append((row.name, error)) }
                    }
                    return (rows, found)
                }
                guard let last = rows.last else { break }
                failures += found.count
                for (name, error) in found where reports.count < MigrationSummary.itemLimit {
                    reports.append(MigrationItemReport(
                        kind: kind.rawValue, name: name, outcome: "unverified", errorKind: error.kind.rawValue, message: error.message))
                }
                cursor = last.name
                done += rows.count
                if failures == 0 {
                    let position = kind.rawValue + ":" + cursor
                    try store.migrationWrite { access in
                        var current = try MigrationRecord.load(
                            access, id: record.id, source: run.from, target: run.to, origin: run.origin, file: store.databasePath)
                        guard current.phase == .verify else { return }
                        current.cursor = position
                        try MigrationRecord.save(access, current)
                    }
                }
                run.report(phase: "verify", done: done, total: total)
            }
        }
        return (failures, reports)
    }

    private func removePhase(_ phase: MigrationRecord.Phase) throws {
        guard let kind = phase.kind, let id = run.record?.id else { return }
        let total = try count(kind)
        let sealing = BatchSealing(key: oldKey, kind: kind)
        var done = 0
        while true {
            let finished = try store.migrationWrite { access -> Bool in
                var current = try MigrationRecord.load(
                    access, id: id, source: run.from, target: run.to, origin: run.origin, file: store.databasePath)
                guard current.phase == phase else { return true }
                // The old owner's writers wait: an item is deleted in the transaction that judged it.
                try access.lockOwner(run.from)
                let rows = try readBatch(access, kind: kind, after: current.cursor)
                guard let first = rows.first?.name, let last = rows.last?.name else { return true }
                let items = try MigrationRecord.items(access, migration: id, kind: kind, from: first, through: last)
                let verdicts = try verdicts(access, kind: kind, rows: rows, items: items, record: current, sealing: sealing)
                var verified: [String] = []
                for (row, verdict) in zip(rows, verdicts) {
                    switch verdict {
                    case .verified:
                        verified.append(row.name)
                        current.counts[kind].removed += 1
                    case .notMigrated:
                        current.counts[kind].kept += 1
                    case .keep(let reason):
                        try access.markKept(migration: id, kind: kind, name: row.name, reason: reason)
                        current.counts[kind].kept += 1
                    case .broken(let error):
                        try access.markKept(
                            migration: id, kind: kind, name: row.name, reason: "it does not open under the new owner's key: \(error.message)")
                        current.counts[kind].kept += 1
                    }
                }
                try access.delete(kind, owner: run.from, names: verified)
                current.cursor = last
                try MigrationRecord.save(access, current)
                run.record = current
                done += rows.count
                return false
            }
            run.report(phase: LocalMigration.phaseName(phase), done: done, total: total)
            if finished { break }
        }
        try run.advance(from: phase)
    }
}

