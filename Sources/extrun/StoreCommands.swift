import ArgumentParser
import ExtrunHost
import ExtrunProtocol
import ExtrunStore
import Foundation

#if canImport(Glibc)
import Glibc
#endif

// What the store commands share: the owner option and the exit status of a store error.
// The commands themselves: OwnersCommand.swift, GlobalsCommand.swift, BookmarksCommand.swift.

/// Options every store command shares.
struct OwnerOption: ParsableArguments {
    @Option(help: ArgumentHelp("The owner identity (the `owner` of a plugin's manifest, e.g. EXAMPLETEAM).", valueName: "owner"))
    var owner: String
}

/// Exit statuses of the store commands (docs/cli.md).
enum StoreExit {
    static func code(for kind: StoreErrorKind) -> Int32 {
        switch kind {
        case .notFound: 2
        case .versionConflict: 13
        case .invalidName, .invalidValue, .tooLarge, .invalidPath, .pathEscape, .wrongType, .alreadyExists, .readOnly, .staleBookmark,
            .invalidDocument, .notYours, .quotaExceeded, .accessDenied:
            14
        case .keyMissing, .wrongKey, .invalidKeyFile, .insecurePermissions, .unsignedPlugin, .untrustedSigner: 15
        case .sealBroken, .corruptStore, .storeMissing, .incompatibleStore: 16
        case .storeBusy, .storeUnavailable, .ioError, .databaseError: 17
        }
    }

    /// Runs a store operation; a store error is printed on stderr with its kind and exits with its status.
    static func run(_ body: (Store) throws -> Void) throws {
        do {
            let store = try Store(home: HostPaths.fromEnvironment().home)
            try body(store)
        } catch let error as StoreError {
            Output.printError("extrun: \(error.kind.rawValue): \(error.message)")
            throw ExitCode(code(for: error.kind))
        }
    }
}
