import ExtrunProtocol
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// One item of the old owner as read (and opened) from its source: the store
/// itself for a local migration, or a transfer bundle for an import.
struct MigrationSourceItem {
    var name: String
    /// The opened value: a global's compact JSON, or a bookmark's record as JSON.
    var plaintext: Data?
    /// A global's version in the old owner (local migrations only).
    var version: Int64?
    /// Why the item cannot be migrated (it does not open, is not a valid record).
    var failure: StoreError?
}

/// An item ready to be written under the new owner.
struct PreparedItem {
    var name: String
    var failure: StoreError?
    /// Globals: the value's JSON, sealed as it is.
    var plaintext = Data()
    /// Bookmarks: the record for the new owner (paths rewritten into its container).
    var record: BookmarkRecord?
    /// Bookmarks inside the old owner's container, local migrations: what to copy where.
    var copySource: String?
    var copyDestination: String?
    var copied = false
    /// Bookmarks: the old owner's bookmark was stale (migrated as it is).
    var stale = false
    var rewritten = false
    /// Keep the identity recorded in the old owner (a stale bookmark stays stale).
    var keepIdentity = false
}

/// One migration run: a local migration (`Store.migrate`) or an import
/// (`Store.importTransfer`). See docs/migration.md for the guarantees.
final class MigrationRun {
    let store: Store
    let from: String
    let to: String
    let origin: String
    let options: MigrationOptions
    let containers: ContainerMap
    /// Local: copy files of bookmarks inside the old owner's container. Import: re-record bookmarks on this machine.
    let copiesFiles: Bool
    let progress: ((MigrationProgress) -> Void)?
    let started = Date()

    var targetKey: OwnerKey?
    /// The persistent record; nil in a dry run that has nothing to resume.
    var record: MigrationRecord.Row?
    var resumed = false

    // Dry runs keep their plan in memory.
    var dryCounts = MigrationRecord.Counts()
    var dryItems: [MigrationItemReport] = []
    var dryItemCount = 0
    /// Names a dry run would have written (renames), with their value, so later items see them.
    var simulated: [SealKind: [String: PreparedItem]] = [:]

    init(
        store: Store, from: String, to: String, origin: String, options: MigrationOptions, containers: ContainerMap, copiesFiles: Bool,
        progress: ((MigrationProgress) -> Void)?
    ) {
        self.store = store
        self.from = from
        self.to = to
        self.origin = origin
        self.options = options
        self.containers = containers
        self.copiesFiles = copiesFiles
        self.progress = progress
    }

    var file: String { store.databasePath }

    var storedOptions: MigrationRecord.StoredOptions {
        MigrationRecord.StoredOptions(scope: options.scope, onConflict: options.onConflict, removeSource: options.removeSource)
    }

    // MARK: - Starting and resuming

    /// Finds the unfinished migration to resume (refusing other options), or nil.
    func findUnfinished() throws -> MigrationRecord.Row? {
        let found = try store.migrationRead { rows in
            try MigrationRecord.unfinished(rows, source: from, target: to, origin: origin, file: file)
        }
        if let found, found.options != storedOptions {
            let recorded = found.options
            throw StoreError(
                .alreadyExists,
                "an interrupted migration from '\(from)' to '\(to)' is unfinished (phase \(found.phase.rawValue)) with --only \(recorded.scope.rawValue) --on-conflict \(recorded.onConflict.rawValue)\(recorded.removeSource ? " --remove-source" : ""); run it again with those options to finish it first",
                details: [
                    "from": .string(from), "to": .string(to), "phase": .string(found.phase.rawValue),
                    "only": .string(recorded.scope.rawValue), "onConflict": .string(recorded.onConflict.rawValue),
                    "removeSource": .bool(recorded.removeSource),
                ])
        }
        return found
    }

