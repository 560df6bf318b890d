import ExtrunProtocol
import Foundation
import Testing

/// Manifests are read by hand (`PluginManifest(jsonValue:)`, no Codable on the cold
/// path); the Codable conformance stays. These tests hold the two to each other.
@Suite("Manifests read without Codable agree with Codable")
struct ManifestDecodingTests {
    static func codable(_ data: Data) throws -> PluginManifest {
        try JSONCoding.decoder().decode(PluginManifest.self, from: data)
    }

    /// Every manifest of the examples, and the generated ones of the staged plugins when the suite has them.
    static func manifests() throws -> [URL] {
        var urls: [URL] = []
        let examples = URL(fileURLWithPath: "Examples")
        for name in try FileManager.default.contentsOfDirectory(atPath: examples.path) {
            let url = examples.appendingPathComponent(name).appendingPathComponent("manifest.json")
            if FileManager.default.fileExists(atPath: url.path) { urls.append(url) }
        }
        if let staged = ProcessInfo.processInfo.environment["EXTRUN_TEST_PLUGINS"],
            let names = try? FileManager.default.contentsOfDirectory(atPath: staged)
        {
            for name in names {
                let url = URL(fileURLWithPath: staged).appendingPathComponent(name).appendingPathComponent("manifest.json")
                if FileManager.default.fileExists(atPath: url.path) { urls.append(url) }
            }
        }
        return urls
    }

    @Test("the examples' manifests read the same both ways")
    func examples() throws {
        let urls = try Self.manifests()
        #expect(urls.count >= 5, "\(urls)")
        for url in urls {
            let data = try Data(contentsOf: url)
            #expect(try PluginManifest(json: data) == (try Self.codable(data)), "\(url.path)")
        }
    }

