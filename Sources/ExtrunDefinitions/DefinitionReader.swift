import ExtrunProtocol
import Foundation

/// Reads the JSON tree of a definition file into the model, reporting every
/// field that is missing, of the wrong type, or unknown (with its path).
/// Members whose name starts with `$` are comments and are skipped.
final class DefinitionReader {
    var sink: DiagnosticSink

    init(file: String) { sink = DiagnosticSink(file: file) }

    func read(_ root: JSONNode) -> Definition? {
        guard var top = object(root, path: "") else { return nil }
        let pluginNode = top.take("plugin", required: true, sink: &sink)
        let enumNodes = top.take("enums", sink: &sink)
        let typeNodes = top.take("types", sink: &sink)
        let intentNodes = top.take("intents", required: true, sink: &sink)
        top.finish(known: ["plugin", "enums", "types", "intents"], sink: &sink)

        let plugin = pluginNode.flatMap { readPlugin($0, path: "plugin") }
        let enums = list(enumNodes, path: "enums") { readEnum($0, path: $1) }
        let types = list(typeNodes, path: "types") { readType($0, path: $1) }
        let intents = list(intentNodes, path: "intents") { readIntent($0, path: $1) }
        guard let plugin else { return nil }
        return Definition(plugin: plugin, enums: enums, types: types, intents: intents, spot: Spot(path: "", location: root.location))
    }

    // MARK: Elements

    func readPlugin(_ node: JSONNode, path: String) -> PluginSpec? {
        guard var o = object(node, path: path) else { return nil }
        let id = o.string("id", required: true, sink: &sink)
        let version = o.string("version", required: true, sink: &sink)
        let owner = o.string("owner", required: true, sink: &sink)
        let appName = o.string("appName", sink: &sink)
        let executable = o.string("executable", sink: &sink)
        let arguments = o.strings("arguments", sink: &sink)
        var modes: [Mode] = [.extension, .inApp]
        if let names = o.strings("modes", sink: &sink) {
            modes = []
            for (i, name) in names.enumerated() {
                if let mode = Mode(rawValue: name) {
                    modes.append(mode)
                } else {
                    sink.error(o.itemSpot("modes", i), "'\(name)' is not a mode (use extension or in-app)")
                }
            }
        }
        var limits: ManifestLimits?
        if let limitsNode = o.take("limits", sink: &sink), var l = object(limitsNode, path: o.spot("limits").path) {
            func request(_ key: String) -> ManifestLimits.Request? {
                guard let node = l.take(key, sink: &sink), var r = object(node, path: l.spot(key).path) else { return nil }
                let memory = r.positiveInt("memoryBytes", sink: &sink)
                let deadline = r.positiveInt("deadlineMs", sink: &sink)
                r.finish(known: ["memoryBytes", "deadlineMs"], sink: &sink)
                return ManifestLimits.Request(memoryBytes: memory, deadlineMs: deadline.map { Int($0) })
            }
            limits = ManifestLimits(extension: request("extension"), inApp: request("in-app"))
            l.finish(known: ["extension", "in-app"], sink: &sink)
        }
        let activityTypes = o.strings("activityTypes", sink: &sink) ?? []
        let retry = o.bool("retryInAppOnMemoryLimit", sink: &sink) ?? false
        o.finish(
            known: ["id", "version", "owner", "appName", "executable", "arguments", "modes", "limits", "activityTypes", "retryInAppOnMemoryLimit"],
            sink: &sink)
        return PluginSpec(
            id: id ?? "", version: version ?? "", owner: owner ?? "", appName: appName, executable: executable, arguments: arguments ?? [],
            modes: modes, limits: limits, activityTypes: activityTypes, retryInAppOnMemoryLimit: retry, spots: o.spots)
    }

    func readEnum(_ node: JSONNode, path: String) -> EnumSpec? {
        guard var o = object(node, path: path) else { return nil }
        let name = o.string("name", required: true, sink: &sink)
        let description = o.string("description", sink: &sink)
        let cases = readCases(o.take("cases", required: true, sink: &sink), path: o.spot("cases").path) ?? []
        o.finish(known: ["name", "description", "cases"], sink: &sink)
        return EnumSpec(name: name ?? "", description: description, cases: cases, spots: o.spots)
    }

