import ExtrunProtocol
import ExtrunStore
import Foundation

/// The donation of a successful run's interaction to its owner's donation log.
extension Host {
    /// Donates the interaction of a successful run to its owner's donation log. A store
    /// that cannot take it does not fail the run: the outcome says why.
    func donate(
        _ run: IntentLifecycle, report: HandleReport, invocation: IntentInvocation, options: HandleOptions, donations: () throws -> Donations
    ) -> DonationOutcome {
        guard options.donate else { return DonationOutcome(donated: false, reason: "--no-donate") }
        let manifest = run.plugin.manifest
        let donation = Donation(
            identifier: report.id ?? Self.newIdentifier(), owner: manifest.owner, plugin: manifest.id, intent: run.definition.name,
            groupIdentifier: invocation.groupIdentifier, source: "handle",
            parameters: (run.resolved ?? [:]).mapValues(Self.withoutFileData), response: report.response)
        do {
            try run.services?.authorize()
            try donations().donate(donation, durable: false)
            options.log?("[extrun] donated the interaction \(donation.identifier) to \(manifest.owner)'s donation log")
            return DonationOutcome(donated: true)
        } catch let error as StoreError {
            options.log?("[extrun] the interaction was not donated: \(error.message)")
            return DonationOutcome(donated: false, reason: error.message, error: error.json)
        } catch {
            return DonationOutcome(donated: false, reason: "\(error)")
        }
    }

    /// A parameter value as donated: files keep their name and type but not their bytes.
    static func withoutFileData(_ value: JSONValue) -> JSONValue {
        switch value {
        case .object(var fields) where fields["filename"] != nil && fields["data"] != nil:
            fields["data"] = nil
            return .object(fields)
        case .array(let items):
            return .array(items.map(withoutFileData))
        default:
            return value
        }
    }
}
