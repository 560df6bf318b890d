import ExtrunHost
import ExtrunProtocol
import Foundation
import NIOConcurrencyHelpers

/// The modern era's prompter (docs/mcp.md, "Resolution as input_required rounds"). Each
/// round of a `tools/call` runs the intent from the start; its questions are answered,
/// in order, from the answers the sealed state recorded, then the pending question from
/// this round's `inputResponses`. At the first question without an answer it gives up
/// (nil: the lifecycle ends the run there, before confirm's person step and before
/// handle) and keeps the question, which the call answers as `input_required`.
///
/// A recorded answer whose question no longer has the same fingerprint (the plugin asks
/// something else than when it was given) stops the run too: `stale`.
final class ReplayingPrompter: Prompter, Sendable {
    enum Stop: Sendable {
        /// A question with no answer yet: ask it (`input_required`).
        case needs(Question, mistyped: String?)
        /// The recorded answer `index` was given to another question.
        case stale(index: Int)
    }

    private struct State {
        var told: [String] = []
        /// The answers used so far, recorded ones first, then the one from this round.
        var answers: [RequestState.Answer] = []
        var asked = 0
        var stop: Stop?
    }

    let recorded: [RequestState.Answer]
    /// The pending question's fingerprint and the client's `ElicitResult` for it, if it sent one.
    let pending: (fingerprint: String, response: JSONValue?)?
    private let state = NIOLockedValueBox(State())

    init(recorded: [RequestState.Answer], pending: (fingerprint: String, response: JSONValue?)?) {
        self.recorded = recorded
        self.pending = pending
    }

    /// Why the run stopped for the person, if it did.
    var stop: Stop? { state.withLockedValue { $0.stop } }
    /// The answers the run took (to seal into the next state).
    var answers: [RequestState.Answer] { state.withLockedValue { $0.answers } }

    func tell(_ message: String) {
        state.withLockedValue { $0.told.append(message) }
    }

    func ask(_ question: String) -> String? {
        answer(Question.ask(question, told: takeTold())).flatMap(Question.text)
    }

    func ask(_ question: String, for parameter: ParameterDefinition) -> String? {
        answer(Question.value(question, for: parameter, told: takeTold())).flatMap(Question.text)
    }

    func choose(_ question: String, among options: [String]) -> Int? {
        choose(question, among: options.enumerated().map { PromptOption(identifier: String($0.offset + 1), label: $0.element) }, for: nil)
    }

    func choose(_ question: String, among options: [PromptOption], for parameter: ParameterDefinition?) -> Int? {
        let asked = Question.choose(question, among: options, for: parameter, told: takeTold())
        return answer(asked).flatMap(asked.index)
    }

    func confirm(_ question: String) -> Bool? {
        answer(Question.confirm(question, told: takeTold()))?.boolValue
    }

    private func takeTold() -> [String] {
        state.withLockedValue { state in
            defer { state.told.removeAll() }
            return state.told
        }
    }

    /// The answer to `question`: recorded, or this round's; nil (and the run stops) when there is none.
    private func answer(_ question: Question) -> JSONValue? {
        state.withLockedValue { state -> JSONValue? in
            guard state.stop == nil else { return nil }
            let index = state.asked
            state.asked += 1
            if index < recorded.count {
                let answer = recorded[index]
                guard answer.fingerprint == question.fingerprint, question.mismatch(answer.value) == nil else {
                    state.stop = .stale(index: index)
                    return nil
                }
                state.answers.append(answer)
                return answer.value
            }
            if index == recorded.count, let pending, pending.fingerprint == question.fingerprint, let response = pending.response {
                guard response["action"]?.stringValue == "accept" else {
                    // Declined or cancelled: the run ends as at a terminal where nobody answers.
                    return nil
                }
                if let value = question.acceptedValue(of: response) {
                    if let expected = question.mismatch(value) {
                        // Asked again, saying why (MRTR: missing or unusable input is requested again).
                        let said = String(decoding: JSONWriter.bytes(value), as: UTF8.self).prefix(200)
                        state.stop = .needs(question, mistyped: "The answer \(said) is not \(expected).")
                        return nil
                    }
                    state.answers.append(RequestState.Answer(fingerprint: question.fingerprint, value: value))
                    return value
                }
            }
            state.stop = .needs(question, mistyped: nil)
            return nil
        }
    }
}
