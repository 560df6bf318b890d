import ExtrunHost
import Foundation
import Testing

@testable import ExtrunServe

/// serve.json `grants`: which callers may run which owners' intents (docs/serve.md, "Who may run what").
@Suite("extrun serve: grants")
struct ServeGrantsTests {
    static func policy(_ text: String) throws -> ServePolicy {
        try ServePolicy.parse(Array(text.utf8), source: "serve.json")
    }

    @Test("by default only the service's own uid and root run every owner; another uid none; the TCP token's holders every owner")
    func defaults() throws {
        let grants = ServePolicy().grants
        #expect(grants.owners(uid: 1000, principal: nil, serviceUID: 1000) == nil)
        #expect(grants.owners(uid: 0, principal: nil, serviceUID: 1000) == nil)
        #expect(grants.owners(uid: 1001, principal: nil, serviceUID: 0) == [])
        #expect(grants.owners(uid: nil, principal: "tcp", serviceUID: 0) == nil)
    }

    @Test("an explicit grant: a uid's owners, everyone's (*) added to them, every owner (*), and a tcp entry that narrows the token's holders")
    func explicit() throws {
        let grants = try Self.policy(#"{"grants": {"1001": ["EXAMPLETEAM"], "*": ["PUBLIC"], "1002": ["*"], "tcp": ["PUBLIC"]}}"#).grants
        #expect(grants.owners(uid: 1001, principal: nil, serviceUID: 0) == ["EXAMPLETEAM", "PUBLIC"])
        #expect(grants.owners(uid: 1003, principal: nil, serviceUID: 0) == ["PUBLIC"])
        #expect(grants.owners(uid: 1002, principal: nil, serviceUID: 0) == nil)
        #expect(grants.owners(uid: nil, principal: "tcp", serviceUID: 0) == ["PUBLIC"])
    }

    @Test("a caller not granted the owner is refused notPermitted naming it and the owner; a granted one passes")
    func refusal() throws {
        let refused = CallerIdentity(uid: 1001, grantedOwners: ["OTHER"])
        let error = #expect(throws: HostError.self) { try refused.admit(owner: "EXAMPLETEAM", plugin: "com.example.bookmarks") }
        #expect(error?.kind == .notPermitted && error?.kind.exitCode == 23)
        #expect(error?.details["owner"] == "EXAMPLETEAM" && error?.details["uid"] == 1001)
        #expect(error?.message.contains("uid 1001") == true && error?.message.contains("'EXAMPLETEAM'") == true)
        #expect(ServeResponse.status(exitStatus: 23, error: .notPermitted) == 403)
        try CallerIdentity(uid: 1001, grantedOwners: ["EXAMPLETEAM"]).admit(owner: "EXAMPLETEAM", plugin: "p")
        try CallerIdentity(uid: 1001).admit(owner: "EXAMPLETEAM", plugin: "p")
    }

    @Test("a malformed grants field is a configurationError naming it")
    func malformed() throws {
        for text in [#"{"grants": []}"#, #"{"grants": {"alice": ["X"]}}"#, #"{"grants": {"1001": "X"}}"#, #"{"grants": {"1001": [1]}}"#] {
            let error = #expect(throws: HostError.self) { try Self.policy(text) }
            #expect(error?.kind == .configurationError && error?.message.contains("grants") == true, "\(text)")
        }
    }
}