    /// Cases as strings (`"cheese"`) or objects (`{"value": "red_pepper", "title": "Red Pepper"}`).
    func readCases(_ node: JSONNode?, path: String) -> [EnumCaseSpec]? {
        guard let node else { return nil }
        return list(node, path: path) { item, itemPath in
            if case .string(let value) = item.value {
                return EnumCaseSpec(value: value, title: nil, spot: Spot(path: itemPath, location: item.location))
            }
            guard case .object = item.value, var c = object(item, path: itemPath) else {
                sink.error(Spot(path: itemPath, location: item.location), "expected a string or an object with 'value' and 'title', got \(item.typeName)")
                return nil
            }
            let value = c.string("value", required: true, sink: &sink)
            let title = c.string("title", sink: &sink)
            c.finish(known: ["value", "title"], sink: &sink)
            return EnumCaseSpec(value: value ?? "", title: title, spot: Spot(path: itemPath, location: item.location))
        }
    }

    func readProperty(_ node: JSONNode, path: String) -> PropertySpec? {
        guard var o = object(node, path: path) else { return nil }
        let name = o.string("name", required: true, sink: &sink)
        let type = o.string("type", required: true, sink: &sink)
        let multiple = o.bool("multiple", sink: &sink)
        let title = o.string("title", sink: &sink)
        let description = o.string("description", sink: &sink)
        o.finish(known: ["name", "type", "multiple", "title", "description"], sink: &sink)
        return PropertySpec(name: name ?? "", type: type ?? "", multiple: multiple ?? false, title: title, description: description, spots: o.spots)
    }

    func readType(_ node: JSONNode, path: String) -> TypeSpec? {
        guard var o = object(node, path: path) else { return nil }
        let name = o.string("name", required: true, sink: &sink)
        let description = o.string("description", sink: &sink)
        let properties = list(o.take("properties", sink: &sink), path: o.spot("properties").path) { readProperty($0, path: $1) }
        var display: DisplayTemplate?
        if let displayNode = o.take("display", sink: &sink), var d = object(displayNode, path: o.spot("display").path) {
            let title = d.string("title", required: true, sink: &sink)
            let subtitle = d.string("subtitle", sink: &sink)
            let image = d.string("image", sink: &sink)
            d.finish(known: ["title", "subtitle", "image"], sink: &sink)
            display = DisplayTemplate(title: title ?? "", subtitle: subtitle, image: image)
            // Keep the spots of the templates for validation.
            for (key, spot) in d.spots.fields { o.spots.fields["display.\(key)"] = spot }
        }
        o.finish(known: ["name", "description", "properties", "display"], sink: &sink)
        return TypeSpec(name: name ?? "", description: description, properties: properties, display: display, spots: o.spots)
    }

    func readParameter(_ node: JSONNode, path: String) -> ParameterSpec? {
        guard var o = object(node, path: path) else { return nil }
        let name = o.string("name", required: true, sink: &sink)
        let type = o.string("type", required: true, sink: &sink)
        let title = o.string("title", sink: &sink)
        let description = o.string("description", sink: &sink)
        let required = o.bool("required", sink: &sink)
        let multiple = o.bool("multiple", sink: &sink)
        let defaultValue = o.take("default", sink: &sink)?.json
        let prompt = o.string("prompt", sink: &sink)
        let confirmationPrompt = o.string("confirmationPrompt", sink: &sink)
        let values = readCases(o.take("values", sink: &sink), path: o.spot("values").path)
        let allowedTypes = o.strings("allowedTypes", sink: &sink)
        let dynamicOptions = o.bool("dynamicOptions", sink: &sink)
        var parent: ParentCondition?
        if let parentNode = o.take("parent", sink: &sink), var p = object(parentNode, path: o.spot("parent").path) {
            let parameter = p.string("parameter", required: true, sink: &sink)
            let value = p.take("value", required: true, sink: &sink)
            p.finish(known: ["parameter", "value"], sink: &sink)
            if let parameter, let value { parent = ParentCondition(parameter: parameter, value: value.json) }
            for (key, spot) in p.spots.fields { o.spots.fields["parent.\(key)"] = spot }
        }
        var reasonSpots: [String: Spot] = [:]
        let reasons = list(o.take("unsupportedReasons", sink: &sink), path: o.spot("unsupportedReasons").path) { item, itemPath -> UnsupportedReason? in
            guard var r = object(item, path: itemPath) else { return nil }
            let code = r.string("code", required: true, sink: &sink)
            let message = r.string("message", required: true, sink: &sink)
            r.finish(known: ["code", "message"], sink: &sink)
            let index = itemPath.split(separator: "[").last.map { "[" + $0 } ?? ""
            for (key, spot) in r.spots.fields { reasonSpots["unsupportedReasons\(index).\(key)"] = spot }
            return UnsupportedReason(code: code ?? "", message: message ?? "")
        }
        o.spots.fields.merge(reasonSpots) { first, _ in first }
        o.finish(
            known: [
                "name", "type", "title", "description", "required", "multiple", "default", "prompt", "confirmationPrompt", "values",
                "allowedTypes", "dynamicOptions", "parent", "unsupportedReasons",
            ], sink: &sink)
        return ParameterSpec(
            name: name ?? "", type: type ?? "", title: title, description: description, required: required ?? false,
            multiple: multiple ?? false, default: defaultValue, prompt: prompt, confirmationPrompt: confirmationPrompt, values: values,
            allowedTypes: allowedTypes, dynamicOptions: dynamicOptions ?? false, parent: parent, unsupportedReasons: reasons, spots: o.spots)
    }