    /// Makes sure the new owner's key exists on disk (fsynced) before anything is sealed with it,
    /// switches SQLite's connection to synchronous=FULL (a PostgreSQL server's commits are
    /// durable unless its configuration says otherwise), and creates or resumes the record.
    func begin(sourceStartVersion: Int64) throws {
        targetKey = try store.writeKey(to)
        if case .sqlite(let database) = store.backend {
            do {
                try database.queue.writeWithoutTransaction { db in
                    try db.execute(sql: "PRAGMA synchronous = FULL")
                }
            } catch {
                throw StoreDatabase.storeError(error, path: file)
            }
        }
        if let existing = try findUnfinished() {
            record = existing
            resumed = true
            return
        }
        record = try store.migrationWrite { rows in
            if let raced = try MigrationRecord.unfinished(rows, source: from, target: to, origin: origin, file: file) { return raced }
            return try MigrationRecord.create(
                rows, source: from, target: to, origin: origin, options: storedOptions, sourceStartVersion: sourceStartVersion, file: file)
        }
    }

    // MARK: - Preparing items

    func prepare(_ items: [MigrationSourceItem], kind: SealKind) -> [PreparedItem] {
        items.map { item in
            var prepared = PreparedItem(name: item.name, failure: item.failure)
            guard item.failure == nil, let plaintext = item.plaintext else { return prepared }
            if kind == .global {
                prepared.plaintext = plaintext
                return prepared
            }
            do {
                let record = try JSONCoding.decode(BookmarkRecord.self, fromJSON: plaintext)
                prepareBookmark(&prepared, record)
            } catch {
                prepared.failure = StoreError(
                    .sealBroken, "bookmark '\(item.name)' of owner '\(from)' opened but is not a bookmark record: \(JSONCoding.describe(error))",
                    details: ["owner": .string(from), "name": .string(item.name)])
            }
            return prepared
        }
    }

    private func prepareBookmark(_ prepared: inout PreparedItem, _ source: BookmarkRecord) {
        var record = source
        let pathRelative = containers.relative(source.path)
        let lastRelative = containers.relative(source.lastKnownPath)
        if let pathRelative { record.path = ContainerMap.join(containers.targetRoot, pathRelative) }
        if let lastRelative { record.lastKnownPath = ContainerMap.join(containers.targetCanonicalRoot, lastRelative) }
        prepared.rewritten = pathRelative != nil || lastRelative != nil
        if copiesFiles {
            prepared.stale = Bookmarks.status(of: source).isStale
            prepared.keepIdentity = prepared.stale
            if let lastRelative, let root = containers.sourceReadRoot {
                prepared.copySource = ContainerMap.join(root, lastRelative)
                prepared.copyDestination = ContainerMap.join(containers.targetRoot, lastRelative)
            }
        } else {
            // An import: stale unless something of the same kind is at the path on this machine.
            prepared.stale = (try? Bookmarks.locate(record.path)).map { $0.kind != record.kind } ?? true
            // Made, on this machine, by whoever imports it: a uid from another machine names
            // nobody here, and a bundle must not choose whose rights a root process opens it with.
            record.creatorUID = getuid()
            record.creatorPrincipal = nil
        }
        prepared.record = record
    }

    /// Copies a bookmark's target into the new owner's container and records the copy's identity.
    func materialize(_ prepared: inout PreparedItem, copier: inout ContainerCopier) throws {
        guard !prepared.copied, prepared.failure == nil else { return }
        prepared.copied = true
        guard var record = prepared.record else { return }
        if let source = prepared.copySource, let destination = prepared.copyDestination {
            do {
                try copier.copy(source, to: destination, root: containers.targetRoot)
            } catch let conflict as CopyConflict {
                prepared.failure = StoreError(
                    .alreadyExists, "bookmark '\(prepared.name)': \(conflict.message)", details: ["name": .string(prepared.name), "file": .string(destination)])
                return
            }
        }
        // Local: a copy made for a bookmark that was not stale is its new target.
        // Import: whatever is at the path on this machine, if it is of the same kind
        // (identities are per machine: the old one's mean nothing here).
        let probe: String? = copiesFiles ? (prepared.keepIdentity ? nil : prepared.copyDestination) : record.path
        if let probe, let target = try? Bookmarks.locate(probe), copiesFiles || target.kind == record.kind {
            record.lastKnownPath = target.canonical
            record.kind = target.kind
            record.identity = target.identity
        }
        if !copiesFiles {
            prepared.stale = Bookmarks.status(of: record).isStale
        }
        prepared.record = record
    }

