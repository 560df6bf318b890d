import ExtrunProtocol
import ExtrunStore
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `globals import` reads its document as a stream (issue 14): from a file (read twice,
/// checked through before anything is written) or a pipe (read once, checked as it is
/// written, in one transaction). Either way a bad document imports nothing.
@Suite("Streamed globals import")
struct ImportStreamingTests {
    /// Imports `document` through a pipe, written by another thread (a pipe is read once).
    func importThroughPipe(_ document: String, into globals: Globals, mode: ImportMode = .merge) throws -> ImportSummary {
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        let (readEnd, writeEnd) = (fds[0], fds[1])
        defer { close(readEnd) }
        let bytes = Array(document.utf8)
        let writer = Thread {
            var offset = 0
            while offset < bytes.count {
                let written = bytes[offset...].withUnsafeBytes { write(writeEnd, $0.baseAddress, $0.count) }
                if written <= 0 { break }
                offset += written
            }
            close(writeEnd)
        }
        writer.start()
        defer {
            // The reader may stop at an error: drain what the writer still has to write.
            var sink = [UInt8](repeating: 0, count: 1 << 16)
            while read(readEnd, &sink, sink.count) > 0 {}
        }
        return try globals.import(from: .fileDescriptor(readEnd, name: "the pipe"), mode: mode)
    }

    @Test("a document in any key order, pretty or compact, imports the same through a pipe and a file")
    func keyOrderAndLayout() throws {
        let test = try TestStore()
        let globals = try test.store.globals(of: "TEAM")
        // "owner" and "version" after "globals" (an export's order), spaces everywhere, escapes in names.
        let document = """
            {
              "globals" : {
                "a\\u00e9" : [ 1 , { "k" : "v w" } , [ ] , { } ],
                "b" : "line\\nbreak",
                "c":-1.25e1,"d":true ,
                "e" : null
              } ,
              "owner" : "TEAM", "format" : "extrun-globals",
              "version" : 1, "exported" : "2026-11-25T00:00:00Z"
            }
            """
        #expect(try importThroughPipe(document, into: globals) == ImportSummary(created: 5))
        #expect(try globals.get("aé")?.value == [1, ["k": "v w"], [], [:]])
        #expect(try globals.get("b")?.value == "line\nbreak")
        #expect(try globals.get("c")?.value == .double(-12.5))
        #expect(try globals.get("e")?.value == .null)
        // From a file: unchanged, versions too.
        let versions = try globals.list()
        let file = try test.directory.write("doc.json", document).path
        let fd = open(file, O_RDONLY)
        defer { close(fd) }
        #expect(try globals.import(from: .fileDescriptor(fd, name: file), mode: .merge) == ImportSummary(unchanged: 5))
        #expect(try globals.list() == versions)
    }

    @Test("through a pipe, a bad entry in the middle or a wrong owner at the end imports nothing")
    func pipeAllOrNothing() throws {
        let test = try TestStore()
        let globals = try test.store.globals(of: "TEAM")
        try globals.set("existing", to: "before")
        let entries = (0..<2000).map { "\"g\($0)\": {\"n\": \($0)}" }
        let big = String(repeating: "x", count: StoreLimits.maxValueBytes)
        let bad: [(String, StoreErrorKind, String)] = [
            (#"{"format":"extrun-globals","version":1,"owner":"TEAM","globals":{\#(entries[..<1000].joined(separator: ",")),"bad\nname":1,\#(entries[1000...].joined(separator: ","))}}"#, .invalidName, "bad"),
            (#"{"format":"extrun-globals","version":1,"globals":{"existing":"after",\#(entries.joined(separator: ","))},"owner":"ELSE"}"#, .invalidDocument, "ELSE"),
            (#"{"format":"extrun-globals","globals":{"existing":"after",\#(entries.joined(separator: ","))},"owner":"TEAM","version":2}"#, .invalidDocument, "version"),
            (#"{"format":"extrun-globals","version":1,"owner":"TEAM","globals":{"existing":"after","g":1,"g":2}}"#, .invalidDocument, "twice"),
            (#"{"format":"extrun-globals","version":1,"owner":"TEAM","globals":{"existing":"after","g":[1,2}}"#, .invalidDocument, "line 1"),
            (#"{"format":"extrun-globals","version":1,"owner":"TEAM","globals":{"existing":"after","huge":"\#(big)"}}"#, .tooLarge, "huge"),
            (#"{"format":"extrun-globals","version":1,"owner":"TEAM","globals":{"existing":"after"}} trailing"#, .invalidDocument, "after the document"),
            (#"{"format":"extrun-globals","version":1,"owner":"TEAM","globals":{"existing":"after""#, .invalidDocument, "end of the document"),
        ]
        for (document, kind, mentions) in bad {
            let error = expectStoreError(kind) { try importThroughPipe(document, into: globals, mode: .replace) }
            #expect(error?.message.contains("nothing was imported") == true, "\(error?.message ?? "")")
            #expect(error?.message.contains(mentions) == true, "\(error?.message ?? "")")
            #expect(try globals.list().map(\.name) == ["existing"])
            #expect(try globals.get("existing")?.value == "before")
        }
    }

    @Test("spaces between tokens are not dropped into valid JSON: [1 2] and [tr ue] are refused, from memory and a pipe")
    func spacesSeparateTokens() throws {
        let test = try TestStore()
        let globals = try test.store.globals(of: "TEAM")
        for value in ["[1 2]", "[tr ue]", "{\"a\":1 2}", "[\"a\" \"b\"]", "[1\t2]", "[1\r2]"] {
            let document = #"{"format":"extrun-globals","version":1,"owner":"TEAM","globals":{"g":\#(value)}}"#
            let error = expectStoreError(.invalidDocument) { try globals.import(Data(document.utf8), mode: .merge) }
            #expect(error?.message.contains("global 'g'") == true, "\(value): \(error?.message ?? "")")
            expectStoreError(.invalidDocument) { try importThroughPipe(document, into: globals) }
        }
        // Where the spaces are only layout, the value is the same.
        let document = #"{"format":"extrun-globals","version":1,"owner":"TEAM","globals":{"g":[ 1 , 2 ,\#n [ true ] , { "a" : null } ]}}"#
        #expect(try globals.import(Data(document.utf8), mode: .merge) == ImportSummary(created: 1))
        #expect(try globals.get("g")?.value == [1, 2, [true], ["a": .null]])
        #expect(try globals.list().map(\.name) == ["g"])
    }

    @Test("replace through a pipe deletes what the document does not name, and only that")
    func replaceThroughPipe() throws {
        let test = try TestStore()
        let globals = try test.store.globals(of: "TEAM")
        for name in ["keep", "change", "drop1", "drop2"] { try globals.set(name, to: 1) }
        let document = #"{"format":"extrun-globals","version":1,"owner":"TEAM","globals":{"keep":1,"change":2,"new":3}}"#
        #expect(try importThroughPipe(document, into: globals, mode: .replace) == ImportSummary(created: 1, updated: 1, unchanged: 1, deleted: 2))
        #expect(try globals.list().map(\.name) == ["change", "keep", "new"])
        // Twice in a row on the same connection (its temporary table is gone after each).
        #expect(try importThroughPipe(document, into: globals, mode: .replace) == ImportSummary(unchanged: 3))
    }
}
