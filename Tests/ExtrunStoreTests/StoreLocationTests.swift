import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

@testable import ExtrunStore

/// Where the rows are (`StoreLocation`): `EXTRUN_STORE`, `store` in policy.json, else the
/// SQLite file; a server that cannot be reached is `storeUnavailable` (issue 34).
@Suite struct StoreLocationTests {
    @Test func libpqsURLFormsAreRead() throws {
        guard case .postgres(let socket) = try StoreLocation.parse("postgresql:///extrun?host=/tmp/pg%20dir&port=6543&user=alice") else {
            Issue.record("not a PostgreSQL location")
            return
        }
        #expect(socket.database == "extrun")
        #expect(socket.user == "alice")
        #expect(socket.socketPath == "/tmp/pg dir/.s.PGSQL.6543")
        #expect(socket.host == nil)
        guard case .postgres(let tcp) = try StoreLocation.parse("postgres://bob@db.example:5433/store") else {
            Issue.record("not a PostgreSQL location")
            return
        }
        #expect(tcp.host == "db.example" && tcp.port == 5433 && tcp.user == "bob" && tcp.database == "store")
        #expect(tcp.socketPath == nil)
        #expect(try StoreLocation.parse("") == .sqlite)
        #expect(try StoreLocation.parse("sqlite") == .sqlite)
    }

    @Test func aPasswordComesFromAFileNeverFromTheURL() throws {
        let refused = expectStoreError(.invalidDocument) { try StoreLocation.parse("postgresql://bob:secret@db.example/store") }
        #expect(refused?.message.contains("secret") == false)
        #expect(refused?.message.contains("passwordFile") == true)
        let tmp = try TempDirectory()
        try tmp.write("password", "s3cret\n", mode: 0o600)
        guard case .postgres(let location) = try StoreLocation.parse("postgresql://bob@db.example/store", passwordFile: tmp.sub("password")) else {
            Issue.record("not a PostgreSQL location")
            return
        }
        #expect(location.password == "s3cret")
        #expect(!location.display.contains("s3cret"))
        try tmp.write("pgpass", "# comment\nother:5432:*:bob:no\ndb.example:5432:store:bob:yes\\:colon\n", mode: 0o600)
        #expect(try location.passwordFromPassFile(tmp.sub("pgpass")) == "yes:colon")
        expectStoreError(.invalidDocument) { try StoreLocation.parse("mysql://db.example/store") }
        expectStoreError(.invalidDocument) { try StoreLocation.parse("postgresql:///db?host=/tmp&port=99999") }
    }

    @Test func aServerThatCannotBeReachedIsStoreUnavailableSayingWhatToCheck() throws {
        let tmp = try TempDirectory()
        let location = try StoreLocation.parse("postgresql:///extrun?host=\(tmp.path)&port=1&user=nobody")
        let error = expectStoreError(.storeUnavailable) { try Store(home: URL(fileURLWithPath: tmp.sub("home")), location: location) }
        #expect(error?.message.contains("\(tmp.path)/.s.PGSQL.1") == true, "\(String(describing: error))")
        #expect(error?.message.contains("Check that the server runs") == true)
        #expect(error?.details["store"] == .string("postgresql:///extrun?host=\(tmp.path)&port=1&user=nobody"))
    }

    /// `store` in policy.json names the server; the home keeps its keys and no store.sqlite.
    @Test(arguments: StoreBackendKind.postgresOnly)
    func thePolicysStoreKeyChoosesTheServer(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        try test.store.globals(of: "TEAM").set("n", to: 1)
        let policy = try JSONCoding.encoder().encode(JSONValue.object(["store": .object(["url": .string(test.storeVariable)])]))
        let path = test.home + "/policy.json"
        #expect(FileManager.default.createFile(atPath: path, contents: policy, attributes: [.posixPermissions: 0o600]))
        let reopened = try Store(home: test.homeURL)
        #expect(reopened.databasePath == test.storeVariable)
        #expect(try reopened.globals(of: "TEAM").get("n")?.value == 1)
        #expect(!FileManager.default.fileExists(atPath: test.home + "/store.sqlite"))
        // Asking a PostgreSQL store for its SQLite file says where the store is.
        let error = expectStoreError(.databaseError) { try reopened.database }
        let message = error?.message ?? ""
        #expect(message.contains("reads the SQLite file, and the store is on PostgreSQL"), "\(message)")
    }
}
