import ExtrunHost
import ExtrunProtocol
import Foundation
import NIOConcurrencyHelpers

/// Where a run's events go: the caller's connection (an NDJSON stream when interactive).
protocol EventSink: Sendable {
    /// Sends one event line; false when the caller is gone.
    @discardableResult
    func send(_ event: JSONValue) -> Bool
    /// Sends a progress event, which may be dropped when the caller does not keep up.
    func sendProgress(_ event: JSONValue)
}

/// An interactive run's questions to the person at the caller's end (docs/serve.md,
/// "Prompts"): each is a `prompt` event with an id on the run's stream; the run's thread
/// waits until `POST /v1/runs/RUN/answers` answers it, the caller goes away, the run is
/// cancelled, or `promptTimeoutSeconds` pass (then it counts as declined: nil). The
/// plugin's deadline clock is stopped meanwhile, as on a terminal.
final class InteractiveRun: Prompter, @unchecked Sendable {
    let id: String
    /// The caller's uid: only the same uid (or, over TCP, the token's holder) answers.
    let uid: UInt32
    let sink: any EventSink
    let timeoutSeconds: Double

    private struct Pending {
        var id: String
        var kind: String
        var count: Int
        var answered = false
        var answer: JSONValue = .null
    }

    private let condition = NSCondition()
    private var pending: Pending?
    private var counter = 0
    private var closed = false

    /// Started over TCP (then only a TCP caller with the token may answer), else over the Unix socket.
    let tcp: Bool

    init(id: String, uid: UInt32, tcp: Bool = false, sink: any EventSink, timeoutSeconds: Double) {
        self.id = id
        self.uid = uid
        self.tcp = tcp
        self.sink = sink
        self.timeoutSeconds = timeoutSeconds
    }

    /// The caller went away or the run was cancelled: a waiting prompt returns nil, and so does every later one.
    func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        condition.unlock()
    }

    /// Why an answer is refused: the HTTP status and the message.
    struct Refusal: Error {
        var status: Int
        var message: String
    }

    /// Gives `value` to the waiting prompt `promptID`.
    func answer(_ promptID: String, _ value: JSONValue) throws(Refusal) {
        condition.lock()
        defer { condition.unlock() }
        guard var waiting = pending, waiting.id == promptID, !waiting.answered else {
            throw Refusal(status: 409, message: "run \(id) is not waiting for an answer to prompt '\(promptID.prefix(64))'" + (pending.map { " (it waits for prompt \($0.id))" } ?? ""))
        }
        if !value.isNull {
            switch waiting.kind {
            case "ask":
                guard value.stringValue != nil else { throw Refusal(status: 400, message: "prompt \(promptID) asks for text: answer a string (or null to decline)") }
            case "choose":
                guard let index = value.intValue, index >= 0, index < waiting.count else {
                    throw Refusal(status: 400, message: "prompt \(promptID) is a choice: answer the option's index, 0 to \(waiting.count - 1) (or null to decline)")
                }
            default:
                guard value.boolValue != nil else { throw Refusal(status: 400, message: "prompt \(promptID) asks yes or no: answer true or false (or null to decline)") }
            }
        }
        waiting.answer = value
        waiting.answered = true
        pending = waiting
        condition.broadcast()
    }

    /// Sends a prompt event and waits for its answer; nil when declined or nobody can answer.
    private func prompt(_ kind: String, _ question: String, options: [String] = []) -> JSONValue? {
        condition.lock()
        if closed {
            condition.unlock()
            return nil
        }
        counter += 1
        let promptID = String(counter)
        pending = Pending(id: promptID, kind: kind, count: options.count)
        condition.unlock()
        var event: [String: JSONValue] = ["event": "prompt", "run": .string(id), "prompt": .string(promptID), "kind": .string(kind), "question": .string(question)]
        if kind == "choose" { event["options"] = .array(options.map(JSONValue.string)) }
        guard sink.send(.object(event)) else {
            close()
            return nil
        }
        let deadline = Date(timeIntervalSinceNow: timeoutSeconds)
        condition.lock()
        defer {
            pending = nil
            condition.unlock()
        }
        while !closed, pending?.answered == false {
            if !condition.wait(until: deadline) { break }
        }
        guard !closed, let answer = pending, answer.answered, !answer.answer.isNull else { return nil }
        return answer.answer
    }

    func ask(_ question: String) -> String? {
        prompt("ask", question)?.stringValue
    }

    func choose(_ question: String, among options: [String]) -> Int? {
        prompt("choose", question, options: options)?.intValue.map { Int($0) }
    }

    func confirm(_ question: String) -> Bool? {
        prompt("confirm", question)?.boolValue
    }

    func tell(_ message: String) {
        sink.send(.object(["event": "tell", "run": .string(id), "message": .string(message)]))
    }
}

/// The interactive runs in flight, by id, for their answers.
final class RunRegistry: Sendable {
    private let runs = NIOLockedValueBox<[String: InteractiveRun]>([:])

    func add(_ run: InteractiveRun) { runs.withLockedValue { $0[run.id] = run } }
    func remove(_ run: InteractiveRun) { _ = runs.withLockedValue { $0.removeValue(forKey: run.id) } }
    func run(_ id: String) -> InteractiveRun? { runs.withLockedValue { $0[id] } }
    func closeAll() {
        for run in runs.withLockedValue({ Array($0.values) }) { run.close() }
    }
}
