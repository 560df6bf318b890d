import ExtrunProtocol
import Foundation
import Testing

/// The small helps of a first hour (issue 31): suggestions for mistyped subcommands and
/// intents, `--help` with USAGE first, a text summary of `continue` that names what ran,
/// and a dry run's summary that says what it would do.
@Suite struct CLIUsabilityTests {
    @Test("A mistyped subcommand gets a suggestion: handel, plugins instal (exit 64)")
    func mistypedSubcommandsAreSuggested() throws {
        let cli = try CLI()
        let handel = try cli.run(["handel", "Examples/intents/make-uppercase.json"])
        #expect(handel.status == 64, "\(handel)")
        #expect(handel.stderr.contains("Unknown command 'handel' for 'extrun'. Did you mean 'handle'?"), "\(handel)")
        let instal = try cli.run(["plugins", "instal", "/tmp/whisper"])
        #expect(instal.status == 64, "\(instal)")
        #expect(instal.stderr.contains("Unknown command 'instal' for 'extrun plugins'. Did you mean 'install'?"), "\(instal)")
        // An unknown word with nothing close: the commands, without a guess.
        let far = try cli.run(["frobnicate"])
        #expect(far.status == 64, "\(far)")
        #expect(far.stderr.contains("Unknown command 'frobnicate' for 'extrun'. Its commands: handle,"), "\(far)")
    }

    @Test("An unknown intent that differs in case or a letter suggests the known one")
    func unknownIntentIsSuggested() throws {
        let cli = try CLI()
        let result = try cli.run(["handle", "-"], stdin: #"{"intent": "MakeUpperCase", "parameters": {"text": "x"}}"#)
        #expect(result.status == 5, "\(result)")
        #expect(result.stdout.contains("no plugin handles the intent 'MakeUpperCase' (did you mean 'MakeUppercase'?)"), "\(result)")
    }

    @Test("Every command's --help starts with USAGE and its options; the explanation follows them")
    func helpStartsWithUsage() throws {
        let cli = try CLI()
        for arguments in [
            ["--help"], ["handle", "--help"], ["serve", "--help"], ["plugins", "check", "--help"], ["help", "batch"], ["migrate", "-h"],
        ] {
            let result = try cli.run(arguments)
            #expect(result.status == 0, "\(arguments): \(result)")
            #expect(result.stdout.hasPrefix("USAGE: extrun"), "\(arguments): \(result.stdout.prefix(300))")
            let usage = result.stdout.range(of: "OPTIONS:")?.lowerBound
            let overview = result.stdout.range(of: "OVERVIEW:")?.lowerBound
            if let usage, let overview { #expect(usage < overview, "\(arguments)") }
        }
        let handle = try cli.run(["handle", "--help"])
        #expect(handle.stdout.contains("Exit status: 0 the plugin answered success"), "the explanation is still there, after the options")
    }

    @Test("continue --format text names the activity before the plugin")
    func continueTextNamesTheActivity() throws {
        let cli = try CLI()
        let result = try cli.run(["continue", "--format", "text", "Examples/activities/view-person.json"])
        #expect(result.status == 0, "\(result)")
        #expect(result.stdout.hasPrefix("com.example.people.viewPerson by com.example.people (in-app): success"), "\(result)")
    }

    @Test("migrate --dry-run says what it would migrate (wouldMigrate), with no complete: nothing ran")
    func dryRunSaysWouldMigrate() throws {
        let cli = try CLI()
        #expect(try cli.run(["globals", "set", "greeting", #""hi""#, "--owner", "OLDTEAM"]).status == 0)
        let plan = try cli.run(["migrate", "--from", "OLDTEAM", "--to", "NEWTEAM", "--dry-run"])
        #expect(plan.status == 0, "\(plan)")
        let json = try plan.json()
        #expect(json["wouldMigrate"] == 1)
        #expect(json["migrated"] == nil)
        #expect(json["complete"] == nil)
        #expect(json["globals"]?["wouldMigrate"] == 1)
        #expect(json["clean"] == true)
        let done = try cli.run(["migrate", "--from", "OLDTEAM", "--to", "NEWTEAM"])
        #expect(done.status == 0, "\(done)")
        #expect(try done.json()["migrated"] == 1)
        #expect(try done.json()["complete"] == true)
    }
}
