import ExtrunHost
import ExtrunProtocol
import Foundation
import Synchronization
import Testing

/// A person, scripted: answers from a list, records the questions.
final class ScriptedPrompter: Prompter, Sendable {
    enum Answer: Sendable {
        case text(String?)
        case choice(Int?)
        case yesNo(Bool?)
    }
    private let state: Mutex<(answers: [Answer], asked: [String], told: [String])>
    let delay: Double

    init(_ answers: [Answer], delay: Double = 0) {
        state = Mutex((answers, [], []))
        self.delay = delay
    }

    var asked: [String] { state.withLock { $0.asked } }
    var told: [String] { state.withLock { $0.told } }

    private func next(_ question: String) -> Answer? {
        if delay > 0 { Thread.sleep(forTimeInterval: delay) }
        return state.withLock { state in
            state.asked.append(question)
            return state.answers.isEmpty ? nil : state.answers.removeFirst()
        }
    }

    func ask(_ question: String) -> String? {
        if case .text(let text)? = next(question) { return text }
        return nil
    }

    func choose(_ question: String, among options: [String]) -> Int? {
        if case .choice(let index)? = next("\(question) \(options)") { return index }
        return nil
    }

    func confirm(_ question: String) -> Bool? {
        if case .yesNo(let answer)? = next(question) { return answer }
        return nil
    }

    func tell(_ message: String) {
        state.withLock { $0.told.append(message) }
    }
}

/// The lifecycle where a person takes part: missing values, choices, confirmations, parent conditions.
@Suite("Asking a person")
struct PrompterTests {
    typealias Fixture = HostilePluginTests.Fixture

