import ArgumentParser
import ExtrunCommandLine
import ExtrunHost
import ExtrunProtocol
import Foundation

struct Handle: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Handle an intent with the plugin that declares it, and print the response.",
        discussion: """
            The intent file is JSON:
              {"intent": "MakeUppercase", "parameters": {"text": "hello world"}}
            with optional "id" (the interaction's identifier, echoed in the output; one is \
            made up when absent), "groupIdentifier" (groups donations) and "mode" \
            ("extension" or "in-app").

            The host checks the file against the plugin's manifest before starting \
            anything; then it starts the plugin in its sandbox, resolves each parameter, \
            confirms and handles the intent. An intent file over 4 MiB is refused before \
            it is read (policy host.maxIntentFileBytes).

            Limits: in extension mode (the default when the plugin supports it) a plugin \
            gets 30 MiB of memory (of which 4 MiB for its /tmp, /var/tmp and /dev/shm), \
            a 256 MiB scratch directory quota and 10 s from launch; in in-app mode 1 GiB \
            (64 MiB), 2 GiB and 10 s. $EXTRUN_HOME/policy.json changes the defaults and maxima; a manifest or \
            --memory-limit/--timeout may ask for other values within the maxima. --verbose \
            prints the limits and the sandbox mechanisms in force (docs/sandbox.md). The host \
            bounds itself too: a plugin's message (16 MiB), its answer (8 MiB), the answers \
            it leaves unread (32 MiB in extension mode); going over one is exit 7 naming the \
            limit (docs/protocol.md, 11.1). The output (stdout) is one JSON object with intent, plugin, \
            mode, response or error, and metrics; docs/cli.md describes every field.

            Privileges: run as root, the host starts plugins as an unprivileged user \
            (extrun-plugin, else nobody; policy field pluginUser) with no supplementary \
            groups; $EXTRUN_HOME (keys, store, policy, containers) is hidden from them \
            by a mount namespace, and the store, keys, containers and policy must be \
            private to the host's user (else exit 11 naming the file and the chmod). \
            --verbose says which protection applies (docs/sandbox.md, Privileges).

            Confinement: the plugin has a session of its own (no terminal), its own /dev, \
            /tmp, /var/tmp and /dev/shm (one tmpfs within its memory cap), Landlock where the \
            kernel has it (reads only the system's folders and its own, writes only its \
            scratch directory; no TCP), and a seccomp filter (no network, no shared memory, \
            no other ABI). --verbose prints one line per layer, and what holds without it \
            (docs/sandbox.md, Every resource and reach).

            Exit status: 0 the plugin answered success; 1 it answered another code; \
            3 parameterUnresolved; 4 invalidIntent; 5 noHandler; 6 pluginCrashed; \
            7 protocolError; 8 timeout; 9 memoryLimitExceeded; 10 sandboxViolation; \
            11 configurationError; 12 pluginError; 13 confirmationDeclined; 14 diskLimitExceeded; \
            19 signatureInvalid (a signed plugin's file changed after signing: it was not started); \
            20 cancelled (by the caller: a server's client went away, an MCP cancel); \
            21 overloaded (`extrun serve` had no room: its queue was full); \
            64 bad command line; 70 internal error.

            With --server SOCKET (or EXTRUN_SERVER) the intent goes to `extrun serve` on that \
            socket (docs/serve.md) instead of a plugin started here: the same report and exit \
            status (its metrics are the service's run), the prompts asked here on the terminal \
            and answered over the connection (--no-input: none); file parameters are read here \
            and sent inline. A service that cannot be reached is exit 11.

            Owners: a plugin gets its owner's globals, bookmarks and donations only when its \
            folder is signed with a key that owner trusts (extrun plugins sign, extrun owners \
            trust); an unsigned plugin runs, but its store requests are refused (docs/store.md, \
            Signing keys).

            Continuing in the app: when the plugin, in extension mode, answers continueInApp \
            or failureRequiringAppLaunch, and it supports in-app mode, the host starts it again \
            in in-app mode (in-app limits, 10 s from that launch) and hands it the user \
            activity, the intent and the extension's answer; when the extension goes over \
            its memory cap and its manifest has retryInAppOnMemoryLimit, the intent is run \
            again in in-app mode. The output's "steps" lists every process run; the \
            top-level fields describe the last. --no-app-launch stops after the extension.

            Donations: after a successful run the interaction (intent, parameters, \
            response, id, groupIdentifier, time) is donated to the owner's donation log \
            (`extrun donations list`); --no-donate skips it.

            On a terminal, a missing value, a choice among options and a confirmation are \
            asked (on /dev/tty; the plugin's clock stops meanwhile); without one (or with \
            --no-input) they end the run with parameterUnresolved or confirmationDeclined, \
            the question in the message. --yes accepts confirmations.
            """
    )

    @Argument(help: ArgumentHelp("The intent file to handle; - reads standard input.", valueName: "intent.json"))
    var intentFile: String

    @OptionGroup var options: RunOptionFlags

    @Flag(name: .shortAndLong, help: "Show on stderr what happens: phases with their times, each host-service request, and the plugin's stdout, stderr and log lines.")
    var verbose = false

    @Option(help: "Output format: json (for programs) or text (a summary for people).")
    var format: OutputFormat = .json

    @OptionGroup var service: ServerOptions

    func run() throws {
        var run = options.runOptions()
        if let server = service.socket {
            service.noteVerbose(verbose)
            run.text = format == .text
            let status = ServerClient.handle(server: server, intentFile: intentFile, options: run)
            if status != 0 { throw ExitCode(status) }
            return
        }
        let options = HandleOptions.commandLine(run, verbose: verbose)
        try ReportOutput.printAndExit(format: format) { () throws(HostError) in
            Host().handle(try IntentFileParser.read(path: intentFile), options: options)
        }
    }
}
