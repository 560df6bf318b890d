import Crypto
import ExtrunProtocol
import Foundation
import GRDB
import Synchronization
import Testing

@testable import ExtrunStore

@Suite struct DonationsTests {
    func donation(_ id: String, owner: String = "TEAM", intent: String = "OrderSoup", group: String? = nil, text: String = "tomato")
        -> Donation
    {
        Donation(
            identifier: id, owner: owner, plugin: "com.example.soupchef", intent: intent, groupIdentifier: group, source: "handle",
            parameters: ["soup": .string(text)], response: IntentResponse(code: "success", properties: ["total": 4.5]))
    }

    @Test(arguments: StoreBackendKind.all)
    func donationsRoundTripSealedAndListInOrder(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let log = try test.store.donations(of: "TEAM")
        try log.donate(donation("a", group: "g1"))
        try log.donate(donation("b", intent: "CancelOrder"))
        try log.donate(donation("c", group: "g1", text: "leek"))
        let listed = try test.reopen().donations(of: "TEAM").list()
        #expect(listed.map(\.identifier) == ["a", "b", "c"])
        #expect(listed[2].parameters == ["soup": "leek"])
        #expect(listed[2].response?.properties["total"] == 4.5)
        #expect(listed[0].groupIdentifier == "g1")
        #expect(try log.list(intent: "CancelOrder").map(\.identifier) == ["b"])
        // The parameters are sealed: the plaintext is not in the database file.
        #expect(try test.number("SELECT COUNT(*) FROM donation WHERE owner = $1 AND identifier = 'c'", owner: "TEAM") == 1)
        let leekInSealed = backend == .sqlite ? "instr(sealed, CAST('leek' AS BLOB)) > 0" : "position('leek'::bytea IN sealed) > 0"
        #expect(try test.number("SELECT COUNT(*) FROM donation WHERE owner = $1 AND \(leekInSealed)", owner: "TEAM") == 0)
    }

    /// Group commit (DonationGroupCommit): donations from many threads at once end each in
    /// its own outcome, and the store holds exactly those that succeeded (a quota refuses
    /// some in the middle of batches).
    @Test func donationsFromManyThreadsEachKeepTheirOwnOutcome() throws {
        let test = try TestStore()
        try test.store.setQuota(of: "TEAM", ["donations": 150])
        let log = try test.store.donations(of: "TEAM")
        let outcomes = Mutex<[String: StoreError?]>([:])
        let group = DispatchGroup()
        for t in 0..<8 {
            group.enter()
            Thread.detachNewThread {
                for i in 0..<25 {
                    let id = "t\(t)-\(i)"
                    do {
                        try log.donate(donation(id), durable: i % 2 == 0)
                        outcomes.withLock { $0[id] = .some(nil) }
                    } catch let error as StoreError {
                        outcomes.withLock { $0[id] = .some(error) }
                    } catch {
                        outcomes.withLock { $0[id] = .some(StoreError(.databaseError, "\(error)")) }
                    }
                }
                group.leave()
            }
        }
        group.wait()
        let all = outcomes.withLock { $0 }
        #expect(all.count == 200)
        let succeeded = Set(all.filter { $0.value == nil }.keys)
        let refused = all.compactMap { $0.value }
        #expect(succeeded.count == 150)
        #expect(refused.count == 50 && refused.allSatisfy { $0.kind == .quotaExceeded }, "\(refused.map(\.kind))")
        let listed = try test.reopen().donations(of: "TEAM").list()
        #expect(Set(listed.map(\.identifier)) == succeeded)
        #expect(try test.store.quota(of: "TEAM").usage.donations == 150)
        #expect(test.store.donationBatchCounts.donations == 200)
    }

    /// The group commit itself: donations that arrive while a batch is being written wait,
    /// then go together in the next batch, written by one of them; each gets its own result.
    @Test func donationsArrivingDuringAWriteGoTogetherInTheNextBatch() throws {
        let commits = DonationGroupCommit()
        let firstWriteStarted = DispatchSemaphore(value: 0)
        let releaseFirstWrite = DispatchSemaphore(value: 0)
        let batchSizes = Mutex<[Int]>([])
        @Sendable func entry(_ id: String) -> DonationGroupCommit.Entry {
            DonationGroupCommit.Entry(donation: donation(id), sealed: Data(id.utf8), durable: false)
        }
        @Sendable func write(_ batch: [DonationGroupCommit.Entry]) -> [Result<Void, StoreError>] {
            let first = batchSizes.withLock { sizes in
                sizes.append(batch.count)
                return sizes.count == 1
            }
            if first {
                firstWriteStarted.signal()
                releaseFirstWrite.wait()
            }
            return batch.map { item in
                item.donation.identifier == "refused" ? .failure(StoreError(.quotaExceeded, "over")) : .success(())
            }
        }
        let group = DispatchGroup()
        let failures = Mutex<[String]>([])
        func donate(_ id: String) {
            group.enter()
            Thread.detachNewThread {
                do throws(StoreError) {
                    try commits.commit(entry(id), write: write)
                } catch {
                    failures.withLock { $0.append(id) }
                }
                group.leave()
            }
        }
        donate("first")
        firstWriteStarted.wait()
        for id in ["b", "refused", "d"] { donate(id) }
        // All three wait for the first write to end.
        let deadline = Date().addingTimeInterval(10)
        while commits.pendingCount < 3, Date() < deadline { usleep(1000) }
        #expect(commits.pendingCount == 3)
        releaseFirstWrite.signal()
        group.wait()
        #expect(batchSizes.withLock { $0 } == [1, 3])
        #expect(failures.withLock { $0 } == ["refused"])
        #expect(commits.counts == (batches: 2, donations: 4))
    }

