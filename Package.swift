// swift-tools-version: 6.1
//
// Module layout (dependencies point one way; docs/architecture.md draws it):
//
//   ExtrunProtocol  ← ExtrunSDK ← the example plugins     (no I/O: wire messages, framing, JSON, manifests,
//                                                           a run's options RunOptions, KindedError)
//   ExtrunProtocol  ← ExtrunDefinitions ← extrun-intentgen ← IntentGenerator (definition files, code generation)
//   ExtrunProtocol  ← ExtrunCommandLine                   (the flags extrun and extrun-serve share; ArgumentParser)
//   ExtrunSystem    ← ExtrunStore, ExtrunHost, ExtrunServe, extrun (system calls: EINTR, would-block, errno; swift-system.
//                     Not the SDK: a plugin compiled against ExtrunSDK's module alone would then need swift-system's C module)
//   CExtrunStoreShims ← ExtrunStore                       (openat2, renameat2, statx: C; GRDB + swift-crypto above;
//                                                           postgres-nio for a store on a PostgreSQL server)
//   CExtrunLinux, ExtrunStore, ExtrunDefinitions ← ExtrunHost (the host; IntentService, the layer every front end shares)
//   ExtrunHost ← ExtrunMCP ← extrun                       (the CLI: one static executable; ExtrunMCP also takes epoll from CExtrunLinux)
//   ExtrunHost ← ExtrunMCP ← ExtrunServe ← extrun-serve  (`extrun serve`: SwiftNIO, swift-log, metrics; its own executable; /mcp)
import PackageDescription

