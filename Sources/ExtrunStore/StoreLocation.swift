import ExtrunProtocol
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Where a home's store keeps its rows (docs/store.md, "PostgreSQL"): the SQLite file
/// `<home>/store.sqlite` (the default), or a PostgreSQL server named by a URL in
/// `EXTRUN_STORE` or in `store` of `<home>/policy.json`. The keys stay files under
/// `<home>/keys` either way: the server holds only sealed rows.
public enum StoreLocation: Sendable, Equatable {
    case sqlite
    case postgres(PostgresLocation)

    /// `EXTRUN_STORE` when set and not empty, else `store` in `<home>/policy.json`
    /// (a URL, or an object with `url` and `passwordFile`), else SQLite.
    static func configured(home: String, keystore: Keystore) throws -> StoreLocation {
        if let value = getenv("EXTRUN_STORE").map({ String(cString: $0) }), !value.isEmpty {
            return try parse(value, passwordFile: nil, origin: "EXTRUN_STORE")
        }
        let path = home + "/policy.json"
        guard let data = try keystore.readPrivateFile(path, owner: "", limit: 1 << 20, what: "a policy file") else { return .sqlite }
        let details: [String: JSONValue] = ["file": .string(path)]
        guard case .object(let policy) = (try? JSONCoding.parse(json: data)) ?? .null else {
            throw StoreError(.invalidDocument, "\(path) is not a JSON object: fix the policy file", details: details)
        }
        switch policy["store"] {
        case nil, .null:
            return .sqlite
        case .string(let url):
            return try parse(url, passwordFile: nil, origin: path)
        case .object(let fields):
            guard case .string(let url) = fields["url"] ?? .null else {
                throw StoreError(.invalidDocument, "\(path): store.url must be a postgresql:// URL", details: details)
            }
            var passwordFile: String?
            switch fields["passwordFile"] {
            case nil, .null: break
            case .string(let file): passwordFile = file
            default: throw StoreError(.invalidDocument, "\(path): store.passwordFile must be a file's path", details: details)
            }
            return try parse(url, passwordFile: passwordFile, origin: path)
        default:
            throw StoreError(
                .invalidDocument, "\(path): store must be a postgresql:// URL or an object with url and passwordFile", details: details)
        }
    }

    /// A `postgresql://` (or `postgres://`) URL, libpq's forms: `postgresql://USER@HOST:PORT/DB`, or
    /// the Unix-socket form `postgresql:///DB?host=/socket/dir&port=N&user=U`. `sqlite` (or
    /// empty) is the SQLite file. A password in the URL is refused: it comes from
    /// `passwordFile` (the file's first line) or from `PGPASSFILE` (libpq's format).
    public static func parse(_ text: String, passwordFile: String? = nil, origin: String = "the store's URL") throws -> StoreLocation {
        if text.isEmpty || text == "sqlite" { return .sqlite }
        let details: [String: JSONValue] = ["store": .string(origin)]
        guard let components = URLComponents(string: text), let scheme = components.scheme,
            scheme == "postgresql" || scheme == "postgres"
        else {
            throw StoreError(
                .invalidDocument,
                "\(origin): '\(text)' is not a store URL: give postgresql:///DB?host=/socket/dir&port=N&user=U, postgresql://USER@HOST:PORT/DB, or nothing (the SQLite file in $EXTRUN_HOME)",
                details: details)
        }
        if components.password != nil {
            throw StoreError(
                .invalidDocument,
                "\(origin): the store's URL holds a password; put it in a file instead (store.passwordFile in policy.json, or PGPASSFILE), never on a command line",
                details: details)
        }
        var query: [String: String] = [:]
        for item in components.queryItems ?? [] { query[item.name] = item.value ?? "" }
        var location = PostgresLocation()
        location.user = query["user"] ?? components.user ?? PostgresLocation.systemUser()
        let database = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        location.database = query["dbname"] ?? (database.isEmpty ? location.user : database)
        let host = query["host"] ?? components.host ?? ""
        if let portText = query["port"] ?? components.port.map(String.init) {
            guard let port = Int(portText), (1...65535).contains(port) else {
                throw StoreError(.invalidDocument, "\(origin): port '\(portText)' is not a port number", details: details)
            }
            location.port = port
        }
        if host.isEmpty || host.hasPrefix("/") {
            location.socketDirectory = host.isEmpty ? "/var/run/postgresql" : host
        } else {
            location.host = host
        }
        if let file = passwordFile ?? query["passwordFile"] {
            location.password = try PostgresLocation.readPassword(file, origin: origin)
        } else if let file = getenv("PGPASSFILE").map({ String(cString: $0) }), !file.isEmpty {
            location.password = try location.passwordFromPassFile(file)
        }
        return .postgres(location)
    }

