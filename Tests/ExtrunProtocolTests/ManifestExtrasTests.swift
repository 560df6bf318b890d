import ExtrunProtocol
import Foundation
import Testing

private func manifest(_ body: String, appName: String? = nil, types: String = "[]") throws -> PluginManifest {
    let app = appName.map { #","appName":"\#($0)""# } ?? ""
    return try JSONCoding.decode(
        PluginManifest.self,
        fromJSON: Data(#"{"id":"com.example.t","version":"1","owner":"T","protocolVersion":1,"executable":"run"\#(app),"types":\#(types),"intents":\#(body)}"#.utf8))
}

/// Custom types, phrases, parent conditions and the other descriptive manifest fields.
@Suite("Manifest: types, phrases, parents")
struct ManifestExtrasTests {
    static let soupType = #"[{"name":"Soup","properties":[{"name":"name","type":"string"},{"name":"price","type":"number"}],"display":{"title":"${name}"}}]"#

    @Test("the descriptive fields are read, with their defaults")
    func fields() throws {
        let m = try manifest(
            #"""
            [{"name":"Order","runsInBackground":true,"phrases":["Order ${soup} in Soup Chef"],"confirmation":"Order ${soup}?",
              "parameters":[{"name":"soup","type":"custom","customType":"Soup","description":"The soup","dynamicOptions":true,
                             "confirmationPrompt":"Really?","unsupportedReasons":[{"code":"soldOut","message":"Sold out"}]},
                            {"name":"size","type":"enum","values":["s","l"],"valueTitles":{"s":"Small","l":"Large"},
                             "parent":{"parameter":"soup","value":{"identifier":"pea"}}}]}]
            """#, appName: "Soup Chef", types: Self.soupType)
        #expect(m.problems() == [])
        #expect(m.appName == "Soup Chef")
        #expect(m.type(named: "Soup")?.properties.map(\.name) == ["name", "price"])
        #expect(m.type(named: "Soup")?.display?.title == "${name}")
        let intent = m.intents[0]
        #expect(intent.runsInBackground == true)
        #expect(intent.phrases == ["Order ${soup} in Soup Chef"])
        #expect(intent.confirmation == "Order ${soup}?")
        let soup = intent.parameters[0]
        #expect(soup.customType == "Soup" && soup.description == "The soup" && soup.dynamicOptions && soup.confirmationPrompt == "Really?")
        #expect(soup.unsupportedReasons == [UnsupportedReason(code: "soldOut", message: "Sold out")])
        let size = intent.parameters[1]
        #expect(size.valueTitles == ["s": "Small", "l": "Large"])
        #expect(size.parent == ParentCondition(parameter: "soup", value: ["identifier": "pea"]))

        let plain = try manifest(#"[{"name":"A","parameters":[{"name":"p","type":"string"}]}]"#)
        #expect(plain.types.isEmpty && plain.appName == nil)
        #expect(plain.intents[0].phrases == nil && plain.intents[0].runsInBackground == nil)
        #expect(plain.intents[0].parameters[0].dynamicOptions == false)
    }

    @Test("problems: custom types")
    func customTypeProblems() throws {
        let m = try manifest(
            #"[{"name":"A","parameters":[{"name":"a","type":"custom"},{"name":"b","type":"custom","customType":"Pizza"},{"name":"c","type":"custom","customType":"Soup","default":{"identifier":"x"}}]}]"#,
            types: #"[{"name":"Soup","properties":[]},{"name":"Soup","properties":[]}]"#)
        #expect(m.problems() == [
            "types[1].name: type 'Soup' is declared twice",
            "intents[0].parameters[0].customType: a custom parameter must name its type",
            "intents[0].parameters[2].default: a custom parameter cannot have a default",
            "intents[0].parameters[0].customType: '' is not one of the manifest's types",
            "intents[0].parameters[1].customType: 'Pizza' is not one of the manifest's types",
        ])
    }

    @Test("problems: phrases must name the app and at most one existing parameter")
    func phraseProblems() throws {
        let m = try manifest(
            #"[{"name":"Order","parameters":[{"name":"soup","type":"string"},{"name":"size","type":"string"}],"phrases":["Order ${soup} in soup chef","Order ${soup}","Order ${soup} ${size} in Soup Chef","Order ${pizza} in Soup Chef"]}]"#,
            appName: "Soup Chef")
        #expect(m.problems() == [
            "intents[0].phrases[1]: 'Order ${soup}' does not contain the app's name 'Soup Chef'",
            "intents[0].phrases[2]: a phrase may hold at most one parameter",
            "intents[0].phrases[3]: 'pizza' is not a parameter of Order",
        ])
    }

    @Test("problems: parent conditions, value titles, unsupported reasons")
    func parameterProblems() throws {
        let m = try manifest(
            #"""
            [{"name":"A","parameters":[
                {"name":"flag","type":"boolean"},
                {"name":"x","type":"string","parent":{"parameter":"nope","value":true}},
                {"name":"y","type":"string","parent":{"parameter":"flag","value":"yes"}},
                {"name":"z","type":"string","parent":{"parameter":"z","value":"z"}},
                {"name":"e","type":"enum","values":["a"],"valueTitles":{"a":"A","b":"B"}},
                {"name":"u","type":"string","unsupportedReasons":[{"code":"c","message":"m"},{"code":"c","message":"n"}]}]}]
            """#)
        #expect(m.problems() == [
            "intents[0].parameters[1].parent.parameter: 'nope' is not a parameter of A",
            "intents[0].parameters[2].parent.value: expected a boolean (true or false), got string",
            "intents[0].parameters[3].parent.parameter: a parameter cannot be its own parent",
            "intents[0].parameters[4].valueTitles: 'b' is not one of the values",
            "intents[0].parameters[5].unsupportedReasons[1].code: 'c' is declared twice",
        ])
    }

    @Test("problems: typed outputs")
    func outputs() throws {
        let good = try manifest(
            #"[{"name":"Order","outputs":[{"name":"soup","type":"custom","customType":"Soup"},{"name":"total","type":"number"}],"responses":[{"code":"soldOut","properties":["soup"]}]}]"#,
            types: Self.soupType)
        #expect(good.problems() == [])
        #expect(good.intents[0].output(named: "total")?.type == .number)
        let bad = try manifest(
            #"""
            [{"name":"Order","outputs":[{"name":"soup","type":"custom","customType":"Stew"},{"name":"soup","type":"enum"},{"name":"n","type":"integer","values":["a"]}],
              "responses":[{"code":"soldOut","properties":["soup","price"]}]}]
            """#, types: Self.soupType)
        #expect(
            bad.problems() == [
                "intents[0].outputs[1].name: output 'soup' is declared twice",
                "intents[0].outputs[1].values: an enum output must list its values",
                "intents[0].outputs[2].values: only enum outputs take values",
                "intents[0].responses[0].properties: 'price' is not one of the intent's outputs",
                "intents[0].outputs[0].customType: 'Stew' is not one of the manifest's types",
            ])
        // Without outputs, a response's properties are untyped names, as before.
        #expect(try manifest(#"[{"name":"Order","responses":[{"code":"soldOut","properties":["anything"]}]}]"#).problems() == [])
    }

    @Test("a parameter with a parent condition is shown only when the parent has that value")
    func isShown() {
        let p = ParameterDefinition(name: "newCase", type: .enum, values: ["a"], parent: ParentCondition(parameter: "changeCase", value: true))
        #expect(p.isShown(given: ["changeCase": true]))
        #expect(!p.isShown(given: ["changeCase": false]))
        #expect(!p.isShown(given: [:]))
        #expect(ParameterDefinition(name: "q", type: .string).isShown(given: [:]))
    }

    @Test("custom values are objects with a string identifier")
    func customValues() {
        let p = ParameterDefinition(name: "soup", type: .custom, customType: "Soup")
        #expect(ParameterValueCheck.problem(["identifier": "pea", "title": "Pea"], for: p) == nil)
        #expect(ParameterValueCheck.problem(["title": "Pea"], for: p) == "expected a Soup object with a string 'identifier'")
        #expect(ParameterValueCheck.problem("pea", for: p) == "expected a Soup object with a string 'identifier'")
    }

    @Test("phrase slots and filling")
    func phrases() {
        #expect(Phrase.slots(in: "Order ${quantity} ${soup} now") == ["quantity", "soup"])
        #expect(Phrase.slots(in: "No slots, or ${unclosed") == [])
        #expect(
            Phrase.fill("Order ${n} ${soup}, ${hot}?", with: ["n": 2, "soup": ["identifier": "pea", "title": "Pea Soup"], "hot": true])
                == "Order 2 Pea Soup, yes?")
        #expect(Phrase.fill("Rename ${files}", with: ["files": ["a", "b"]]) == "Rename a, b")
        #expect(Phrase.fill("Order ${soup}", with: [:]) == "Order soup")
    }

    @Test("a filled-in value is not itself filled in")
    func fillIsNotRecursive() {
        #expect(Phrase.fill("Say ${text} to ${name}", with: ["text": "${name}", "name": "Ann"]) == "Say ${name} to Ann")
    }

    @Test("options results")
    func optionsCoding() throws {
        let result = OptionsResult(items: [OptionItem(identifier: "pea", title: "Pea", value: ["identifier": "pea"])])
        #expect(result.sections.count == 1)
        #expect(result.allItems.map(\.identifier) == ["pea"])
        let value = try JSONCoding.value(of: result)
        #expect(value["sections"]?.arrayValue?.first?["items"]?.arrayValue?.first?["title"] == "Pea")
        #expect(try JSONCoding.decode(OptionsResult.self, from: value) == result)
        let params = OptionsParams(intent: "Order", parameter: "soup", parameters: [:], search: "pe")
        #expect(try JSONCoding.decode(OptionsParams.self, from: JSONCoding.value(of: params)) == params)
    }
}
