import ExtrunProtocol
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Someone to ask: for a missing value, a choice among options, a yes or no.
/// Each answer is nil when nobody answers (end of input).
public protocol Prompter: Sendable {
    func ask(_ question: String) -> String?
    /// The index of the option chosen.
    func choose(_ question: String, among options: [String]) -> Int?
    func confirm(_ question: String) -> Bool?
    /// Says something without asking (why a value was refused, say).
    func tell(_ message: String)
    /// Asks for a value of `parameter` (its type, its enum values and titles, whether it
    /// takes a list): a front end that shows typed fields, such as MCP's elicitation,
    /// builds its form from it. The answer is text, as typed at a terminal
    /// (`PromptedValue` reads it). Default: `ask(question)`.
    func ask(_ question: String, for parameter: ParameterDefinition) -> String?
    /// Asks to choose among options that have identifiers beside their labels (a
    /// disambiguation's candidates, a plugin's dynamic options), for `parameter` when
    /// the choice is a parameter's value. Default: `choose(question, among: labels)`.
    func choose(_ question: String, among options: [PromptOption], for parameter: ParameterDefinition?) -> Int?
}

/// One option offered to a person: what identifies it, the line a terminal shows,
/// and a short title when the line is longer (a custom value's `title`).
public struct PromptOption: Sendable, Equatable {
    public var identifier: String
    public var label: String
    public var title: String?
    public init(identifier: String, label: String, title: String? = nil) {
        self.identifier = identifier
        self.label = label
        self.title = title
    }
}

extension Prompter {
    public func ask(_ question: String, for parameter: ParameterDefinition) -> String? {
        ask(question)
    }

    public func choose(_ question: String, among options: [PromptOption], for parameter: ParameterDefinition?) -> Int? {
        choose(question, among: options.map(\.label))
    }
}

/// Asks on the controlling terminal (`/dev/tty`), so that standard input and
/// output stay free for the intent file and the JSON report.
public final class TerminalPrompter: Prompter, @unchecked Sendable {
    private let input: UnsafeMutablePointer<FILE>
    private let output: UnsafeMutablePointer<FILE>

    /// Nil when there is no terminal to ask on.
    public init?() {
        guard isatty(STDERR_FILENO) != 0, let tty = fopen("/dev/tty", "r+") else { return nil }
        input = tty
        output = tty
    }

    deinit { fclose(input) }

    private func write(_ text: String) {
        fputs(text, output)
        fflush(output)
    }

    private func readLine() -> String? {
        var line: UnsafeMutablePointer<CChar>?
        var capacity = 0
        defer { free(line) }
        guard getline(&line, &capacity, input) >= 0, let line else { return nil }
        return String(cString: line).trimmingCharacters(in: .newlines)
    }

    public func ask(_ question: String) -> String? {
        write("\(question) ")
        return readLine()
    }

    public func choose(_ question: String, among options: [String]) -> Int? {
        write("\(question)\n")
        for (index, option) in options.enumerated() { write("  \(index + 1). \(option)\n") }
        for _ in 0..<5 {
            write("Choose 1-\(options.count): ")
            guard let answer = readLine() else { return nil }
            if let number = Int(answer.trimmingCharacters(in: .whitespaces)), number >= 1, number <= options.count { return number - 1 }
            if let index = options.firstIndex(where: { $0.lowercased().hasPrefix(answer.lowercased()) }), !answer.isEmpty { return index }
        }
        return nil
    }

    public func confirm(_ question: String) -> Bool? {
        for _ in 0..<5 {
            write("\(question) [y/n] ")
            guard let answer = readLine()?.lowercased().trimmingCharacters(in: .whitespaces) else { return nil }
            if ["y", "yes"].contains(answer) { return true }
            if ["n", "no"].contains(answer) { return false }
        }
        return nil
    }

    public func tell(_ message: String) {
        write("\(message)\n")
    }
}