    /// What error messages name: the file, or the URL without a password.
    var display: String {
        switch self {
        case .sqlite: "store.sqlite"
        case .postgres(let location): location.display
        }
    }
}

/// A PostgreSQL server and database (`StoreLocation.parse`).
public struct PostgresLocation: Sendable, Equatable {
    public var database = ""
    public var user = ""
    /// The directory of the server's socket (`.s.PGSQL.<port>` in it); nil for TCP.
    public var socketDirectory: String?
    public var host: String?
    public var port = 5432
    var password: String?

    public var socketPath: String? { socketDirectory.map { "\($0)/.s.PGSQL.\(port)" } }

    /// The URL without a password: what messages name.
    public var display: String {
        if let socketDirectory {
            return "postgresql:///\(database)?host=\(socketDirectory)&port=\(port)&user=\(user)"
        }
        return "postgresql://\(user)@\(host ?? "localhost"):\(port)/\(database)"
    }

    /// The same server, another database (the tests' own databases).
    public func with(database: String) -> PostgresLocation {
        var copy = self
        copy.database = database
        return copy
    }

    /// This user's name (libpq's default user), from /etc/passwd itself (no NSS: the CLI is a
    /// static executable; `LocalUsers`).
    static func systemUser() -> String {
        let uid = geteuid()
        if let text = try? String(contentsOfFile: "/etc/passwd", encoding: .utf8) {
            for line in text.split(separator: "\n") {
                let fields = line.split(separator: ":", omittingEmptySubsequences: false)
                if fields.count >= 3, UInt32(fields[2]) == uid { return String(fields[0]) }
            }
        }
        return "postgres"
    }

    static func readPassword(_ file: String, origin: String) throws -> String {
        do {
            let text = try String(contentsOfFile: file, encoding: .utf8)
            return String(text.split(separator: "\n", omittingEmptySubsequences: false).first ?? "")
        } catch {
            throw StoreError(
                .ioError, "\(origin): cannot read the store's password file \(file): \(error.localizedDescription)",
                details: ["file": .string(file)])
        }
    }

    /// libpq's password file: lines `host:port:database:user:password`, `*` matching anything.
    func passwordFromPassFile(_ file: String) throws -> String? {
        let text: String
        do {
            text = try String(contentsOfFile: file, encoding: .utf8)
        } catch {
            throw StoreError(.ioError, "cannot read PGPASSFILE \(file): \(error.localizedDescription)", details: ["file": .string(file)])
        }
        let hostField = socketDirectory == nil ? (host ?? "localhost") : "localhost"
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            var fields: [String] = []
            var current = ""
            var escaped = false
            for character in line {
                if escaped {
                    current.append(character)
                    escaped = false
                } else if character == "\\" {
                    escaped = true
                } else if character == ":" && fields.count < 4 {
                    fields.append(current)
                    current = ""
                } else {
                    current.append(character)
                }
            }
            fields.append(current)
            guard fields.count == 5 else { continue }
            let wanted = [hostField, String(port), database, user]
            if zip(fields.prefix(4), wanted).allSatisfy({ $0 == "*" || $0 == $1 }) { return fields[4] }
        }
        return nil
    }
}
