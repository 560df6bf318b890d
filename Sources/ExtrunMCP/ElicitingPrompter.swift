import ExtrunHost
import ExtrunProtocol
import Foundation
import NIOConcurrencyHelpers

/// The legacy eras' prompter: the host's questions as MCP `elicitation/create` requests
/// (docs/mcp.md, "Resolution as elicitation"), sent on the call's own output (stdio's
/// stream; over HTTP, the call's SSE stream) and answered by the client's response.
/// Each question blocks the intent's thread (its deadline's clock stopped, as for a
/// person at a terminal) until the client answers:
/// - accept: the answer, as text a person would have typed (`PromptedValue` reads it);
/// - decline, cancel, an error, the call cancelled, the input ended: nil, which the
///   lifecycle turns into `parameterUnresolved` or `confirmationDeclined` (`cancelled`
///   when the call was cancelled).
final class ElicitingPrompter: Prompter, Sendable {
    let peer: Peer
    let call: Call
    /// What `tell` said since the last question: put before the next one.
    private let told = NIOLockedValueBox<[String]>([])

    init(peer: Peer, call: Call) {
        self.peer = peer
        self.call = call
    }

    func tell(_ message: String) {
        told.withLockedValue { $0.append(message) }
    }

    func ask(_ question: String) -> String? {
        elicit(Question.ask(question, told: takeTold())).flatMap(Question.text)
    }

    func ask(_ question: String, for parameter: ParameterDefinition) -> String? {
        elicit(Question.value(question, for: parameter, told: takeTold())).flatMap(Question.text)
    }

    func choose(_ question: String, among options: [String]) -> Int? {
        choose(question, among: options.enumerated().map { PromptOption(identifier: String($0.offset + 1), label: $0.element) }, for: nil)
    }

    func choose(_ question: String, among options: [PromptOption], for parameter: ParameterDefinition?) -> Int? {
        let asked = Question.choose(question, among: options, for: parameter, told: takeTold())
        return elicit(asked).flatMap(asked.index)
    }

    func confirm(_ question: String) -> Bool? {
        elicit(Question.confirm(question, told: takeTold()))?.boolValue
    }

    private func takeTold() -> [String] {
        told.withLockedValue { said in
            defer { said.removeAll() }
            return said
        }
    }

    /// One elicitation; the accepted value, or nil.
    func elicit(_ question: Question) -> JSONValue? {
        guard let value = question.acceptedValue(of: peer.ask("elicitation/create", question.elicitation, for: call)) else { return nil }
        if let expected = question.mismatch(value) {
            // Nothing is coerced: an answer of another type than the one asked ends the run with an error that says so.
            call.refuse(question.refusal(of: value, expected: expected))
            return nil
        }
        return value
    }
}