    /// Resolves `text` to what it is given, or asks for it when it is missing.
    static let askingPlugin = #"""
        def resolve(msg):
            p = msg["params"]
            value = p["parameters"].get(p["parameter"])
            if value is None:
                reply(msg, {"result": "needsValue", "prompt": "What should I echo?"})
            else:
                reply(msg, {"result": "success", "value": value})
        serve({"resolve": resolve})
        """#

    static let confirmedIntent = #"[{"name":"Echo","confirmation":"Echo ${text}?","parameters":[{"name":"text","type":"string"}]}]"#

    @Test("the intent's confirmation: without a prompter the run ends as confirmationDeclined (exit 13), before handle")
    func confirmationWithoutPrompter() throws {
        let f = try Fixture("confirmnone", intents: Self.confirmedIntent, script: #"""
            def handle(msg):
                note("handled", "yes")
                default(msg)
            serve({"handle": handle})
            """#)
        let report = f.run(["text": "hi"])
        let error = try #require(report.error)
        #expect(error.kind == .confirmationDeclined)
        #expect(report.exitCode == 13)
        #expect(error.details["prompt"] == "Echo hi?")
        #expect(error.message == "Echo needs a confirmation: Echo hi? (run with --yes to confirm, or on a terminal)")
        #expect(f.plugin.note("handled") == nil)
        #expect(f.run(["text": "hi"], options: .with { $0.assumeYes = true }).exitCode == 0)
        try f.expectNoProcessLeft()
    }

    @Test("the intent's confirmation is asked with the values filled in; yes handles, no and silence decline")
    func confirmationWithPrompter() throws {
        let f = try Fixture("confirmask", intents: Self.confirmedIntent, script: "serve()")
        let yes = ScriptedPrompter([.yesNo(true)])
        let accepted = f.run(["text": "soup"], options: .with { $0.prompter = yes })
        #expect(accepted.exitCode == 0, "\(String(describing: accepted.error))")
        #expect(yes.asked == ["Echo soup?"])

        let declined = f.run(["text": "soup"], options: .with { $0.prompter = ScriptedPrompter([.yesNo(false)]) })
        #expect(declined.error?.kind == .confirmationDeclined)
        #expect(declined.error?.message == "Echo was not confirmed: Echo soup? (declined)")

        let silent = f.run(["text": "soup"], options: .with { $0.prompter = ScriptedPrompter([]) })
        #expect(silent.error?.message == "Echo was not confirmed: Echo soup? (no answer)")
        try f.expectNoProcessLeft()
    }

    @Test("a missing value is asked for, then resolved again")
    func asksForValue() throws {
        let f = try Fixture("askvalue", script: Self.askingPlugin)
        let person = ScriptedPrompter([.text("typed by a person")])
        let report = f.run([:], options: .with { $0.prompter = person })
        #expect(report.error == nil, "\(String(describing: report.error))")
        #expect(report.response?.properties["echo"] == "typed by a person")
        #expect(person.asked == ["What should I echo?"])
        try f.expectNoProcessLeft()
    }

    @Test("a person who does not answer leaves the parameter unresolved")
    func noAnswer() throws {
        let f = try Fixture("noanswer", script: Self.askingPlugin)
        let report = f.run([:], options: .with { $0.prompter = ScriptedPrompter([]) })
        #expect(report.error?.kind == .parameterUnresolved)
        #expect(report.error?.message == "text: What should I echo? (no answer)")
        try f.expectNoProcessLeft()
    }

    @Test("a plugin that never accepts an answer stops being asked after a few rounds")
    func boundedRounds() throws {
        let f = try Fixture("neversatisfied", script: #"serve({"resolve": lambda msg: reply(msg, {"result": "needsValue", "prompt": "Again?"})})"#)
        let person = ScriptedPrompter(Array(repeating: .text("x"), count: 20))
        let report = f.run([:], options: .with { $0.prompter = person })
        #expect(report.error?.kind == .parameterUnresolved)
        #expect(report.error?.message == "text: Again?")
        #expect(person.asked.count == 5, "\(person.asked.count) questions")
        try f.expectNoProcessLeft()
    }

    @Test("disambiguation offers the plugin's options and uses the one chosen")
    func disambiguation() throws {
        let f = try Fixture("choose", script: #"""
            def resolve(msg):
                value = msg["params"]["parameters"].get("text")
                if value in ("pea", "tomato"):
                    reply(msg, {"result": "success", "value": value})
                else:
                    reply(msg, {"result": "disambiguation", "options": ["pea", "tomato"], "prompt": "Which soup?"})
            serve({"resolve": resolve})
            """#)
        let person = ScriptedPrompter([.choice(1)])
        let report = f.run(["text": "soup"], options: .with { $0.prompter = person })
        #expect(report.response?.properties["echo"] == "tomato", "\(String(describing: report.error))")
        #expect(person.asked == [#"Which soup? ["pea", "tomato"]"#])
        try f.expectNoProcessLeft()
    }

    @Test("the deadline's clock stops while a person answers")
    func clockStops() throws {
        let f = try Fixture("slowperson", script: Self.askingPlugin)
        let person = ScriptedPrompter([.text("eventually")], delay: 1.5)
        let report = f.run([:], options: .with {
            $0.prompter = person
            $0.deadlineMs = 1_000
        })
        #expect(report.error == nil, "\(String(describing: report.error))")
        #expect(report.response?.properties["echo"] == "eventually")
        try f.expectNoProcessLeft()
    }

    @Test("a parameter whose parent condition is not met is not resolved, and its value is not passed on")
    func parentCondition() throws {
        let intents = #"""
            [{"name":"Echo","parameters":[
                {"name":"text","type":"string"},
                {"name":"loud","type":"boolean","default":false},
                {"name":"volume","type":"integer","parent":{"parameter":"loud","value":true}}]}]
            """#
        let f = try Fixture("parent", intents: intents, script: #"""
            resolved = []
            def resolve(msg):
                resolved.append(msg["params"]["parameter"])
                note("resolved", ",".join(resolved))
                default(msg)
            def handle(msg):
                reply(msg, {"code": "success", "properties": msg["params"]["parameters"]})
            serve({"resolve": resolve, "handle": handle})
            """#)
        let quiet = f.run(["text": "hi", "volume": 11])
        #expect(quiet.response?.properties == ["text": "hi", "loud": false], "\(String(describing: quiet.error))")
        #expect(f.plugin.note("resolved") == "text,loud")

        let loud = f.run(["text": "hi", "loud": true, "volume": 11])
        #expect(loud.response?.properties == ["text": "hi", "loud": true, "volume": 11])
        #expect(f.plugin.note("resolved") == "text,loud,volume")
        try f.expectNoProcessLeft()
    }
}
