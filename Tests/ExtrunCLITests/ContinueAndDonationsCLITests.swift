import ExtrunProtocol
import Foundation
import Testing

/// `extrun handle` escalating with the real example plugins, `extrun continue`
/// and `extrun donations`, as a person or a program runs them.
@Suite("extrun CLI: continue in app and donations")
struct ContinueAndDonationsCLITests {
    let cli: CLI

    init() throws {
        cli = try CLI()
    }

    @Test("handle: People's ViewPerson hands over to the app, which shows the person with the note; steps show both runs")
    func viewPersonContinuesInApp() throws {
        let result = try cli.run(["handle", "Examples/intents/view-person.json"])
        #expect(result.status == 0, "\(result)")
        let json = try result.json()
        #expect(json["mode"] == "in-app")
        #expect(json["response"]?["code"] == "success")
        #expect(json["response"]?["properties"]?["details"] == "Anne Johnson, Engineer, anne@example.com. Note: Ask about the launch.")
        let steps = try #require(json["steps"]?.arrayValue)
        #expect(steps.count == 2)
        #expect(steps.first?["mode"] == "extension")
        #expect(steps.first?["response"]?["code"] == "continueInApp")
        #expect(steps.first?["response"]?["userActivity"]?["activityType"] == "com.example.people.viewPerson")
        #expect(steps.first?["response"]?["userActivity"]?["userInfo"]?["note"] == "Ask about the launch.")
        #expect(steps.last?["mode"] == "in-app")
        #expect(steps.last?["reason"] == "the extension answered continueInApp")
        #expect(steps.last?["limits"]?["memoryBytes"] == json["limits"]?["memoryBytes"])
    }

    @Test("handle --no-app-launch: the extension's continueInApp, exit 1, and why the app was not launched")
    func noAppLaunch() throws {
        let result = try cli.run(["handle", "--no-app-launch", "Examples/intents/view-person.json"])
        #expect(result.status == 1, "\(result)")
        let json = try result.json()
        #expect(json["mode"] == "extension")
        #expect(json["response"]?["code"] == "continueInApp")
        #expect(json["appLaunch"] == "--no-app-launch: the run stopped after the extension")
        #expect(json["steps"] == nil)  // one process ran
        #expect(json["donation"] == nil)
    }

    @Test("handle: Indexer needs 100 MB, goes over the extension's cap, and succeeds in in-app mode")
    func indexerRetriesInApp() throws {
        let result = try cli.run(["handle", "Examples/intents/build-index-100mb.json"])
        #expect(result.status == 0, "\(result)")
        let json = try result.json()
        #expect(json["response"]?["properties"]?["mode"] == "in-app")
        #expect(json["response"]?["properties"]?["megabytes"] == 100)
        let steps = try #require(json["steps"]?.arrayValue)
        #expect(steps.count == 2)
        #expect(steps.first?["error"]?["kind"] == "memoryLimitExceeded")
        #expect(steps.first?["error"]?["limitBytes"] == 31_457_280)
        #expect(steps.last?["reason"]?.stringValue?.contains("retryInAppOnMemoryLimit") == true)

        let stopped = try cli.run(["handle", "--no-app-launch", "Examples/intents/build-index-100mb.json"])
        #expect(stopped.status == 9, "\(stopped)")
        #expect(try stopped.json()["error"]?["kind"] == "memoryLimitExceeded")
    }

    @Test("batch handles each intent as handle does: People's hand-over to the app, and a donation per success")
    func batchEscalatesAndDonates() throws {
        let result = try cli.run(["batch", "Examples/intents/view-person.json", "Examples/intents/make-uppercase.json", "Examples/intents/view-person.json"])
        #expect(result.status == 0, "\(result)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        try #require(lines.count == 3)
        for line in [lines[0], lines[2]] {
            let json = try JSONDecoder().decode(JSONValue.self, from: Data(line.utf8))
            #expect(json["mode"] == "in-app")
            #expect(json["steps"]?.arrayValue?.compactMap { $0["mode"]?.stringValue } == ["extension", "in-app"])
            #expect(json["response"]?["properties"]?["details"]?.stringValue?.hasSuffix("Note: Ask about the launch.") == true)
            #expect(json["donation"] == ["donated": true])
        }
        let listed = try cli.run(["donations", "list", "--format", "json"])
        let all = try JSONDecoder().decode(JSONValue.self, from: Data(listed.stdout.utf8)).arrayValue ?? []
        #expect(all.compactMap { $0["intent"]?.stringValue } == ["ViewPerson", "MakeUppercase", "ViewPerson"])
    }