    static let full = #"""
        {"id":"com.example.all","version":"2.0","owner":"TEAM","protocolVersion":1,"executable":"bin/x","arguments":["-v","--x"],
         "modes":["in-app"],"appName":"All","activityTypes":["com.example.open"],"retryInAppOnMemoryLimit":true,
         "limits":{"extension":{"memoryBytes":62914560,"deadlineMs":20000},"in-app":{"deadlineMs":9000}},
         "types":[{"name":"Soup","properties":[{"name":"price","type":"number"},{"name":"tags","type":"string","multiple":true},
                   {"name":"other","type":"custom","customType":"Soup"}],"display":{"title":"${name}","subtitle":"${price}","image":"soup.png"}},
                  {"name":"Empty","properties":[]}],
         "intents":[{"name":"Order","title":"Order","description":"d","runsInBackground":true,"phrases":["Order ${soup} in All"],
                     "confirmation":"Order ${soup}?",
                     "parameters":[{"name":"soup","type":"custom","customType":"Soup","required":true,"dynamicOptions":true,"prompt":"Which?"},
                                   {"name":"size","type":"enum","values":["s","l"],"valueTitles":{"s":"Small","l":"Large"},"default":"s"},
                                   {"name":"note","type":"string","parent":{"parameter":"size","value":"l"},"confirmationPrompt":"Sure?",
                                    "unsupportedReasons":[{"code":"empty","message":"Say something"}]},
                                   {"name":"photo","type":"file","allowedTypes":["public.jpeg"],"multiple":true},
                                   {"name":"when","type":"date","default":null}],
                     "responses":[{"code":"soldOut","dialog":"Sorry","properties":["soup"]},{"code":"done","success":true}],
                     "outputs":[{"name":"soup","type":"custom","customType":"Soup","title":"Soup"},
                                {"name":"size","type":"enum","values":["s","l"],"valueTitles":{"s":"Small"},"multiple":true,"description":"d"}]},
                    {"name":"Bare"}]}
        """#

    @Test("every field, default and null reads the same both ways")
    func everyField() throws {
        let data = Data(Self.full.utf8)
        let byHand = try PluginManifest(json: data)
        #expect(byHand == (try Self.codable(data)))
        #expect(byHand.intents[0].parameters[1].valueTitles == ["s": "Small", "l": "Large"])
        #expect(byHand.limits?.inApp?.deadlineMs == 9000 && byHand.limits?.extension?.memoryBytes == 62_914_560)
        #expect(byHand.intents[0].outputs.map(\.name) == ["soup", "size"] && byHand.intents[0].outputs[1].multiple)
        #expect(byHand.intents[1].outputs.isEmpty)
        // Written back, an intent without outputs has no `outputs` field (manifests before typed outputs stay as they were).
        let written = String(decoding: try JSONCoding.encoder().encode(byHand), as: UTF8.self)
        #expect(written.components(separatedBy: "\"outputs\"").count == 2)
        #expect(try Self.codable(try JSONCoding.encoder().encode(byHand)) == byHand)
        let minimal = Data(#"{"id":"a","version":"1","owner":"o","protocolVersion":1,"executable":"x","intents":[]}"#.utf8)
        #expect(try PluginManifest(json: minimal) == (try Self.codable(minimal)))
        #expect(try PluginManifest(json: minimal).modes == [.extension, .inApp])
    }

    /// The full manifest with the field at `path` (keys and indexes, dot-separated) set to
    /// the JSON text `replacement`, or removed when it is nil.
    static func replacing(_ path: String, with replacement: String?) throws -> Data {
        let value = try replacement.map { try JSONSerialization.jsonObject(with: Data($0.utf8), options: .fragmentsAllowed) }
        func replace(_ node: Any, _ path: ArraySlice<Substring>) -> Any {
            guard let head = path.first else { return value ?? NSNull() }
            if var array = node as? [Any], let index = Int(head) {
                array[index] = replace(array[index], path.dropFirst())
                return array
            }
            var object = node as? [String: Any] ?? [:]
            if path.count == 1 && value == nil {
                object[String(head)] = nil
            } else {
                object[String(head)] = replace(object[String(head)] ?? [String: Any](), path.dropFirst())
            }
            return object
        }
        let root = replace(try JSONSerialization.jsonObject(with: Data(full.utf8)), path.split(separator: ".")[...])
        return try JSONSerialization.data(withJSONObject: root)
    }

    @Test("a field missing or of the wrong type is refused both ways, naming the same field", arguments: [
        ("id", nil), ("id", "3"), ("protocolVersion", #""1""#), ("arguments", #""x""#), ("arguments.1", "2"), ("modes.0", #""sideways""#),
        ("modes", #""in-app""#), ("intents", nil), ("intents.0.name", nil), ("intents.0.parameters.0.type", #""text""#),
        ("intents.0.parameters.1.valueTitles.s", "1"), ("intents.0.parameters.2.parent.parameter", nil),
        ("intents.0.parameters.2.unsupportedReasons.0.message", nil), ("intents.0.responses.0.success", #""yes""#),
        ("intents.0.phrases", "[1]"), ("limits.extension.memoryBytes", #""big""#), ("limits.in-app", "5"),
        ("types.0.properties.1.type", nil), ("types.0.display.title", nil), ("types.1.properties", nil),
        ("retryInAppOnMemoryLimit", "1"), ("intents.0.runsInBackground", #""no""#), ("appName", "false"), ("intents.0.parameters", "{}"),
    ] as [(String, String?)])
    func refused(path: String, replacement: String?) throws {
        let data = try Self.replacing(path, with: replacement)
        var codable: String?
        do { _ = try Self.codable(data) } catch { codable = JSONCoding.describe(error) }
        var byHand: String?
        do { _ = try PluginManifest(json: data) } catch { byHand = JSONCoding.describe(error) }
        let expected = try #require(codable, "Codable accepted \(path) = \(replacement ?? "(removed)")")
        let got = try #require(byHand, "the hand-written reading accepted \(path) = \(replacement ?? "(removed)")")
        #expect(got.split(separator: ";").first == expected.split(separator: ";").first, "\(path): \(got) vs \(expected)")
    }
}
