import ExtrunProtocol
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `extrun globals import` and `export` hold one global at a time, never the document
/// (issue 14): the peak RSS of the `extrun` process, read from outside (wait4's ru_maxrss),
/// is the same for N globals and for 4N. Before, import parsed the whole document and held
/// every entry, plaintext and sealed: ~0.7 KB of memory per global of this test, ~35 MB more
/// for 4N than for N.
@Suite("globals import and export memory", .serialized)
struct GlobalsMemoryCLITests {
    /// Memory that 4N globals may take beyond N (SQLite's page caches are bounded; what
    /// malloc keeps of freed memory varies a little).
    static let slackBytes: Int64 = 10 << 20

    struct Measured {
        var status: Int32
        var peakRSSBytes: Int64
        var stdout: String
        var stderr: String
    }

    /// Runs `extrun ARGS` as the child of a small wrapper that reports its rusage; with
    /// `pipeFrom`, the child's standard input is a pipe the wrapper fills with that file.
    func measure(_ arguments: [String], home: URL, pipeFrom: URL? = nil) throws -> Measured {
        let dir = home.deletingLastPathComponent()
        let wrapper = dir.appendingPathComponent("wait4.py")
        try Data(
            """
            import os, sys
            rss_file, source = sys.argv[1], sys.argv[2]
            if source:
                r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                if source:
                    os.dup2(r, 0); os.close(r); os.close(w)
                os.execv(sys.argv[3], sys.argv[3:])
            if source:
                os.close(r)
                with open(source, "rb") as f:
                    while True:
                        chunk = f.read(1 << 16)
                        if not chunk: break
                        try: os.write(w, chunk)
                        except BrokenPipeError: break
                os.close(w)
            _, status, usage = os.wait4(pid, 0)
            with open(rss_file, "w") as f:
                f.write(str(usage.ru_maxrss * 1024))
            sys.exit(os.waitstatus_to_exitcode(status) & 255)
            """.utf8
        ).write(to: wrapper)
        let rss = dir.appendingPathComponent("rss")
        let out = dir.appendingPathComponent("out")
        let err = dir.appendingPathComponent("err")
        for file in [out, err] { _ = FileManager.default.createFile(atPath: file.path, contents: nil) }
        defer { for file in [rss, out, err] { try? FileManager.default.removeItem(at: file) } }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [wrapper.path, rss.path, pipeFrom?.path ?? "", try ExtrunBinary.url().path] + arguments
        process.environment = ["PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home.path, "EXTRUN_HOME": home.path]
        process.standardOutput = try FileHandle(forWritingTo: out)
        process.standardError = try FileHandle(forWritingTo: err)
        process.standardInput = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        return Measured(
            status: process.terminationStatus,
            peakRSSBytes: (try? String(contentsOf: rss, encoding: .utf8)).flatMap { Int64($0) } ?? -1,
            stdout: (try? String(contentsOf: out, encoding: .utf8)) ?? "", stderr: (try? String(contentsOf: err, encoding: .utf8)) ?? "")
    }

    /// An export document of `count` globals, each a 1 KB string in an object, written as it goes.
    func writeDocument(_ url: URL, count: Int) throws {
        _ = FileManager.default.createFile(atPath: url.path, contents: nil)
        let handle = try FileHandle(forWritingTo: url)
        defer { try? handle.close() }
        let filler = String(repeating: "v", count: 1000)
        handle.write(Data(#"{"exported":"2026-11-25T00:00:00Z","format":"extrun-globals","globals":{"#.utf8))
        var piece = ""
        for index in 0..<count {
            piece += (index == 0 ? "" : ",") + #""global\#(index)":{"n":\#(index),"text":"\#(filler)"}"#
            if piece.utf8.count > 1 << 16 {
                handle.write(Data(piece.utf8))
                piece = ""
            }
        }
        handle.write(Data((piece + #"},"owner":"TEAM","version":1}"#).utf8))
    }

    @Test("import (from a file and from a pipe) and export of 4N globals take no more memory than of N")
    func flatInTheDocumentsSize() throws {
        let tmp = try TempDirectory("globals-memory")
        var peaks: [String: [Int: Int64]] = [:]
        let counts = [3_000, 12_000]
        for count in counts {
            let document = tmp.url.appendingPathComponent("doc-\(count).json")
            try writeDocument(document, count: count)
            for (step, viaPipe) in [("import", false), ("pipe", true)] {
                let home = tmp.url.appendingPathComponent("\(step)-\(count)/home")
                try FileManager.default.createDirectory(at: home, withIntermediateDirectories: true)
                let run = try measure(
                    ["globals", "import", viaPipe ? "-" : document.path, "--owner", "TEAM"], home: home, pipeFrom: viaPipe ? document : nil)
                #expect(run.status == 0, "\(step) \(count): \(run.stderr)")
                #expect(run.stdout.contains("\"created\" : \(count)") || run.stdout.contains("\"created\":\(count)"), "\(run.stdout)")
                peaks[step, default: [:]][count] = run.peakRSSBytes
                if !viaPipe {
                    let exported = home.deletingLastPathComponent().appendingPathComponent("export.json")
                    let export = try measure(["globals", "export", "--owner", "TEAM", "-o", exported.path], home: home)
                    #expect(export.status == 0, "export \(count): \(export.stderr)")
                    peaks["export", default: [:]][count] = export.peakRSSBytes
                    let globals = try JSONParser.parse(try Data(contentsOf: exported))["globals"]
                    #expect(globals?["global\(count - 1)"]?["n"] == .int(Int64(count - 1)))
                    try FileManager.default.removeItem(at: exported)
                }
                try FileManager.default.removeItem(at: home.deletingLastPathComponent())
            }
            try FileManager.default.removeItem(at: document)
        }
        print("[globals memory] peak RSS KiB by step and count: \(peaks.mapValues { $0.mapValues { $0 >> 10 } })")
        for (step, byCount) in peaks {
            let (small, large) = (byCount[counts[0]] ?? -1, byCount[counts[1]] ?? -1)
            #expect(small > 0 && large > 0, "\(step): no rusage")
            #expect(
                large - small < Self.slackBytes,
                "\(step): \(counts[1]) globals took \(large >> 10) KiB, \(counts[0]) took \(small >> 10) KiB: memory grows with the document")
        }
    }
}
