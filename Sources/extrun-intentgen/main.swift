import ExtrunDefinitions
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// extrun-intentgen: checks a definition file, generates its Swift and its manifest.
/// The IntentGenerator build-tool plugin runs it as `extrun-intentgen build`.

let usage = """
    extrun-intentgen: generates a plugin's Swift code and manifest.json from its definition file
    (docs/definitions.md).

    Usage:
      extrun-intentgen swift DEFINITION [-o OUT.swift]
          Writes the Swift code the plugin's author builds on (import ExtrunSDK).
      extrun-intentgen manifest DEFINITION [-o manifest.json] [--executable NAME]
          Writes the plugin's manifest.json.
      extrun-intentgen check DEFINITION...
          Checks definition files; prints each problem with the file, line, column and path.
      extrun-intentgen build DEFINITION --swift OUT.swift [--manifest OUT.json] [--executable NAME]
          Both at once (what the IntentGenerator build-tool plugin runs).

    Options:
      -o, --output PATH    where to write (default: standard output)
      --executable NAME    the manifest's executable (default: the definition's plugin.executable,
                           else the name of the definition file's directory)
      -h, --help           this help

    Files are only rewritten when their contents change. Exit status: 0 done, 1 the definition
    is invalid (problems on standard error), 64 wrong command line, 74 a file could not be written.

    """

struct UsageError: Error { var message: String }

struct Options {
    var command = ""
    var inputs: [String] = []
    var output: String?
    var swiftOutput: String?
    var manifestOutput: String?
    var executable: String?
}

func parse(_ arguments: [String]) throws(UsageError) -> Options {
    var options = Options()
    var rest = arguments[...]
    guard let command = rest.popFirst() else { throw UsageError(message: "a command is needed (swift, manifest, check or build)") }
    options.command = command
    func value(_ flag: String) throws(UsageError) -> String {
        guard let next = rest.popFirst(), !next.isEmpty else { throw UsageError(message: "\(flag) needs a value") }
        return next
    }
    while let argument = rest.popFirst() {
        switch argument {
        case "-o", "--output": options.output = try value(argument)
        case "--swift": options.swiftOutput = try value(argument)
        case "--manifest": options.manifestOutput = try value(argument)
        case "--executable": options.executable = try value(argument)
        case "--": options.inputs += rest; rest = []
        default:
            if argument.hasPrefix("-") && argument != "-" { throw UsageError(message: "unknown option '\(argument)'") }
            options.inputs.append(argument)
        }
    }
    switch command {
    case "swift", "manifest":
        guard options.inputs.count == 1 else { throw UsageError(message: "\(command) takes one definition file") }
        if options.swiftOutput != nil || options.manifestOutput != nil { throw UsageError(message: "--swift and --manifest are options of build; use -o") }
    case "check":
        guard !options.inputs.isEmpty else { throw UsageError(message: "check takes one or more definition files") }
    case "build":
        guard options.inputs.count == 1 else { throw UsageError(message: "build takes one definition file") }
        guard options.swiftOutput != nil else { throw UsageError(message: "build needs --swift OUT.swift") }
        if options.output != nil { throw UsageError(message: "build writes to --swift and --manifest, not -o") }
    default:
        throw UsageError(message: "unknown command '\(command)' (use swift, manifest, check or build)")
    }
    return options
}

/// Writes `data` to `path` unless it already holds exactly that (so builds stay incremental); `nil` is standard output.
func write(_ data: Data, to path: String?) throws {
    guard let path else {
        FileHandle.standardOutput.write(data)
        return
    }
    let url = URL(fileURLWithPath: path)
    if let existing = try? Data(contentsOf: url), existing == data { return }
    try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
    try data.write(to: url, options: .atomic)
}

func fail(_ message: String, status: Int32) -> Never {
    FileHandle.standardError.write(Data("\(message)\n".utf8))
    exit(status)
}

let arguments = Array(CommandLine.arguments.dropFirst())
if arguments.isEmpty {
    fail(usage, status: 64)
}
if arguments.contains("-h") || arguments.contains("--help") || arguments.first == "help" {
    FileHandle.standardOutput.write(Data(usage.utf8))
    exit(0)
}

let options: Options
do {
    options = try parse(arguments)
} catch {
    fail("extrun-intentgen: \(error.message)\nRun extrun-intentgen --help for the usage.", status: 64)
}

var invalid = false
var files: [DefinitionFile] = []
for input in options.inputs {
    do {
        files.append(try DefinitionFile.load(path: input))
    } catch {
        invalid = true
        FileHandle.standardError.write(Data("\(error.description)\n".utf8))
    }
}
if invalid {
    let count = options.inputs.count
    fail("extrun-intentgen: \(count == 1 ? "the definition is" : "definitions are") invalid; see docs/definitions.md", status: 1)
}

do {
    switch options.command {
    case "swift":
        try write(Data(files[0].swiftSource().utf8), to: options.output)
    case "manifest":
        try write(try files[0].manifestJSON(executable: options.executable), to: options.output)
    case "check":
        for file in files {
            let intents = file.definition.intents.map(\.name).joined(separator: ", ")
            print("\(file.path): ok (\(file.definition.plugin.id) \(file.definition.plugin.version): \(intents))")
        }
    case "build":
        try write(Data(files[0].swiftSource().utf8), to: options.swiftOutput)
        if let manifest = options.manifestOutput {
            try write(try files[0].manifestJSON(executable: options.executable), to: manifest)
        }
    default:
        break
    }
} catch {
    fail("extrun-intentgen: cannot write the output: \((error as NSError).localizedDescription)", status: 74)
}
