import ArgumentParser
import ExtrunCommandLine
import ExtrunHost
import ExtrunMCP
import ExtrunProtocol
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// `extrun mcp`: the installed intents as tools of an MCP server on stdio (docs/mcp.md).
struct MCPCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mcp",
        abstract: "Serve the installed intents as MCP tools on standard input and output, for AI assistants.",
        discussion: """
            An MCP server (Model Context Protocol: 2026-07-28, and the handshake versions 2024-11-05 \
            to 2025-11-25) over stdio: the client starts `extrun mcp` and speaks newline-delimited \
            JSON-RPC with it. Every \
            intent on the plugin path is a tool: its inputSchema from the parameters, its \
            outputSchema from the typed outputs. Each call runs in the sandbox with its mode's \
            limits, in a warm plugin process when the plugin allows it (as `extrun batch`).

            A missing value, a choice or a confirmation is asked of the user through the client \
            when the client supports elicitation: in 2026-07-28, as input_required results whose \
            requestState is sealed with the key of --request-state-key (default \
            $EXTRUN_HOME/mcp-request-state.key; servers sharing the file continue each other's \
            rounds); in the handshake versions, as elicitation/create requests. Otherwise the result says what is \
            missing and the options, and tools that may ask for a confirmation take \
            "_confirmed": true once the user agreed. A failure or a limit (memoryLimitExceeded, \
            timeout...) is a result with isError and the error's kind and numbers in \
            structuredContent.error. notifications/cancelled cancels the plugin (its grace, then \
            a kill); a plugin's progress is sent as notifications/progress when the call has a \
            progress token. Installing or removing a plugin sends notifications/tools/list_changed \
            within about a second.

            Standard output carries only protocol messages; --verbose writes what happens to \
            standard error. The server ends when its standard input ends (exit 0), or on \
            SIGTERM, SIGINT or SIGHUP (exit 128 + the signal), after cancelling the calls in \
            flight and ending the warm processes.

            Client configuration: {"mcpServers": {"extrun": {"command": "extrun", "args": ["mcp"]}}} \
            (docs/mcp.md).
            """)

    @Flag(name: .shortAndLong, help: "Show on stderr each call's outcome and what the host does (phases, plugin output).")
    var verbose = false

    @OptionGroup var limits: RunLimitFlags

    @Option(help: "How many tool calls run at once (each in a plugin process of its own).")
    var maxCalls = 8

    @Option(
        help: ArgumentHelp(
            "The 32-byte key that seals a 2026-07-28 call's requestState; made (mode 0600) when absent, refused when others may read it.",
            valueName: "file"))
    var requestStateKey: String?

    @Option(help: ArgumentHelp("How long a sealed requestState may be presented, in seconds.", valueName: "seconds"))
    var requestStateLifetime: Double = 300

    func validate() throws {
        if maxCalls < 1 || maxCalls > 64 { throw ValidationError("--max-calls takes 1 to 64 (got \(maxCalls))") }
        if !(requestStateLifetime > 0 && requestStateLifetime <= 86_400) {
            throw ValidationError("--request-state-lifetime takes more than 0 and at most 86400 seconds (got \(requestStateLifetime))")
        }
    }

    func run() throws {
        // A client that goes away must not kill the server in a write; the write fails instead.
        _ = signal(SIGPIPE, SIG_IGN)
        var configuration = MCPServer.Configuration()
        configuration.maxConcurrentCalls = maxCalls
        configuration.requestStateKeyFile = requestStateKey.map { URL(fileURLWithPath: $0) }
        configuration.requestStateLifetimeSeconds = requestStateLifetime
        var run = RunOptions()
        limits.apply(to: &run)
        configuration.handleOptions = HandleOptions(run)
        if verbose {
            let log: @Sendable (String) -> Void = { line in Output.printError(line) }
            configuration.log = log
            configuration.handleOptions.log = log
        }
        let server: MCPServer
        do {
            server = try MCPServer(configuration: configuration)
        } catch {
            Output.printError("extrun mcp: \(error.description)")
            throw ExitCode(78)
        }
        TerminationSignals.install(terminating: [SIGTERM, SIGINT, SIGHUP]) { signal in
            server.stop(reason: "extrun mcp received signal \(signal)")
            Glibc.exit(128 + signal)
        }
        server.run()
    }
}
