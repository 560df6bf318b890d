import ExtrunProtocol
import Foundation
import Testing

@testable import ExtrunStore

@Suite struct GlobalsTests {
    @Test(arguments: [0, 1, 2, 15, 16, 17, 29, 30, 31, 32, 33, 63, 64, 65, 255, 256, 4096, 1_000_000])
    func stringsOfEverySizeRoundTrip(length: Int) throws {
        let test = try TestStore()
        let globals = try test.store.globals(of: "TEAM")
        let text = String(repeating: "a", count: length)
        try globals.set("text", to: .string(text))
        #expect(try globals.get("text")?.value == .string(text))
        // Through a fresh connection too: nothing served from memory.
        #expect(try test.reopen().globals(of: "TEAM").get("text")?.value == .string(text))
        #expect(try globals.list().first?.byteCount == length + 2)  // the JSON quotes
    }

    @Test(arguments: StoreBackendKind.all)
    func everyKindOfValueRoundTrips(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let globals = try test.store.globals(of: "TEAM")
        let values: [String: JSONValue] = [
            "text": "héllo ✓ \"quoted\" \\ /",
            "empty": "",
            "integer": .int(-9_007_199_254_740_993),
            "number": 3.25,
            "true": true,
            "false": false,
            "date": .string(ISODate.format(Date(timeIntervalSince1970: 1_800_000_000))),
            "list": [1, "two", [3.5], ["four": nil]],
            "emptyList": [],
            "dictionary": ["a": 1, "nested": ["b": [true, false]], "": "empty key"],
            "emptyDictionary": [:],
            "null": nil,
        ]
        for (name, value) in values { try globals.set(name, to: value) }
        for (name, value) in values {
            #expect(try globals.get(name)?.value == value, "\(name)")
        }
        #expect(try globals.list().map(\.name) == values.keys.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) })
    }

    @Test(arguments: StoreBackendKind.all)
    func aOneMegabyteListRoundTrips(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let globals = try test.store.globals(of: "TEAM")
        let value = JSONValue.array((0..<1000).map { .string("\($0) " + String(repeating: "é", count: 500)) })
        try globals.set("big", to: value)
        #expect(try globals.get("big")?.value == value)
    }

    @Test(arguments: StoreBackendKind.all)
    func valuesOverTheLimitAreRefused(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let globals = try test.store.globals(of: "TEAM")
        // Exactly at the limit: 4 MiB of JSON, quotes included.
        let atLimit = String(repeating: "x", count: StoreLimits.maxValueBytes - 2)
        try globals.set("max", to: .string(atLimit))
        #expect(try globals.get("max")?.value == .string(atLimit))
        let error = expectStoreError(.tooLarge) { try globals.set("over", to: .string(atLimit + "x")) }
        #expect(error?.message.contains("4194304") == true)
        #expect(try globals.get("over") == nil)
        expectStoreError(.invalidValue) { try globals.set("nan", to: .double(.nan)) }
        expectStoreError(.invalidValue) { try globals.set("inf", to: ["a": .double(.infinity)]) }
    }

    @Test(arguments: StoreBackendKind.all)
    func namesAreValidated(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let globals = try test.store.globals(of: "TEAM")
        for bad in ["", String(repeating: "n", count: 257), "new\nline", "nul\u{0}", " padded", "e\u{301}"] {
            expectStoreError(.invalidName) { try globals.set(bad, to: 1) }
            expectStoreError(.invalidName) { try globals.get(bad) }
        }
        for good in [String(repeating: "n", count: 256), "with space", "a/b", "é", "🙂", "settings.theme"] {
            try globals.set(good, to: .string(good))
            #expect(try globals.get(good)?.value == .string(good))
        }
    }

    @Test(arguments: StoreBackendKind.all)
    func deleteAndList(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let globals = try test.store.globals(of: "TEAM")
        for name in ["b", "a", "c", "B"] { try globals.set(name, to: .string(name)) }
        #expect(try globals.list().map(\.name) == ["B", "a", "b", "c"], "byte order")
        #expect(try globals.list(after: "a", limit: 2).map(\.name) == ["b", "c"])
        #expect(try globals.list(limit: 1).map(\.name) == ["B"])
        #expect(try globals.delete("b"))
        #expect(try globals.delete("b") == false)
        #expect(try globals.get("b") == nil)
        #expect(try globals.list().map(\.name) == ["B", "a", "c"])
    }

    @Test(arguments: StoreBackendKind.all)
    func ownersAreIsolated(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let alice = try test.store.globals(of: "ALICE")
        let bob = try test.store.globals(of: "BOB")
        try alice.set("shared-name", to: "alice")
        try bob.set("shared-name", to: "bob")
        try alice.set("only-alice", to: 1)
        #expect(try alice.get("shared-name")?.value == "alice")
        #expect(try bob.get("shared-name")?.value == "bob")
        #expect(try bob.get("only-alice") == nil)
        #expect(try bob.list().map(\.name) == ["shared-name"])
        #expect(try bob.delete("only-alice") == false)
        #expect(try alice.get("only-alice") != nil)
        let bobExport = try JSONCoding.decode(JSONValue.self, fromJSON: try bob.export())
        #expect(bobExport["globals"] == ["shared-name": "bob"])
    }

    // MARK: - Compare-and-set

