import ExtrunDefinitions
import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

/// A small definition with one of each feature; tests change one field and look at the problems.
let baseDefinition = #"""
    {
      "$comment": "a test definition",
      "plugin": {"id": "com.example.test", "version": "1.2.3", "owner": "TEAM", "appName": "Test App",
                 "limits": {"extension": {"memoryBytes": 62914560}}},
      "enums": [
        {"name": "Size", "description": "How big.", "cases": ["small", {"value": "extra_large", "title": "Extra Large"}]}
      ],
      "types": [
        {"name": "Thing", "properties": [{"name": "label", "type": "string"}, {"name": "count", "type": "integer"},
                                         {"name": "sizes", "type": "Size", "multiple": true}],
         "display": {"title": "${label}", "subtitle": "${count} left", "image": "things/${identifier}.png"}}
      ],
      "intents": [
        {
          "name": "DoThing", "title": "Do Thing", "description": "Does a thing.", "runsInBackground": true,
          "confirmation": "Do ${thing}?",
          "phrases": ["Do ${thing} in Test App", "Do something in Test App"],
          "parameters": [
            {"name": "thing", "type": "Thing", "required": true, "prompt": "Which thing?", "dynamicOptions": true,
             "confirmationPrompt": "Really ${thing}?",
             "unsupportedReasons": [{"code": "gone", "message": "It is gone."}]},
            {"name": "size", "type": "Size", "default": "small"},
            {"name": "fancy", "type": "boolean", "default": false},
            {"name": "style", "type": "enum", "values": ["plain", "bold"], "prompt": "Which style?",
             "parent": {"parameter": "fancy", "value": true}},
            {"name": "when", "type": "date"},
            {"name": "attachments", "type": "file", "multiple": true, "allowedTypes": ["public.image"]}
          ],
          "outputs": [{"name": "thing", "type": "Thing"}, {"name": "message", "type": "string"}],
          "responses": [
            {"code": "success", "dialog": "Did ${thing}: ${message}", "properties": ["thing", "message"]},
            {"code": "failureGone", "dialog": "${thing} is gone.", "properties": ["thing"]},
            {"code": "doneLater", "success": true}
          ]
        }
      ]
    }
    """#

/// Parses a definition that must be valid.
func valid(_ json: String, path: String = "test/intents.json", sourceLocation: Testing.SourceLocation = #_sourceLocation) throws -> DefinitionFile {
    do {
        return try DefinitionFile.parse(Data(json.utf8), path: path)
    } catch {
        Issue.record("expected a valid definition, got:\n\(error)", sourceLocation: sourceLocation)
        throw error
    }
}

/// Parses a definition that must be invalid, and returns its diagnostics.
func diagnostics(_ json: String, path: String = "test/intents.json", sourceLocation: Testing.SourceLocation = #_sourceLocation) -> [Diagnostic] {
    do {
        _ = try DefinitionFile.parse(Data(json.utf8), path: path)
        Issue.record("expected the definition to be invalid", sourceLocation: sourceLocation)
        return []
    } catch {
        return error.diagnostics
    }
}

/// The base definition with changes at JSON paths (`intents[0].parameters[1].default`); nil removes the member.
func definition(_ changes: [(String, JSONValue?)]) -> String {
    guard var root = try? JSONCoding.decode(JSONValue.self, fromJSON: Data(baseDefinition.utf8)) else { return "" }
    for (path, value) in changes { root.set(JSONPath.parse(path)[...], value) }
    let data = (try? JSONCoding.encoder(pretty: true).encode(root)) ?? Data()
    return String(decoding: data, as: UTF8.self)
}

enum JSONPath {
    enum Component { case key(String), index(Int) }

    static func parse(_ path: String) -> [Component] {
        var components: [Component] = []
        for part in path.split(separator: ".") {
            var rest = part[...]
            if let bracket = rest.firstIndex(of: "[") {
                if bracket > rest.startIndex { components.append(.key(String(rest[..<bracket]))) }
                rest = rest[bracket...]
                while rest.first == "[", let close = rest.firstIndex(of: "]") {
                    components.append(.index(Int(rest[rest.index(after: rest.startIndex)..<close]) ?? 0))
                    rest = rest[rest.index(after: close)...]
                }
            } else {
                components.append(.key(String(rest)))
            }
        }
        return components
    }
}

extension JSONValue {
    mutating func set(_ path: ArraySlice<JSONPath.Component>, _ value: JSONValue?) {
        guard let first = path.first else {
            self = value ?? .null
            return
        }
        let rest = path.dropFirst()
        switch (first, self) {
        case (.key(let key), .object(var fields)):
            if rest.isEmpty && value == nil {
                fields[key] = nil
            } else {
                var child = fields[key] ?? .object([:])
                child.set(rest, value)
                fields[key] = child
            }
            self = .object(fields)
        case (.index(let index), .array(var items)):
            if rest.isEmpty && value == nil {
                items.remove(at: index)
            } else if index == items.count {
                var child = JSONValue.object([:])
                child.set(rest, value)
                items.append(child)
            } else {
                items[index].set(rest, value)
            }
            self = .array(items)
        default:
            break
        }
    }
}

/// Runs a program and returns its status and output.
func run(_ executable: URL, _ arguments: [String], environment: [String: String]? = nil, stdin: String? = nil) throws -> (status: Int32, stdout: String, stderr: String) {
    let process = Process()
    process.executableURL = executable
    process.arguments = arguments
    process.currentDirectoryURL = StagedPlugins.packageRoot
    if let environment { process.environment = ProcessInfo.processInfo.environment.merging(environment) { _, new in new } }
    let out = Pipe()
    let err = Pipe()
    let input = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = input
    try process.run()
    if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
    try input.fileHandleForWriting.close()
    // Read both pipes to the end before waiting (large outputs would otherwise block the child).
    let group = DispatchGroup()
    nonisolated(unsafe) var stdoutData = Data()
    nonisolated(unsafe) var stderrData = Data()
    group.enter()
    DispatchQueue.global().async {
        stdoutData = out.fileHandleForReading.readDataToEndOfFile()
        group.leave()
    }
    stderrData = err.fileHandleForReading.readDataToEndOfFile()
    group.wait()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: stdoutData, as: UTF8.self), String(decoding: stderrData, as: UTF8.self))
}

struct Missing: Error, CustomStringConvertible {
    var description: String
}
