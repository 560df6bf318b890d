import ExtrunStore
import Foundation
import Synchronization
import NIOConcurrencyHelpers

/// An owner's store for one intent, from `StoreConnections`. When donations are on and
/// this process has not opened the store yet (a cold `extrun handle`), it is opened on
/// another thread while the plugin runs: a process start of its own (opening SQLite,
/// reading the owner's key) the caller need not wait for. Otherwise it is taken on
/// first use. The plugin's store services and the donation share it.
final class PendingStore: @unchecked Sendable {
    // Written once by the opening thread before `done` is signalled, read after `wait`;
    // `taken` only by the intent's own thread.
    private var result: Result<Store, any Error> = .failure(CancellationError())
    private let done: DispatchSemaphore?
    private var taken: Store?
    private let paths: HostPaths

    init(paths: HostPaths, owner: String, openAhead: Bool) {
        self.paths = paths
        guard openAhead, !StoreConnections.isOpen(homePath: paths.homePath) else {
            done = nil
            return
        }
        let done = DispatchSemaphore(value: 0)
        self.done = done
        Thread.detachNewThread { [self] in
            result = Result {
                let store = try StoreConnections.store(paths)
                try store.donations(of: owner).prepare()
                return store
            }
            done.signal()
        }
    }

    /// Waits for the opening thread, if one runs (the end of a run: none outlives it).
    func settle() {
        guard let done else { return }
        done.wait()
        done.signal()
    }

    /// The store, or why it could not be opened (waits for the opening thread; any number of times).
    func get() throws -> Store {
        if let done {
            done.wait()
            done.signal()
            return try result.get()
        }
        if let taken { return taken }
        let store = try StoreConnections.store(paths)
        taken = store
        return store
    }
}

/// The one place store connections are kept: the stores this process opened, one per
/// home, kept open for the process's life. Every intent's store services and donation
/// (`Host.handle`, a pool's, a phrase's) take their connection from here: the next
/// intent of the process reuses it, and none is closed
/// on the way out (a close cost `extrun handle` a checkpoint, an fsync and Foundation's
/// notification machinery: docs/benchmarks.md, "Costs the source's comments point to"). A store whose file was replaced
/// (another inode) is opened again. Opened without a checkpoint at close, for when one is
/// replaced: the write-ahead log is left for a later connection (docs/store.md).
enum StoreConnections {
    private static let cache = NIOLockedValueBox<[String: (store: Store, file: FileIdentity, used: UInt64)]>([:])
    /// The most homes kept open (a test process goes through hundreds of homes; a host, one).
    static let maxOpen = 4
    /// Whether this process is a long-lived host (a `PluginPool` was made): its stores keep
    /// a longer write-ahead log (`StoreLimits.maxLogBytesLongLived`), folded by `foldLogs()`.
    private static let longLived = Atomic<Bool>(false)

    static func useLongLivedLogs() {
        longLived.store(true, ordering: .relaxed)
    }

    /// Folds the write-ahead log of every store this process keeps open (a pool closing).
    static func foldLogs() {
        for store in cache.withLockedValue({ $0.values.map(\.store) }) { store.foldLog() }
    }

    /// Whether a connection to the store of the home at `homePath` is kept (not checking the file).
    static func isOpen(homePath: String) -> Bool {
        cache.withLockedValue { $0[homePath] != nil }
    }

    static func store(home: URL) throws -> Store {
        try store(home: home, path: home.path)
    }

    /// The store of `paths.home`, by the path made once (URL's `path` cost a warm intent ~3 µs).
    static func store(_ paths: HostPaths) throws -> Store {
        try store(home: paths.home, path: paths.homePath)
    }

    private static func store(home: URL, path: String) throws -> Store {
        let key = path
        // A store on a PostgreSQL server has no file here: its home's keys folder stands for it.
        let identity = FileIdentity(path: key + "/store.sqlite") ?? FileIdentity(path: key + "/keys")
        let now = MonotonicClock.now()
        let hit = cache.withLockedValue { cache -> Store? in
            guard let identity, var cached = cache[key], cached.file.isSameFile(as: identity) else { return nil }
            cached.used = now
            cache[key] = cached
            return cached.store
        }
        if let hit { return hit }
        let store = try Store(
            home: home, checkpointOnClose: false,
            logLimitBytes: longLived.load(ordering: .relaxed) ? StoreLimits.maxLogBytesLongLived : StoreLimits.maxLogBytes)
        var onServer = false
        if case .postgres = store.backend { onServer = true }
        if let opened = onServer ? FileIdentity(path: key + "/keys") : FileIdentity(path: store.databasePath) {
            let evicted = cache.withLockedValue { cache -> [Store] in
                cache[key] = (store, opened, now)
                // The least recently used beyond the limit: closed once its last user lets go.
                var evicted: [Store] = []
                while cache.count > maxOpen, let oldest = cache.min(by: { $0.value.used < $1.value.used })?.key {
                    if let gone = cache.removeValue(forKey: oldest) { evicted.append(gone.store) }
                }
                return evicted
            }
            // A long-lived host's store leaves its (longer) log folded, as at the pool's close.
            if longLived.load(ordering: .relaxed) { for gone in evicted { gone.foldLog() } }
        }
        return store
    }
}