    // MARK: - Planning a batch

    enum Action {
        case none
        case insert(targetName: String)
        case update
    }

    struct Plan {
        var actions: [Action] = []
        var counts = MigrationCounts()
        var reports: [MigrationItemReport] = []
    }

    /// The new owner's value `row`: opened, or a failure.
    private func opened(_ row: MigrationRowRead, kind: SealKind) -> Result<Data, StoreError>? {
        guard let key = targetKey else { return nil }
        do {
            return .success(try Sealing.open(row.sealed, with: key, context: SealContext(owner: to, kind: kind, name: row.name), file: file))
        } catch let error as StoreError {
            return .failure(error)
        } catch {
            return .failure(StoreError(.sealBroken, "\(error)"))
        }
    }

    /// Whether the new owner's value (opened) is the same as the item's.
    private func same(_ kind: SealKind, _ item: PreparedItem, _ existing: Data) -> Bool {
        if kind == .global { return item.plaintext == existing }
        guard let record = item.record, let other = try? JSONCoding.decode(BookmarkRecord.self, fromJSON: existing) else { return false }
        return record.path == other.path && record.readOnly == other.readOnly
    }

    /// Decides what to do with each item against the new owner's current
    /// state (inside the caller's transaction). `simulate`: a dry run, whose
    /// earlier renames live in `simulated`.
    func plan(_ rows: any MigrationRows, _ items: [PreparedItem], kind: SealKind, simulate: Bool) throws -> Plan {
        var plan = Plan()
        let names = items.map(\.name)
        guard !names.isEmpty else { return plan }
        // The new owner's rows under the batch's names, read at once; other names (renames) one by one.
        let batchNames = Set(names)
        var targets = targetKey == nil ? [:] : try rows.rows(kind, owner: to, names: names)
        /// Items this batch (or, simulating, the dry run) writes: name -> item.
        var written = simulate ? (simulated[kind] ?? [:]) : [:]
        func target(_ name: String) throws -> MigrationRowRead? {
            if targetKey == nil { return nil }
            if let found = targets[name] { return found }
            guard !batchNames.contains(name) else { return nil }
            let found = try rows.rows(kind, owner: to, names: [name])[name]
            targets[name] = found
            return found
        }
        func lookup(_ name: String) throws -> Result<Data, StoreError>? {
            if let item = written[name] {
                return .success(kind == .global ? item.plaintext : (try? JSONCoding.encoder().encode(item.record)) ?? Data())
            }
            return try target(name).flatMap { opened($0, kind: kind) }
        }
        for item in items {
            plan.counts.total += 1
            if item.failure == nil, kind == .bookmark {
                if item.stale { plan.counts.stale += 1 }
                if item.rewritten { plan.counts.rewritten += 1 }
            }
            if let failure = item.failure {
                plan.counts.failed += 1
                plan.reports.append(report(kind, item.name, "failed", failure))
                plan.actions.append(.none)
                continue
            }
            guard let current = try lookup(item.name) else {
                plan.counts.migrated += 1
                plan.actions.append(.insert(targetName: item.name))
                written[item.name] = item
                continue
            }
            switch current {
            case .failure(let error):
                plan.counts.failed += 1
                plan.reports.append(
                    report(kind, item.name, "failed", StoreError(
                        error.kind,
                        "the new owner's \(kind.rawValue) '\(item.name)' does not open (\(error.message)); both were left as they are",
                        details: error.details)))
                plan.actions.append(.none)
                continue
            case .success(let value) where same(kind, item, value):
                plan.counts.migrated += 1
                plan.counts.alreadyPresent += 1
                plan.actions.append(.none)
                continue
            case .success:
                break
            }
            if kind == .global, origin == "local",
                try MigrationRecord.carriedChange(rows, source: from, target: to, name: item.name, targetVersion: try target(item.name)?.version)
            {
                // Changed in the old owner during an earlier --remove-source run; the new owner's
                // value is still the copy that run wrote: carry the change, whatever the policy.
                plan.counts.conflicting += 1
                plan.counts.migrated += 1
                plan.counts.overwritten += 1
                plan.reports.append(MigrationItemReport(
                    kind: kind.rawValue, name: item.name, outcome: "overwritten",
                    message: "it changed in the old owner during an earlier migration, and the new owner's value was still that migration's copy: the change was carried"))
                plan.actions.append(.update)
                written[item.name] = item
                continue
            }
            plan.counts.conflicting += 1
            switch options.onConflict {
            case .fail, .skip:
                let outcome = options.onConflict == .fail ? "conflict" : "skipped"
                plan.counts.skipped += 1
                plan.reports.append(MigrationItemReport(
                    kind: kind.rawValue, name: item.name, outcome: outcome,
                    message: "the new owner already has a \(kind.rawValue) '\(item.name)' with another value; it was kept and this one was not migrated"))
                plan.actions.append(.none)
            case .overwrite:
                plan.counts.migrated += 1
                plan.counts.overwritten += 1
                plan.reports.append(MigrationItemReport(
                    kind: kind.rawValue, name: item.name, outcome: "overwritten", message: "the new owner's value was replaced"))
                plan.actions.append(.update)
                written[item.name] = item
            case .rename:
                var decided = false
                for attempt in 1...100 {
                    guard let candidate = MigrationRun.renameCandidate(item.name, source: from, attempt: attempt) else { break }
                    guard let other = try lookup(candidate) else {
                        plan.counts.migrated += 1
                        plan.counts.renamed += 1
                        plan.reports.append(MigrationItemReport(kind: kind.rawValue, name: item.name, outcome: "renamed", targetName: candidate))
                        plan.actions.append(.insert(targetName: candidate))
                        written[candidate] = item
                        if simulate { simulated[kind, default: [:]][candidate] = item }
                        decided = true
                        break
                    }
                    if case .success(let value) = other, same(kind, item, value) {
                        plan.counts.migrated += 1
                        plan.counts.renamed += 1
                        plan.counts.alreadyPresent += 1
                        plan.reports.append(MigrationItemReport(kind: kind.rawValue, name: item.name, outcome: "renamed", targetName: candidate))
                        plan.actions.append(.none)
                        decided = true
                        break
                    }
                }
                if !decided {
                    plan.counts.failed += 1
                    plan.reports.append(report(
                        kind, item.name, "failed",
                        StoreError(.alreadyExists, "no free name to migrate \(kind.rawValue) '\(item.name)' under (tried 100)")))
                    plan.actions.append(.none)
                }
            }
        }
        return plan
    }