    @Test("continue: the example activity goes to People in in-app mode; an undeclared type is noHandler (exit 5)")
    func continueActivity() throws {
        let result = try cli.run(["continue", "Examples/activities/view-person.json"])
        #expect(result.status == 0, "\(result)")
        let json = try result.json()
        #expect(json["plugin"] == "com.example.people")
        #expect(json["mode"] == "in-app")
        #expect(json["activity"]?["activityType"] == "com.example.people.viewPerson")
        #expect(json["response"]?["properties"]?["details"] == "Chen Wei, Engineer, chen@example.com. Note: Bring the design review notes.")

        let unknown = try cli.run(["continue", "-"], stdin: #"{"activityType": "com.example.nobody"}"#)
        #expect(unknown.status == 5, "\(unknown)")
        #expect(try unknown.json()["error"]?["message"]?.stringValue?.contains("no plugin continues the activity type 'com.example.nobody'") == true)

        let malformed = try cli.run(["continue", "-"], stdin: #"{"activityType": 3}"#)
        #expect(malformed.status == 4, "\(malformed)")
        #expect(try malformed.json()["error"]?["field"] == "activityType")
    }

    @Test("donations: successful runs are listed with their id and group; --no-donate skips; delete by id, group and all")
    func donationsListAndDelete() throws {
        let dir = try TempDirectory("donations")
        let first = try dir.write("a.json", #"{"intent": "MakeUppercase", "id": "up-1", "groupIdentifier": "shouting", "parameters": {"text": "a"}}"#)
        let second = try dir.write("b.json", #"{"intent": "MakeUppercase", "id": "up-2", "groupIdentifier": "shouting", "parameters": {"text": "b"}}"#)
        let third = try dir.write("c.json", #"{"intent": "GetPeople", "id": "people-1"}"#)
        let skipped = try dir.write("d.json", #"{"intent": "MakeUppercase", "id": "up-3", "parameters": {"text": "d"}}"#)
        for file in [first, second, third] {
            let result = try cli.run(["handle", file.path])
            #expect(result.status == 0, "\(result)")
            #expect(try result.json()["donation"] == ["donated": true])
        }
        let noDonate = try cli.run(["handle", "--no-donate", skipped.path])
        #expect(try noDonate.json()["donation"] == ["donated": false, "reason": "--no-donate"])

        let listed = try cli.run(["donations", "list", "--format", "json"])
        #expect(listed.status == 0, "\(listed)")
        let all = try JSONDecoder().decode(JSONValue.self, from: Data(listed.stdout.utf8)).arrayValue ?? []
        #expect(all.compactMap { $0["identifier"]?.stringValue } == ["up-1", "up-2", "people-1"])
        #expect(all.first?["owner"] == "EXAMPLETEAM")
        #expect(all.first?["groupIdentifier"] == "shouting")
        #expect(all.first?["parameters"]?["text"] == "a")
        #expect(all.first?["response"]?["properties"]?["result"] == "A")
        let byIntent = try cli.run(["donations", "list", "--owner", "EXAMPLETEAM", "--intent", "GetPeople"])
        #expect(byIntent.stdout.contains("people-1") && !byIntent.stdout.contains("up-1"), "\(byIntent)")

        let group = try cli.run(["donations", "delete", "--owner", "EXAMPLETEAM", "--group", "shouting"])
        #expect(group.status == 0, "\(group)")
        #expect(try group.json() == ["deleted": 2])
        let missing = try cli.run(["donations", "delete", "--owner", "EXAMPLETEAM", "--id", "up-1"])
        #expect(missing.status == 2, "\(missing)")
        let one = try cli.run(["donations", "delete", "--owner", "EXAMPLETEAM", "--id", "people-1"])
        #expect(try one.json() == ["deleted": 1])
        let none = try cli.run(["donations", "delete", "--owner", "EXAMPLETEAM", "--all"])
        #expect(try none.json() == ["deleted": 0])
        let usage = try cli.run(["donations", "delete", "--owner", "EXAMPLETEAM", "--id", "x", "--all"])
        #expect(usage.status == 64, "\(usage)")
        #expect(usage.stderr.contains("give exactly one of --id ID, --group GROUP, --all"), "\(usage)")
    }

    @Test("donations delete: another owner's donation is refused (exit 14, notYours) and stays")
    func anotherOwnersDonationIsRefused() throws {
        let result = try cli.run(["handle", "-"], stdin: #"{"intent": "MakeUppercase", "id": "theirs", "parameters": {"text": "x"}}"#)
        #expect(result.status == 0, "\(result)")
        let refused = try cli.run(["donations", "delete", "--owner", "INTRUDER", "--id", "theirs"])
        #expect(refused.status == 14, "\(refused)")
        #expect(refused.stderr.contains("notYours: donation 'theirs' belongs to owner 'EXAMPLETEAM', not to 'INTRUDER'"), "\(refused)")
        let still = try cli.run(["donations", "list", "--owner", "EXAMPLETEAM"])
        #expect(still.stdout.contains("theirs"), "\(still)")
    }
}
