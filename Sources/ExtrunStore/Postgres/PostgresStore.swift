import ExtrunProtocol
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import PostgresNIO

/// The store's rows on a PostgreSQL server (docs/store.md, "PostgreSQL"), through postgres-nio.
///
/// One connection per `Store`, used by one caller at a time (as GRDB's `DatabaseQueue` is
/// for the SQLite file): the host's threads block, so each statement is sent on
/// postgres-nio's event loop and the calling thread waits for its answer
/// (`EventLoopFuture.wait`). A connection the server or the network dropped is
/// replaced on the next call: a server restarted needs no restart of extrun.
/// A server that cannot be reached is `storeUnavailable`, naming it and the cause.
package final class PostgresStore: @unchecked Sendable {
    package let location: PostgresLocation
    /// Guards `connection`, and is held for a whole transaction.
    private let lock = NIOLock()
    private var connection: PostgresConnection?
    /// The wait in progress on `connection`, failed as soon as its channel closes.
    private var waits: PostgresWaitSlot?
    private let logger = Logger(label: "extrun.store.postgres", factory: { _ in SwiftLogNoOpLogHandler() })

    /// The event loop every store connection of this process runs on: its own thread,
    /// never one of `extrun serve`'s loops, whose threads must not wait.
    private static let loops = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    /// Serialization failures and deadlocks are retried this many times before `storeBusy`.
    static let maxAttempts = 5

    /// - Parameter migrating: false opens the connection for statements of its own
    ///   (`run`: creating a database), with no schema.
    package init(location: PostgresLocation, migrating: Bool = true) throws {
        self.location = location
        if migrating { try migrate() }
    }

    /// Runs one statement outside any transaction (`CREATE DATABASE`, `DROP DATABASE`).
    package func run(_ sql: String) throws {
        _ = try read { session in try session.execute(PostgresQuery(unsafeSQL: sql)) }
    }

    /// The first column of the first row of `sql` (with `$1` bound to `argument`), as a whole number: for checks.
    package func number(_ sql: String, _ argument: String) throws -> Int64 {
        var binds = PostgresBindings()
        binds.append(argument)
        return try read { session in
            try session.query(PostgresQuery(unsafeSQL: sql, binds: binds)).first?.decode(Int64?.self) ?? 0
        }
    }

    deinit {
        // Not waited for: the last reference may go on any thread, the event loop's own included.
        if let connection { PostgresStore.close(connection) }
    }

    /// Closes without waiting (the future's close, not the async one). The connection is
    /// kept until its channel is closed: postgres-nio asserts that one is closed before it goes.
    private static func close(_ connection: PostgresConnection) {
        let closed: EventLoopFuture<Void> = connection.close()
        closed.whenComplete { _ in withExtendedLifetime(connection) {} }
    }

    // MARK: - Transactions

    /// Runs `body` in one transaction (READ COMMITTED; the writes lock the rows they
    /// depend on first: the owner's row, the usage row). Retried from the start on a
    /// serialization failure or a deadlock, at most `maxAttempts` times.
    package func transaction<T>(_ body: (PostgresSession) throws -> T) throws -> T {
        try lock.withLock {
            let clock = CallClock()
            var attempt = 0
            while true {
                attempt += 1
                let session = try PostgresSession(connection: connected(), store: self, waits: waits)
                var committing = false
                do {
                    try session.execute("BEGIN")
                    if let deadline = clock.deadline {
                        try session.boundStatements(by: deadline)
                    }
                    let result = try body(session)
                    committing = true
                    try session.commit()
                    return result
                } catch {
                    let retry = PostgresStore.isRetryable(error) && attempt < PostgresStore.maxAttempts
                    // A connection the server dropped is not asked to roll back (a statement sent
                    // on it as it closes was seen never to be answered): the server rolled back.
                    if PostgresStore.connectionLost(error) { dropConnection() } else { rollBack(session) }
                    if retry { continue }
                    throw storeError(error, clock: clock, committing: committing)
                }
            }
        }
    }

    /// One statement (or a few) outside any explicit transaction: reads.
    package func read<T>(_ body: (PostgresSession) throws -> T) throws -> T {
        try lock.withLock {
            let clock = CallClock()
            let session = try PostgresSession(connection: connected(), store: self, waits: waits)
            do {
                return try body(session)
            } catch {
                if PostgresStore.connectionLost(error) { dropConnection() }
                throw storeError(error, clock: clock)
            }
        }
    }

    private func rollBack(_ session: PostgresSession) {
        guard !session.connection.isClosed else { return dropConnection() }
        do {
            try session.execute("ROLLBACK")
        } catch {
            dropConnection()
        }
    }

    private func dropConnection() {
        if let connection { PostgresStore.close(connection) }
        connection = nil
    }

    /// The open connection, or a new one (under `lock`).
    private func connected() throws -> PostgresConnection {
        if let connection, !connection.isClosed { return connection }
        connection = nil
        var configuration: PostgresConnection.Configuration
        if let socket = location.socketPath {
            configuration = .init(unixSocketPath: socket, username: location.user, password: location.password, database: location.database)
        } else {
            configuration = .init(
                host: location.host ?? "localhost", port: location.port, username: location.user, password: location.password,
                database: location.database, tls: .disable)
        }
        var timeout: Int64 = 10_000
        if let deadline = StoreDeadline.current {
            let now = StoreDeadline.now()
            timeout = deadline > now ? max(1, Int64((deadline - now) / 1_000_000)) : 1
            timeout = min(timeout, 10_000)
        }
        configuration.options.connectTimeout = .milliseconds(timeout)
        do {
            // The connection's start (authentication, parameters) is bounded too, by the same
            // wait as a statement's: a server in the middle of a restart may accept and not answer.
            let connecting = PostgresConnection.connect(on: PostgresStore.loops.next(), configuration: configuration, id: 1, logger: logger)
            let opened = try PostgresSession.wait(connecting, atMost: (timeout + 1_000) * 1_000_000) {
                connecting.whenSuccess { late in PostgresStore.close(late) }
            }
            // A connection the server or the network closes ends the wait in progress on it
            // at once (a store call gets storeUnavailable), not at the deadline.
            let slot = PostgresWaitSlot()
            opened.closeFuture.whenComplete { _ in slot.closed() }
            waits = slot
            connection = opened
            return opened
        } catch {
            throw unavailable(error)
        }
    }

    // MARK: - Errors

    /// SQLSTATE of a server error, if the error is one.
    static func sqlState(_ error: any Error) -> String? {
        (error as? PSQLError)?.serverInfo?[.sqlState]
    }

    static func isRetryable(_ error: any Error) -> Bool {
        guard let state = sqlState(error) else { return false }
        return state == "40001" || state == "40P01"
    }

    /// The connection is gone (closed by the server, the network, a restart).
    static func connectionLost(_ error: any Error) -> Bool {
        guard let error = error as? PSQLError else { return !(error is StoreError) && !(error is PostgresDecodingError) }
        switch error.code {
        case .connectionError, .serverClosedConnection, .clientClosedConnection, .uncleanShutdown, .messageDecodingFailure,
            .unexpectedBackendMessage:
            return true
        case .server:
            // admin_shutdown, crash_shutdown, cannot_connect_now, and the connection exceptions.
            let state = sqlState(error) ?? ""
            return state.hasPrefix("08") || state.hasPrefix("57P")
        default:
            return false
        }
    }

    /// - Parameter committing: the connection was lost during the transaction's `COMMIT`.
    func unavailable(_ error: any Error, committing: Bool = false) -> StoreError {
        let cause: String
        if let psql = error as? PSQLError {
            if let message = psql.serverInfo?[.message] {
                cause = "the server said: \(message)"
            } else if let underlying = psql.underlying {
                cause = "\(underlying)"
            } else {
                cause = "\(psql.code)"
            }
        } else {
            cause = "\(error)"
        }
        let outcome =
            committing
            ? "the connection was lost while the transaction committed: whether it was kept is unknown, read it back"
            : "nothing was changed"
        let check: String
        if let socket = location.socketPath {
            check = "Check that the server runs and listens on the socket \(socket) (its directory and port in the URL), that this user may reach it, and that user '\(location.user)' and database '\(location.database)' exist"
        } else {
            check = "Check that the server runs and accepts connections at \(location.host ?? "localhost"):\(location.port), and that user '\(location.user)', its password (store.passwordFile or PGPASSFILE) and database '\(location.database)' are right"
        }
        return StoreError(
            .storeUnavailable,
            "the store's PostgreSQL server \(location.display) cannot be reached (\(cause)); \(outcome). \(check); the next call tries again.",
            details: ["store": .string(location.display), "cause": .string(cause)])
    }

    /// When a call (`transaction` or `read`) started, and the deadline it had (`StoreDeadline`).
    struct CallClock {
        let started = StoreDeadline.now()
        let deadline = StoreDeadline.current

        /// Milliseconds since the call started.
        var waitedMs: Int64 { Int64((StoreDeadline.now() - started) / 1_000_000) }
        /// Milliseconds the call had when it started (nil: no deadline).
        var deadlineMs: Int64? { deadline.map { $0 > started ? Int64(($0 - started) / 1_000_000) : 0 } }
    }

    /// A `StoreError` for anything thrown while using the server. `committing`: it came from the
    /// transaction's `COMMIT`, whose outcome is then unknown when the connection went away.
    func storeError(_ error: any Error, clock: CallClock? = nil, committing: Bool = false) -> StoreError {
        if let error = error as? StoreError { return error }
        var details: [String: JSONValue] = ["store": .string(location.display)]
        let psql = error as? PSQLError
        let state = psql?.serverInfo?[.sqlState] ?? ""
        let message = psql?.serverInfo?[.message] ?? psql.map { "\($0.code)" } ?? "\(error)"
        // The store's own wait ended at the deadline (the server did not answer by then), or the
        // server cancelled the statement at the timeout the deadline set (57014).
        let expired = error is PostgresDeadlineExpired
        if expired || (state == "57014" && clock?.deadline != nil), let clock, let had = clock.deadlineMs {
            let waited = clock.waitedMs
            details["waitedMs"] = .int(waited)
            details["deadlineMs"] = .int(had)
            let cause = expired ? "no answer from the server by then; the connection is closed" : "PostgreSQL 57014: \(message)"
            let outcome =
                committing
                ? "the transaction was committing: whether it was kept is unknown, read it back"
                : "nothing was changed, try again"
            return StoreError(
                .storeBusy,
                "\(location.display): the run's deadline came after \(waited) ms (the call had \(had) ms) while the store waited for other connections' locks or the server (\(cause)); \(outcome)",
                details: details)
        }
        if PostgresStore.connectionLost(error) {
            // The connection went away mid-call: the next call opens a new one.
            if state == "53100" { return diskFull(message, state: state, details: details, serverStopped: true, committing: committing) }
            return unavailable(error, committing: committing)
        }
        guard psql != nil else {
            return StoreError(.databaseError, "\(location.display): \(error)", details: details)
        }
        switch state {
        case "40001", "40P01", "55P03":
            return StoreError(
                .storeBusy, "\(location.display): other writers kept the rows busy (PostgreSQL \(state): \(message)); nothing was changed, try again",
                details: details)
        case "57014":
            return StoreError(
                .storeBusy, "\(location.display): the server cancelled the statement (PostgreSQL 57014: \(message)); nothing was changed, try again",
                details: details)
        case "53100":
            // A PANIC (the write-ahead log could not grow) stops the server: the connection is gone.
            let stopped = psql?.serverInfo?[.localizedSeverity] == "PANIC" || psql?.serverInfo?[.severity] == "PANIC"
            return diskFull(message, state: state, details: details, serverStopped: stopped, committing: committing)
        case "53200":
            return StoreError(.ioError, "\(location.display): the server is out of memory (PostgreSQL \(state): \(message)); nothing was changed", details: details)
        case "28000", "28P01", "3D000", "42501":
            return unavailable(error)
        default:
            return StoreError(.databaseError, "\(location.display): PostgreSQL error \(state): \(message)", details: details)
        }
    }

    /// The server's disk is full (SQLSTATE 53100 disk_full): `ioError`, as SQLite's full disk is.
    private func diskFull(_ message: String, state: String, details: [String: JSONValue], serverStopped: Bool, committing: Bool) -> StoreError {
        var details = details
        details["cause"] = .string("diskFull")
        let outcome =
            serverStopped
            ? (committing
                ? "the server stopped (PANIC) while the transaction committed: whether it was kept is unknown, read it back once the server runs again"
                : "the server stopped (PANIC: its write-ahead log could not grow) and rolled the transaction back; it runs again only once it has room, and until then calls end storeUnavailable")
            : "nothing was changed; writes work again once the server has room"
        return StoreError(
            .ioError, "\(location.display): the server's disk is full (PostgreSQL \(state): \(message)); \(outcome)", details: details)
    }
}