    func readResponse(_ node: JSONNode, path: String) -> ResponseSpec? {
        guard var o = object(node, path: path) else { return nil }
        let code = o.string("code", required: true, sink: &sink)
        let success = o.bool("success", sink: &sink)
        let dialog = o.string("dialog", sink: &sink)
        let properties = o.strings("properties", sink: &sink)
        o.finish(known: ["code", "success", "dialog", "properties"], sink: &sink)
        return ResponseSpec(code: code ?? "", success: success, dialog: dialog, properties: properties, spots: o.spots)
    }

    func readIntent(_ node: JSONNode, path: String) -> IntentSpec? {
        guard var o = object(node, path: path) else { return nil }
        let name = o.string("name", required: true, sink: &sink)
        let title = o.string("title", sink: &sink)
        let description = o.string("description", sink: &sink)
        let background = o.bool("runsInBackground", sink: &sink)
        let confirmation = o.string("confirmation", sink: &sink)
        let phrases = o.strings("phrases", sink: &sink)
        let parameters = list(o.take("parameters", sink: &sink), path: o.spot("parameters").path) { readParameter($0, path: $1) }
        let outputs = list(o.take("outputs", sink: &sink), path: o.spot("outputs").path) { readProperty($0, path: $1) }
        let responses = list(o.take("responses", sink: &sink), path: o.spot("responses").path) { readResponse($0, path: $1) }
        o.finish(
            known: ["name", "title", "description", "runsInBackground", "confirmation", "phrases", "parameters", "outputs", "responses"],
            sink: &sink)
        return IntentSpec(
            name: name ?? "", title: title, description: description, runsInBackground: background, confirmation: confirmation,
            phrases: phrases ?? [], parameters: parameters, outputs: outputs, responses: responses, spots: o.spots)
    }

    // MARK: Helpers

    func object(_ node: JSONNode, path: String) -> ObjectReader? {
        guard case .object(let members) = node.value else {
            sink.error(Spot(path: path, location: node.location), "expected an object, got \(node.typeName)")
            return nil
        }
        return ObjectReader(members: members, element: Spot(path: path, location: node.location))
    }

    /// Reads each item of a list node; a node that is not a list is reported.
    func list<T>(_ node: JSONNode?, path: String, _ read: (JSONNode, String) -> T?) -> [T] {
        guard let node else { return [] }
        guard case .array(let items) = node.value else {
            sink.error(Spot(path: path, location: node.location), "expected a list, got \(node.typeName)")
            return []
        }
        return items.enumerated().compactMap { i, item in read(item, "\(path)[\(i)]") }
    }
}

/// The members of one JSON object, taken one by one; what is left at the end is unknown.
struct ObjectReader {
    private var members: [String: JSONNode.Member]
    private var order: [String]
    private var taken: Set<String> = []
    var spots: Spots