    /// A batch through the store's own writer (savepoints): donations queued behind a
    /// write go in one transaction; the one over its owner's quota fails alone, and the
    /// store holds exactly the others.
    @Test func aRealBatchKeepsEachOutcome() throws {
        let test = try TestStore()
        try test.store.setQuota(of: "TEAM", ["donations": 3])
        let store = test.store
        let log = try store.donations(of: "TEAM")
        let firstWriteStarted = DispatchSemaphore(value: 0)
        let releaseFirstWrite = DispatchSemaphore(value: 0)
        let leader = DonationGroupCommit.Entry(donation: donation("leader"), sealed: Data("x".utf8), durable: false, deadline: nil)
        let leaderDone = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            // A first batch that holds the writer until the others have queued (sealed bytes
            // that open to nothing: only the rows and the quota matter here).
            try? store.donationCommits.commit(leader) { batch in
                firstWriteStarted.signal()
                releaseFirstWrite.wait()
                return store.writeDonations(batch)
            }
            leaderDone.signal()
        }
        firstWriteStarted.wait()
        let outcomes = Mutex<[String: StoreErrorKind?]>([:])
        let group = DispatchGroup()
        for id in ["a", "b", "c"] {
            group.enter()
            Thread.detachNewThread {
                do {
                    try log.donate(donation(id))
                    outcomes.withLock { $0[id] = .some(nil) }
                } catch let error as StoreError {
                    outcomes.withLock { $0[id] = .some(error.kind) }
                } catch {
                    outcomes.withLock { $0[id] = .some(.databaseError) }
                }
                group.leave()
            }
        }
        let deadline = Date().addingTimeInterval(10)
        while store.donationCommits.pendingCount < 3, Date() < deadline { usleep(1000) }
        #expect(store.donationCommits.pendingCount == 3)
        releaseFirstWrite.signal()
        group.wait()
        leaderDone.wait()
        #expect(store.donationBatchCounts == (batches: 2, donations: 4))
        let all = outcomes.withLock { $0 }
        #expect(all.values.filter { $0 == nil }.count == 2, "\(all)")
        #expect(all.values.filter { $0 == .quotaExceeded }.count == 1, "\(all)")
        let held = try Set(store.database.read { db in try String.fetchAll(db, sql: "SELECT identifier FROM donation") })
        #expect(held == Set(["leader"] + all.filter { $0.value == nil }.map(\.key)))
        #expect(try store.quota(of: "TEAM").usage.donations == 3)
    }

    /// Queues `ids` as donations of `log` from one thread each while a first batch holds the
    /// group commit, then lets them go: they are written as one batch. Each one's outcome
    /// (nil: donated). `deadline` (ns from now) binds each donating thread to a run's deadline.
    func donateAsOneGroup(_ ids: [String], to log: Donations, store: Store, deadline: UInt64? = nil) -> [String: StoreError?] {
        let firstWriteStarted = DispatchSemaphore(value: 0)
        let releaseFirstWrite = DispatchSemaphore(value: 0)
        let leaderDone = DispatchSemaphore(value: 0)
        // The first batch writes nothing: it only holds the group commit while the others queue.
        let leader = DonationGroupCommit.Entry(donation: donation("leader"), sealed: Data("x".utf8), durable: false, deadline: nil)
        Thread.detachNewThread {
            try? store.donationCommits.commit(leader) { batch in
                firstWriteStarted.signal()
                releaseFirstWrite.wait()
                return batch.map { _ in .success(()) }
            }
            leaderDone.signal()
        }
        firstWriteStarted.wait()
        let outcomes = Mutex<[String: StoreError?]>([:])
        let group = DispatchGroup()
        let bound = deadline.map { StoreDeadline.now() + $0 }
        for id in ids {
            group.enter()
            Thread.detachNewThread {
                do {
                    try StoreDeadline.$current.withValue(bound) { try log.donate(donation(id), durable: false) }
                    outcomes.withLock { $0[id] = .some(nil) }
                } catch let error as StoreError {
                    outcomes.withLock { $0[id] = .some(error) }
                } catch {
                    outcomes.withLock { $0[id] = .some(StoreError(.databaseError, "\(error)")) }
                }
                group.leave()
            }
        }
        let waitUntil = Date().addingTimeInterval(10)
        while store.donationCommits.pendingCount < ids.count, Date() < waitUntil { usleep(1000) }
        let queued = store.donationCommits.pendingCount
        #expect(queued == ids.count)
        releaseFirstWrite.signal()
        group.wait()
        leaderDone.wait()
        return outcomes.withLock { $0 }
    }

    /// A failure that ends a batch's transaction (here the write lock, held by another
    /// connection past the runs' deadline) reaches every donation of the batch, each with
    /// the store's typed error, and nothing of the batch is written.
    @Test func aFailedBatchFailsEveryDonationInItWithItsKind() throws {
        let test = try TestStore()
        let log = try test.store.donations(of: "TEAM")
        try log.donate(donation("before"))
        let holder = try WriteLockHolder(databasePath: test.databasePath)
        let ids = ["a", "b", "c", "d"]
        let outcomes = donateAsOneGroup(ids, to: log, store: test.store, deadline: 2_000_000_000)
        holder.release()
        #expect(test.store.donationBatchCounts == (batches: 3, donations: 6))
        let kinds = ids.map { outcomes[$0]??.kind }
        #expect(kinds == Array(repeating: .storeBusy, count: ids.count), "\(outcomes)")
        let held = try test.store.donations(of: "TEAM").list().map(\.identifier)
        #expect(held == ["before"])
    }

    /// A read-only connection (SQLite's query_only: every write refused with
    /// SQLITE_READONLY) fails each donation of a batch with ioError; none is written, and
    /// the connection writes again once it may.
    @Test func aReadOnlyStoreFailsEveryDonationOfABatch() throws {
        let test = try TestStore()
        let log = try test.store.donations(of: "TEAM")
        try log.donate(donation("before"))
        try test.store.database.withoutTransaction { db in try db.execute(sql: "PRAGMA query_only = ON") }
        let ids = ["a", "b", "c"]
        let outcomes = donateAsOneGroup(ids, to: log, store: test.store)
        #expect(test.store.donationBatchCounts == (batches: 3, donations: 5))
        let kinds = ids.map { outcomes[$0]??.kind }
        #expect(kinds == Array(repeating: .ioError, count: ids.count), "\(outcomes)")
        try test.store.database.withoutTransaction { db in try db.execute(sql: "PRAGMA query_only = OFF") }
        try log.donate(donation("after"))
        let held = try test.reopen().donations(of: "TEAM").list().map(\.identifier)
        #expect(held == ["before", "after"])
    }

    /// What `donate` returning means: the row is committed. A process donating from 8
    /// threads (as a host's, at synchronous = NORMAL, without a checkpoint at close) is
    /// killed with SIGKILL in the middle; every donation it saw return is in the store.
    @Test func everyDonationThatReturnedSurvivesAKillOfTheProcess() throws {
        let test = try TestStore()
        let acknowledged = test.directory.sub("acknowledged")
        _ = FileManager.default.createFile(atPath: acknowledged, contents: Data())
        let process = Process()
        process.executableURL = URL(fileURLWithPath: try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
        process.arguments = ["--testing-library", "swift-testing", "--filter", "DonationsTests/childDonor"]
        var environment = ProcessInfo.processInfo.environment
        environment[childDonorHome] = test.home
        environment[childDonorLog] = acknowledged
        process.environment = environment
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        func lines() -> [String] {
            let text = (try? String(contentsOfFile: acknowledged, encoding: .utf8)) ?? ""
            // Only whole lines: the last may be cut by the kill.
            return text.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init)
        }
        let deadline = Date().addingTimeInterval(60)
        while lines().count < 300, process.isRunning, Date() < deadline { usleep(2000) }
        let running = process.isRunning
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        #expect(running, "the donor ended before it was killed")
        #expect(process.terminationReason == .uncaughtSignal)
        let returned = Set(lines())
        #expect(returned.count >= 300)
        let held = Set(try test.reopen().donations(of: "TEAM").list().map(\.identifier))
        let missing = returned.subtracting(held)
        #expect(missing.isEmpty, "returned but not in the store: \(missing.sorted().prefix(10))")
    }

    /// The donor of `everyDonationThatReturnedSurvivesAKillOfTheProcess`; runs only in its
    /// child process. 8 threads donate until the process is killed, appending each
    /// identifier to the log once its donation returned.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[childDonorHome] != nil))
    func childDonor() throws {
        let environment = ProcessInfo.processInfo.environment
        let home = try #require(environment[childDonorHome])
        let logPath = try #require(environment[childDonorLog])
        let descriptor = open(logPath, O_WRONLY | O_APPEND | O_CLOEXEC)
        try #require(descriptor >= 0)
        let store = try Store(home: URL(fileURLWithPath: home), checkpointOnClose: false, logLimitBytes: StoreLimits.maxLogBytesLongLived)
        let log = try store.donations(of: "TEAM")
        for thread in 0..<8 {
            Thread.detachNewThread {
                for index in 0... {
                    let id = "t\(thread)-\(index)"
                    guard (try? log.donate(donation(id), durable: false)) != nil else { continue }
                    let line = Array((id + "\n").utf8)
                    _ = line.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
                }
            }
        }
        // Until the parent's SIGKILL (or a minute, if it never comes).
        sleep(60)
    }

    /// Folding the log keeps the connection's busy handler: a write after a fold still
    /// gives up at the run's deadline when another process holds the store (the fold's
    /// busy timeout used to replace the handler, and every later wait took 10 s).
    @Test func aFoldKeepsTheDeadlineOfLaterWaits() throws {
        let test = try TestStore()
        let store = try Store(home: URL(fileURLWithPath: test.home), checkpointOnClose: false)
        let log = try store.donations(of: "TEAM")
        try log.donate(donation("before"))
        #expect(store.foldLog())
        let holder = try WriteLockHolder(databasePath: test.databasePath)
        defer { holder.release() }
        let started = StoreDeadline.now()
        let error = #expect(throws: StoreError.self) {
            try StoreDeadline.$current.withValue(started + 300_000_000) { try log.donate(donation("blocked")) }
        }
        let waitedMs = (StoreDeadline.now() - started) / 1_000_000
        #expect(error?.kind == .storeBusy)
        #expect(waitedMs < 3000, "waited \(waitedMs) ms for a 300 ms deadline")
    }

    /// A donation waiting behind another batch is bounded by its own run's deadline, as
    /// it was before batching: it leaves the queue with storeBusy, and nothing of it is written.
    @Test func aDonationWaitingForAnotherBatchEndsAtItsDeadline() throws {
        let commits = DonationGroupCommit()
        let firstWriteStarted = DispatchSemaphore(value: 0)
        let releaseFirstWrite = DispatchSemaphore(value: 0)
        let written = Mutex<[String]>([])
        @Sendable func write(_ batch: [DonationGroupCommit.Entry]) -> [Result<Void, StoreError>] {
            let first = written.withLock { names in
                defer { names += batch.map(\.donation.identifier) }
                return names.isEmpty
            }
            if first {
                firstWriteStarted.signal()
                releaseFirstWrite.wait()
            }
            return batch.map { _ in .success(()) }
        }
        let leaderDone = DispatchSemaphore(value: 0)
        let leaderEntry = DonationGroupCommit.Entry(donation: donation("leader"), sealed: Data(), durable: false, deadline: nil)
        Thread.detachNewThread {
            try? commits.commit(leaderEntry, write: write)
            leaderDone.signal()
        }
        firstWriteStarted.wait()
        let started = StoreDeadline.now()
        let late = DonationGroupCommit.Entry(donation: donation("late"), sealed: Data(), durable: false, deadline: started + 200_000_000)
        let error = #expect(throws: StoreError.self) { try commits.commit(late, file: "store.sqlite", write: write) }
        let waitedMs = (StoreDeadline.now() - started) / 1_000_000
        #expect(error?.kind == .storeBusy)
        #expect(waitedMs >= 190 && waitedMs < 2000, "waited \(waitedMs) ms")
        #expect(commits.pendingCount == 0)
        releaseFirstWrite.signal()
        leaderDone.wait()
        #expect(written.withLock { $0 } == ["leader"])
    }

    /// The owner's own signing key is read again whenever its file changes (the cache of
    /// `standing` keys on the file's stamp): a damaged key file is refused at once.
    @Test func theOwnKeyIsReadAgainWhenItsFileChanges() throws {
        let test = try TestStore()
        let key = try test.store.signingKey(of: "TEAM")
        #expect(try test.store.standing(of: key.publicKey, for: "TEAM") == .ownKey)
        #expect(try test.store.standing(of: key.publicKey, for: "TEAM") == .ownKey)
        let path = test.store.keysDirectory + "/TEAM.signing"
        var text = try String(contentsOfFile: path, encoding: .utf8)
        text = text.replacingOccurrences(of: "\"version\" : 1", with: "\"version\" : 2")
        try text.write(toFile: path, atomically: false, encoding: .utf8)
        let error = #expect(throws: StoreError.self) { try test.store.standing(of: key.publicKey, for: "TEAM") }
        #expect(error?.kind == .invalidKeyFile)
    }

    /// The trusted keys are read for every check (parsing is skipped only for the same
    /// bytes): a key trusted, then removed, is refused at the next check, and a file
    /// changed behind extrun's back is read as it now is.
    @Test func theTrustedKeysAreReadAgainWhenTheirFileChanges() throws {
        let test = try TestStore()
        let author = Curve25519.Signing.PrivateKey().publicKey.rawRepresentation
        #expect(throws: StoreError.self) { try test.store.standing(of: author, for: "TEAM") }
        func trustedAuthor() throws -> String? {
            if case .trustedAuthor(let key) = try test.store.standing(of: author, for: "TEAM") { return key.author }
            return nil
        }
        let trusted = try test.store.trust("TEAM", author: "Ada", signingKey: author)
        #expect(try trustedAuthor() == "Ada")
        #expect(try trustedAuthor() == "Ada")
        _ = try test.store.untrust("TEAM", fingerprint: trusted.fingerprint)
        let refused = #expect(throws: StoreError.self) { try test.store.standing(of: author, for: "TEAM") }
        #expect(refused?.kind == .untrustedSigner)
        _ = try test.store.trust("TEAM", author: "Bea", signingKey: author)
        #expect(try trustedAuthor() == "Bea")
        let path = test.store.keysDirectory + "/TEAM.trusted"
        var text = try String(contentsOfFile: path, encoding: .utf8)
        text = text.replacingOccurrences(of: "\"version\" : 1", with: "\"version\" : 2")
        try text.write(toFile: path, atomically: false, encoding: .utf8)
        let broken = #expect(throws: StoreError.self) { try test.store.standing(of: author, for: "TEAM") }
        #expect(broken?.kind == .invalidKeyFile)
        // A file read before and gone now trusts nothing (an absent file is one lstat), and
        // one made again is read.
        try text.replacingOccurrences(of: "\"version\" : 2", with: "\"version\" : 1").write(toFile: path, atomically: false, encoding: .utf8)
        #expect(try trustedAuthor() == "Bea")
        try FileManager.default.removeItem(atPath: path)
        let gone = #expect(throws: StoreError.self) { try test.store.standing(of: author, for: "TEAM") }
        #expect(gone?.kind == .untrustedSigner)
        _ = try test.store.trust("TEAM", author: "Di", signingKey: author)
        #expect(try trustedAuthor() == "Di")
    }

    /// Once a key file has settled (unchanged for 2 s when read), a check only `stat`s it
    /// (KeyFileCache, FileStamp): the same identity is the same bytes. Every later change is still
    /// seen at the next check: a key removed (the file replaced), the mode opened to
    /// others, a byte changed in place with the size kept.
    @Test func aSettledKeyFileIsOnlyLookedAtYetEveryChangeCounts() throws {
        let test = try TestStore()
        let author = Curve25519.Signing.PrivateKey().publicKey.rawRepresentation
        let other = Curve25519.Signing.PrivateKey().publicKey.rawRepresentation
        func trustedAuthor(_ key: Data) throws -> String? {
            if case .trustedAuthor(let trusted) = try test.store.standing(of: key, for: "TEAM") { return trusted.author }
            return nil
        }
        _ = try test.store.trust("TEAM", author: "Ada", signingKey: author)
        let path = test.store.keysDirectory + "/TEAM.trusted"
        #expect(try trustedAuthor(author) == "Ada")
        // Read within 2 s of its change: not trusted to stay the same.
        #expect(test.store.trustedKeys.entry("TEAM")?.settled == false)
        Thread.sleep(forTimeInterval: 2.2)
        #expect(try trustedAuthor(author) == "Ada")
        #expect(test.store.trustedKeys.entry("TEAM")?.settled == true)
        #expect(try trustedAuthor(author) == "Ada")
        // A byte changed in place, the size kept (the author's name): seen at the next check.
        var text = try String(contentsOfFile: path, encoding: .utf8)
        text = text.replacingOccurrences(of: "\"Ada\"", with: "\"Bob\"")
        let handle = try #require(FileHandle(forWritingAtPath: path))
        try handle.write(contentsOf: Data(text.utf8))
        try handle.close()
        #expect(try trustedAuthor(author) == "Bob")
        Thread.sleep(forTimeInterval: 2.2)
        #expect(try trustedAuthor(author) == "Bob")
        // Opened to others: refused at once.
        chmod(path, 0o644)
        let open = #expect(throws: StoreError.self) { try test.store.standing(of: author, for: "TEAM") }
        #expect(open?.kind == .insecurePermissions)
        chmod(path, 0o600)
        #expect(try trustedAuthor(author) == "Bob")
        Thread.sleep(forTimeInterval: 2.2)
        #expect(try trustedAuthor(author) == "Bob")
        // The file replaced (another key trusted, then the first removed): seen at once.
        _ = try test.store.trust("TEAM", author: "Cy", signingKey: other)
        #expect(try trustedAuthor(other) == "Cy")
        _ = try test.store.untrust("TEAM", fingerprint: SigningKeyFingerprint.of(author))
        let refused = #expect(throws: StoreError.self) { try test.store.standing(of: author, for: "TEAM") }
        #expect(refused?.kind == .untrustedSigner)
        // The owner's own key file likewise.
        let own = try test.store.signingKey(of: "TEAM")
        #expect(try test.store.standing(of: own.publicKey, for: "TEAM") == .ownKey)
        Thread.sleep(forTimeInterval: 2.2)
        #expect(try test.store.standing(of: own.publicKey, for: "TEAM") == .ownKey)
        #expect(test.store.ownSigningKeys.entry("TEAM")?.settled == true)
        let signing = test.store.keysDirectory + "/TEAM.signing"
        chmod(signing, 0o640)
        let opened = #expect(throws: StoreError.self) { try test.store.standing(of: own.publicKey, for: "TEAM") }
        #expect(opened?.kind == .insecurePermissions)
    }

    /// A long-lived host's store (StoreConnections in a PluginPool's process) lets its
    /// log grow to `maxLogBytesLongLived` before folding it, and folds it when asked (the
    /// pool closing): nothing committed is lost either way.
    @Test func aLongLivedStoreFoldsItsLogLessOftenAndOnRequest() throws {
        let test = try TestStore()
        func walBytes() -> Int { logBytes(test) }
        let store = try Store(home: URL(fileURLWithPath: test.home), checkpointOnClose: false, logLimitBytes: StoreLimits.maxLogBytesLongLived)
        let log = try store.donations(of: "TEAM")
        var largest = 0
        for i in 0..<150 {
            try log.donate(donation("long-\(i)", text: String(repeating: "x", count: 2000)), durable: false)
            largest = max(largest, walBytes())
        }
        #expect(largest > StoreLimits.maxLogBytes, "the log was folded at the short limit: \(largest) bytes")
        #expect(largest <= StoreLimits.maxLogBytesLongLived + (256 << 10), "\(largest) bytes")
        #expect(store.foldLog())
        #expect(walBytes() == 0)
        #expect(try test.reopen().donations(of: "TEAM").list().count == 150)
    }

    /// A long-lived store's log is folded by its `LogFolder`, beside the writes: under a
    /// stream of donations from 4 threads (~20 MiB of log) the folder folds it, no writer
    /// folds it itself (that fold empties the file, which otherwise is reused and never
    /// shrinks; SQLite's own checkpoint after a commit is off), the file takes the pages,
    /// the log stays under the bound at which a writer would fold, and nothing is lost.
    @Test func aLongLivedStoreFoldsItsLogBesideAStreamOfDonations() throws {
        let test = try TestStore()
        let store = try Store(home: URL(fileURLWithPath: test.home), checkpointOnClose: false, logLimitBytes: StoreLimits.maxLogBytesLongLived)
        let log = try store.donations(of: "TEAM")
        try log.donate(donation("first"), durable: false)
        let sizes = Mutex<[Int]>([])
        let failures = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: 4) { thread in
            for i in 0..<400 {
                do {
                    try log.donate(donation("stream-\(thread)-\(i)", text: String(repeating: "x", count: 2000)), durable: false)
                } catch {
                    failures.withLock { $0.append("\(thread)-\(i): \(error)") }
                }
                let bytes = logBytes(test)
                sizes.withLock { $0.append(bytes) }
            }
        }
        #expect(failures.withLock { $0 }.isEmpty)
        let folds = try store.database.logFolds ?? 0
        #expect(folds > 0)
        let seen = sizes.withLock { $0 }
        let largest = seen.max() ?? 0
        let smallest = seen.min() ?? 0
        // Sampled after each donation by each thread: a fold by a writer would have left 0.
        #expect(smallest > 0, "a writer emptied the log (folded it itself)")
        #expect(largest < StoreLimits.maxLogBytesLongLived * LogFolder.inlineFactor, "\(largest) bytes")
        var info = stat()
        #expect(stat(test.databasePath, &info) == 0)
        // 1,601 donations of ~2 KiB: store.sqlite holds what the folds copied.
        #expect(Int(info.st_size) > 2 << 20, "store.sqlite is \(info.st_size) bytes")
        #expect(store.foldLog())
        #expect(logBytes(test) == 0)
        #expect(try test.reopen().donations(of: "TEAM").list().count == 1601)
    }

    @Test func theSealedPlaintextIsWhatCodableReadsAndNonFiniteNumbersAreRefused() throws {
        let response = IntentResponse(
            code: "success", properties: ["total": 4.5, "n": 3, "list": [1, "x", nil], "nested": ["a": ["b": true]]],
            dialog: Dialog(full: "Done ✓"), userActivity: UserActivity(activityType: "t", userInfo: ["k": "v"]), progress: 0.25)
        let sealed = SealedDonation(parameters: ["soup": "tomato", "count": 2, "weights": [0.5, 1e-9]], response: response)
        let decoded = try JSONCoding.decoder().decode(SealedDonation.self, from: try sealed.json())
        #expect(decoded.parameters == sealed.parameters && decoded.response == response)
        let withoutResponse = try JSONCoding.decoder().decode(SealedDonation.self, from: try SealedDonation(parameters: [:], response: nil).json())
        #expect(withoutResponse.parameters.isEmpty && withoutResponse.response == nil)
        let test = try TestStore()
        var bad = donation("inf")
        bad.parameters = ["weights": [1, .double(.infinity)]]
        let error = #expect(throws: StoreError.self) { try test.store.donations(of: "TEAM").donate(bad) }
        #expect(error?.kind == .invalidValue)
        #expect(error?.message.contains("weights[1]") == true, "\(String(describing: error?.message))")
    }

    @Test func storesClosedWithoutCheckpointKeepEveryDonationAndAShortLog() throws {
        let test = try TestStore()
        func walBytes() -> Int { logBytes(test) }
        // As extrun handle does: a store closed without a checkpoint, one donation per process.
        for i in 0..<60 {
            let store = try Store(home: URL(fileURLWithPath: test.home), checkpointOnClose: false)
            try store.donations(of: "TEAM").donate(donation("d\(i)", text: String(repeating: "soup ", count: 2000)), durable: false)
            #expect(walBytes() <= StoreLimits.maxLogBytes + (64 << 10), "the log grew to \(walBytes()) bytes")
        }
        #expect(walBytes() <= StoreLimits.maxLogBytes + (64 << 10), "the log is \(walBytes()) bytes after 60 donations")
        // Nothing committed was lost, whether it sits in the log or in store.sqlite.
        let listed = try test.reopen().donations(of: "TEAM").list()
        #expect(listed.count == 60)
        #expect(Set(listed.map(\.identifier)) == Set((0..<60).map { "d\($0)" }))
    }

    /// A donation that does not wait for the disk leaves the connection at synchronous =
    /// NORMAL (so that the next donation runs no pragma); every durable write, and a durable
    /// donation, runs at FULL again, and sees FULL inside its transaction.
    @Test func aRelaxedDonationNeverLeavesADurableWriteRelaxed() throws {
        let test = try TestStore()
        let database = try test.store.database
        func setting(_ db: Database) throws -> Int? { try Int.fetchOne(db, sql: "PRAGMA synchronous") }
        #expect(try database.read(setting) == 2)
        let log = try test.store.donations(of: "TEAM")
        try log.donate(donation("relaxed-1"), durable: false)
        #expect(try database.read(setting) == 1)
        try log.donate(donation("relaxed-2"), durable: false)
        #expect(try database.read(setting) == 1)
        // A global's write (durable), through StoreDatabase.write: FULL inside it and after it.
        let inside = Mutex<Int?>(nil)
        try database.write { db in inside.withLock { $0 = try? setting(db) } }
        #expect(inside.withLock { $0 } == 2)
        #expect(try database.read(setting) == 2)
        try log.donate(donation("relaxed-3"), durable: false)
        try test.store.globals(of: "TEAM").set("g", to: "v")
        #expect(try database.read(setting) == 2)
        try log.donate(donation("relaxed-4"), durable: false)
        try log.donate(donation("durable"), durable: true)
        #expect(try database.read(setting) == 2)
        // A pragma access outside a transaction is durable too.
        try log.donate(donation("relaxed-5"), durable: false)
        let pragmaAccess = try database.withoutTransaction { db in try setting(db) }
        #expect(pragmaAccess == 2)
        #expect(try log.list().map(\.identifier) == ["relaxed-1", "relaxed-2", "relaxed-3", "relaxed-4", "durable", "relaxed-5"])
    }

    @Test(arguments: StoreBackendKind.all)
    func donatingTheSameIdentifierAgainReplacesIt(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let log = try test.store.donations(of: "TEAM")
        try log.donate(donation("a", text: "tomato"))
        try log.donate(donation("a", group: "g", text: "pea"))
        let listed = try log.list()
        #expect(listed.count == 1)
        #expect(listed[0].parameters == ["soup": "pea"])
        #expect(listed[0].groupIdentifier == "g")
    }

    @Test(arguments: StoreBackendKind.all)
    func deleteByIdentifierGroupAndAll(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let log = try test.store.donations(of: "TEAM")
        for (id, group) in [("a", "g1"), ("b", "g1"), ("c", "g2"), ("d", nil)] { try log.donate(donation(id, group: group)) }
        #expect(try log.delete(identifier: "d"))
        #expect(try log.delete(identifier: "d") == false)
        #expect(try log.delete(group: "g1") == 2)
        #expect(try log.list().map(\.identifier) == ["c"])
        #expect(try log.deleteAll() == 1)
        #expect(try log.list().isEmpty)
    }

    @Test(arguments: StoreBackendKind.all)
    func anOwnerCannotDeleteAnotherOwnersDonations(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        try test.store.donations(of: "TEAM").donate(donation("mine", group: "orders"))
        let other = try test.store.donations(of: "OTHER")
        #expect(throws: StoreError.self) { try other.delete(identifier: "mine") }
        do {
            try other.delete(identifier: "mine")
        } catch let error as StoreError {
            #expect(error.kind == .notYours)
            #expect(error.message == "donation 'mine' belongs to owner 'TEAM', not to 'OTHER': an owner can delete only its own donations; nothing was deleted")
        }
        do {
            try other.delete(group: "orders")
            Issue.record("deleting another owner's group was not refused")
        } catch let error as StoreError {
            #expect(error.kind == .notYours)
        }
        #expect(try other.deleteAll() == 0)
        #expect(try test.store.donations(of: "TEAM").list().map(\.identifier) == ["mine"])
        // The same identifier may exist for both owners; each deletes its own.
        try other.donate(donation("mine", owner: "OTHER"))
        #expect(try other.delete(identifier: "mine"))
        #expect(try test.store.donations(of: "TEAM").list().count == 1)
    }

    @Test(arguments: StoreBackendKind.all)
    func everyOwnersDonationsAndBadInput(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        try test.store.donations(of: "B").donate(donation("1", owner: "B"))
        try test.store.donations(of: "A").donate(donation("2", owner: "A", intent: "Other"))
        #expect(try test.store.allDonations().map(\.owner) == ["A", "B"])
        #expect(try test.store.allDonations(intent: "Other").map(\.identifier) == ["2"])
        #expect(throws: StoreError.self) { try test.store.donations(of: "A").donate(donation("x", owner: "B")) }
        #expect(throws: StoreError.self) { try test.store.donations(of: "A").donate(donation("", owner: "A")) }
        #expect(throws: StoreError.self) { try test.store.donations(of: "../A") }
    }

    @Test func aDonationCopiedToAnotherIdentifierNoLongerOpens() throws {
        let test = try TestStore()
        let log = try test.store.donations(of: "TEAM")
        try log.donate(donation("a"))
        try log.donate(donation("b"))
        try test.store.database.write { db in
            try db.execute(sql: "UPDATE donation SET sealed = (SELECT sealed FROM donation WHERE identifier = 'a') WHERE identifier = 'b'")
        }
        do {
            _ = try log.list()
            Issue.record("a swapped seal opened")
        } catch let error as StoreError {
            #expect(error.kind == .sealBroken)
        }
    }
}

private let childDonorHome = "EXTRUN_DONATIONS_TEST_CHILD_HOME"
private let childDonorLog = "EXTRUN_DONATIONS_TEST_CHILD_LOG"

/// The size of a test store's write-ahead log (0 when there is none).
private func logBytes(_ test: TestStore) -> Int {
    var info = stat()
    return stat(test.databasePath + "-wal", &info) == 0 ? Int(info.st_size) : 0
}

/// Another connection holding the store's write lock (`BEGIN IMMEDIATE`), as another
/// process would, from `init` until `release()`.
final class WriteLockHolder: Sendable {
    private let released = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)

    init(databasePath: String) throws {
        let other = try DatabaseQueue(path: databasePath)
        let locked = DispatchSemaphore(value: 0)
        let released = self.released
        let done = self.done
        Thread.detachNewThread {
            try? other.writeWithoutTransaction { db in
                try db.execute(sql: "BEGIN IMMEDIATE")
                locked.signal()
                released.wait()
                try db.execute(sql: "ROLLBACK")
            }
            done.signal()
        }
        locked.wait()
    }

    /// Lets the lock go and waits until the other connection has rolled back.
    func release() {
        released.signal()
        done.wait()
    }
}
