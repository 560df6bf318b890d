import ArgumentParser
import ExtrunCommandLine
import ExtrunHost
import ExtrunProtocol
import Foundation

struct Describe: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Describe an intent: its plugin, parameters, types, defaults, prompts, typed outputs, response codes and phrases.",
        discussion: """
            Reads the manifest only: no plugin is started. --format json prints the plugin \
            (id, version, owner, modes, app name), the manifest's definition of the intent and \
            the custom types it uses.

            With --server SOCKET (or EXTRUN_SERVER) the intent is described by `extrun serve` on \
            that socket (GET /v1/intents/NAME, docs/serve.md), from the plugins the service \
            runs: the same output and exit status. A service that cannot be reached is exit 11.
            """)

    @Argument(help: "The intent name, e.g. OrderSoup.") var intent: String
    @Option(help: "Output format: text or json.") var format: OutputFormat = .text
    @Option(
        help: ArgumentHelp(
            "Ask `extrun serve` on this Unix socket for the description, from the plugins it runs (default: $EXTRUN_SERVER when set).",
            valueName: "socket"))
    var server: String?

    func run() throws {
        let described: IntentDescription
        do throws(HostError) {
            if let socket = server ?? ServerClient.environmentServer {
                described = try ServerClient.describe(server: socket, intent: intent)
            } else {
                described = try Host().describe(intent: intent)
            }
        } catch {
            Output.printError("extrun: \(error.kind.rawValue): \(error.message)")
            throw ExitCode(error.kind.exitCode)
        }
        if format == .json { return Output.printJSON(described.json) }
        let definition = described.definition
        var lines: [String] = []
        lines.append("\(definition.title ?? definition.name) (\(definition.name))")
        if let description = definition.description { lines.append("  \(description)") }
        lines.append("  plugin \(described.plugin) \(described.version), owner \(described.owner), modes \(described.modes.map(\.rawValue).joined(separator: ", "))")
        if definition.runsInBackground == true { lines.append("  runs in the background") }
        if let confirmation = definition.confirmation { lines.append("  asks to confirm: \(confirmation)") }
        lines.append("")
        lines.append(definition.parameters.isEmpty ? "No parameters." : "Parameters:")
        for parameter in definition.parameters {
            var type = parameter.type == .custom ? (parameter.customType ?? "custom") : parameter.type.rawValue
            if parameter.multiple { type = "list of \(type)" }
            var head = "  \(parameter.name): \(type)"
            head += parameter.required ? ", required" : ", optional"
            if let value = parameter.default { head += ", default \(ValueText.literal(value))" }
            lines.append(head)
            if let title = parameter.title { lines.append("      title: \(title)") }
            if let description = parameter.description { lines.append("      \(description)") }
            if let values = parameter.values {
                lines.append("      values: " + values.map { v in parameter.valueTitles?[v].map { "\(v) (\($0))" } ?? v }.joined(separator: ", "))
            }
            if let allowed = parameter.allowedTypes, !allowed.isEmpty { lines.append("      file types: \(allowed.joined(separator: ", "))") }
            if parameter.dynamicOptions { lines.append("      options: provided by the plugin (extrun options INTENT.json \(parameter.name))") }
            if let parent = parameter.parent { lines.append("      only when \(parent.parameter) is \(ValueText.literal(parent.value))") }
            if let prompt = parameter.prompt { lines.append("      asks: \(prompt)") }
            if let confirm = parameter.confirmationPrompt { lines.append("      confirms: \(confirm)") }
            for reason in parameter.unsupportedReasons ?? [] { lines.append("      unsupported (\(reason.code)): \(reason.message)") }
        }
        if !definition.outputs.isEmpty {
            lines.append("")
            lines.append("Outputs:")
            for output in definition.outputs {
                var type = output.type == .custom ? (output.customType ?? "custom") : output.type.rawValue
                if output.multiple { type = "list of \(type)" }
                lines.append("  \(output.name): \(type)" + (output.title.map { " (\($0))" } ?? ""))
                if let description = output.description { lines.append("      \(description)") }
                if let values = output.values {
                    lines.append("      values: " + values.map { v in output.valueTitles?[v].map { "\(v) (\($0))" } ?? v }.joined(separator: ", "))
                }
            }
        }
        lines.append("")
        lines.append("Responses: the standard codes (\(ResponseCode.standard.joined(separator: ", ")))" + (definition.responses.isEmpty ? "" : ", and:"))
        for response in definition.responses {
            var line = "  \(response.code)\(response.success ? " (counts as success)" : "")"
            if let properties = response.properties, !properties.isEmpty { line += " with \(properties.joined(separator: ", "))" }
            if let dialog = response.dialog { line += ": \"\(dialog)\"" }
            lines.append(line)
        }
        if let phrases = definition.phrases, !phrases.isEmpty {
            lines.append("")
            lines.append("Phrases:")
            for phrase in phrases { lines.append("  \"\(phrase)\"") }
        }
        Output.printLine(lines.joined(separator: "\n"))
    }
}

struct Options: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Ask a plugin for the possible values of a parameter (its dynamic options).",
        discussion: """
            Starts the plugin with the same limits and sandbox as `handle`, sends it the \
            intent's current parameter values and the search text, and prints the options it \
            offers: identifier, title, subtitle, image, in sections. Example:
              extrun options Examples/intents/order-soup.json soup --search chow

            With --server SOCKET (or EXTRUN_SERVER) the plugin is asked by `extrun serve` on \
            that socket (docs/serve.md) instead of started here: the same report and exit \
            status; file parameters of the intent file are read here and sent inline. A \
            service that cannot be reached is exit 11.
            """)

    @Argument(help: ArgumentHelp("The intent file (its other parameters may narrow the options); - reads stdin.", valueName: "intent.json"))
    var intentFile: String
    @Argument(help: "The parameter whose options to list.") var parameter: String
    @Option(help: "Text a person typed, to narrow the list.") var search: String?
    @Option(help: "Run the plugin in this mode.") var mode: Mode?
    @Option(help: "Output format: json or text.") var format: OutputFormat = .json
    @Flag(name: .shortAndLong, help: "Show on stderr what happens.") var verbose = false
    @OptionGroup var service: ServerOptions

    func run() throws {
        var run = RunOptions()
        run.mode = mode
        run.text = format == .text
        if let server = service.socket {
            service.noteVerbose(verbose)
            let status = ServerClient.options(server: server, intentFile: intentFile, parameter: parameter, search: search, options: run)
            if status != 0 { throw ExitCode(status) }
            return
        }
        let options = HandleOptions.commandLine(run, verbose: verbose)
        try ReportOutput.printAndExit(format: format) { () throws(HostError) in
            Host().options(try IntentFileParser.read(path: intentFile), parameter: parameter, search: search, options: options)
        }
    }
}