    init(members: [JSONNode.Member], element: Spot) {
        self.members = Dictionary(members.map { ($0.key, $0) }, uniquingKeysWith: { first, _ in first })
        self.order = members.map(\.key)
        self.spots = Spots(element: element)
    }

    func spot(_ key: String) -> Spot { spots[key] }

    func itemSpot(_ key: String, _ index: Int) -> Spot {
        let base = spots[key]
        var location = base.location
        if case .array(let items)? = members[key]?.value.value, index < items.count { location = items[index].location }
        return Spot(path: "\(base.path)[\(index)]", location: location)
    }

    mutating func take(_ key: String, required: Bool = false, sink: inout DiagnosticSink) -> JSONNode? {
        taken.insert(key)
        guard let member = members[key] else {
            if required { sink.error(spots.element, "missing required field '\(key)'") }
            return nil
        }
        spots.fields[key] = Spot(path: spots.element.child(key).path, location: member.value.location)
        return member.value
    }

    mutating func string(_ key: String, required: Bool = false, sink: inout DiagnosticSink) -> String? {
        guard let node = take(key, required: required, sink: &sink) else { return nil }
        guard case .string(let text) = node.value else {
            sink.error(spot(key), "expected a string, got \(node.typeName)")
            return nil
        }
        return text
    }

    mutating func bool(_ key: String, sink: inout DiagnosticSink) -> Bool? {
        guard let node = take(key, sink: &sink) else { return nil }
        guard case .bool(let value) = node.value else {
            sink.error(spot(key), "expected true or false, got \(node.typeName)")
            return nil
        }
        return value
    }

    mutating func positiveInt(_ key: String, sink: inout DiagnosticSink) -> Int64? {
        guard let node = take(key, sink: &sink) else { return nil }
        guard case .int(let value) = node.value, value > 0 else {
            sink.error(spot(key), "expected a positive integer, got \(node.typeName == "an integer" ? "\(node.json.intValue ?? 0)" : node.typeName)")
            return nil
        }
        return value
    }

    mutating func strings(_ key: String, sink: inout DiagnosticSink) -> [String]? {
        guard let node = take(key, sink: &sink) else { return nil }
        guard case .array(let items) = node.value else {
            sink.error(spot(key), "expected a list of strings, got \(node.typeName)")
            return nil
        }
        var result: [String] = []
        for (i, item) in items.enumerated() {
            spots.fields["\(key)[\(i)]"] = Spot(path: "\(spot(key).path)[\(i)]", location: item.location)
            if case .string(let text) = item.value {
                result.append(text)
            } else {
                sink.error(Spot(path: "\(spot(key).path)[\(i)]", location: item.location), "expected a string, got \(item.typeName)")
            }
        }
        return result
    }

    /// Reports the members nobody took (comments, `$...`, aside), suggesting the closest known name.
    func finish(known: [String], sink: inout DiagnosticSink) {
        for key in order where !taken.contains(key) && !key.hasPrefix("$") {
            guard let member = members[key] else { continue }
            let spot = Spot(path: spots.element.child(key).path, location: member.keyLocation)
            if let suggestion = closest(to: key, in: known) {
                sink.error(spot, "unknown field '\(key)'; did you mean '\(suggestion)'?")
            } else {
                sink.error(spot, "unknown field '\(key)' (known here: \(known.joined(separator: ", ")))")
            }
        }
    }
}

/// The candidate closest to `word` when it is close enough to be a likely typo.
func closest(to word: String, in candidates: [String]) -> String? {
    let lowered = word.lowercased()
    var best: (String, Int)?
    for candidate in candidates {
        let distance = editDistance(lowered, candidate.lowercased())
        if distance <= max(1, candidate.count / 3), distance < (best?.1 ?? .max) { best = (candidate, distance) }
    }
    return best?.0
}

func editDistance(_ a: String, _ b: String) -> Int {
    let a = Array(a)
    let b = Array(b)
    if a.isEmpty { return b.count }
    if b.isEmpty { return a.count }
    var previous = Array(0...b.count)
    for i in 1...a.count {
        var current = [i] + Array(repeating: 0, count: b.count)
        for j in 1...b.count {
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
        }
        previous = current
    }
    return previous[b.count]
}