let package = Package(
    name: "extrun",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "extrun", targets: ["extrun"]),
        .library(name: "ExtrunSDK", targets: ["ExtrunSDK"]),
        .library(name: "ExtrunHost", targets: ["ExtrunHost"]),
        .library(name: "ExtrunProtocol", targets: ["ExtrunProtocol"]),
        .library(name: "ExtrunDefinitions", targets: ["ExtrunDefinitions"]),
        .executable(name: "extrun-intentgen", targets: ["extrun-intentgen"]),
        .executable(name: "extrun-serve", targets: ["extrun-serve"]),
        .plugin(name: "IntentGenerator", targets: ["IntentGenerator"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "4.5.2"),
        // The listener of `extrun serve` (the extrun-serve executable); and everywhere,
        // NIOConcurrencyHelpers' locks in place of Synchronization.Mutex (CONTRIBUTING.md, "Locks").
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
        // Bearer JWTs on `extrun serve`'s HTTP listeners (ExtrunServe's ServeAuthentication).
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.7.1"),
        // The store's PostgreSQL backend (docs/store.md, "PostgreSQL").
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
    ],
    targets: [
        .target(name: "ExtrunProtocol"),
        // System calls: EINTR retried in one place, errno as a typed error with the call's name.
        .target(name: "ExtrunSystem", dependencies: [.product(name: "SystemPackage", package: "swift-system")]),
        .target(name: "ExtrunSDK", dependencies: ["ExtrunProtocol", .product(name: "NIOConcurrencyHelpers", package: "swift-nio")]),
        .target(name: "CExtrunLinux", linkerSettings: [.linkedLibrary("seccomp")]),
        .target(name: "CExtrunStoreShims", linkerSettings: [.linkedLibrary("sqlite3")]),
        .target(
            name: "ExtrunStore",
            dependencies: [
                "ExtrunProtocol",
                "ExtrunSystem",
                "CExtrunStoreShims",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .target(name: "ExtrunHost", dependencies: ["ExtrunProtocol", "ExtrunSystem", "CExtrunLinux", "ExtrunStore", "ExtrunDefinitions", .product(name: "NIOConcurrencyHelpers", package: "swift-nio")]),
        .target(
            name: "ExtrunMCP",
            dependencies: [
                "ExtrunHost", "ExtrunProtocol", "ExtrunSystem", .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                // epoll and eventfd: stdio's input watched while a call holds the reading (MCPServer's InputWatch).
                "CExtrunLinux",
                // The modern era's sealed requestState (ChaChaPoly, SHA-256).
                .product(name: "Crypto", package: "swift-crypto"),
            ]),
        .executableTarget(
            name: "extrun",
            dependencies: [
                "ExtrunHost", "ExtrunMCP", "ExtrunProtocol", "ExtrunStore", "ExtrunSystem", "ExtrunCommandLine", .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            // The CLI is one static executable (the Swift runtime, Foundation, SQLite,
            // libseccomp and glibc linked in): no dynamic loader at start, which a dynamic
            // Swift program spends ~7 ms in, and a workflow starts extrun once per action
            // (docs/benchmarks.md). Plugins stay dynamic: a static Foundation's ICU data
            // alone exceeds the 30 MiB extension-mode memory cap.
            linkerSettings: [
                .unsafeFlags(
                    [
                        "-static-executable", "-Xlinker", "--start-group", "-lFoundation", "-lFoundationInternationalization",
                        "-lFoundationEssentials", "-lCoreFoundation", "-l_FoundationICU", "-l_FoundationCShims", "-l_FoundationCollections",
                        "-lswiftSynchronization", "-lsqlite3", "-lseccomp", "-lstdc++", "-lm", "-Xlinker", "--end-group",
                    ], .when(platforms: [.linux]))
            ]
        ),

        // `extrun serve` (docs/serve.md): a long-running host on a Unix socket. Its own executable, which
        // `extrun serve` execs, so that SwiftNIO, swift-log and the metrics stay out of the static CLI
        // whose start time every `extrun handle` pays (docs/serve.md, "Why its own executable").
        .target(name: "ExtrunCommandLine", dependencies: ["ExtrunProtocol", .product(name: "ArgumentParser", package: "swift-argument-parser")]),
        .target(
            name: "ExtrunServe",
            dependencies: [
                "ExtrunHost", "ExtrunMCP", "ExtrunProtocol", "ExtrunSystem", "ExtrunCommandLine",
                .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"), .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"), .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "JWTKit", package: "jwt-kit"),
            ]
        ),
        .executableTarget(
            name: "extrun-serve", dependencies: ["ExtrunServe", "ExtrunCommandLine", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),

        // Intent definition files (docs/definitions.md): parse, validate, generate Swift and manifest.json.
        .target(name: "ExtrunDefinitions", dependencies: ["ExtrunProtocol"]),
        .executableTarget(name: "extrun-intentgen", dependencies: ["ExtrunDefinitions"]),
        .plugin(name: "IntentGenerator", capability: .buildTool(), dependencies: ["extrun-intentgen"]),

        // Example plugins: each directory holds the plugin's source and its intents.json (generated code and manifest) or manifest.json.
        .executableTarget(name: "MakeUppercase", dependencies: ["ExtrunSDK"], path: "Examples/MakeUppercase",
                          exclude: ["intents.json"], plugins: [.plugin(name: "IntentGenerator")]),
        .executableTarget(name: "RenameFiles", dependencies: ["ExtrunSDK"], path: "Examples/RenameFiles",
                          exclude: ["intents.json"], plugins: [.plugin(name: "IntentGenerator")]),
        .executableTarget(name: "AllocateMemory", dependencies: ["ExtrunSDK"], path: "Examples/AllocateMemory",
                          exclude: ["manifest.json"]),
        .executableTarget(name: "Sleep", dependencies: ["ExtrunSDK"], path: "Examples/Sleep",
                          exclude: ["manifest.json"]),
        .executableTarget(name: "GlobalVariables", dependencies: ["ExtrunSDK"], path: "Examples/GlobalVariables",
                          exclude: ["manifest.json"]),
        .executableTarget(name: "Bookmarks", dependencies: ["ExtrunSDK"], path: "Examples/Bookmarks",
                          exclude: ["manifest.json"]),
        .executableTarget(name: "Indexer", dependencies: ["ExtrunSDK"], path: "Examples/Indexer",
                          exclude: ["manifest.json"]),
        // Example plugins built from a definition file (intents.json): the code and the manifest are generated.
        .executableTarget(name: "SoupChef", dependencies: ["ExtrunSDK"], path: "Examples/SoupChef",
                          exclude: ["intents.json"], plugins: [.plugin(name: "IntentGenerator")]),
        .executableTarget(name: "People", dependencies: ["ExtrunSDK"], path: "Examples/People",
                          exclude: ["intents.json"], plugins: [.plugin(name: "IntentGenerator")]),

        // What several test targets share: the staged plugins, temporary folders, the built binary.
        .target(name: "ExtrunTestSupport", dependencies: ["ExtrunHost", "ExtrunStore"], path: "Tests/ExtrunTestSupport"),
        .testTarget(name: "ExtrunProtocolTests", dependencies: ["ExtrunProtocol"]),
        .testTarget(name: "ExtrunSDKTests", dependencies: ["ExtrunSDK"]),
        .testTarget(name: "ExtrunDefinitionsTests", dependencies: ["ExtrunDefinitions", "ExtrunSDK", "ExtrunTestSupport"]),
        .testTarget(name: "ExtrunHostTests", dependencies: ["ExtrunHost", "ExtrunStore", "ExtrunTestSupport"]),
        .testTarget(
            name: "ExtrunCLITests", dependencies: ["ExtrunProtocol", "ExtrunTestSupport", .product(name: "Crypto", package: "swift-crypto")],
            exclude: ["Fixtures"]),
        .testTarget(name: "ExtrunStoreTests", dependencies: ["ExtrunStore", "ExtrunStoreFill", "ExtrunTestSupport"]),
        .testTarget(name: "ExtrunSandboxTests", dependencies: ["ExtrunHost", "ExtrunStore", "ExtrunTestSupport"], exclude: ["Fixtures"]),
        .testTarget(name: "ExtrunServeTests", dependencies: ["ExtrunServe", "ExtrunHost", "ExtrunTestSupport", .product(name: "Crypto", package: "swift-crypto")]),
        .testTarget(name: "ExtrunMCPTests", dependencies: ["ExtrunMCP", "ExtrunHost", "ExtrunProtocol", "ExtrunTestSupport"], exclude: ["mcp_client.py", "mcp_modern_client.py"]),
        .testTarget(name: "ExtrunIntegrationTests", dependencies: ["ExtrunHost", "ExtrunStore", "ExtrunTestSupport"], exclude: ["Fixtures"]),
    ]
)

// Benchmarks (Scripts/bench, docs/benchmarks.md): the in-process harness.
package.targets.append(contentsOf: [
    .executableTarget(
        name: "ExtrunBench",
        dependencies: [
            "ExtrunHost", "ExtrunProtocol", "ExtrunStore", "ExtrunStoreFill", .product(name: "PostgresNIO", package: "postgres-nio"),
            .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "Logging", package: "swift-log"),
        ], path: "Benchmarks/ExtrunBench"),
    // A store filled fast (`ExtrunBench populate`, the migration tests): not in any product; it
    // writes through the store's `package` internals.
    .target(
        name: "ExtrunStoreFill",
        dependencies: ["ExtrunStore", "ExtrunProtocol", "ExtrunSystem", .product(name: "GRDB", package: "GRDB.swift")],
        path: "Benchmarks/StoreFill"),
    // The listener of `extrun serve` with no intent behind it: the floor under its throughput rows.
    .executableTarget(
        name: "ExtrunHTTPFloor",
        dependencies: [
            "ExtrunServe", .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOHTTP1", package: "swift-nio"),
        ], path: "Benchmarks/HTTPFloor"),
])
