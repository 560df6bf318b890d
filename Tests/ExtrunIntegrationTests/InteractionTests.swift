import ExtrunHost
import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Synchronization
import Testing

/// A person at a terminal, scripted: the answers in order, and what was asked.
final class ScriptedPrompter: Prompter, Sendable {
    private let answers: Mutex<[String?]>
    private let asked = Mutex<[String]>([])

    init(_ answers: [String?]) { self.answers = Mutex(answers) }

    var questions: [String] { asked.withLock { $0 } }

    private func next(_ question: String) -> String? {
        asked.withLock { $0.append(question) }
        return answers.withLock { $0.isEmpty ? nil : $0.removeFirst() }
    }

    func ask(_ question: String) -> String? { next(question) }
    func choose(_ question: String, among options: [String]) -> Int? {
        guard let answer = next("\(question) [\(options.joined(separator: " | "))]") else { return nil }
        return Int(answer).map { $0 - 1 }
    }
    func confirm(_ question: String) -> Bool? { next(question).map { $0 == "y" } }
    func tell(_ message: String) { asked.withLock { $0.append("(told) \(message)") } }
}

@Suite struct InteractionTests {
    let host: ExtrunHost.Host

    init() throws {
        let root = try makeTemporaryFolder("integration-soupshop")
        let plugin = root.appendingPathComponent("soupshop")
        try FileManager.default.createDirectory(at: plugin, withIntermediateDirectories: true)
        let script = plugin.appendingPathComponent("soupshop.py")
        try FileManager.default.copyItem(
            at: URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures/soupshop.py"), to: script)
        _ = chmod(script.path, 0o755)
        try StagedPlugins.copyPythonModule(into: plugin)
        let manifest = PluginManifest(
            id: "test.soupshop", version: "1", owner: "TESTTEAM", executable: "soupshop.py",
            intents: [
                IntentDefinition(
                    name: "OrderSoup", title: "Order Soup",
                    parameters: [
                        ParameterDefinition(name: "soup", type: .custom, required: true, prompt: "Which soup?", customType: "Soup", dynamicOptions: true),
                        ParameterDefinition(name: "quantity", type: .integer, prompt: "How many?",
                                            unsupportedReasons: [UnsupportedReason(code: "tooFew", message: "Order at least one bowl.")]),
                        ParameterDefinition(name: "note", type: .string),
                        ParameterDefinition(name: "giftWrap", type: .boolean, default: false),
                        ParameterDefinition(name: "giftMessage", type: .string, parent: ParentCondition(parameter: "giftWrap", value: true)),
                    ],
                    responses: [ResponseDefinition(code: "failureOutOfStock", properties: ["soup"])],
                    phrases: ["Order ${soup} in Soup Shop", "Show the Soup Shop menu"],
                    confirmation: "Order ${quantity} ${soup}?"),
            ],
            appName: "Soup Shop",
            types: [CustomTypeDefinition(name: "Soup", properties: [], display: DisplayTemplate(title: "${title}"))])
        #expect(manifest.problems().isEmpty, "\(manifest.problems())")
        try JSONCoding.encoder().encode(manifest).write(to: plugin.appendingPathComponent("manifest.json"))
        host = ExtrunHost.Host(paths: HostPaths(home: root.appendingPathComponent("home"), pluginSearchPath: [root]))
    }

    func order(_ parameters: [String: JSONValue], prompter: ScriptedPrompter? = nil, yes: Bool = false) -> HandleReport {
        var options = HandleOptions()
        options.prompter = prompter
        options.assumeYes = yes
        return host.handle(IntentInvocation(intent: "OrderSoup", parameters: parameters), options: options)
    }

    static let tomato: JSONValue = ["identifier": "tomato", "title": "Tomato Soup"]

    @Test func withoutAPersonAMissingValueIsUnresolvedWithThePrompt() {
        let report = order([:])
        #expect(report.error?.kind == .parameterUnresolved)
        #expect(report.error?.message.contains("Which soup?") == true)
    }

    @Test func aPersonPicksAMissingValueFromThePluginsOptions() throws {
        let person = ScriptedPrompter(["2", "y"])
        let report = order([:], prompter: person)
        #expect(report.response?.code == "success", "\(String(describing: report.error))")
        #expect(report.response?.properties["soup"] == "tomato")
        #expect(person.questions.first?.contains("Clam Chowder — New England style | Tomato Soup — with basil") == true, "\(person.questions)")
        #expect(person.questions.last == "Order 1 Tomato Soup?")
    }

    @Test func disambiguationOffersTheChoices() {
        let person = ScriptedPrompter(["1", "y"])
        let report = order(["soup": ["identifier": "ambiguous"]], prompter: person)
        #expect(report.response?.properties["soup"] == "tomato", "\(String(describing: report.error)) \(person.questions)")
        #expect(person.questions.first?.hasPrefix("Which tomato soup?") == true)
        let alone = order(["soup": ["identifier": "ambiguous"]])
        #expect(alone.error?.kind == .parameterUnresolved)
        #expect(alone.error?.details["options"]?.arrayValue?.count == 2)
        // --format text lists the candidates, each with the value to pass in the intent file.
        let lines = alone.text.split(separator: "\n").map(String.init)
        #expect(lines.contains(#"    - Tomato Soup  {"identifier":"tomato","subtitle":"with basil","title":"Tomato Soup"}"#), "\(alone.text)")
        #expect(lines.contains { $0.hasPrefix("    - Clam Chowder  {") }, "\(alone.text)")
    }

    @Test func confirmationRequiredIsAskedOrNeedsYes() {
        let many: [String: JSONValue] = ["soup": Self.tomato, "quantity": 12]
        #expect(order(many).error?.message.contains("Really 12 bowls?") == true)
        #expect(order(many, yes: true).response?.properties["quantity"] == 12)
        let person = ScriptedPrompter(["y", "y"])
        #expect(order(many, prompter: person).response?.properties["quantity"] == 12)
        // Declined: a new value is asked for, then resolved again.
        let changesMind = ScriptedPrompter(["n", "3", "y"])
        let report = order(many, prompter: changesMind)
        #expect(report.response?.properties["quantity"] == 3, "\(changesMind.questions)")
    }

    @Test func anUnsupportedValueShowsTheDeclaredMessage() {
        let report = order(["soup": Self.tomato, "quantity": 0], yes: true)
        #expect(report.error?.kind == .parameterUnresolved)
        #expect(report.error?.message.contains("Order at least one bowl.") == true)
        let person = ScriptedPrompter(["2", "y"])
        let fixed = order(["soup": Self.tomato, "quantity": 0], prompter: person)
        #expect(fixed.response?.properties["quantity"] == 2, "\(person.questions)")
        #expect(person.questions.contains("(told) Order at least one bowl."))
    }

    @Test func theIntentsConfirmationIsAskedOrNeedsYes() {
        let report = order(["soup": Self.tomato])
        #expect(report.error?.kind == .confirmationDeclined)
        #expect(report.error?.message.contains("Order 1 Tomato Soup?") == true)
        #expect(report.exitCode == 13)
        #expect(order(["soup": Self.tomato], prompter: ScriptedPrompter(["n"])).error?.kind == .confirmationDeclined)
        #expect(order(["soup": Self.tomato], yes: true).response?.code == "success")
    }

    @Test func aParameterWhoseParentConditionFailsIsNotResolvedOrPassed() {
        let plain = order(["soup": Self.tomato, "giftMessage": "ignored"], yes: true)
        #expect(plain.response?.code == "success")
        #expect(plain.response?.properties["giftMessage"] == nil)
        let gift = order(["soup": Self.tomato, "giftWrap": true], yes: true)
        #expect(gift.error?.message.contains("What should the gift card say?") == true, "\(String(describing: gift.error))")
        let withMessage = order(["soup": Self.tomato, "giftWrap": true, "giftMessage": "Get well"], yes: true)
        #expect(withMessage.response?.properties["giftMessage"] == "Get well")
    }

    @Test func optionsComeFromThePluginInSections() throws {
        let report = host.options(IntentInvocation(intent: "OrderSoup"), parameter: "soup", search: "chow")
        let options = try #require(report.options, "\(String(describing: report.error))")
        #expect(options.sections.first?.title == "Today's menu")
        #expect(options.allItems.map(\.identifier) == ["clam-chowder"])
        #expect(options.allItems.first?.subtitle == "New England style")
        #expect(report.exitCode == 0)
        let fixed = host.options(IntentInvocation(intent: "OrderSoup"), parameter: "quantity", search: nil)
        #expect(fixed.error?.kind == .invalidIntent)
    }

    /// The plugin filters its options exactly on `search` (without accents "creme" is not
    /// in "Crème"): the phrase's words are not sent as the search, the host matches the titles.
    @Test func phrasesMatchIgnoringCaseAndAccents() {
        var options = HandleOptions()
        options.assumeYes = true
        let report = host.phrase("order CREME brulee soup in soup shop", options: options)
        #expect(report.response?.properties["soup"] == "creme-brulee", "\(String(describing: report.error))")
        // Final punctuation is ignored, also after a parameter's words.
        let chowder = host.phrase("Order clam chowder in Soup Shop.", options: options)
        #expect(chowder.response?.properties["soup"] == "clam-chowder", "\(String(describing: chowder.error))")
        let spaced = host.phrase("Order Tomato Soup in Soup Shop !", options: options)
        #expect(spaced.response?.properties["soup"] == "tomato", "\(String(describing: spaced.error))")
        let chili = host.phrase("Order chili in Soup Shop", options: options)
        #expect(chili.response?.code == "failureOutOfStock")
        #expect(chili.response?.dialog?.full == "Sorry, Chili is sold out.")
    }

    @Test func noMatchListsTheClosestPhrases() {
        let report = host.phrase("Order soup from the Soup Shop")
        #expect(report.error?.kind == .noHandler)
        let closest = report.error?.details["closest"]?.arrayValue?.compactMap(\.stringValue) ?? []
        #expect(closest.first == "Order ${soup} in Soup Shop", "\(closest)")
        let unknownSoup = host.phrase("Order gazpacho in Soup Shop")
        #expect(unknownSoup.error?.kind == .parameterUnresolved)
        #expect(unknownSoup.error?.message.contains("gazpacho") == true)
    }
}
