import ArgumentParser
import ExtrunHost
import ExtrunProtocol
import ExtrunStore
import Foundation

struct DonationsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "donations",
        abstract: "List and delete donated interactions.",
        discussion: """
            After a successful `extrun handle`, the interaction (intent, parameters, \
            response, id, groupIdentifier, time) is donated to the plugin owner's donation \
            log, sealed with the owner's key; plugins donate related intents through the \
            SDK. An app removes donations that no longer make sense (an order cancelled, a \
            soup off the menu): by id, by group, or all. An owner deletes only its own \
            donations: deleting another owner's is refused (exit status 14, notYours). \
            docs/store.md, "Donations".
            """,
        subcommands: [DonationsList.self, DonationsDelete.self],
        defaultSubcommand: DonationsList.self)
}

struct DonationsList: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List donations, oldest first (all owners unless --owner).")
    @Option(help: ArgumentHelp("Only this owner's donations.", valueName: "owner")) var owner: String?
    @Option(help: ArgumentHelp("Only donations of this intent.", valueName: "intent")) var intent: String?
    @Option(help: "Output format: text or json.") var format: OutputFormat = .text

    func run() throws {
        try StoreExit.run { store in
            let donations = try owner.map { try store.donations(of: $0).list(intent: intent) } ?? store.allDonations(intent: intent)
            if format == .json { return Output.printJSON(.array(donations.map(\.json))) }
            if donations.isEmpty { Output.printLine("No donations\(owner.map { " of \($0)" } ?? "")\(intent.map { " for \($0)" } ?? "").") }
            for donation in donations {
                var line = "\(donation.created)  \(donation.owner)  \(donation.intent)  \(donation.identifier)"
                if let group = donation.groupIdentifier { line += "  group \(group)" }
                if let code = donation.response?.code { line += "  → \(code)" }
                line += "  (\(donation.source == "plugin" ? "donated by \(donation.plugin)" : "handled by \(donation.plugin)"))"
                Output.printLine(line)
            }
        }
    }
}

struct DonationsDelete: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "delete",
        abstract: "Delete an owner's donations: one (--id), a group (--group) or all (--all).",
        discussion: "Prints {\"deleted\": N}. Exit status 2 when --id names nothing; 14 (notYours) when it names another owner's donation.")
    @OptionGroup var owner: OwnerOption
    @Option(help: ArgumentHelp("The donation's identifier (the intent file's id, or the one `handle` printed).", valueName: "id")) var id: String?
    @Option(help: ArgumentHelp("Every donation with this groupIdentifier.", valueName: "group")) var group: String?
    @Flag(help: "Every donation of the owner.") var all = false

    func validate() throws {
        let chosen = [id != nil, group != nil, all].filter { $0 }.count
        if chosen != 1 { throw ValidationError("give exactly one of --id ID, --group GROUP, --all") }
    }

    func run() throws {
        try StoreExit.run { store in
            let donations = try store.donations(of: owner.owner)
            let deleted: Int
            if let id {
                guard try donations.delete(identifier: id) else {
                    throw StoreError(.notFound, "owner '\(owner.owner)' has no donation '\(id)'", details: ["owner": .string(owner.owner), "identifier": .string(id)])
                }
                deleted = 1
            } else if let group {
                deleted = try donations.delete(group: group)
            } else {
                deleted = try donations.deleteAll()
            }
            Output.printJSON(.object(["deleted": .int(Int64(deleted))]))
        }
    }
}
