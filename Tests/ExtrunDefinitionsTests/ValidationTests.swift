import ExtrunDefinitions
import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

/// One invalid change to the base definition, and the problem it must cause.
struct InvalidCase: Sendable, CustomTestStringConvertible {
    var label: String
    var changes: [Change]
    var path: String
    var message: String

    struct Change: Sendable {
        var path: String
        var value: JSONValue?
    }

    init(_ label: String, _ changes: [(String, JSONValue?)], _ path: String, _ message: String) {
        self.label = label
        self.changes = changes.map { Change(path: $0.0, value: $0.1) }
        self.path = path
        self.message = message
    }

    var testDescription: String { label }
}

private let p = "intents[0].parameters"

let invalidCases: [InvalidCase] = [
    // Plugin
    InvalidCase("plugin id with a space", [("plugin.id", "com example")], "plugin.id", "'com example' is not a valid plugin id"),
    InvalidCase("empty owner", [("plugin.owner", "")], "plugin.owner", "must not be empty"),
    InvalidCase("no modes", [("plugin.modes", [])], "plugin.modes", "must list at least one of extension, in-app"),
    InvalidCase("a mode twice", [("plugin.modes", ["extension", "extension"])], "plugin.modes", "lists a mode twice"),

    // Parent conditions
    InvalidCase("a parent that does not exist", [("\(p)[3].parent.parameter", "fancyy")], "\(p)[3].parent.parameter",
                "'fancyy' is not a parameter of DoThing; did you mean 'fancy'?"),
    InvalidCase("its own parent", [("\(p)[3].parent.parameter", "style")], "\(p)[3].parent.parameter", "a parameter cannot be its own parent"),
    InvalidCase("a parent declared after", [("\(p)[2].parent", ["parameter": "style", "value": "bold"])], "\(p)[2].parent.parameter",
                "'style' comes after 'fancy'; a parent must be declared (and is resolved) before the parameters it shows"),
    InvalidCase("a parent value of the wrong type", [("\(p)[3].parent.value", "yes")], "\(p)[3].parent.value",
                "not a value of 'fancy': expected a boolean (true or false), got string"),
    InvalidCase("a parent value not among the enum's cases", [("\(p)[5].parent", ["parameter": "size", "value": "medium"])], "\(p)[5].parent.value",
                "not a value of 'size': 'medium' is not one of small, extra_large"),
    InvalidCase("a date parent", [("\(p)[5].parent", ["parameter": "when", "value": "2026-01-01"])], "\(p)[5].parent.parameter",
                "'when' is a date parameter; a parent must be a boolean, string, integer or enum"),
    InvalidCase("a file parent", [("\(p)[4].parent", ["parameter": "attachments", "value": "x"])], "\(p)[4].parent.parameter",
                "'attachments' is a file parameter; a parent must be a boolean, string, integer or enum"),
    InvalidCase("a list parent", [("\(p)[1].multiple", true), ("\(p)[1].default", ["small"]), ("\(p)[5].parent", ["parameter": "size", "value": "small"])],
                "\(p)[5].parent.parameter", "'size' takes a list; a parent must take a single value"),

    // Defaults
    InvalidCase("an enum default not among its cases", [("\(p)[1].default", "huge")], "\(p)[1].default",
                "'huge' is not one of the cases of Size (small, extra_large)"),
    InvalidCase("an in-place enum default not among its cases", [("\(p)[3].default", "italic")], "\(p)[3].default",
                "'italic' is not one of the cases of 'style' (plain, bold)"),
    InvalidCase("a boolean default that is a string", [("\(p)[2].default", "no")], "\(p)[2].default",
                "not a valid value: expected a boolean (true or false), got string"),
    InvalidCase("a date default that is not a date", [("\(p)[4].default", "tomorrow")], "\(p)[4].default",
                "not a valid value: 'tomorrow' is not an ISO 8601 date"),
    InvalidCase("a single default for a list", [("\(p)[1].multiple", true)], "\(p)[1].default",
                "not a valid value: expected a list of enum values, got string"),
    InvalidCase("a default of a file parameter", [("\(p)[5].default", ["a.png"])], "\(p)[5].default", "a file parameter cannot have a default"),
    InvalidCase("a default of a custom parameter", [("\(p)[0].default", ["identifier": "x"])], "\(p)[0].default",
                "a custom-type parameter cannot have a default"),

    // Types
    InvalidCase("an unknown type", [("\(p)[1].type", "Sise")], "\(p)[1].type", "'Sise' is not a type; did you mean 'Size'?"),
    InvalidCase("type custom instead of the type's name", [("\(p)[0].type", "custom")], "\(p)[0].type", "name the custom type itself"),
    InvalidCase("an enum parameter without values", [("\(p)[3].values", nil)], "\(p)[3].type", "an enum parameter lists its cases in 'values'"),
    InvalidCase("values on a string", [("\(p)[3].type", "string")], "\(p)[3].values", "only enum parameters take values"),
    InvalidCase("allowedTypes on a non-file parameter", [("\(p)[4].allowedTypes", ["public.image"])], "\(p)[4].allowedTypes",
                "only file parameters take allowedTypes"),
    InvalidCase("an empty type identifier", [("\(p)[5].allowedTypes", ["public.image", ""])], "\(p)[5].allowedTypes[1]",
                "'' is not a type identifier"),
    InvalidCase("an enum property given as 'enum'", [("types[0].properties[2].type", "enum")], "types[0].properties[2].type",
                "name the enum or type itself"),

    // Dynamic options
    InvalidCase("dynamic options of a boolean", [("\(p)[2].dynamicOptions", true)], "\(p)[2].dynamicOptions",
                "dynamic options are for string, integer, number and custom-type parameters, not a boolean (its values are known already)"),
    InvalidCase("dynamic options of a file", [("\(p)[5].dynamicOptions", true)], "\(p)[5].dynamicOptions", "not a file"),
    InvalidCase("dynamic options of an enum", [("\(p)[1].dynamicOptions", true)], "\(p)[1].dynamicOptions", "not an enum (its values are known already)"),

    // Responses
    InvalidCase("two responses with one code", [("intents[0].responses[2].code", "failureGone")], "intents[0].responses[2].code",
                "the response 'failureGone' is declared twice"),
    InvalidCase("success on a standard code", [("intents[0].responses[0].success", true)], "intents[0].responses[0].success",
                "'success' is a standard code; whether it counts as success is fixed"),
    InvalidCase("a code that is not an identifier", [("intents[0].responses[2].code", "done-later")], "intents[0].responses[2].code",
                "'done-later' is not a valid code"),
    InvalidCase("a response property that is not an output", [("intents[0].responses[1].properties", ["thing", "mesage"])],
                "intents[0].responses[1].properties[1]", "'mesage' is not one of the intent's outputs; did you mean 'message'?"),
    InvalidCase("a dialog slot the response does not carry", [("intents[0].responses[1].dialog", "${message}")], "intents[0].responses[1].dialog",
                "'${message}' is not a property of the response failureGone (its properties: thing)"),
    InvalidCase("a dialog slot without properties", [("intents[0].responses[2].dialog", "Later, ${thing}")], "intents[0].responses[2].dialog",
                "'${thing}' is not a property of the response doneLater (it carries no properties)"),
    InvalidCase("an output named dialog", [("intents[0].outputs[1].name", "dialog")], "intents[0].outputs[1].name",
                "'dialog' cannot be the name of an output"),
    InvalidCase("an output of an unknown type", [("intents[0].outputs[1].type", "text")], "intents[0].outputs[1].type", "'text' is not a type"),

    // Phrases and templates
    InvalidCase("a phrase with two parameters", [("intents[0].phrases[0]", "Do ${thing} ${size} in Test App")], "intents[0].phrases[0]",
                "holds 2 parameters (${thing}, ${size}); a phrase may hold at most one"),
    InvalidCase("a phrase without the app's name", [("intents[0].phrases[1]", "Do something")], "intents[0].phrases[1]",
                "'Do something' does not contain the app's name 'Test App'"),
    InvalidCase("a phrase slot that is not a parameter", [("intents[0].phrases[0]", "Do ${thingy} in Test App")], "intents[0].phrases[0]",
                "'${thingy}' is not a parameter of DoThing"),
    InvalidCase("phrases without an app name", [("plugin.appName", nil)], "intents[0].phrases[0]", "phrases need the app's name"),
    InvalidCase("a confirmation slot that is not a parameter", [("intents[0].confirmation", "Do ${what}?")], "intents[0].confirmation",
                "'${what}' is not a parameter of DoThing"),
    InvalidCase("a confirmation prompt about another parameter", [("\(p)[0].confirmationPrompt", "Really ${size}?")], "\(p)[0].confirmationPrompt",
                "'${size}' is not this parameter"),
    InvalidCase("a display template slot that is not a property", [("types[0].display.subtitle", "${cuont} left")], "types[0].display.subtitle",
                "'${cuont}' is not a property of Thing"),

    // Names
    InvalidCase("two parameters with one name", [("\(p)[2].name", "size")], "\(p)[2].name", "the parameter 'size' is declared twice"),
    InvalidCase("names that differ only in case", [("\(p)[4].name", "Size")], "\(p)[4].name", "'Size' and 'size' would both generate resolveSize"),
    InvalidCase("a parameter name that is not an identifier", [("\(p)[4].name", "when-ever")], "\(p)[4].name", "'when-ever' is not a valid parameter name"),
    InvalidCase("two intents with one name", [("intents[1]", ["name": "DoThing"])], "intents[1].name", "the intent 'DoThing' is declared twice"),
    InvalidCase("an enum named like a built-in type", [("enums[0].name", "string")], "enums[0].name", "'string' is a built-in type name"),
    InvalidCase("a type named like a Swift type", [("types[0].name", "Date")], "types[0].name", "'Date' is already a Swift or ExtrunSDK name"),
    InvalidCase("an enum and a type with one name", [("enums[0].name", "Thing")], "types[0].name", "'Thing' is declared twice (already an enum)"),
    InvalidCase("an enum clashing with generated code", [("enums[1]", ["name": "DoThingResponse", "cases": ["a"]])], "intents[0].name",
                "the generated DoThingResponse would clash with the enum DoThingResponse"),
    InvalidCase("a case twice", [("enums[0].cases[1]", "small")], "enums[0].cases[1]", "the case 'small' is listed twice"),
    InvalidCase("cases with one Swift name", [("enums[0].cases[1]", "Small")], "enums[0].cases[1]", "'Small' and 'small' would both be the Swift case 'small'"),
    InvalidCase("an enum without cases", [("enums[0].cases", [])], "enums[0].cases", "an enum must list at least one case"),
    InvalidCase("a property named title", [("types[0].properties[0].name", "title")], "types[0].properties[0].name",
                "'title' cannot be the name of a property"),
    InvalidCase("a reason twice", [("\(p)[0].unsupportedReasons[1]", ["code": "gone", "message": "Gone again."])],
                "\(p)[0].unsupportedReasons[1].code", "the reason 'gone' is declared twice"),
    InvalidCase("an empty reason message", [("\(p)[0].unsupportedReasons[0].message", " ")], "\(p)[0].unsupportedReasons[0].message", "must not be empty"),
    InvalidCase("a nested name clash", [("\(p)[4].name", "styleResolution"), ("\(p)[4].type", "enum"), ("\(p)[4].values", ["a"])], "\(p)[4].name",
                "would be DoThingIntent.StyleResolution"),
    InvalidCase("a type that contains itself", [("types[0].properties[1]", ["name": "parent", "type": "Thing"])], "types[0].properties",
                "Thing → Thing: a type cannot contain itself"),
    InvalidCase("no intents", [("intents", [])], "intents", "the plugin declares no intent"),
]