/// A statement's answer not waited for past the caller's deadline: the store closed the connection.
struct PostgresDeadlineExpired: Error {
    let underlying: any Error
}

/// The connection closed (by the server, the network, a restart) while a statement waited for
/// its answer: counted lost (`storeUnavailable`); the next call opens a new connection.
struct PostgresConnectionClosed: Error, CustomStringConvertible {
    var description: String { "the connection closed while waiting for the server's answer" }
}

/// The one wait in progress on a connection (`PostgresSession.wait`), ended by the connection's
/// `closeFuture`: one callback per connection, not one per statement.
final class PostgresWaitSlot: Sendable {
    private let current = NIOLockedValueBox<(@Sendable (any Error) -> Void)?>(nil)

    func set(_ fail: (@Sendable (any Error) -> Void)?) {
        current.withLockedValue { $0 = fail }
    }

    /// The connection closed: the wait in progress, if any, ends now.
    func closed() {
        let fail = current.withLockedValue { slot -> (@Sendable (any Error) -> Void)? in
            defer { slot = nil }
            return slot
        }
        fail?(PostgresConnectionClosed())
    }
}

/// No answer from the server within the longest wait (`PostgresSession.wait`): the connection is
/// closed and counted lost (`storeUnavailable`); the next call opens a new one.
struct PostgresNoAnswer: Error, CustomStringConvertible {
    let waitedNanoseconds: Int64
    var description: String { "no answer from the server in \(waitedNanoseconds / 1_000_000) ms" }
}

