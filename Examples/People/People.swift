import ExtrunSDK
import Foundation

// People: a directory. intents.json declares the plugin, the Person type and
// the GetPeople and ViewPerson intents; the IntentGenerator plugin generates
// Person, GetPeopleIntent, ViewPersonIntent, their responses and handler
// protocols, and PluginMain from it.

enum Directory {
    static let people: [Person] = [
        Person(identifier: "anne", name: "Anne Johnson", job: "Engineer", email: "anne@example.com"),
        Person(identifier: "bruno", name: "Bruno Costa", job: "Designer", email: "bruno@example.com"),
        Person(identifier: "chen", name: "Chen Wei", job: "Engineer", email: "chen@example.com"),
        Person(identifier: "dana", name: "Dana Smith", job: "Product Manager", email: "dana@example.com"),
    ]

    static var jobs: [String] { Array(Set(people.compactMap(\.job))).sorted() }

    static func person(identifier: String) -> Person? {
        people.first { $0.identifier == identifier }
    }

    /// The people whose name contains `text` (any case).
    static func people(matching text: String) -> [Person] {
        let needle = text.trimmingCharacters(in: .whitespaces)
        guard !needle.isEmpty else { return people }
        return people.filter { ($0.name ?? "").localizedCaseInsensitiveContains(needle) }
    }
}

struct GetPeopleHandler: GetPeopleHandling {
    func provideJobOptions(for intent: GetPeopleIntent, search: String?, context: IntentContext) async throws -> [String] {
        let needle = search?.trimmingCharacters(in: .whitespaces) ?? ""
        return Directory.jobs.filter { needle.isEmpty || $0.localizedCaseInsensitiveContains(needle) }
    }

    func handle(intent: GetPeopleIntent, context: IntentContext) async throws -> GetPeopleResponse {
        var people = Directory.people
        if let job = intent.job {
            people = people.filter { $0.job?.caseInsensitiveCompare(job) == .orderedSame }
            if people.isEmpty { return .nobody(job: job) }
        }
        return .success(people: people, count: people.count)
    }
}

struct ViewPersonHandler: ViewPersonHandling {
    /// A person of the directory: by identifier, or by (part of) their name.
    func resolvePerson(for intent: ViewPersonIntent, context: IntentContext) async throws -> ViewPersonIntent.PersonResolution {
        guard let person = intent.person else { return .needsValue }
        if let known = Directory.person(identifier: person.identifier) { return .success(known) }
        let matches = Directory.people(matching: person.name ?? person.title ?? person.identifier)
        switch matches.count {
        case 0: return .unsupported(.notFound)
        case 1: return .success(matches[0])
        default: return .disambiguation(matches, prompt: "Which one?")
        }
    }

    func providePersonOptions(for intent: ViewPersonIntent, search: String?, context: IntentContext) async throws -> [Person] {
        Directory.people(matching: search ?? "")
    }

    /// The extension does not show people: it hands over to the app, with the person
    /// and the note in the user activity (as an extension answers `continueInApp`).
    /// In in-app mode (`--mode in-app`), it shows them itself.
    func handle(intent: ViewPersonIntent, context: IntentContext) async throws -> ViewPersonResponse {
        guard let person = intent.person.flatMap({ Directory.person(identifier: $0.identifier) }) else {
            return .failure("There is nobody by that name in People.")
        }
        if context.mode == .extension {
            var userInfo: [String: JSONValue] = ["person": .string(person.identifier)]
            if let note = intent.note { userInfo["note"] = .string(note) }
            let activity = UserActivity(activityType: ViewPersonActivity.activityType, title: person.name, userInfo: userInfo)
            return .continueInApp(userActivity: activity, dialog: Dialog(full: "Opening \(person.name ?? person.identifier) in People."))
        }
        return ViewPersonActivity.details(of: person, note: intent.note)
    }
}

/// The app's side: shows the person of a `com.example.people.viewPerson` activity,
/// whether the extension handed it over or `extrun continue` brought it.
struct ViewPersonActivity: ActivityHandler {
    static let activityType = "com.example.people.viewPerson"

    func continueActivity(_ activity: UserActivity, interaction: Interaction?, context: IntentContext) async throws -> IntentResponse {
        guard let identifier = activity.userInfo?["person"]?.stringValue, let person = Directory.person(identifier: identifier) else {
            return ViewPersonResponse.failure("There is nobody by that name in People.").intentResponse
        }
        return Self.details(of: person, note: activity.userInfo?["note"]?.stringValue).intentResponse
    }

    static func details(of person: Person, note: String?) -> ViewPersonResponse {
        let display = person.displayRepresentation
        var details = "\(display.title), \(display.subtitle ?? "no job"), \(person.email ?? "no email")."
        if let note, !note.isEmpty { details += " Note: \(note)" }
        return .success(person: person, details: details)
    }
}

@main
struct PeopleMain {
    static func main() async {
        await PluginMain.run(getPeople: GetPeopleHandler(), viewPerson: ViewPersonHandler(), activities: [ViewPersonActivity()])
    }
}