    private func report(_ kind: SealKind, _ name: String, _ outcome: String, _ error: StoreError) -> MigrationItemReport {
        MigrationItemReport(kind: kind.rawValue, name: name, outcome: outcome, errorKind: error.kind.rawValue, message: error.message)
    }

    /// `<name> (from <owner>)`, `<name> (from <owner> 2)`, ...: the name shortened (whole
    /// characters) to fit the 256-byte limit; nil if no valid name results.
    static func renameCandidate(_ name: String, source: String, attempt: Int) -> String? {
        let suffix = attempt == 1 ? " (from \(source))" : " (from \(source) \(attempt))"
        var base = name
        while !base.isEmpty, base.utf8.count + suffix.utf8.count > StoreLimits.maxNameBytes { base.removeLast() }
        let candidate = base + suffix
        guard !base.isEmpty, (try? NameRules.validateName(candidate, kind: .global)) != nil else { return nil }
        return candidate
    }

    // MARK: - Writing a batch

    /// Writes the plan's items; returns the global versions it gave them (one range: the
    /// batch's transaction alone takes versions of the new owner while it runs).
    @discardableResult
    func execute(_ rows: any MigrationRows, _ items: [PreparedItem], _ plan: Plan, kind: SealKind) throws -> ClosedRange<Int64>? {
        guard let key = targetKey else { throw StoreError(.databaseError, "no key for the new owner '\(to)'") }
        guard kind != .donation else {
            // Migration moves globals and bookmarks; donations stay with the old owner (docs/migration.md).
            throw StoreError(.databaseError, "donations reached the migration of items, which moves only globals and bookmarks")
        }
        let writes = plan.actions.filter { if case .none = $0 { return false } else { return true } }.count
        guard writes > 0 else { return nil }
        var version: Int64 = 0
        var written: ClosedRange<Int64>?
        if kind == .global {
            guard let last = try rows.reserveVersions(owner: to, count: writes) else {
                throw StoreError(.databaseError, "owner '\(to)' has no row in the store's owner table", details: ["owner": .string(to)])
            }
            version = last - Int64(writes)
            written = (version + 1)...last
        }
        // Seal on every core, then write in order.
        let sealing = BatchSealing(key: key, kind: kind)
        let nonces = BatchSealing.nonces(items.count)
        let actions = plan.actions
        let sealedItems: [Result<Data, StoreError>?] = Parallel.map(items.count) { index in
            let item = items[index]
            let targetName: String
            switch actions[index] {
            case .none: return nil
            case .insert(let name): targetName = name
            case .update: targetName = item.name
            }
            do {
                let plaintext = kind == .global ? item.plaintext : try JSONCoding.encoder().encode(item.record)
                return .success(try sealing.seal(plaintext, name: targetName, nonce: nonces[index]))
            } catch let error as StoreError {
                return .failure(error)
            } catch {
                return .failure(StoreError(.invalidValue, "cannot encode \(kind.rawValue) '\(item.name)': \(error)"))
            }
        }
        var inserts: [MigrationRowWrite] = []
        var updates: [MigrationRowWrite] = []
        for (index, (item, action)) in zip(items, plan.actions).enumerated() {
            guard let result = sealedItems[index] else { continue }
            let sealed = try result.get()
            if kind == .global { version += 1 }
            switch action {
            case .none: continue
            case .insert(let name): inserts.append(MigrationRowWrite(name: name, version: kind == .global ? version : nil, sealed: sealed))
            case .update: updates.append(MigrationRowWrite(name: item.name, version: kind == .global ? version : nil, sealed: sealed))
            }
        }
        try rows.write(kind, owner: to, inserts: inserts, updates: updates)
        return written
    }