/// One connection's statements, inside `PostgresStore.transaction` or `read`.
package struct PostgresSession {
    let connection: PostgresConnection
    let store: PostgresStore
    let waits: PostgresWaitSlot?

    init(connection: PostgresConnection, store: PostgresStore, waits: PostgresWaitSlot? = nil) {
        self.connection = connection
        self.store = store
        self.waits = waits
    }

    /// The statement's rows (one statement: parameters are bound, never spliced in).
    @discardableResult
    package func query(_ query: PostgresQuery) throws -> [PostgresRow] {
        try answer(query).rows
    }

    /// The statement's count of rows changed (UPDATE, DELETE, INSERT).
    @discardableResult
    package func execute(_ query: PostgresQuery) throws -> Int {
        try answer(query).metadata.rows ?? 0
    }

    /// The transaction's `COMMIT`: waited for a second past the deadline (not `deadlineGraceNanoseconds`),
    /// since a commit cut short leaves its outcome unknown.
    func commit() throws {
        _ = try answer("COMMIT", grace: 1_000_000_000)
    }

    /// The longest a statement's answer is waited for without a deadline bound (`StoreDeadline`).
    static let maxWaitNanoseconds: Int64 = 60_000_000_000
    /// How long after the caller's deadline a statement's answer is still waited for: the server's
    /// own `statement_timeout` (the deadline's, `boundStatements`) usually answers first.
    static let deadlineGraceNanoseconds: Int64 = 100_000_000

    /// Sends the statement and waits for its answer, never past the caller's deadline (plus
    /// `grace`) or `maxWaitNanoseconds`: then the connection is closed, which ends the wait
    /// (`PostgresDeadlineExpired` at the deadline: `storeBusy`; else `storeUnavailable`), the server
    /// rolls the transaction back, and the next call connects again. The server's
    /// `statement_timeout` bounds each statement alone, so a transaction's second wait for a
    /// lock would outlast the deadline without this; and a wait without an end held the
    /// store's lock, and every later run of the process waited behind it past its deadline.
    private func answer(_ query: PostgresQuery, grace: Int64 = PostgresSession.deadlineGraceNanoseconds) throws -> PostgresQueryResult {
        var limit = PostgresSession.maxWaitNanoseconds
        var byDeadline = false
        if let deadline = StoreDeadline.current {
            let now = StoreDeadline.now()
            let left = (deadline > now ? Int64(deadline - now) : 0) + grace
            if left < limit {
                limit = left
                byDeadline = true
            }
        }
        let connection = connection
        do {
            return try PostgresSession.wait(
                connection.query(query, logger: connection.logger), atMost: limit, slot: waits, alreadyClosed: { connection.isClosed }
            ) {
                let closed: EventLoopFuture<Void> = connection.close()
                closed.whenComplete { _ in withExtendedLifetime(connection) {} }
            }
        } catch let expired as PostgresNoAnswer {
            if byDeadline { throw PostgresDeadlineExpired(underlying: expired) }
            throw expired
        }
    }

    /// The value of `future`, waited for at most `nanoseconds`: then `expire` runs (it closes
    /// what the future waits on) and the wait ends with `PostgresNoAnswer`, whether or not
    /// postgres-nio ever completes the future. The wait is on a promise of the store's own:
    /// a query sent as the server dropped the connection was seen never to be completed, even
    /// after the connection's close (the fleet's PostgreSQL restart, about 1 round in 10), and
    /// a wait on that future held the store's lock and every later run of the process.
    ///
    /// With `slot`, the connection's closing also ends the wait, at once (`PostgresConnectionClosed`):
    /// the fleet's PostgreSQL restart otherwise held a run until its deadline.
    static func wait<T: Sendable>(
        _ future: EventLoopFuture<T>, atMost nanoseconds: Int64, slot: PostgresWaitSlot? = nil, alreadyClosed: () -> Bool = { false },
        expire: @escaping @Sendable () -> Void
    ) throws -> T {
        let loop = future.eventLoop
        let promise = loop.makePromise(of: T.self)
        // Whichever comes first completes the promise; the other does nothing.
        let done = NIOLockedValueBox(false)
        let first: @Sendable () -> Bool = { done.withLockedValue { finished in if finished { return false }; finished = true; return true } }
        let timer = loop.scheduleTask(in: .nanoseconds(nanoseconds)) {
            guard first() else { return }
            promise.fail(PostgresNoAnswer(waitedNanoseconds: nanoseconds))
            expire()
        }
        future.whenComplete { result in
            guard first() else { return }
            timer.cancel()
            promise.completeWith(result)
        }
        if let slot {
            slot.set { error in
                guard first() else { return }
                timer.cancel()
                promise.fail(error)
            }
            defer { slot.set(nil) }
            if alreadyClosed() { slot.closed() }
            return try promise.futureResult.wait()
        }
        return try promise.futureResult.wait()
    }

    /// Keeps every statement of this transaction, its lock waits included, inside the
    /// caller's deadline (`StoreDeadline`): an answer `storeBusy` when it comes.
    func boundStatements(by deadline: UInt64) throws {
        let now = StoreDeadline.now()
        let milliseconds = deadline > now ? max(1, (deadline - now) / 1_000_000) : 1
        try execute(PostgresQuery(unsafeSQL: "SET LOCAL statement_timeout = \(milliseconds)"))
    }
}
