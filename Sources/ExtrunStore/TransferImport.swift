import ExtrunProtocol
import Foundation
import GRDB

extension Store {
    /// Imports a transfer bundle into owner `to`, whose key it must be sealed
    /// to, from the sender it must be sealed by. The whole bundle is read and
    /// checked first (authenticity, order, totals, end marker): a tampered,
    /// truncated or wrong-recipient bundle is refused with nothing written. Then
    /// it is written with the guarantees of `migrate` (batches, a record that an
    /// interrupted import resumes from). `options.removeSource` does not apply.
    public func importTransfer(
        from bundle: String, to: String, sender: TransferSender, options: MigrationOptions = MigrationOptions(),
        progress: ((MigrationProgress) -> Void)? = nil
    ) throws -> MigrationSummary {
        try NameRules.validateOwner(to)
        guard let key = try readKey(to) else {
            throw StoreError(
                .notFound,
                "owner '\(to)' has no key here, so no bundle can be sealed to it; run `extrun owners pubkey \(to)` and send its output to the exporting machine",
                details: ["owner": .string(to)])
        }
        var options = options
        options.removeSource = false
        let probe = try TransferReader(path: bundle)
        try probe.open(with: key, sender: sender)
        let header = probe.header
        let containers = ContainerMap(
            sourceLiteral: header.sourceContainer, sourceRoots: [header.sourceContainer, header.sourceContainerCanonical], sourceReadRoot: nil,
            targetRoot: containerDirectory(of: to), targetCanonicalRoot: ContainerMap.canonicalContainer(home: homePath, owner: to))
        let lock = options.dryRun ? nil : try MigrationLock.acquire(home: homePath, from: header.source, to: to)
        // On PostgreSQL, also the pair's lock on the server: other hosts import into the same rows.
        let serverLock = options.dryRun ? nil : try migrationServerLock(from: header.source, to: to)
        defer { withExtendedLifetime((lock, serverLock)) {} }
        let run = MigrationRun(
            store: self, from: header.source, to: to, origin: "bundle \(header.bundle)", options: options, containers: containers,
            copiesFiles: false, progress: progress)
        return try TransferImport(run: run, key: key, bundle: bundle, sender: sender).perform(checked: probe)
    }
}

/// Reads a bundle twice: once to check all of it (and plan, for a dry run or
/// `fail`), once to write it in batches.
struct TransferImport {
    let run: MigrationRun
    let key: OwnerKey
    let bundle: String
    let sender: TransferSender

    var options: MigrationOptions { run.options }

    /// Batches of entries of the scope, in order, with the kind of each batch.
    /// `skip` says whether an entry was already written by an earlier run.
    private func read(
        _ reader: TransferReader, skip: (SealKind, String) -> Bool, batch: (SealKind, [MigrationSourceItem]) throws -> Void
    ) throws -> TransferEnd {
        var counts: [SealKind: Int] = [:]
        var lastKind: SealKind?
        var lastName: String?
        var pending: [MigrationSourceItem] = []
        var pendingBytes = 0
        var pendingKind = SealKind.global
        func flush() throws {
            guard !pending.isEmpty else { return }
            try batch(pendingKind, pending)
            pending.removeAll(keepingCapacity: true)
            pendingBytes = 0
        }
        while let (entries, end) = try reader.next() {
            if let end {
                try flush()
                guard end.globals == counts[.global] ?? 0, end.bookmarks == counts[.bookmark] ?? 0, end.chunks == reader.chunks else {
                    throw reader.invalid(
                        "holds \(counts[.global] ?? 0) globals and \(counts[.bookmark] ?? 0) bookmarks in \(reader.chunks) chunks, but its end marker says \(end.globals), \(end.bookmarks) and \(end.chunks)")
                }
                // Read on to make sure nothing follows the end marker.
                guard try reader.next() == nil else { throw reader.invalid("has data after its end marker") }
                return end
            }
            for entry in entries ?? [] {
                if let lastKind, lastKind == .bookmark, entry.kind == .global { throw reader.invalid("has a global after its bookmarks") }
                if lastKind == entry.kind, let lastName, !lastName.utf8.lexicographicallyPrecedes(entry.name.utf8) {
                    throw reader.invalid("has its \(entry.kind.rawValue)s out of order ('\(entry.name)' after '\(lastName)')")
                }
                do {
                    try NameRules.validateName(entry.name, kind: entry.kind)
                } catch let error as StoreError {
                    throw reader.invalid("has an invalid name: \(error.message)")
                }
                lastKind = entry.kind
                lastName = entry.name
                counts[entry.kind, default: 0] += 1
                guard options.scope.kinds.contains(entry.kind), !skip(entry.kind, entry.name) else { continue }
                if entry.kind != pendingKind || pending.count >= options.batchSize || pendingBytes >= LocalMigration.batchBytes {
                    try flush()
                    pendingKind = entry.kind
                }
                pending.append(MigrationSourceItem(name: entry.name, plaintext: entry.value))
                pendingBytes += entry.value.count
            }
        }
        throw reader.invalid("is truncated: it ends without its end marker")
    }

