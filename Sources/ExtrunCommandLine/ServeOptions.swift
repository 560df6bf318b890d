import ArgumentParser

#if canImport(Glibc)
import Glibc
#endif

/// The command line of `extrun serve`, shared by the `extrun` CLI (which checks it and
/// prints its help) and the `extrun-serve` executable it execs (which runs the service).
public struct ServeOptions: ParsableArguments, Sendable {
    @Option(
        help: ArgumentHelp(
            "The Unix socket to listen on (default: $XDG_RUNTIME_DIR/extrun.sock, else $EXTRUN_HOME/extrun.sock).",
            valueName: "path"))
    public var socket: String?

    @Option(
        name: .customLong("socket-mode"),
        help: ArgumentHelp("The socket's permission bits, in octal: who may connect (default 600: only this user).", valueName: "mode"))
    public var socketMode: String = "600"

    @Option(
        help: ArgumentHelp(
            "Also listen on TCP at HOST:PORT (loopback unless HOST says otherwise); requires --token-file.", valueName: "host:port"))
    public var listen: String?

    @Option(
        name: .customLong("token-file"),
        help: ArgumentHelp(
            "A file (mode 600) holding the bearer token TCP callers must send (Authorization: Bearer TOKEN).", valueName: "path"))
    public var tokenFile: String?

    @Option(
        help: ArgumentHelp("The service's policy (default: $EXTRUN_HOME/serve.json; defaults when absent). SIGHUP re-reads it.", valueName: "path"))
    public var config: String?

    @Option(name: .customLong("log-format"), help: "Log lines on stderr: json (one object a line) or text.")
    public var logFormat: String = "json"

    @Flag(name: .shortAndLong, help: "Log every intent's phases and the plugins' output (debug level).")
    public var verbose = false

    public init() {}

    public func validate() throws {
        guard UInt32(socketMode, radix: 8).map({ $0 <= 0o777 }) == true else {
            throw ValidationError("--socket-mode '\(socketMode)' is not an octal mode; write it like 600 or 660")
        }
        if listen != nil, tokenFile == nil {
            throw ValidationError(
                "--listen needs --token-file: a TCP port reaches every local user (and more), so callers must send the token in that file")
        }
        if let listen, ServeOptions.hostAndPort(listen) == nil {
            throw ValidationError("--listen '\(listen)' is not HOST:PORT; write it like 127.0.0.1:8377 or [::1]:8377")
        }
        guard ["json", "text"].contains(logFormat) else {
            throw ValidationError("--log-format '\(logFormat)' is not json or text")
        }
    }

    /// `HOST:PORT` (`[v6]:PORT` for an IPv6 address) split; nil when malformed.
    public static func hostAndPort(_ text: String) -> (host: String, port: Int)? {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port) else {
            return nil
        }
        var host = String(text[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return host.isEmpty ? nil : (host, port)
    }

    /// The socket's permission bits.
    public var socketPermissions: UInt32 { UInt32(socketMode, radix: 8) ?? 0o600 }

    /// The help's discussion: what `extrun serve --help` teaches.
    public static let discussion = """
        Runs the host as a long-running service: apps, assistants and scripts send it intents \
        over a Unix socket and get the same JSON reports and exit statuses as `extrun handle`. \
        Plugins that declare "reusable": true stay warm between intents (per plugin at most \
        maxWarmPerPlugin processes, each ended after idleTimeoutSeconds idle).

        The API is HTTP/1.1 on the socket (docs/serve.md; OpenAPI document docs/serve-openapi.json):
          curl --unix-socket $XDG_RUNTIME_DIR/extrun.sock http://x/v1/health
          curl --unix-socket $XDG_RUNTIME_DIR/extrun.sock --data @Examples/intents/make-uppercase.json http://x/v1/handle
          extrun handle --server $XDG_RUNTIME_DIR/extrun.sock Examples/intents/make-uppercase.json
          EXTRUN_SERVER=$XDG_RUNTIME_DIR/extrun.sock extrun handle Examples/intents/make-uppercase.json
        The last two ask the person at the terminal for missing values, choices and \
        confirmations over the connection, as `extrun handle` does on its own.

        Who may call: the socket's mode (--socket-mode, default 600: only this user); every \
        intent's log line names the caller's uid (SO_PEERCRED), and the policy limits \
        each uid's concurrent intents and open connections (maxConnectionsPerCaller, 128 \
        below maxConnections' 1024), so that one caller at its limit leaves the service to \
        the others; refusals are logged summed up per caller every 10 s. A --socket path \
        through a symbolic link another user owns is refused. TCP (--listen) is refused \
        without --token-file.

        The policy ($EXTRUN_HOME/serve.json, or --config): maxConcurrent, maxQueued, \
        maxConcurrentPerCaller, maxQueuedPerCaller, callers.UID (maxConcurrent, maxConnections, \
        requestHeadTimeoutSeconds, requestTimeoutSeconds), maxWarmPerPlugin, maxWarm, \
        idleTimeoutSeconds, crashLimit, crashWindowSeconds, crashBackoffSeconds, \
        promptTimeoutSeconds, requestHeadTimeoutSeconds, requestTimeoutSeconds, writeTimeoutSeconds, \
        shutdownGraceSeconds, maxRequestBytes, maxBufferedRequestBytes, maxConnections, \
        maxConnectionsPerCaller, maxPendingResponseBytes, grants (which callers run which \
        owners' intents: by default only this user and root, and the TCP token's holders; \
        any other uid is refused notPermitted, HTTP 403, exit status 23) \
        (docs/serve.md lists each with its default). A request beyond the queue is refused \
        at once with the error kind overloaded (HTTP 503, exit status 21). SIGHUP re-reads \
        serve.json and policy.json; a bad file is reported and the old one kept.

        Signals: SIGTERM or SIGINT stop accepting, give intents in flight \
        shutdownGraceSeconds, cancel the rest (kind cancelled, exit 20) and end every plugin. \
        If the service is killed (SIGKILL), every plugin it started is killed with it.

        Socket activation: when started with LISTEN_FDS=1 and LISTEN_PID (as systemd does), \
        the service listens on descriptor 3 instead of --socket (docs/serve.md has the units). \
        GET /metrics answers in the Prometheus text format.
        """
}
