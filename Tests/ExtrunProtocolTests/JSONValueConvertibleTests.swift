import ExtrunProtocol
import Foundation
import Testing

/// The protocol's types convert to and from `JSONValue` by hand (no Codable on the
/// wire's hot path); their `Codable` conformance goes through that conversion. These
/// tests hold the two ways in: through `JSONEncoder`/`JSONDecoder` (a `Codable` parent,
/// a plugin author's coder) the same JSON out, the same values in, the same error text.
@Suite("Hand-written JSON conversions and their Codable conformance agree")
struct JSONValueConvertibleTests {
    /// Codable's encoding, without the fast path (`JSONCoding.value(of:)` takes the hand-written one).
    static func codableValue(_ value: some Encodable) throws -> JSONValue {
        try JSONParser.parse(JSONCoding.encoder().encode(value))
    }

    /// Codable's decoding, without the fast path.
    static func codableDecode<T: Decodable>(_ type: T.Type, _ value: JSONValue) throws -> T {
        try JSONCoding.decoder().decode(type, from: Data(JSONWriter.bytes(value)))
    }

    static func check<T: Codable & JSONValueConvertible & Equatable>(_ value: T) throws {
        let byHand = value.jsonValue
        #expect(byHand == (try codableValue(value)), "\(T.self): \(value)")
        #expect(try T(jsonValue: byHand) == value)
        #expect(try codableDecode(T.self, byHand) == value)
        #expect(try JSONCoding.decode(T.self, from: byHand) == value)
        #expect(try JSONCoding.value(of: value) == byHand)
    }

    /// The same input refused both ways, with the same text from `JSONCoding.describe`.
    static func checkRefused<T: Decodable & JSONValueConvertible>(_ type: T.Type, _ text: String) throws {
        let value = try JSONParser.parse(Data(text.utf8))
        var codable: String?
        do { _ = try codableDecode(type, value) } catch { codable = JSONCoding.describe(error) }
        var byHand: String?
        do { _ = try T(jsonValue: value) } catch { byHand = JSONCoding.describe(error) }
        let expected = try #require(codable, "Codable accepted \(text) as \(T.self)")
        let got = try #require(byHand, "the hand-written conversion accepted \(text) as \(T.self)")
        // The field path and the kind of problem are what people read; Foundation's own detail may differ.
        #expect(got.split(separator: ";").first == expected.split(separator: ";").first, "\(T.self) \(text): \(got) vs \(expected)")
    }

    static let values: [JSONValue] = [
        .null, true, 0, -7, .int(Int64.max), 0.5, -1e300, "", "naïve ✓ \u{1F600}", "line\nbreak \"quoted\" \\ /",
        [1, "two", [3.25], ["k": nil]], ["a": ["b": ["c": [true, false]]], "empty": [:], "list": []],
    ]

    @Test("requests' parameters")
    func requests() throws {
        for mode in Mode.allCases {
            try Self.check(InitializeParams(hostVersion: "0.1.0", mode: mode, intent: "MakeUppercase"))
            try Self.check(InitializeParams(protocolVersion: 2, hostVersion: "x", mode: mode, intent: nil))
        }
        for value in Self.values {
            try Self.check(ResolveParams(intent: "I", parameter: "p", parameters: ["p": value, "other": "x"]))
            try Self.check(IntentParams(intent: "I", parameters: ["p": value]))
        }
        try Self.check(IntentParams(intent: "I", parameters: [:]))
        try Self.check(LogParams(level: "info", message: "hello ✓"))
        try Self.check(ProgressParams(fraction: 0.25, message: "a quarter"))
        try Self.check(ProgressParams())
        try Self.check(CancelParams(reason: "timeout"))
    }

