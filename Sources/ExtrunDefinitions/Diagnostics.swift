import Foundation

/// A line and column in a definition file, both counted from 1 (columns in characters).
public struct FilePosition: Sendable, Hashable, CustomStringConvertible {
    public var line: Int
    public var column: Int

    public init(line: Int, column: Int) {
        self.line = line
        self.column = column
    }

    public var description: String { "\(line):\(column)" }
}

/// One problem in a definition file: the file, where in it (a JSON path such as
/// `intents[0].parameters[1].default`, and the line and column), and what is wrong.
///
/// Its description reads like a compiler's, so SwiftPM and editors can point at it:
/// `Examples/SoupChef/intents.json:53:82: error: intents[0].parameters[1].default: not a valid value: expected an integer, got string`.
public struct Diagnostic: Sendable, Hashable, CustomStringConvertible {
    public var file: String
    /// The JSON path inside the file; empty for the whole document.
    public var path: String
    public var location: FilePosition?
    public var message: String

    public init(file: String, path: String, location: FilePosition?, message: String) {
        self.file = file
        self.path = path
        self.location = location
        self.message = message
    }

    public var description: String {
        let position = location.map { ":\($0.line):\($0.column)" } ?? ""
        let subject = path.isEmpty ? "" : "\(path): "
        return "\(file)\(position): error: \(subject)\(message)"
    }
}

/// A definition file that cannot be used, with every problem found in it.
public struct DefinitionError: Error, Sendable, CustomStringConvertible {
    public var diagnostics: [Diagnostic]

    public init(_ diagnostics: [Diagnostic]) { self.diagnostics = diagnostics }

    public var description: String { diagnostics.map(\.description).joined(separator: "\n") }
}

/// Where something is in a definition file: its JSON path and its position.
public struct Spot: Sendable, Hashable {
    public var path: String
    public var location: FilePosition?

    public init(path: String, location: FilePosition?) {
        self.path = path
        self.location = location
    }

    /// The spot of a member that may be absent: its own path, at its parent's position.
    func child(_ key: String) -> Spot { Spot(path: path.isEmpty ? key : "\(path).\(key)", location: location) }
}

/// Collects diagnostics for one file.
struct DiagnosticSink {
    let file: String
    private(set) var diagnostics: [Diagnostic] = []

    init(file: String) { self.file = file }

    mutating func error(_ spot: Spot, _ message: String) {
        let diagnostic = Diagnostic(file: file, path: spot.path, location: spot.location, message: message)
        if !diagnostics.contains(diagnostic) { diagnostics.append(diagnostic) }
    }
}