    @Test(arguments: StoreBackendKind.all)
    func compareAndSet(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let globals = try test.store.globals(of: "TEAM")
        let v1 = try globals.set("counter", to: 1, ifVersion: .absent)
        expectStoreError(.versionConflict) { try globals.set("counter", to: 9, ifVersion: .absent) }
        let v2 = try globals.set("counter", to: 2, ifVersion: .version(v1))
        #expect(v2 > v1)
        let conflict = expectStoreError(.versionConflict) { try globals.set("counter", to: 3, ifVersion: .version(v1)) }
        #expect(conflict?.details["currentVersion"] == .int(v2))
        #expect(conflict?.details["expectedVersion"] == .int(v1))
        #expect(try globals.get("counter") == Global(name: "counter", value: 2, version: v2))
        expectStoreError(.versionConflict) { try globals.set("missing", to: 1, ifVersion: .version(1)) }
        expectStoreError(.versionConflict) { try globals.delete("counter", ifVersion: .version(v1)) }
        #expect(try globals.delete("counter", ifVersion: .version(v2)))
        // Re-created after a delete: a version never seen before, so an old read cannot win.
        let v3 = try globals.set("counter", to: 1)
        #expect(v3 > v2)
        expectStoreError(.versionConflict) { try globals.set("counter", to: 5, ifVersion: .version(v1)) }
        expectStoreError(.versionConflict) { try globals.set("counter", to: 5, ifVersion: .version(v2)) }
    }

    // MARK: - Export and import

    @Test(arguments: StoreBackendKind.all)
    func exportImportRoundTrip(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let globals = try test.store.globals(of: "TEAM")
        let values: [String: JSONValue] = [
            "text": "hello", "empty": "", "n": 42, "pi": 3.25, "flag": true,
            "list": [1, [2, 3]], "dict": ["k": "v"], "big": .string(String(repeating: "z", count: 1_000_000)),
        ]
        for (name, value) in values { try globals.set(name, to: value) }
        let document = try globals.export()
        let parsed = try JSONCoding.decode(JSONValue.self, fromJSON: document)
        #expect(parsed["format"] == "extrun-globals")
        #expect(parsed["version"] == 1)
        #expect(parsed["owner"] == "TEAM")
        #expect(parsed["globals"] == .object(values))

        // Into a brand-new home: everything comes back.
        let other = try TestStore()
        let imported = try other.store.globals(of: "TEAM")
        #expect(try imported.import(document, mode: .merge) == ImportSummary(created: values.count))
        for (name, value) in values { #expect(try imported.get(name)?.value == value) }
        // Importing the same document again changes nothing, not even versions.
        let versions = try imported.list()
        #expect(try imported.import(document, mode: .merge) == ImportSummary(unchanged: values.count))
        #expect(try imported.list() == versions)
    }

    @Test(arguments: StoreBackendKind.all)
    func importMergeAndReplace(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let globals = try test.store.globals(of: "TEAM")
        try globals.set("keep", to: 1)
        try globals.set("change", to: 1)
        let document = Data(#"{"format":"extrun-globals","version":1,"owner":"TEAM","globals":{"change":2,"new":3}}"#.utf8)
        #expect(try globals.import(document, mode: .merge) == ImportSummary(created: 1, updated: 1))
        #expect(try globals.list().map(\.name) == ["change", "keep", "new"])
        try globals.set("change", to: 1)
        #expect(try globals.import(document, mode: .replace) == ImportSummary(created: 0, updated: 1, unchanged: 1, deleted: 1))
        #expect(try globals.list().map(\.name) == ["change", "new"])
    }

    @Test(arguments: StoreBackendKind.all)
    func importValidatesEverythingBeforeWritingAnything(backend: StoreBackendKind) throws {
        let test = try BackendStore(backend)
        let globals = try test.store.globals(of: "TEAM")
        try globals.set("existing", to: "before")
        let big = String(repeating: "x", count: StoreLimits.maxValueBytes)
        let bad: [(String, StoreErrorKind)] = [
            ("not json", .invalidDocument),
            (#"[1,2]"#, .invalidDocument),
            (#"{"format":"other","version":1,"owner":"TEAM","globals":{}}"#, .invalidDocument),
            (#"{"format":"extrun-globals","version":2,"owner":"TEAM","globals":{}}"#, .invalidDocument),
            (#"{"format":"extrun-globals","version":1,"owner":"ELSE","globals":{"existing":"after"}}"#, .invalidDocument),
            (#"{"format":"extrun-globals","version":1,"owner":"TEAM","globals":[]}"#, .invalidDocument),
            // A valid entry first, then a bad name: nothing may be written.
            (#"{"format":"extrun-globals","version":1,"owner":"TEAM","globals":{"existing":"after","a":1,"bad\nname":1}}"#, .invalidName),
            (#"{"format":"extrun-globals","version":1,"owner":"TEAM","globals":{"existing":"after","huge":"\#(big)"}}"#, .tooLarge),
        ]
        for (document, kind) in bad {
            let error = expectStoreError(kind) { try globals.import(Data(document.utf8), mode: .replace) }
            #expect(error?.message.contains("nothing was imported") == true, "\(error?.message ?? "")")
            #expect(try globals.list().map(\.name) == ["existing"])
            #expect(try globals.get("existing")?.value == "before")
        }
    }
}
