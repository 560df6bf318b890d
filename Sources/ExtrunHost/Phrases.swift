import ExtrunProtocol
import Foundation

/// `extrun phrase "Order clam chowder in Soup Chef"`: finds the intent whose
/// phrase matches (case- and accent-insensitive), fills its one parameter
/// (from the plugin's options when it has dynamic ones), and handles it. Both steps
/// take their session from one pool: a plugin that declares `"reusable": true` answers
/// the options and handles the intent in one process.
extension Host {
    public func phrase(_ text: String, options: HandleOptions = HandleOptions()) -> HandleReport {
        let sessions = PooledSessions(maxIdle: 1)
        defer { sessions.close() }
        return phrase(text, options: options, context: RunContext(sessions: sessions))
    }

    /// A phrase with the sessions and caches of `context` (a pool's: `PluginPool.phrase`).
    func phrase(_ text: String, options: HandleOptions, context: RunContext) -> HandleReport {
        let catalog = context.catalog ?? self.catalog()
        var candidates: [PhraseMatch] = []
        var definitions: [String: IntentDefinition] = [:]
        var templates: [(template: String, intent: String)] = []
        for plugin in catalog.plugins where plugin.problem == nil {
            for intent in plugin.manifest.intents {
                definitions[intent.name] = intent
                for template in intent.phrases ?? [] {
                    templates.append((template, intent.name))
                    if let match = PhraseMatch.match(text, template: template, intent: intent.name) { candidates.append(match) }
                }
            }
        }
        let intents = Set(candidates.map(\.intent))
        guard intents.count == 1, let match = candidates.first else {
            var report = HandleReport(intent: nil)
            let closest = PhraseMatch.closest(to: text, among: templates.map(\.template), count: 3)
            if candidates.isEmpty {
                let hint = templates.isEmpty ? "no plugin declares phrases" : "closest phrases: \(closest.map { "\"\($0)\"" }.joined(separator: ", "))"
                report.error = HostError(
                    .noHandler, "no phrase matches \"\(text)\"; \(hint)",
                    details: ["phrase": .string(text), "closest": .array(closest.map { .string($0) })])
            } else {
                report.error = HostError(
                    .noHandler,
                    "\"\(text)\" matches phrases of several intents: \(candidates.map { "\"\($0.template)\" (\($0.intent))" }.joined(separator: ", ")); say it more precisely",
                    details: ["phrase": .string(text), "matches": .array(candidates.map { .string($0.template) })])
            }
            return report
        }
        options.log?("[extrun] \"\(text)\" matches \"\(match.template)\" (\(match.intent))")
        var invocation = IntentInvocation(intent: match.intent, source: "phrase \"\(text)\"")
        if let slot = match.slot, let slotText = match.slotText {
            var report = HandleReport(intent: match.intent)
            guard let definition = definitions[match.intent],
                let value = fill(slot, with: slotText, definition: definition, options: options, context: context, report: &report)
            else { return report }
            invocation.parameters[slot] = value
        }
        return run(invocation, options: options, context: context)
    }

    /// The value for a phrase's parameter, from the words that filled its slot.
    func fill(
        _ parameter: String, with text: String, definition: IntentDefinition, options: HandleOptions, context: RunContext,
        report: inout HandleReport
    ) -> JSONValue?
    {
        let intent = definition.name
        guard let parameterDefinition = definition.parameter(named: parameter) else {
            report.error = HostError(.configurationError, "the phrase names '\(parameter)', which is not a parameter of \(intent)")
            return nil
        }
        let folded = PhraseMatch.fold(text)
        if parameterDefinition.dynamicOptions {
            // No `search`: it is what a person typed into a list (protocol.md §5.4a), and a
            // plugin that filters on it exactly would drop the titles matched here without
            // case and accents. The host asks for every option and matches them itself.
            let offered = self.options(IntentInvocation(intent: intent), parameter: parameter, search: nil, options: options, context: context)
            guard let items = offered.options?.allItems else {
                report = offered
                return nil
            }
            var hits = items.filter { PhraseMatch.fold($0.title) == folded }
            if hits.isEmpty { hits = items.filter { PhraseMatch.fold($0.title).contains(folded) || folded.contains(PhraseMatch.fold($0.title)) } }
            guard hits.count == 1, let hit = hits.first else {
                let listed = (hits.isEmpty ? items : hits).map(\.title)
                report.error = HostError(
                    .parameterUnresolved,
                    hits.isEmpty
                        ? "\(parameter): nothing the plugin offers matches \"\(text)\" (it offers: \(listed.joined(separator: ", ")))"
                        : "\(parameter): \"\(text)\" could be \(listed.joined(separator: " or "))",
                    details: ["parameter": .string(parameter), "options": .array(listed.map { .string($0) })])
                return nil
            }
            return parameterDefinition.multiple ? .array([hit.value]) : hit.value
        }
        switch PromptedValue.parse(text, for: parameterDefinition, baseDirectory: URL(fileURLWithPath: FileManager.default.currentDirectoryPath)) {
        case .success(let value): return value
        case .failure(let problem):
            report.error = HostError(.parameterUnresolved, "\(parameter): \(problem.message)", details: ["parameter": .string(parameter)])
            return nil
        }
    }
}

