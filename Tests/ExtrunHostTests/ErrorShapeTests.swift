import ExtrunHost
import ExtrunProtocol
import ExtrunStore
import Testing

/// HostError and StoreError: one shape (`KindedError`), two lists of kinds.
@Suite("The host's and the store's errors")
struct ErrorShapeTests {
    @Test("a store error reported by the host keeps its message and details, and its kind where asked")
    func storeErrorAsHostError() {
        let stored = StoreError(.insecurePermissions, "keys/ can be read by others", details: ["file": "/home/keys"])
        let reported = HostError(.configurationError, from: stored, keepingKindAs: "problem")
        #expect(reported.kind == .configurationError)
        #expect(reported.message == "keys/ can be read by others")
        #expect(reported.details == ["file": "/home/keys", "problem": "insecurePermissions"])
        #expect(reported.kind.exitCode == 11)
        #expect(reported.json == ["kind": "configurationError", "message": "keys/ can be read by others", "file": "/home/keys", "problem": "insecurePermissions"])
        let plain = HostError(.internalError, from: stored)
        #expect(plain.details == ["file": "/home/keys"])
    }

    @Test("each reads back from its JSON; a kind of the other list is not read")
    func jsonRoundTrip() {
        let host = HostError(.timeout, "late", details: ["seconds": 3])
        #expect(HostError(json: host.json) == host)
        let store = StoreError(.quotaExceeded, "over", details: ["quota": "bytes"])
        #expect(StoreError(json: store.json) == store)
        #expect(StoreError(json: host.json) == nil)
        #expect(HostError(json: store.json) == nil)
        #expect(store.description == "quotaExceeded: over")
    }

    @Test("a catch of one does not catch the other")
    func distinctTypes() {
        let thrown: any Error = StoreError(.notFound, "no such global")
        #expect(thrown as? HostError == nil)
        #expect((thrown as? StoreError)?.kind == .notFound)
        let hostThrown: any Error = HostError(.notFound, "no such endpoint")
        #expect(hostThrown as? StoreError == nil)
    }
}