    /// Plans and writes one batch in one transaction, moving the record's
    /// cursor with it. Returns false (writing nothing) when another run moved
    /// the cursor meanwhile: the caller reloads the record and goes on from there.
    func commit(_ items: [PreparedItem], kind: SealKind, expectedCursor: String) throws -> Bool {
        guard var items = Optional(items), let last = items.last?.name, let id = record?.id else { return true }
        let phase = MigrationRecord.Phase.copy(kind)
        var copier = ContainerCopier()
        if kind == .bookmark, copiesFiles {
            // Copies outside the write lock for what the plan would write now; the
            // transaction copies any other item it ends up writing (idempotent).
            let tentative = try store.migrationRead { rows in try plan(rows, items, kind: kind, simulate: false) }
            for index in items.indices {
                if case .none = tentative.actions[index] { continue }
                try materialize(&items[index], copier: &copier)
            }
            try copier.syncFolders()
        }
        return try store.migrationWrite { rows in
            var current = try MigrationRecord.load(rows, id: id, source: from, target: to, origin: origin, file: file)
            guard current.phase == phase, current.cursor == expectedCursor else {
                record = current
                return false
            }
            // The new owner's writers wait for this batch: the plan holds until it commits.
            try rows.lockOwner(to)
            var batchPlan = try plan(rows, items, kind: kind, simulate: false)
            if kind == .bookmark {
                var replan = false
                for index in items.indices where !items[index].copied {
                    if case .none = batchPlan.actions[index] { continue }
                    try materialize(&items[index], copier: &copier)
                    replan = true
                }
                try copier.syncFolders()
                if replan { batchPlan = try plan(rows, items, kind: kind, simulate: false) }
                // Count what was copied for this batch (files of items skipped later are counted too: they are on disk).
                batchPlan.counts.filesCopied += copier.files
                batchPlan.counts.bytesCopied += copier.bytes
            }
            if let written = try execute(rows, items, batchPlan, kind: kind), kind == .global {
                try rows.recordWritten(migration: id, versions: written)
            }
            for item in batchPlan.reports {
                try rows.recordItem(migration: id, kind: kind, item)
            }
            current.cursor = last
            current.counts[kind].add(batchPlan.counts)
            try MigrationRecord.save(rows, current)
            record = current
            return true
        }
    }