@Suite("Validating definition files")
struct ValidationTests {
    @Test("the base definition is valid")
    func base() throws {
        _ = try valid(baseDefinition)
    }

    @Test("each invalid change is reported with the file, its path and position", arguments: invalidCases)
    func invalid(_ c: InvalidCase) {
        let found = diagnostics(definition(c.changes.map { ($0.path, $0.value) }))
        let match = found.first { $0.path == c.path && $0.message.contains(c.message) }
        #expect(match != nil, "expected '\(c.path): \(c.message)', got:\n\(found.map(\.description).joined(separator: "\n"))")
        #expect(match?.file == "test/intents.json")
        #expect(match?.location != nil)
        #expect(match?.description.hasPrefix("test/intents.json:") == true)
    }

    @Test("every problem is reported, not only the first")
    func all() {
        let found = diagnostics(definition([
            ("intents[0].parameters[1].default", "huge"), ("intents[0].phrases[1]", "Do"), ("intents[0].responses[2].code", "failureGone"),
        ]))
        #expect(found.map(\.path) == ["intents[0].parameters[1].default", "intents[0].phrases[1]", "intents[0].responses[2].code"])
    }

    @Test("positions point at the value at fault")
    func positions() throws {
        let json = """
            {
              "plugin": {"id": "a.b", "version": "1", "owner": "O"},
              "intents": [
                {"name": "Go", "parameters": [
                  {"name": "n", "type": "integer", "default": "one"}
                ]}
              ]
            }
            """
        let found = diagnostics(json)
        #expect(found.map(\.description) == [
            "test/intents.json:5:51: error: intents[0].parameters[0].default: not a valid value: expected an integer, got string",
        ])
    }

    @Test("a cycle through a list is fine")
    func listCycle() throws {
        _ = try valid(definition([("types[0].properties[3]", ["name": "children", "type": "Thing", "multiple": true])]))
    }

    @Test("the examples' definitions are valid, and so are their manifests", arguments: ["MakeUppercase", "RenameFiles", "SoupChef", "People"])
    func examples(_ name: String) throws {
        let file = try DefinitionFile.load(path: StagedPlugins.packageRoot.appendingPathComponent("Examples/\(name)/intents.json").path)
        let manifest = file.manifest()
        #expect(manifest.problems() == [])
        #expect(manifest.executable == name)
        #expect(manifest.owner == "EXAMPLETEAM")
    }
}