    @Test("answers")
    func answers() throws {
        let identity = PluginIdentity(id: "com.example.x", version: "1.2.3")
        try Self.check(identity)
        for reusable in [nil, true, false] as [Bool?] {
            for session in [nil, true, false] as [Bool?] {
                try Self.check(InitializeResult(plugin: identity, intents: ["A", "B"], reusable: reusable, session: session))
            }
        }
        try Self.check(InitializeResult(protocolVersion: 1, plugin: identity, intents: []))
        var results: [ResolutionResult] = [
            .needsValue(prompt: nil), .needsValue(prompt: "Which?"), .disambiguation(options: Self.values, prompt: nil),
            .disambiguation(options: [], prompt: "Pick"), .unsupported(reason: nil, message: nil), .unsupported(reason: "empty", message: "Enter text"),
            .notRequired,
        ]
        for value in Self.values where value != .null {
            results += [.success(value), .confirmationRequired(value, prompt: nil), .confirmationRequired(value, prompt: "Sure?")]
        }
        for result in results { try Self.check(result) }
        try Self.check(ResolutionResult.success(.null))
        let activity = UserActivity(activityType: "com.example.open", title: "Open", userInfo: ["id": 7, "nested": ["x": [1, 2]]])
        let responses = [
            IntentResponse(code: "success"), IntentResponse(code: "failure", properties: ["why": "no"]),
            IntentResponse(
                code: "inProgress", properties: ["count": 2, "text": "HI"], dialog: Dialog(full: "Working.", supporting: "2 of 4"),
                userActivity: activity, progress: 0.5),
            IntentResponse(code: "continueInApp", dialog: Dialog(full: "Open the app"), userActivity: UserActivity(activityType: "t")),
            IntentResponse(code: "custom", dialog: Dialog()),
        ]
        for response in responses { try Self.check(response) }
        try Self.check(Dialog(supporting: "only this"))
        try Self.check(activity)
    }

