import ExtrunHost
import ExtrunProtocol
import Foundation
import Testing

/// The `session` request (docs/protocol.md §15): a later session of a warm process
/// in one exchange. The host replays the plugin's answers through its own
/// lifecycle; a plugin that goes further or stops earlier than the protocol says
/// is caught.
@Suite("Warm sessions in one request")
struct SessionRequestTests {
    /// Python: a reusable plugin that takes `session` requests. `session` runs the
    /// plugin's own resolve/confirm/handle functions by the protocol's rule, unless
    /// `extra` replaces it; every request's method is appended to the note "methods".
    static func script(_ extra: String = "") -> String {
        #"""
        def log_method(msg):
            path = os.path.join(PLUGIN_DIR, "methods")
            with open(path, "a") as f:
                f.write(msg.get("method", "") + "\n")

        def resolve_value(intent, name, values):
            value = values.get(name)
            if value is None:
                return {"result": "needsValue", "prompt": "Which " + name + "?"} if name == "text" else {"result": "notRequired"}
            if value == "ambiguous":
                return {"result": "disambiguation", "options": ["one", "two"]}
            return {"result": "success", "value": value.upper() if name == "shout" else value}

        def confirm_values(values):
            return {"code": "failure"} if values.get("text") == "refuse" else {"code": "ready"}

        def handle_values(values):
            return {"code": "success", "properties": {"echo": values.get("text"), "shout": values.get("shout")}}

        def run_session(p):
            values = dict(p["parameters"])
            out = {"resolutions": []}
            for entry in p["resolve"]:
                parent = entry.get("parent")
                if parent is not None and values.get(parent["parameter"]) != parent["value"]:
                    values.pop(entry["parameter"], None)
                    continue
                result = resolve_value(p["intent"], entry["parameter"], values)
                out["resolutions"].append({"parameter": entry["parameter"], "result": result})
                if result["result"] == "success":
                    if result.get("value") is None:
                        values.pop(entry["parameter"], None)
                    else:
                        values[entry["parameter"]] = result["value"]
                if result["result"] not in ("success", "notRequired") or (entry.get("required") and values.get(entry["parameter"]) is None):
                    return out
            out["confirm"] = confirm_values(values)
            if p["handle"] and out["confirm"]["code"] in ("ready", "success"):
                out["handle"] = handle_values(values)
            return out

        def session_handshake(msg):
            log_method(msg)
            reply(msg, {"protocolVersion": 1, "plugin": {"id": os.environ["EXTRUN_PLUGIN_ID"], "version": "1.0.0"},
                        "intents": [msg["params"]["intent"]], "reusable": True, "session": True})

        def step(msg):
            log_method(msg)
            p = msg["params"]
            if msg["method"] == "resolve":
                reply(msg, resolve_value(p["intent"], p["parameter"], p["parameters"]))
            elif msg["method"] == "confirm":
                reply(msg, confirm_values(p["parameters"]))
            else:
                reply(msg, handle_values(p["parameters"]))

        def session(msg):
            log_method(msg)
            with open(os.path.join(PLUGIN_DIR, "polls"), "a") as f:
                f.write(repr(msg["params"].get("pollAfterUs")) + "\n")
            reply(msg, run_session(msg["params"]))

        handlers = {"initialize": session_handshake, "resolve": step, "confirm": step, "handle": step, "session": session}
        """# + "\n" + extra + "\nserve(handlers)"
    }

    static let intents = #"""
        [{"name":"Echo","parameters":[
            {"name":"text","type":"string","required":true},
            {"name":"loud","type":"boolean"},
            {"name":"shout","type":"string","parent":{"parameter":"loud","value":true}}]},
         {"name":"Careful","confirmation":"Really echo ${text}?","parameters":[{"name":"text","type":"string"}]}]
        """#

    /// A pool over one such plugin.
    func pool(_ name: String, _ extra: String = "") throws -> (PluginPool, ScriptPlugin, TempDirectory) {
        let tmp = try TempDirectory(name)
        let plugin = try ScriptPlugin(in: tmp.url.appendingPathComponent("plugins"), name: name, intents: Self.intents, script: Self.script(extra))
        let host = ExtrunHost.Host(
            paths: HostPaths(home: tmp.url.appendingPathComponent("home"), pluginSearchPath: [tmp.url.appendingPathComponent("plugins")]))
        return (PluginPool(host: host), plugin, tmp)
    }

    func echo(_ parameters: [String: JSONValue], intent: String = "Echo") -> IntentInvocation {
        IntentInvocation(intent: intent, parameters: parameters, source: "test")
    }

    func methods(_ plugin: ScriptPlugin) -> [String] {
        (plugin.note("methods") ?? "").split(separator: "\n").map(String.init)
    }

    @Test("the first session goes step by step; the later ones are one session request each, with the same answers")
    func laterSessionsInOneRequest() throws {
        let (pool, plugin, tmp) = try pool("sessionplain")
        for text in ["one", "two", "three"] {
            let report = pool.handle(echo(["text": .string(text)]))
            #expect(report.error == nil, "\(String(describing: report.error))")
            #expect(report.response?.properties["echo"] == .string(text))
        }
        #expect(methods(plugin) == ["initialize", "resolve", "resolve", "confirm", "handle", "session", "session"])
        // Each session request says how long the plugin may poll after its answer: 200 µs
        // while a CPU is free, 0 when as many intents run in this process as there are CPUs
        // (other tests' pools count too, so either may be seen here).
        let polls = (plugin.note("polls") ?? "").split(separator: "\n").map(String.init)
        #expect(polls.count == 2 && polls.allSatisfy { $0 == "200" || $0 == "0" }, "\(polls)")
        #expect(pool.launches == 1 && pool.reuses == 2)
        // A parent condition is evaluated by the plugin as by the host: `shout` is resolved only when `loud` is true.
        let loud = pool.handle(echo(["text": "a", "loud": true, "shout": "hey"]))
        #expect(loud.response?.properties["shout"] == "HEY", "\(String(describing: loud.error))")
        let quiet = pool.handle(echo(["text": "a", "loud": false, "shout": "hey"]))
        #expect(quiet.response?.properties["shout"] == .null, "\(String(describing: quiet.error))")
        #expect(pool.launches == 1)
        pool.close()
        withExtendedLifetime(tmp) {}
    }

    @Test("a session that stops for a person: without one, the parameter is unresolved in phase resolve, as step by step")
    func stopsForAPerson() throws {
        let (pool, _, tmp) = try pool("sessionstops")
        #expect(pool.handle(echo(["text": "warm"])).error == nil)
        let missing = pool.handle(echo([:]))
        #expect(missing.error?.kind == .parameterUnresolved, "\(String(describing: missing.error))")
        #expect(missing.error?.details["parameter"] == "text")
        let ambiguous = pool.handle(echo(["text": "ambiguous"]))
        #expect(ambiguous.error?.kind == .parameterUnresolved, "\(String(describing: ambiguous.error))")
        #expect(ambiguous.error?.details["options"] == ["one", "two"])
        let refused = pool.handle(echo(["text": "refuse"]))
        #expect(refused.error == nil && refused.response?.code == "failure", "\(String(describing: refused.error))")
        pool.close()
        withExtendedLifetime(tmp) {}
    }

    @Test("with a prompter, the host asks and carries on step by step in the same process")
    func promptsThenCarriesOn() throws {
        let (pool, plugin, tmp) = try pool("sessionprompt")
        #expect(pool.handle(echo(["text": "warm"])).error == nil)
        var options = HandleOptions()
        options.prompter = ScriptedPrompter([.text("typed")])
        let report = pool.handle(echo([:]), options: options)
        #expect(report.error == nil, "\(String(describing: report.error))")
        #expect(report.response?.properties["echo"] == "typed")
        #expect(Array(methods(plugin).suffix(5)) == ["session", "resolve", "resolve", "confirm", "handle"])
        #expect(pool.launches == 1)
        pool.close()
        withExtendedLifetime(tmp) {}
    }

    @Test("an intent a person confirms: the session request stops after confirm, and the host sends handle once confirmed")
    func personConfirms() throws {
        let (pool, plugin, tmp) = try pool("sessionconfirm")
        #expect(pool.handle(echo(["text": "warm"], intent: "Careful"), options: { var o = HandleOptions(); o.assumeYes = true; return o }()).error == nil)
        var options = HandleOptions()
        options.prompter = ScriptedPrompter([.yesNo(true)])
        let report = pool.handle(echo(["text": "sure"], intent: "Careful"), options: options)
        #expect(report.error == nil, "\(String(describing: report.error))")
        #expect(report.response?.properties["echo"] == "sure")
        #expect(Array(methods(plugin).suffix(2)) == ["session", "handle"])
        var declining = HandleOptions()
        declining.prompter = ScriptedPrompter([.yesNo(false)])
        let declined = pool.handle(echo(["text": "sure"], intent: "Careful"), options: declining)
        #expect(declined.error?.kind == .confirmationDeclined, "\(String(describing: declined.error))")
        #expect(methods(plugin).last == "session")
        pool.close()
        withExtendedLifetime(tmp) {}
    }

    @Test("a session answer that breaks the rule is a protocol error, and the process is not reused", arguments: [
        ("wrongorder", #"lambda p: {"resolutions": [{"parameter": "loud", "result": {"result": "success", "value": True}}], "confirm": {"code": "ready"}, "handle": {"code": "success"}}"#,
         "its session answer resolves 'loud' where 'text' comes next"),
        ("goeson", #"lambda p: {"resolutions": [{"parameter": "text", "result": {"result": "needsValue"}}], "confirm": {"code": "ready"}, "handle": {"code": "success"}}"#,
         "its session answer goes on after resolving 'text' as needsValue"),
        ("stopsearly", #"lambda p: {"resolutions": [{"parameter": "text", "result": {"result": "success", "value": "x"}}]}"#,
         "its session answer does not resolve 'loud' and stops without a reason"),
        ("handlesanyway", #"lambda p: dict(run_session(p), confirm={"code": "failure"}, handle={"code": "success"})"#,
         "its session answer handles the intent after confirm answered 'failure'"),
        ("nohandle", #"lambda p: {k: v for k, v in run_session(p).items() if k != "handle"}"#,
         "its session answer stops after confirm without handling the intent"),
        ("malformed", #"lambda p: {"resolutions": "all fine"}"#,
         "its session answer is malformed: resolutions: expected"),
    ])
    func lies(name: String, answer: String, message: String) throws {
        let (pool, _, tmp) = try pool("sessionlie\(name)", "session_answer = \(answer)\nhandlers[\"session\"] = lambda msg: (log_method(msg), reply(msg, session_answer(msg[\"params\"])))")
        #expect(pool.handle(echo(["text": "warm"])).error == nil)
        let report = pool.handle(echo(["text": "lie"]))
        let error = try #require(report.error)
        #expect(error.kind == .protocolError)
        #expect(error.message.contains(message), "\(error.message)")
        #expect(report.response == nil)
        #expect(pool.idleProcessCount == 0)
        // The next intent gets a new process, which answers its first session step by step.
        #expect(pool.handle(echo(["text": "after"])).response?.properties["echo"] == "after")
        #expect(pool.launches == 2)
        pool.close()
        withExtendedLifetime(tmp) {}
    }

    @Test("a timeout during a session request is reported in phase session, and the process is ended")
    func timeoutInSession() throws {
        let (pool, plugin, tmp) = try pool("sessionhang", #"handlers["session"] = lambda msg: (log_method(msg), hang())"#)
        var options = HandleOptions()
        options.deadlineMs = 800
        #expect(pool.handle(echo(["text": "warm"]), options: options).error == nil)
        let report = pool.handle(echo(["text": "slow"]), options: options)
        #expect(report.error?.kind == .timeout, "\(String(describing: report.error))")
        #expect(report.error?.details["phase"] == "session")
        #expect(pool.idleProcessCount == 0)
        pool.close()
        #expect(processes(mentioning: plugin.directory.path).isEmpty)
        withExtendedLifetime(tmp) {}
    }

    @Test("a Swift SDK plugin answers session requests: many intents, one process, one exchange each after the first")
    func swiftPlugin() throws {
        let home = try TempDirectory("session-sdk")
        let pool = PluginPool(host: ExtrunHost.Host(paths: HostPaths(home: home.url, pluginSearchPath: [try StagedPlugins.directory()])))
        let log = LogCollector()
        var options = HandleOptions()
        options.log = { log.append($0) }
        for i in 0..<5 {
            let report = pool.handle(echo(["text": .string("n\(i)")], intent: "MakeUppercase"), options: options)
            #expect(report.response?.properties["result"] == .string("N\(i)"), "\(String(describing: report.error))")
        }
        let lines = log.lines
        #expect(lines.filter { $0.contains("in one session request") }.count == 4, "\(lines)")
        // An empty text is unsupported, in a session as step by step.
        let empty = pool.handle(echo(["text": ""], intent: "MakeUppercase"))
        #expect(empty.error?.kind == .parameterUnresolved, "\(String(describing: empty.error))")
        #expect(empty.error?.message.contains("Please enter some text") == true)
        pool.close()
    }
}

/// Collects log lines from any thread.
final class LogCollector: @unchecked Sendable {
    private let lock = NSLock()
    private var collected: [String] = []
    func append(_ line: String) { lock.withLock { collected.append(line) } }
    var lines: [String] { lock.withLock { collected } }
}
