// swift-tools-version: 6.1
//
// Module layout (dependencies point one way, left to right):
//
//   ExtrunProtocol  ← ExtrunSDK                      (plugins import ExtrunSDK)
//   ExtrunProtocol  ← ExtrunHost ← extrun (the CLI)
//   CExtrunLinux    ← ExtrunHost                     (fork/exec, pidfd; the only C)
//
// ExtrunProtocol has no I/O: wire messages, framing, manifests, versions.
import PackageDescription

let package = Package(
    name: "extrun",
    platforms: [.macOS(.v13)],
    products: [
        .executable(name: "extrun", targets: ["extrun"]),
        .library(name: "ExtrunSDK", targets: ["ExtrunSDK"]),
        .library(name: "ExtrunHost", targets: ["ExtrunHost"]),
        .library(name: "ExtrunProtocol", targets: ["ExtrunProtocol"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
    ],
    targets: [
        .target(name: "ExtrunProtocol"),
        .target(name: "ExtrunSDK", dependencies: ["ExtrunProtocol"]),
        .target(name: "CExtrunLinux"),
        .target(name: "ExtrunHost", dependencies: ["ExtrunProtocol", "CExtrunLinux"]),
        .executableTarget(
            name: "extrun",
            dependencies: ["ExtrunHost", .product(name: "ArgumentParser", package: "swift-argument-parser")]
        ),

        // Example plugins: each directory holds the plugin's source and its manifest.json.
        .executableTarget(name: "MakeUppercase", dependencies: ["ExtrunSDK"], path: "Examples/MakeUppercase",
                          exclude: ["manifest.json"]),
        .executableTarget(name: "RenameFiles", dependencies: ["ExtrunSDK"], path: "Examples/RenameFiles",
                          exclude: ["manifest.json"]),

        .testTarget(name: "ExtrunProtocolTests", dependencies: ["ExtrunProtocol"]),
        .testTarget(name: "ExtrunSDKTests", dependencies: ["ExtrunSDK"]),
        .testTarget(name: "ExtrunHostTests", dependencies: ["ExtrunHost"]),
        .testTarget(name: "ExtrunCLITests", dependencies: ["ExtrunProtocol"]),
    ]
)