    @Test("what Codable accepts, the hand-written way accepts alike (integers as doubles, null as absent)")
    func lenientInput() throws {
        for text in [#"{"code":"success","progress":1}"#, #"{"code":"x","properties":null,"dialog":null}"#, #"{"code":"x","dialog":{"full":null}}"#] {
            let value = try JSONParser.parse(Data(text.utf8))
            #expect(try IntentResponse(jsonValue: value) == (try Self.codableDecode(IntentResponse.self, value)))
        }
        for text in [#"{"result":"success"}"#, #"{"result":"success","value":null}"#, #"{"result":"needsValue","prompt":null}"#] {
            let value = try JSONParser.parse(Data(text.utf8))
            #expect(try ResolutionResult(jsonValue: value) == (try Self.codableDecode(ResolutionResult.self, value)))
        }
        let handshake = try JSONParser.parse(Data(#"{"protocolVersion":1,"plugin":{"id":"a","version":"1"},"intents":["I"],"reusable":null}"#.utf8))
        #expect(try InitializeResult(jsonValue: handshake) == (try Self.codableDecode(InitializeResult.self, handshake)))
    }

    @Test("bad input is refused both ways, naming the same field", arguments: [
        #"{"properties":{}}"#, #"{"code":3}"#, #"{"code":"x","properties":[1]}"#, #"{"code":"x","dialog":{"full":3}}"#,
        #"{"code":"x","userActivity":{"title":"t"}}"#, #"{"code":"x","progress":"half"}"#, #"[1]"#, #"null"#, #"{"code":null}"#,
    ])
    func refusedResponses(text: String) throws {
        try Self.checkRefused(IntentResponse.self, text)
    }

    @Test("bad resolutions and handshakes are refused both ways", arguments: [
        #"{"value":1}"#, #"{"result":"maybe"}"#, #"{"result":"disambiguation"}"#, #"{"result":"needsValue","prompt":5}"#, #""success""#,
    ])
    func refusedResolutions(text: String) throws {
        try Self.checkRefused(ResolutionResult.self, text)
    }

    @Test("bad handshakes are refused both ways", arguments: [
        #"{"protocolVersion":1,"intents":["Echo"]}"#, #"{"protocolVersion":"1","plugin":{"id":"a","version":"1"},"intents":[]}"#,
        #"{"protocolVersion":1,"plugin":{"id":"a"},"intents":[]}"#, #"{"protocolVersion":1,"plugin":{"id":"a","version":"1"},"intents":["A",2]}"#,
        #"{"protocolVersion":1,"plugin":{"id":"a","version":"1"},"intents":[],"reusable":"yes"}"#,
    ])
    func refusedHandshakes(text: String) throws {
        try Self.checkRefused(InitializeResult.self, text)
    }

    @Test("inside a Codable parent, a protocol type's error names the whole path")
    func nestedPath() throws {
        let value = try JSONParser.parse(Data(#"{"intent":"I","parameters":{},"response":{"code":3}}"#.utf8))
        let error = #expect(throws: DecodingError.self) { try Self.codableDecode(Interaction.self, value) }
        #expect(error.map { JSONCoding.describe($0) }?.hasPrefix("response.code: expected a string") == true)
    }

    @Test("a fraction where an integer belongs names the field (Foundation's Codable says only that the data is not valid JSON)")
    func fractionForInteger() throws {
        let value = try JSONParser.parse(Data(#"{"protocolVersion":1.5,"plugin":{"id":"a","version":"1"},"intents":[]}"#.utf8))
        let error = #expect(throws: DecodingError.self) { try InitializeResult(jsonValue: value) }
        #expect(error.map { JSONCoding.describe($0) }?.hasPrefix("protocolVersion: expected an integer") == true)
    }

    @Test("bad request parameters are refused both ways", arguments: [
        #"{"hostVersion":"x","mode":"extension"}"#, #"{"protocolVersion":1,"hostVersion":"x","mode":"sideways"}"#,
        #"{"protocolVersion":1,"hostVersion":"x","mode":"extension","intent":7}"#,
    ])
    func refusedInitializeParams(text: String) throws {
        try Self.checkRefused(InitializeParams.self, text)
    }

    @Test("session requests and answers round-trip; a malformed one names its field")
    func sessions() throws {
        let params = SessionParams(
            intent: "Echo", parameters: ["text": "hi", "n": 2],
            resolve: [
                SessionParameter(parameter: "text", required: true), SessionParameter(parameter: "n"),
                SessionParameter(parameter: "shout", parent: ParentCondition(parameter: "loud", value: true)),
            ], handle: false)
        #expect(try SessionParams(jsonValue: params.jsonValue) == params)
        #expect(params.jsonValue["pollAfterUs"] == nil)
        var polling = params
        polling.pollAfterUs = 200
        #expect(polling.jsonValue["pollAfterUs"] == 200)
        #expect(try SessionParams(jsonValue: polling.jsonValue) == polling)
        var wrong = polling.jsonValue.objectValue ?? [:]
        wrong["pollAfterUs"] = "soon"
        #expect(throws: (any Error).self) { try SessionParams(jsonValue: .object(wrong)) }
        let result = SessionResult(
            resolutions: [
                SessionResolution(parameter: "text", result: .success("hi")), SessionResolution(parameter: "n", result: .notRequired),
            ], confirm: IntentResponse(code: "ready"), handle: IntentResponse(code: "success", properties: ["echo": "hi"]))
        #expect(try SessionResult(jsonValue: result.jsonValue) == result)
        #expect(try SessionResult(jsonValue: SessionResult().jsonValue) == SessionResult())
        func refused(_ text: String) -> String? {
            do {
                _ = try SessionResult(jsonValue: try JSONParser.parse(Data(text.utf8)))
                return nil
            } catch {
                return JSONCoding.describe(error)
            }
        }
        #expect(refused(#"{}"#) == "missing required field 'resolutions'")
        #expect(refused(#"{"resolutions":[{"parameter":"p"}]}"#) == "resolutions[0]: missing required field 'result'")
        #expect(refused(#"{"resolutions":[{"parameter":"p","result":{"result":"maybe"}}]}"#)?.hasPrefix("resolutions[0].result.result: unknown resolution result 'maybe'") == true)
        #expect(refused(#"{"resolutions":[],"confirm":{"code":1}}"#)?.hasPrefix("confirm.code: expected a string") == true)
    }

    @Test("the rule a session follows: go on after success or notRequired, unless a required parameter is left without a value")
    func sessionRule() {
        let required = SessionParameter(parameter: "p", required: true)
        let optional = SessionParameter(parameter: "p")
        #expect(required.goesOn(after: .success("x"), values: ["p": "x"]))
        #expect(!required.goesOn(after: .success(.null), values: [:]))
        #expect(optional.goesOn(after: .success(.null), values: [:]))
        #expect(optional.goesOn(after: .notRequired, values: [:]))
        #expect(!required.goesOn(after: .notRequired, values: [:]))
        for stop: ResolutionResult in [.needsValue(prompt: nil), .disambiguation(options: [], prompt: nil), .confirmationRequired("x", prompt: nil), .unsupported(reason: nil, message: nil)] {
            #expect(!optional.goesOn(after: stop, values: ["p": "x"]))
        }
        var values: [String: JSONValue] = ["p": "old", "q": 1]
        SessionParameter.apply(.success("new"), to: "p", values: &values)
        #expect(values == ["p": "new", "q": 1])
        SessionParameter.apply(.success(.null), to: "p", values: &values)
        #expect(values == ["q": 1])
        SessionParameter.apply(.notRequired, to: "q", values: &values)
        #expect(values == ["q": 1])
        let child = SessionParameter(parameter: "c", parent: ParentCondition(parameter: "q", value: 1))
        #expect(child.isShown(given: ["q": 1]) && !child.isShown(given: ["q": 2]) && !child.isShown(given: [:]))
    }
}

@Suite("ISO 8601 dates read without a format style")
struct ISODateFastPathTests {
    @Test("YYYY-MM-DDTHH:MM:SSZ reads as Foundation's ISO 8601 format style reads it")
    func sameAsFormatStyle() throws {
        var texts = ["1970-01-01T00:00:00Z", "2000-02-29T23:59:59Z", "1900-03-01T12:00:00Z", "2026-11-25T02:13:19Z", "0001-01-01T00:00:00Z",
                     "2400-02-29T01:02:03Z", "9999-12-31T23:59:59Z"]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<500 {
            let date = Date(timeIntervalSince1970: TimeInterval(Int64.random(in: -2_000_000_000...8_000_000_000, using: &generator)))
            texts.append(ISODate.format(date))
        }
        for text in texts {
            let expected = try Date(text, strategy: Date.ISO8601FormatStyle())
            #expect(ISODate.parse(text) == expected, "\(text)")
        }
    }

    @Test("format writes what Foundation's ISO 8601 format style writes")
    func formatSameAsFormatStyle() {
        var generator = SystemRandomNumberGenerator()
        var dates = [Date(timeIntervalSince1970: 0), Date(timeIntervalSince1970: -1), Date(timeIntervalSince1970: 951_782_399.75),
                     Date(timeIntervalSince1970: -12_212_553_600), Date(timeIntervalSince1970: -12_212_553_601), Date(timeIntervalSince1970: 253_402_300_799)]
        for _ in 0..<500 {
            dates.append(Date(timeIntervalSince1970: Double.random(in: -13_000_000_000...260_000_000_000, using: &generator)))
        }
        for date in dates {
            #expect(ISODate.format(date) == date.formatted(Date.ISO8601FormatStyle()), "\(date.timeIntervalSince1970)")
        }
    }

    @Test("out-of-range fields and early years are read as the format style reads them (it rolls them over)", arguments: [
        "2026-02-29T00:00:00Z", "2026-13-01T00:00:00Z", "2026-00-10T00:00:00Z", "2026-04-31T00:00:00Z", "2026-01-01T24:00:00Z",
        "2026-01-01T00:60:00Z", "2026-01-01T00:00:60Z", "2026-01-0xT00:00:00Z", "1900-02-29T00:00:00Z", "1582-10-10T00:00:00Z",
    ])
    func invalid(text: String) {
        #expect(ISODate.parse(text) == (try? Date(text, strategy: Date.ISO8601FormatStyle())), "\(text)")
    }
}

@Suite("Pretty JSON without Codable")
struct PrettyJSONTests {
    static func foundation(_ value: JSONValue) throws -> String {
        String(decoding: try JSONCoding.encoder(pretty: true).encode(value), as: UTF8.self)
    }

    static func random(_ depth: Int, _ generator: inout some RandomNumberGenerator) -> JSONValue {
        let scalars: [JSONValue] = [
            .null, true, false, 0, -1, .int(Int64.max), .int(Int64.min), 0.5, 1.0, -0.0, 1e-7, 5e20, 123456789.123, 1.7976931348623157e308,
            .double(.leastNonzeroMagnitude), 100.0, .double(0.1 + 0.2), "", "a/b", "é ✓ \u{1F600}", "quote \" backslash \\ nl \n tab \t cr \r bs \u{8} ff \u{C} nul \u{0} del \u{7F} \u{1F} \u{2028}",
        ]
        if depth == 0 || Int.random(in: 0..<3, using: &generator) == 0 {
            return scalars[Int.random(in: 0..<scalars.count, using: &generator)]
        }
        let count = Int.random(in: 0..<4, using: &generator)
        if Bool.random(using: &generator) {
            return .array((0..<count).map { _ in random(depth - 1, &generator) })
        }
        var object: [String: JSONValue] = [:]
        for i in 0..<count { object[["b", "a", "é", "A", "key \(i)", "_", "1"][Int.random(in: 0..<7, using: &generator)] + "\(i)"] = random(depth - 1, &generator) }
        return .object(object)
    }

    @Test("the same text as JSONEncoder's pretty printing, over many random values")
    func sameAsFoundation() throws {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<2000 {
            let value = Self.random(4, &generator)
            let ours = String(decoding: JSONWriter.prettyBytes(value), as: UTF8.self)
            let theirs = try Self.foundation(value)
            #expect(ours == theirs, "\(value)")
            if ours != theirs { return }
        }
    }
}
