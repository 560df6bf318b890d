import ExtrunProtocol
import Foundation
import Testing

private func json(_ text: String) throws -> JSONValue {
    try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
}

@Suite("ResolutionResult coding")
struct ResolutionResultTests {
    static let cases: [(ResolutionResult, String)] = [
        (.success("HELLO"), #"{"result":"success","value":"HELLO"}"#),
        (.success([1, 2]), #"{"result":"success","value":[1,2]}"#),
        (.needsValue(prompt: "Which text?"), #"{"result":"needsValue","prompt":"Which text?"}"#),
        (.needsValue(prompt: nil), #"{"result":"needsValue"}"#),
        (.disambiguation(options: ["a", "b"], prompt: "Which one?"), #"{"result":"disambiguation","options":["a","b"],"prompt":"Which one?"}"#),
        (.disambiguation(options: [], prompt: nil), #"{"result":"disambiguation","options":[]}"#),
        (.confirmationRequired(5, prompt: "Really 5?"), #"{"result":"confirmationRequired","value":5,"prompt":"Really 5?"}"#),
        (.unsupported(reason: "empty", message: "Please enter some text"), #"{"result":"unsupported","reason":"empty","message":"Please enter some text"}"#),
        (.unsupported(reason: nil, message: nil), #"{"result":"unsupported"}"#),
        (.notRequired, #"{"result":"notRequired"}"#),
    ]

    @Test("each case encodes to its documented shape and decodes back", arguments: cases)
    func roundTrip(result: ResolutionResult, expected: String) throws {
        let value = try JSONCoding.value(of: result)
        #expect(value == (try json(expected)))
        #expect(try JSONCoding.decode(ResolutionResult.self, from: value) == result)
    }

    @Test("success with a null or absent value decodes as success(null)")
    func successNull() throws {
        #expect(try JSONCoding.decode(ResolutionResult.self, from: json(#"{"result":"success"}"#)) == .success(.null))
        #expect(try JSONCoding.decode(ResolutionResult.self, from: json(#"{"result":"success","value":null}"#)) == .success(.null))
        #expect(try JSONCoding.decode(ResolutionResult.self, from: JSONCoding.value(of: ResolutionResult.success(.null))) == .success(.null))
    }

    @Test("an unknown result kind is refused, listing the known ones")
    func unknownKind() throws {
        let value = try json(#"{"result":"maybe"}"#)
        let error = #expect(throws: DecodingError.self) { try JSONCoding.decode(ResolutionResult.self, from: value) }
        let text = error.map { JSONCoding.describe($0) } ?? ""
        #expect(text.contains("unknown resolution result 'maybe'"))
        #expect(text.contains("needsValue"))
        #expect(text.hasPrefix("result:"))
    }

    @Test("a missing result kind, or disambiguation without options, is refused")
    func missingFields() throws {
        let noKind = #expect(throws: DecodingError.self) { try JSONCoding.decode(ResolutionResult.self, from: json(#"{"value":1}"#)) }
        #expect(noKind.map { JSONCoding.describe($0) } == "missing required field 'result'")
        #expect(throws: DecodingError.self) { try JSONCoding.decode(ResolutionResult.self, from: json(#"{"result":"disambiguation"}"#)) }
    }
}

@Suite("IntentResponse coding")
struct IntentResponseTests {
    @Test("only code is required; properties default to empty")
    func minimal() throws {
        let response = try JSONCoding.decode(IntentResponse.self, from: json(#"{"code":"success"}"#))
        #expect(response == IntentResponse(code: "success"))
        #expect(response.properties.isEmpty)
        #expect(response.dialog == nil && response.userActivity == nil && response.progress == nil)
    }

    @Test("every field survives a round trip")
    func full() throws {
        let response = IntentResponse(
            code: "inProgress", properties: ["result": "HELLO", "count": 2, "nested": ["a": [1.5]]],
            dialog: Dialog(full: "Working on it.", supporting: "2 of 4"),
            userActivity: UserActivity(activityType: "com.example.open", title: "Open", userInfo: ["id": 7]), progress: 0.5)
        let value = try JSONCoding.value(of: response)
        #expect(value["code"] == "inProgress")
        #expect(value["properties"]?["count"] == .int(2))
        #expect(value["dialog"] == ["full": "Working on it.", "supporting": "2 of 4"])
        #expect(value["userActivity"]?["activityType"] == "com.example.open")
        #expect(value["progress"] == .double(0.5))
        #expect(try JSONCoding.decode(IntentResponse.self, from: value) == response)
    }

    @Test("absent optionals are left out of the encoding; properties are always written")
    func encodingOmitsNil() throws {
        #expect(try JSONCoding.value(of: IntentResponse(code: "failure")) == ["code": "failure", "properties": [:]])
    }

    @Test("a response without code, or with wrongly typed fields, is refused with the field's path")
    func malformed() throws {
        let noCode = #expect(throws: DecodingError.self) { try JSONCoding.decode(IntentResponse.self, from: json(#"{"properties":{}}"#)) }
        #expect(noCode.map { JSONCoding.describe($0) } == "missing required field 'code'")
        let badProperties = #expect(throws: DecodingError.self) {
            try JSONCoding.decode(IntentResponse.self, from: json(#"{"code":"success","properties":[1]}"#))
        }
        #expect(badProperties.map { JSONCoding.describe($0) }?.hasPrefix("properties:") == true)
        let badDialog = #expect(throws: DecodingError.self) {
            try JSONCoding.decode(IntentResponse.self, from: json(#"{"code":"success","dialog":{"full":3}}"#))
        }
        #expect(badDialog.map { JSONCoding.describe($0) }?.hasPrefix("dialog.full: expected a string") == true)
    }

    @Test("the standard response codes are SiriKit's")
    func standardCodes() {
        #expect(Set(ResponseCode.standard) == ["success", "failure", "continueInApp", "failureRequiringAppLaunch", "inProgress", "ready", "unspecified"])
    }
}

@Suite("Handshake and other protocol types")
struct HandshakeTypesTests {
    @Test("InitializeParams and InitializeResult coding")
    func initialize() throws {
        let params = InitializeParams(hostVersion: "0.1.0", mode: .inApp, intent: "MakeUppercase")
        let value = try JSONCoding.value(of: params)
        #expect(value == ["protocolVersion": 1, "hostVersion": "0.1.0", "mode": "in-app", "intent": "MakeUppercase"])
        #expect(try JSONCoding.decode(InitializeParams.self, from: value) == params)

        let result = InitializeResult(plugin: PluginIdentity(id: "com.example.x", version: "1.0"), intents: ["A", "B"])
        let resultValue = try JSONCoding.value(of: result)
        #expect(resultValue == ["protocolVersion": 1, "plugin": ["id": "com.example.x", "version": "1.0"], "intents": ["A", "B"]])
        #expect(try JSONCoding.decode(InitializeResult.self, from: resultValue) == result)
    }

    @Test("modes are spelled extension and in-app")
    func modes() throws {
        #expect(Mode(rawValue: "in-app") == .inApp)
        #expect(Mode(rawValue: "inApp") == nil)
        #expect(Mode.allCases.map(\.rawValue) == ["extension", "in-app"])
        #expect(throws: DecodingError.self) { try JSONCoding.decode(Mode.self, from: "app") }
    }

    @Test("the protocol channels are fds 3 and 4")
    func channels() {
        #expect(ProtocolChannels.hostToPlugin == 3)
        #expect(ProtocolChannels.pluginToHost == 4)
        #expect(ProtocolVersion.current == 1)
    }
}