    /// Plans a batch without writing (a dry run), accumulating the plan in memory.
    func simulate(_ items: [PreparedItem], kind: SealKind) throws {
        let batchPlan = try store.migrationRead { rows in try plan(rows, items, kind: kind, simulate: true) }
        dryCounts[kind].add(batchPlan.counts)
        dryItemCount += batchPlan.reports.count
        for item in batchPlan.reports where dryItems.count < MigrationSummary.itemLimit { dryItems.append(item) }
    }

    /// Moves the record to its next phase (if it is still at `phase`).
    func advance(from phase: MigrationRecord.Phase) throws {
        guard let id = record?.id else { return }
        record = try store.migrationWrite { rows in
            var current = try MigrationRecord.load(rows, id: id, source: from, target: to, origin: origin, file: file)
            guard current.phase == phase else { return current }
            let next = phase.next(scope: options.scope, removeSource: options.removeSource)
            let copying: Set<MigrationRecord.Phase> = [.copyGlobals, .copyBookmarks]
            if copying.contains(phase), !copying.contains(next), current.targetCopiedVersion == nil {
                current.targetCopiedVersion = try rows.lastVersion(owner: to)
            }
            current.phase = next
            current.cursor = ""
            try MigrationRecord.save(rows, current, finished: next == .done)
            return current
        }
    }

    func report(phase: String, done: Int, total: Int) {
        progress?(MigrationProgress(phase: phase, done: done, total: total))
    }

    // MARK: - Summary

    func summary(stoppedBecause: String? = nil) throws -> MigrationSummary {
        var counts = record?.counts ?? MigrationRecord.Counts()
        var items: [MigrationItemReport] = []
        var omitted = 0
        if let id = record?.id {
            (items, omitted) = try store.migrationRead { rows in
                try MigrationRecord.reportedItems(rows, migration: id, limit: MigrationSummary.itemLimit)
            }
        }
        do {  // A dry run's plan, or the conflicts found before a `fail` migration wrote anything.
            counts.global.add(dryCounts.global)
            counts.bookmark.add(dryCounts.bookmark)
            let room = max(0, MigrationSummary.itemLimit - items.count)
            items += dryItems.prefix(room)
            omitted += max(0, dryItemCount - min(room, dryItems.count))
        }
        return MigrationSummary(
            from: from, to: to, origin: origin, options: options, resumed: resumed,
            complete: !options.dryRun && record?.phase == .done && stoppedBecause == nil,
            stoppedBecause: stoppedBecause, globals: counts.global, bookmarks: counts.bookmark, items: items, itemsOmitted: omitted,
            sourceContainer: containers.sourceLiteral, targetContainer: containers.targetRoot,
            seconds: Date().timeIntervalSince(started))
    }
}
