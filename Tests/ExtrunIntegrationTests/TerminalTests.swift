import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

/// The CLI on a real pseudo-terminal: it asks for what is missing on /dev/tty,
/// while the JSON report still goes to stdout.
@Suite struct TerminalTests {
    func run(_ answers: [String], _ arguments: [String]) throws -> (transcript: String, status: Int) {
        let driver = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/on_a_terminal.py")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        let answersJSON = String(decoding: try JSONEncoder().encode(answers), as: UTF8.self)
        process.arguments = [driver.path, answersJSON, try ExtrunBinary.url().path] + arguments
        process.environment = [
            "EXTRUN_PLUGIN_PATH": try StagedPlugins.directory().path, "EXTRUN_HOME": try makeTemporaryFolder("integration-tty").path,
            "PATH": "/usr/bin:/bin", "TERM": "dumb",
        ]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let result = try JSONCoding.decode(JSONValue.self, fromJSON: output)
        return (result["transcript"]?.stringValue ?? "", Int(result["status"]?.intValue ?? -1))
    }

    @Test func aMissingValueIsAskedOnTheTerminal() throws {
        let intent = try makeTemporaryFolder("integration-tty-intent").appendingPathComponent("missing.json")
        try Data(#"{"intent": "MakeUppercase"}"#.utf8).write(to: intent)
        let (transcript, status) = try run(["hello there"], ["handle", intent.path, "--format", "text"])
        #expect(transcript.contains("Which text would you like to make uppercase?"), "\(transcript)")
        #expect(transcript.contains("HELLO THERE"), "\(transcript)")
        #expect(status == 0)
    }

    @Test func noInputKeepsItFromAsking() throws {
        let intent = try makeTemporaryFolder("integration-tty-intent").appendingPathComponent("missing.json")
        try Data(#"{"intent": "MakeUppercase"}"#.utf8).write(to: intent)
        let (transcript, status) = try run([], ["handle", intent.path, "--no-input", "--format", "text"])
        #expect(transcript.contains("parameterUnresolved"), "\(transcript)")
        #expect(status == 3)
    }
}
