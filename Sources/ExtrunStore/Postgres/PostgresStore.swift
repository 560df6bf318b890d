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
            var attempt = 0
            while true {
                attempt += 1
                let session = try PostgresSession(connection: connected(), store: self)
                do {
                    try session.execute("BEGIN")
                    if let deadline = StoreDeadline.current {
                        try session.boundStatements(by: deadline)
                    }
                    let result = try body(session)
                    try session.execute("COMMIT")
                    return result
                } catch {
                    let retry = PostgresStore.isRetryable(error) && attempt < PostgresStore.maxAttempts
                    // A connection the server dropped is not asked to roll back (a statement sent
                    // on it as it closes was seen never to be answered): the server rolled back.
                    if PostgresStore.connectionLost(error) { dropConnection() } else { rollBack(session) }
                    if retry { continue }
                    throw storeError(error)
                }
            }
        }
    }

    /// One statement (or a few) outside any explicit transaction: reads.
    package func read<T>(_ body: (PostgresSession) throws -> T) throws -> T {
        try lock.withLock {
            let session = try PostgresSession(connection: connected(), store: self)
            do {
                return try body(session)
            } catch {
                if PostgresStore.connectionLost(error) { dropConnection() }
                throw storeError(error)
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
            let opened = try PostgresConnection.connect(
                on: PostgresStore.loops.next(), configuration: configuration, id: 1, logger: logger
            ).wait()
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

    func unavailable(_ error: any Error) -> StoreError {
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
        let check: String
        if let socket = location.socketPath {
            check = "Check that the server runs and listens on the socket \(socket) (its directory and port in the URL), that this user may reach it, and that user '\(location.user)' and database '\(location.database)' exist"
        } else {
            check = "Check that the server runs and accepts connections at \(location.host ?? "localhost"):\(location.port), and that user '\(location.user)', its password (store.passwordFile or PGPASSFILE) and database '\(location.database)' are right"
        }
        return StoreError(
            .storeUnavailable,
            "the store's PostgreSQL server \(location.display) cannot be reached (\(cause)); nothing was changed. \(check); the next call tries again.",
            details: ["store": .string(location.display), "cause": .string(cause)])
    }

    /// A `StoreError` for anything thrown while using the server.
    func storeError(_ error: any Error) -> StoreError {
        if let error = error as? StoreError { return error }
        if PostgresStore.connectionLost(error) {
            // The connection went away mid-call: the next call opens a new one.
            return unavailable(error)
        }
        let details: [String: JSONValue] = ["store": .string(location.display)]
        guard let psql = error as? PSQLError else {
            return StoreError(.databaseError, "\(location.display): \(error)", details: details)
        }
        let state = psql.serverInfo?[.sqlState] ?? ""
        let message = psql.serverInfo?[.message] ?? "\(psql.code)"
        switch state {
        case "40001", "40P01", "55P03":
            return StoreError(
                .storeBusy, "\(location.display): other writers kept the rows busy (PostgreSQL \(state): \(message)); nothing was changed, try again",
                details: details)
        case "57014":
            return StoreError(
                .storeBusy, "\(location.display): the statement ran out of the run's time (PostgreSQL: \(message)); nothing was changed",
                details: details)
        case "53100", "53200":
            return StoreError(.ioError, "\(location.display): the server is out of space (PostgreSQL \(state): \(message)); nothing was changed", details: details)
        case "28000", "28P01", "3D000", "42501":
            return unavailable(error)
        default:
            return StoreError(.databaseError, "\(location.display): PostgreSQL error \(state): \(message)", details: details)
        }
    }
}

/// One connection's statements, inside `PostgresStore.transaction` or `read`.
package struct PostgresSession {
    let connection: PostgresConnection
    let store: PostgresStore

    init(connection: PostgresConnection, store: PostgresStore) {
        self.connection = connection
        self.store = store
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

    /// The longest a statement's answer is waited for without a deadline bound (`StoreDeadline`).
    static let maxWaitNanoseconds: Int64 = 60_000_000_000

    /// Sends the statement and waits for its answer, never past the caller's deadline (plus a
    /// second for the server's own `statement_timeout` to answer first) or `maxWaitNanoseconds`:
    /// then the connection is closed, which ends the wait with an error (`storeUnavailable`)
    /// and the next call connects again. A wait without an end held the store's lock, and
    /// every later run of the process waited behind it past its deadline.
    private func answer(_ query: PostgresQuery) throws -> PostgresQueryResult {
        var limit = PostgresSession.maxWaitNanoseconds
        if let deadline = StoreDeadline.current {
            let now = StoreDeadline.now()
            limit = min(limit, deadline > now ? Int64(deadline - now) + 1_000_000_000 : 1_000_000_000)
        }
        let connection = connection
        let timer = connection.eventLoop.scheduleTask(in: .nanoseconds(limit)) {
            let closed: EventLoopFuture<Void> = connection.close()
            closed.whenComplete { _ in withExtendedLifetime(connection) {} }
        }
        defer { timer.cancel() }
        return try connection.query(query, logger: connection.logger).wait()
    }

    /// Keeps every statement of this transaction, its lock waits included, inside the
    /// caller's deadline (`StoreDeadline`): an answer `storeBusy` when it comes.
    func boundStatements(by deadline: UInt64) throws {
        let now = StoreDeadline.now()
        let milliseconds = deadline > now ? max(1, (deadline - now) / 1_000_000) : 1
        try execute(PostgresQuery(unsafeSQL: "SET LOCAL statement_timeout = \(milliseconds)"))
    }
}