/// One phrase template matched against what a person said.
struct PhraseMatch {
    var template: String
    var intent: String
    var slot: String?
    var slotText: String?

    /// Case- and accent-insensitive, spaces collapsed, final punctuation dropped.
    static func fold(_ text: String) -> String {
        let folded = text.folding(options: [.caseInsensitive, .diacriticInsensitive, .widthInsensitive], locale: nil)
        let words = folded.split(whereSeparator: { $0.isWhitespace })
        var joined = words.joined(separator: " ")
        while let last = joined.last, last == "." || last == "!" || last == "?" { joined.removeLast() }
        return joined
    }

    /// One character folded as `fold` folds text, punctuation kept; a space when it folds to nothing.
    static func foldCharacter(_ character: Character) -> String {
        let folded = String(character).folding(options: [.caseInsensitive, .diacriticInsensitive, .widthInsensitive], locale: nil)
        return folded.isEmpty ? " " : folded
    }

    static func match(_ text: String, template: String, intent: String) -> PhraseMatch? {
        let slots = Phrase.slots(in: template)
        guard let slot = slots.first, let open = template.range(of: "${\(slot)}") else {
            return fold(text) == fold(template) ? PhraseMatch(template: template, intent: intent) : nil
        }
        let prefix = fold(String(template[..<open.lowerBound]))
        let suffix = fold(String(template[open.upperBound...]))
        // Fold character by character so that positions in the folded text map back to the spoken words.
        let original = Array(text.split(whereSeparator: { $0.isWhitespace }).joined(separator: " "))
        // Each character folded as it is (fold() would drop a lone ".", which must stay
        // to be taken off the end below with the rest of the final punctuation).
        let folded = original.map { foldCharacter($0) }
        let foldedText = folded.joined()
        guard folded.allSatisfy({ $0.count == 1 }) else {
            return matchLoosely(text, template: template, intent: intent, slot: slot, prefix: prefix, suffix: suffix)
        }
        var body = foldedText
        var end = original.count
        while let last = body.last, last == "." || last == "!" || last == "?" || last == " " {
            body.removeLast()
            end -= 1
        }
        let prefixWithSpace = prefix.isEmpty ? "" : prefix + " "
        let suffixWithSpace = suffix.isEmpty ? "" : " " + suffix
        guard body.hasPrefix(prefixWithSpace), body.hasSuffix(suffixWithSpace), body.count > prefixWithSpace.count + suffixWithSpace.count else {
            return nil
        }
        let slotText = String(original[prefixWithSpace.count..<(end - suffixWithSpace.count)]).trimmingCharacters(in: .whitespaces)
        guard !slotText.isEmpty else { return nil }
        return PhraseMatch(template: template, intent: intent, slot: slot, slotText: slotText)
    }

    /// For scripts whose folding changes lengths: match on folded text, keep the folded words.
    static func matchLoosely(_ text: String, template: String, intent: String, slot: String, prefix: String, suffix: String) -> PhraseMatch? {
        let body = fold(text)
        let prefixWithSpace = prefix.isEmpty ? "" : prefix + " "
        let suffixWithSpace = suffix.isEmpty ? "" : " " + suffix
        guard body.hasPrefix(prefixWithSpace), body.hasSuffix(suffixWithSpace), body.count > prefixWithSpace.count + suffixWithSpace.count else {
            return nil
        }
        let middle = body.dropFirst(prefixWithSpace.count).dropLast(suffixWithSpace.count)
        return PhraseMatch(template: template, intent: intent, slot: slot, slotText: String(middle))
    }

    /// The templates nearest to `text` (edit distance on folded text, the slot counted as its own name).
    static func closest(to text: String, among templates: [String], count: Int) -> [String] {
        let target = Array(fold(text))
        return templates.map { template in (template, distance(target, Array(fold(template)))) }
            .sorted { $0.1 < $1.1 }.prefix(count).map(\.0)
    }

    static func distance(_ a: [Character], _ b: [Character]) -> Int {
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var previous = Array(0...b.count)
        var current = [Int](repeating: 0, count: b.count + 1)
        for i in 1...a.count {
            current[0] = i
            for j in 1...b.count {
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            swap(&previous, &current)
        }
        return previous[b.count]
    }
}
