import ExtrunTestSupport
import Foundation
import Testing

/// Rules of CONTRIBUTING.md that a reader would miss in review, checked on the sources.
@Suite("Source rules")
struct SourceRulesTests {
    /// CONTRIBUTING.md, "Locks": the toolchain's Synchronization.Mutex spins under
    /// contention on Linux (a priority-inheritance futex); the sources lock with
    /// NIOLockedValueBox.
    @Test func noSynchronizationMutexInSources() throws {
        let sources = StagedPlugins.packageRoot.appendingPathComponent("Sources", isDirectory: true)
        let files = try #require(FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil))
        var checked = 0
        var offenders: [String] = []
        for case let url as URL in files where url.pathExtension == "swift" {
            let text = try String(contentsOf: url, encoding: .utf8)
            checked += 1
            for (number, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                let code = line.split(separator: "//", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
                if code.contains("Mutex<") || code.contains("Mutex(") {
                    offenders.append("\(url.path.dropFirst(sources.path.count + 1)):\(number + 1): \(line.trimmingCharacters(in: .whitespaces))")
                }
            }
        }
        #expect(checked > 50, "found only \(checked) Swift files under \(sources.path)")
        #expect(offenders.isEmpty, "Synchronization.Mutex in the sources (use NIOLockedValueBox; CONTRIBUTING.md, \"Locks\"):\n\(offenders.joined(separator: "\n"))")
    }
}