    func perform(checked probe: TransferReader) throws -> MigrationSummary {
        let existing = try run.findUnfinished()
        run.record = existing
        run.resumed = existing != nil
        run.targetKey = key
        let recordedPhase = existing?.phase
        let recordedCursor = existing?.cursor ?? ""
        func done(_ kind: SealKind, _ name: String) -> Bool {
            guard let recordedPhase else { return false }
            let order = options.scope.kinds.map(MigrationRecord.Phase.copy)
            guard let current = order.firstIndex(of: recordedPhase) else { return true }  // Past copying: all done.
            guard let index = order.firstIndex(of: .copy(kind)) else { return true }
            if index < current { return true }
            return index == current && !recordedCursor.utf8.lexicographicallyPrecedes(name.utf8)
        }

        // Pass 1: check everything; plan it for a dry run, or find conflicts under `fail`.
        let planning = options.dryRun || (existing == nil && options.onConflict == .fail)
        let total = try read(probe, skip: done) { kind, items in
            if planning { try run.simulate(run.prepare(items, kind: kind), kind: kind) }
            run.report(phase: "check bundle", done: probe.chunks, total: 0)
        }
        for failure in total.failedItems where run.dryItems.count < MigrationSummary.itemLimit {
            // Items the exporter could not open: reported (the old machine still has them).
            run.dryItems.append(MigrationItemReport(
                kind: failure.kind, name: failure.name, outcome: "failed", errorKind: failure.error, message: "on the exporting machine: \(failure.message)"))
        }
        if options.dryRun {
            run.dryItemCount += total.failedItems.count
            return try run.summary()
        }
        if planning {
            let conflicts = run.dryCounts.global.skipped + run.dryCounts.bookmark.skipped
            if conflicts > 0 {
                run.dryItems = run.dryItems.filter { $0.outcome == "conflict" }
                run.dryItemCount = conflicts
                run.dryCounts.global = run.dryCounts.global.nothingWritten
                run.dryCounts.bookmark = run.dryCounts.bookmark.nothingWritten
                return try run.summary(
                    stoppedBecause: "\(conflicts) item(s) of the bundle conflict with the new owner's under --on-conflict fail; nothing was written")
            }
        }
        run.dryCounts = MigrationRecord.Counts()
        run.dryItems = []
        run.dryItemCount = 0

        // Pass 2: write, batch by batch, resuming after what an earlier run wrote.
        try run.begin(sourceStartVersion: 0)
        let writer = try TransferReader(path: bundle)
        try writer.open(with: key, sender: sender)
        guard writer.header.bundle == probe.header.bundle else {
            throw writer.invalid("changed while it was being imported")
        }
        let expectedTotal = total.globals + total.bookmarks
        _ = try read(writer, skip: done) { kind, items in
            var items = run.prepare(items, kind: kind)
            while let record = run.record, !items.isEmpty {
                let order = options.scope.kinds.map(MigrationRecord.Phase.copy)
                guard let current = order.firstIndex(of: record.phase), let index = order.firstIndex(of: .copy(kind)), index >= current else {
                    return  // Another run wrote these already.
                }
                if index > current {
                    try run.advance(from: record.phase)
                    continue
                }
                let cursor = record.cursor
                items = items.filter { cursor.utf8.lexicographicallyPrecedes($0.name.utf8) }
                guard !items.isEmpty else { return }
                if try run.commit(items, kind: kind, expectedCursor: cursor) { break }
            }
            let written = (run.record?.counts.global.total ?? 0) + (run.record?.counts.bookmark.total ?? 0)
            run.report(phase: "import", done: written, total: expectedTotal)
        }
        while let record = run.record, record.phase != .done {
            try run.advance(from: record.phase)
        }
        if total.failed > 0 {
            run.dryCounts.global.failed = total.failedItems.filter { $0.kind == "global" }.count
            run.dryCounts.bookmark.failed = total.failedItems.filter { $0.kind == "bookmark" }.count
            run.dryItems = total.failedItems.map {
                MigrationItemReport(kind: $0.kind, name: $0.name, outcome: "failed", errorKind: $0.error, message: "on the exporting machine: \($0.message)")
            }
            run.dryItemCount = total.failed
        }
        return try run.summary()
    }
}
