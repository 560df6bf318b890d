import Foundation
import GRDB
import GRDBSQLite
import NIOConcurrencyHelpers

/// Folds a long-lived host's write-ahead log into `store.sqlite` mostly on a connection
/// and a thread of its own, so that the host's writes do not wait for it.
///
/// Folding copies the log's pages into the file and syncs the disk twice. Done by the
/// writing connection (SQLite's automatic checkpoint after a commit), every write of the
/// process waited for it: in 8 callers donating in process, a fold every ~200 donations
/// synced 4 MiB of log and no intent ran meanwhile (docs/benchmarks.md, "The donation's
/// own cost"). Here a commit that leaves more than the limit in the log asks this folder
/// for a fold (`request`): a PASSIVE checkpoint on its own connection, which SQLite runs
/// beside writers, copying and syncing what was committed when it started. The log can
/// start again from its beginning only once everything in it is copied, and under a
/// stream of writes new frames always arrive during that fold; so the next commit after
/// it copies the few frames left, on the writing connection, where SQLite's own
/// checkpoint ran (a small copy and two syncs of little), and the write after that
/// starts the log again. Nothing committed is less durable for it: the commit is what
/// makes a write durable, not the fold.
final class LogFolder: Sendable {
    /// How far past its limit the log may grow before the writer folds it itself (the
    /// folder fell behind a stream of writes, or fails: the inline fold waits for writers).
    static let inlineFactor = 4

    private let path: String
    /// The frames in the log past which a commit asks for a fold: `limitBytes` in frames of
    /// the store's 4 KiB pages (SQLite's default page size, which the store keeps).
    private let limitFrames: Int32
    private let queue: DispatchQueue
    private struct State {
        /// Opened on the queue at the first fold.
        var connection: DatabaseQueue?
        /// A fold is asked for or running (one at a time; requests meanwhile are that one).
        var pending = false
        var closed = false
        /// Set by a fold of the folder's: the next commit copies what is left (`watch`).
        var finishDue = false
        /// Folds made (for tests).
        var folds = 0
    }

    private let state = NIOLockedValueBox(State())
    var folds: Int { state.withLockedValue { $0.folds } }

    init(path: String, limitBytes: Int) {
        self.path = path
        limitFrames = Int32(clamping: max(1, limitBytes / (4096 + 24)))
        queue = DispatchQueue(label: "ExtrunStore.LogFolder")
    }

    /// Replaces SQLite's own checkpoint after a commit on the writing connection `db` (its
    /// `wal_autocheckpoint`, which is a WAL hook too) with a request to this folder once
    /// the log holds more than `limitFrames` pages. The hook gets the number of frames in
    /// the log, which restarts from its beginning after a complete fold: the size of the
    /// log's file, reused, does not shrink.
    func watch(_ db: Database) {
        guard let connection = db.sqliteConnection else { return }
        let context = Unmanaged.passUnretained(self).toOpaque()
        sqlite3_wal_hook(
            connection,
            { context, connection, _, frames in
                guard let context else { return SQLITE_OK }
                let folder = Unmanaged<LogFolder>.fromOpaque(context).takeUnretainedValue()
                if folder.state.withLockedValue({ state in defer { state.finishDue = false }; return state.finishDue }) {
                    // What arrived during the folder's fold (busy: the folder folds again).
                    var log: Int32 = 0
                    var copied: Int32 = 0
                    _ = sqlite3_wal_checkpoint_v2(connection, nil, SQLITE_CHECKPOINT_PASSIVE, &log, &copied)
                } else if frames > folder.limitFrames {
                    folder.request()
                }
                return SQLITE_OK
            }, context)
    }

    /// Asks for a fold, unless one is asked for or running already.
    func request() {
        let start = state.withLockedValue { state -> Bool in
            guard !state.pending, !state.closed else { return false }
            state.pending = true
            return true
        }
        guard start else { return }
        queue.async { [self] in
            fold()
            state.withLockedValue { $0.pending = false }
        }
    }

    /// Waits for a fold under way, if any.
    func settle() {
        queue.sync {}
    }

    /// Waits for a fold under way and closes the folder's connection; no fold runs after.
    func close() {
        state.withLockedValue { $0.closed = true }
        queue.sync {
            let connection = state.withLockedValue { state -> DatabaseQueue? in
                defer { state.connection = nil }
                return state.connection
            }
            try? connection?.close()
        }
    }

    /// One PASSIVE checkpoint (on the queue). A failure leaves the log as it was, for the
    /// next request or the writer's own fold.
    private func fold() {
        let (existing, closed) = state.withLockedValue { ($0.connection, $0.closed) }
        guard !closed,
            let connection = existing
                ?? (try? DatabaseQueue(path: path, configuration: StoreDatabase.configuration(checkpointOnClose: false)))
        else { return }
        state.withLockedValue { $0.connection = connection }
        if (try? connection.writeWithoutTransaction({ db in try db.checkpoint(.passive) })) != nil {
            state.withLockedValue { state in
                state.finishDue = true
                state.folds += 1
            }
        }
    }
}
