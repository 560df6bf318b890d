import ExtrunHost
import ExtrunProtocol
import Foundation
import Testing

/// Broken and hostile plugins, written as Python scripts into temporary plugin
/// directories. Each test asserts the exact error kind, what the message and
/// details say, and that no process is left behind.
@Suite("Hostile and broken plugins")
struct HostilePluginTests {
    /// One temporary plugin directory with one script plugin, and a host that sees only it.
    struct Fixture {
        let tmp: TempDirectory
        let plugin: ScriptPlugin
        let host: ExtrunHost.Host
        var id: String { "test.\(plugin.directory.lastPathComponent)" }

        init(_ name: String, intents: String? = nil, script: String) throws {
            tmp = try TempDirectory(name)
            plugin = try ScriptPlugin(in: tmp.url.appendingPathComponent("plugins"), name: name, intents: intents, script: script)
            host = ExtrunHost.Host(paths: HostPaths(home: tmp.url.appendingPathComponent("home"), pluginSearchPath: [tmp.url.appendingPathComponent("plugins")]))
        }

        func run(intent: String = "Echo", _ parameters: [String: JSONValue] = ["text": "hi"], options: HandleOptions = HandleOptions())
            -> HandleReport
        {
            host.handle(IntentInvocation(intent: intent, parameters: parameters, source: "test"), options: options)
        }

        /// The plugin's pid (from the file its script wrote) is gone, and so is every
        /// process whose command line names the plugin's directory (its forks included).
        func expectNoProcessLeft(sourceLocation: SourceLocation = #_sourceLocation) throws {
            let pid = try plugin.pid()
            expectGone(noted: pid, mentioning: plugin.directory.path, sourceLocation: sourceLocation)
            let left = processes(mentioning: plugin.directory.path)
            #expect(left.isEmpty, "processes of \(plugin.directory.lastPathComponent) still running: \(left)", sourceLocation: sourceLocation)
        }

        /// The default policy with some changes.
        static func policy(_ change: (inout SandboxPolicy) -> Void) -> SandboxPolicy {
            var policy = SandboxPolicy.default
            change(&policy)
            return policy
        }
    }

    // MARK: The baseline

    @Test("a host with many descriptors open still starts plugins, whatever numbers their pipes get")
    func manyOpenDescriptors() throws {
        let f = try Fixture("manyfds", script: "serve()")
        var extra: [Int32] = []
        defer { for fd in extra { close(fd) } }
        // Each step opens one more descriptor, so that the plugin's pipes land on every
        // number around the launcher's parking range (100...): none may collide.
        while extra.count < 130 {
            let fd = open("/dev/null", O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { break }
            extra.append(fd)
            guard fd >= 85 else { continue }
            let report = f.run()
            #expect(report.error == nil, "with descriptors up to \(fd) open: \(String(describing: report.error))")
            #expect(report.response?.properties["echo"] == "hi")
        }
    }

    @Test("a plugin cannot make a descriptor signal a process (F_SETOWN, FIOSETOWN are refused)")
    func noSignalsThroughDescriptorOwners() throws {
        let f = try Fixture("setown", script: #"""
            import fcntl, termios
            def handle(msg):
                r, w = os.pipe()
                results = []
                for name, call in [("F_SETOWN", lambda: fcntl.fcntl(r, fcntl.F_SETOWN, os.getpid())),
                                   ("FIOSETOWN", lambda: fcntl.ioctl(r, 0x8901, b"\0\0\0\0"))]:
                    try:
                        call()
                        results.append(name + " allowed")
                    except OSError as e:
                        results.append(name + " refused " + str(e.errno))
                reply(msg, {"code": "success", "properties": {"echo": ", ".join(results)}})
            serve({"handle": handle})
            """#)
        let report = f.run()
        #expect(report.error == nil, "\(String(describing: report.error))")
        #expect(report.response?.properties["echo"] == "F_SETOWN refused 1, FIOSETOWN refused 1")
    }

    @Test("the Python test plugin works when it behaves")
    func wellBehaved() throws {
        let f = try Fixture("wellbehaved", script: "serve()")
        let report = f.run()
        #expect(report.error == nil, "\(String(describing: report.error))")
        #expect(report.response == IntentResponse(code: "success", properties: ["echo": "hi"]))
        #expect(report.plugin == "test.wellbehaved")
        try f.expectNoProcessLeft()
    }

    // MARK: Crashes

    @Test("exits before the handshake: pluginCrashed with the exit status and the last stderr line")
    func exitsBeforeHandshake() throws {
        let f = try Fixture("early", script: #"""
            sys.stderr.write("starting up\n")
            sys.stderr.write("fatal: cannot open the soup database\n")
            sys.stderr.flush()
            sys.exit(3)
            """#)
        let report = f.run()
        let error = try #require(report.error)
        #expect(error.kind == .pluginCrashed)
        #expect(report.exitCode == 6)
        #expect(error.details["exitStatus"] == 3)
        #expect(error.details["phase"] == "launch")
        #expect(error.details["stderr"] == ["starting up", "fatal: cannot open the soup database"])
        #expect(error.message == "test.early exited with status 3 during launch, before it answered; last stderr line: fatal: cannot open the soup database")
        #expect(report.response == nil)
        #expect(report.metrics?.launchMs == nil)
        #expect(report.metrics?.wallMs != nil)
        try f.expectNoProcessLeft()
    }

    @Test("killed by a signal during handle: pluginCrashed naming the signal and the phase")
    func killedBySignal() throws {
        let f = try Fixture("signaled", script: #"""
            import ctypes
            def die(msg):
                sys.stderr.write("about to dereference NULL\n")
                sys.stderr.flush()
                ctypes.string_at(0)
            serve({"handle": die})
            """#)
        let report = f.run()
        let error = try #require(report.error)
        #expect(error.kind == .pluginCrashed)
        #expect(report.exitCode == 6)
        #expect(error.details["signal"] == .int(Int64(SIGSEGV)))
        #expect(error.details["signalName"] == "SIGSEGV")
        #expect(error.details["phase"] == "handle")
        #expect(error.message.hasPrefix("test.signaled was killed by signal \(SIGSEGV) (SIGSEGV) during handle"), "\(error.message)")
        #expect(error.message.hasSuffix("last stderr line: about to dereference NULL"), "\(error.message)")
        try f.expectNoProcessLeft()
    }

    @Test("a plugin that sends itself a fatal signal dies of it (it is not its pid namespace's init)")
    func signalsItself() throws {
        let f = try Fixture("selfsignal", script: #"""
            def die(msg):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
                os.kill(os.getpid(), signal.SIGKILL)
                hang()
            serve({"handle": die})
            """#)
        let report = f.run(options: .with { $0.deadlineMs = 3_000 })
        let error = try #require(report.error)
        #expect(error.kind == .pluginCrashed, "\(error)")
        #expect(error.details["signalName"] == "SIGTERM")
        try f.expectNoProcessLeft()
    }

    @Test("a plugin that calls abort() is reported as killed by SIGABRT")
    func aborts() throws {
        let f = try Fixture("aborter", script: #"serve({"handle": lambda msg: os.abort()})"#)
        let error = try #require(f.run().error)
        #expect(error.kind == .pluginCrashed)
        #expect(error.details["signalName"] == "SIGABRT")
        try f.expectNoProcessLeft()
    }

    @Test("exits in the middle of a message: pluginCrashed, the partial frame is not taken as an answer")
    func exitsMidMessage() throws {
        let f = try Fixture("midmessage", script: #"""
            def half(msg):
                write_raw(b'Content-Length: 200\r\n\r\n{"jsonrpc":"2.0","id":')
                os._exit(0)
            serve({"initialize": half})
            """#)
        let report = f.run()
        let error = try #require(report.error)
        #expect(error.kind == .pluginCrashed)
        #expect(error.details["exitStatus"] == 0)
        #expect(error.details["phase"] == "launch")
        #expect(error.message.hasPrefix("test.midmessage exited with status 0 during launch, before it answered"), "\(error.message)")
        try f.expectNoProcessLeft()
    }

    // MARK: Plugins that cannot start

    @Test("an env interpreter that is not installed: configurationError naming the executable")
    func missingInterpreter() throws {
        let tmp = try TempDirectory("nointerp")
        let dir = tmp.url.appendingPathComponent("plugins/nointerp")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        try Data(manifestJSON(id: "test.nointerp").utf8).write(to: dir.appendingPathComponent("manifest.json"))
        let script = dir.appendingPathComponent("plugin.py")
        try Data("#!/usr/bin/env no-such-interpreter-xyz\nprint('hi')\n".utf8).write(to: script)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: script.path)
        let host = ExtrunHost.Host(paths: HostPaths(home: tmp.url.appendingPathComponent("home"), pluginSearchPath: [tmp.url.appendingPathComponent("plugins")]))
        let report = host.handle(IntentInvocation(intent: "Echo", parameters: ["text": "hi"], source: "test"))
        let error = try #require(report.error)
        #expect(error.kind == .configurationError)
        #expect(report.exitCode == 11)
        #expect(error.details["file"] == .string(script.path))
        #expect(error.message.contains("'no-such-interpreter-xyz' is not in the plugin's PATH"), "\(error.message)")
    }

    @Test("an executable the kernel cannot run: configurationError naming it")
    func notAProgram() throws {
        let tmp = try TempDirectory("notaprogram")
        let dir = tmp.url.appendingPathComponent("plugins/junk")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        try Data(manifestJSON(id: "test.junk", executable: "plugin.bin").utf8).write(to: dir.appendingPathComponent("manifest.json"))
        let binary = dir.appendingPathComponent("plugin.bin")
        try Data([0x7F, 0x45, 0x4C, 0x46, 0x00, 0x01, 0x02]).write(to: binary)  // a truncated ELF header
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: binary.path)
        let host = ExtrunHost.Host(paths: HostPaths(home: tmp.url.appendingPathComponent("home"), pluginSearchPath: [tmp.url.appendingPathComponent("plugins")]))
        let report = host.handle(IntentInvocation(intent: "Echo", parameters: ["text": "hi"], source: "test"))
        let error = try #require(report.error)
        #expect(error.kind == .configurationError)
        #expect(error.message.hasPrefix("cannot execute \(binary.path)"), "\(error.message)")
        #expect(error.details["executable"] == .string(binary.path))
        #expect(processes(mentioning: dir.path).isEmpty)
    }

    // MARK: Broken protocol

    @Test("a malformed frame header: protocolError naming the framing problem")
    func malformedFrame() throws {
        let f = try Fixture("badframe", script: #"""
            serve({"initialize": lambda msg: write_raw(b"Content-Length: abc\r\n\r\n{}")})
            """#)
        let report = f.run()
        let error = try #require(report.error)
        #expect(error.kind == .protocolError)
        #expect(report.exitCode == 7)
        #expect(error.details["phase"] == "launch")
        #expect(error.message == "test.badframe broke the protocol during launch: the plugin sent a malformed frame: invalid Content-Length 'abc' (expected a non-negative decimal integer)")
        try f.expectNoProcessLeft()
    }

    @Test("a print() on the protocol channel: protocolError")
    func textOnProtocolChannel() throws {
        let f = try Fixture("printfd4", script: #"""
            serve({"initialize": lambda msg: write_raw(("debug: got " + json.dumps(msg) + "\n").encode() * 40)})
            """#)
        let error = try #require(f.run().error)
        #expect(error.kind == .protocolError)
        #expect(error.message.contains("malformed frame"), "\(error.message)")
        try f.expectNoProcessLeft()
    }

    @Test("a frame over the host's frame limit: protocolError")
    func frameTooLarge() throws {
        let f = try Fixture("hugeframe", script: #"""
            serve({"handle": lambda msg: reply(msg, {"code": "success", "properties": {"big": "x" * (2 << 20)}})})
            """#)
        let report = f.run(options: .with { $0.policy = Fixture.policy { $0.maxMessageBytes = 1 << 20 } })
        let error = try #require(report.error)
        #expect(error.kind == .protocolError)
        #expect(error.details["phase"] == "handle")
        #expect(error.message.contains("exceeds the limit of \(1 << 20) bytes"), "\(error.message)")
        try f.expectNoProcessLeft()
    }

    @Test("a frame whose body is not JSON: protocolError")
    func invalidJSONBody() throws {
        let f = try Fixture("badjson", script: #"""
            serve({"initialize": lambda msg: write_raw(frame(b"{'jsonrpc': '2.0', 'id': 1}"))})
            """#)
        let error = try #require(f.run().error)
        #expect(error.kind == .protocolError)
        #expect(error.message.hasPrefix("test.badjson broke the protocol during launch: the plugin sent an invalid message: message body is not valid JSON"), "\(error.message)")
        try f.expectNoProcessLeft()
    }

    @Test("a JSON body that is not JSON-RPC: protocolError")
    func notJSONRPC() throws {
        let f = try Fixture("notrpc", script: #"""
            serve({"initialize": lambda msg: write_raw(frame(b'{"id": 1, "result": {}}'))})
            """#)
        let error = try #require(f.run().error)
        #expect(error.kind == .protocolError)
        #expect(error.message.hasSuffix(#"the plugin sent an invalid message: message lacks "jsonrpc": "2.0""#), "\(error.message)")
        try f.expectNoProcessLeft()
    }

    @Test("a wrong protocolVersion in the handshake: protocolError")
    func wrongProtocolVersion() throws {
        let f = try Fixture("version", script: #"serve({"initialize": lambda msg: handshake(msg, version=2)})"#)
        let error = try #require(f.run().error)
        #expect(error.kind == .protocolError)
        #expect(error.details["phase"] == "launch")
        #expect(error.message == "test.version broke the protocol during launch: it speaks protocol version 2, this host speaks version 1")
        try f.expectNoProcessLeft()
    }

    @Test("a wrong plugin id in the handshake: protocolError naming both ids and the manifest")
    func wrongPluginID() throws {
        let f = try Fixture("impostor", script: #"serve({"initialize": lambda msg: handshake(msg, plugin_id="com.example.uppercase")})"#)
        let error = try #require(f.run().error)
        #expect(error.kind == .protocolError)
        let manifest = f.plugin.directory.appendingPathComponent("manifest.json").path
        #expect(error.message == "test.impostor broke the protocol during launch: it introduced itself as 'com.example.uppercase' but its manifest (\(manifest)) says 'test.impostor'")
        try f.expectNoProcessLeft()
    }

    @Test("a handshake that does not list the intent: protocolError")
    func handshakeWithoutIntent() throws {
        let f = try Fixture("nointent", script: #"serve({"initialize": lambda msg: handshake(msg, intents=["Other"])})"#)
        let error = try #require(f.run().error)
        #expect(error.kind == .protocolError)
        #expect(error.message.hasSuffix("its handshake does not list the intent 'Echo' that its manifest declares (it lists: Other)"), "\(error.message)")
        try f.expectNoProcessLeft()
    }

    @Test("a malformed initialize result: protocolError naming the missing field")
    func malformedHandshake() throws {
        let f = try Fixture("badhandshake", script: #"serve({"initialize": lambda msg: reply(msg, {"protocolVersion": 1, "intents": ["Echo"]})})"#)
        let error = try #require(f.run().error)
        #expect(error.kind == .protocolError)
        #expect(error.message.hasSuffix("its initialize result is malformed: missing required field 'plugin'"), "\(error.message)")
        try f.expectNoProcessLeft()
    }

    @Test("answering a request twice: protocolError")
    func answersTwice() throws {
        let f = try Fixture("twice", script: #"""
            def twice(msg):
                reply(msg, {"code": "success"})
                reply(msg, {"code": "success"})
            serve({"handle": twice})
            """#)
        let report = f.run()
        let error = try #require(report.error)
        #expect(error.kind == .protocolError)
        #expect(error.message.contains("the plugin answered request 4 twice"), "\(error.message)")
        #expect(report.response == nil, "a response must not be reported along with the protocol error")
        #expect(report.exitCode == 7)
        try f.expectNoProcessLeft()
    }

    @Test("answering twice during initialize: protocolError in the launch phase")
    func answersTwiceEarly() throws {
        let f = try Fixture("twiceearly", script: #"""
            def twice(msg):
                handshake(msg)
                handshake(msg)
            serve({"initialize": twice})
            """#)
        let error = try #require(f.run().error)
        #expect(error.kind == .protocolError)
        #expect(error.message.contains("answered request 1 twice"), "\(error.message)")
        try f.expectNoProcessLeft()
    }

    @Test("answering an id the host never sent: protocolError")
    func answersUnknownID() throws {
        let f = try Fixture("strangeid", script: #"""
            serve({"confirm": lambda msg: send({"jsonrpc": "2.0", "id": 99, "result": {"code": "ready"}})})
            """#)
        let report = f.run()
        let error = try #require(report.error)
        #expect(error.kind == .protocolError)
        #expect(error.details["phase"] == "confirm")
        #expect(error.message == "test.strangeid broke the protocol during confirm: the plugin answered request 99, which the host never sent")
        try f.expectNoProcessLeft()
    }

    @Test("an error response without an id: protocolError carrying the plugin's message")
    func errorWithoutID() throws {
        let f = try Fixture("nullid", script: #"""
            serve({"confirm": lambda msg: send({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "I could not parse that"}})})
            """#)
        let error = try #require(f.run().error)
        #expect(error.kind == .protocolError)
        #expect(error.message.hasSuffix("the plugin reported a protocol error: I could not parse that (code -32700)"), "\(error.message)")
        try f.expectNoProcessLeft()
    }

    @Test("a response code neither standard nor declared: protocolError listing the declared codes")
    func undeclaredResponseCode() throws {
        let f = try Fixture(
            "undeclared", intents: #"[{"name":"Echo","parameters":[{"name":"text","type":"string"}],"responses":[{"code":"soldOut"}]}]"#,
            script: #"serve({"handle": lambda msg: reply(msg, {"code": "sortOf"})})"#)
        let report = f.run()
        let error = try #require(report.error)
        #expect(error.kind == .protocolError)
        #expect(error.details["phase"] == "handle")
        #expect(error.message == "test.undeclared broke the protocol during handle: it answered handle with the code 'sortOf', which is neither a standard code nor one its manifest declares (declared: soldOut)")
        #expect(report.response == nil)
        try f.expectNoProcessLeft()
    }

    @Test("a malformed handle response: protocolError")
    func malformedResponse() throws {
        let f = try Fixture("badresponse", script: #"serve({"handle": lambda msg: reply(msg, {"properties": {}})})"#)
        let error = try #require(f.run().error)
        #expect(error.kind == .protocolError)
        #expect(error.message.hasSuffix("its handle response is malformed: missing required field 'code'"), "\(error.message)")
        try f.expectNoProcessLeft()
    }

    @Test("a resolution to a value of the wrong type: protocolError")
    func resolvesToWrongType() throws {
        let f = try Fixture("badresolve", script: #"serve({"resolve": lambda msg: reply(msg, {"result": "success", "value": 5})})"#)
        let error = try #require(f.run().error)
        #expect(error.kind == .protocolError)
        #expect(error.details["phase"] == "resolve")
        #expect(error.message.hasSuffix("it resolved 'text' to a value that does not fit its type: expected a string, got integer"), "\(error.message)")
        try f.expectNoProcessLeft()
    }

    @Test("an unknown resolution kind: protocolError")
    func unknownResolution() throws {
        let f = try Fixture("maybe", script: #"serve({"resolve": lambda msg: reply(msg, {"result": "maybe"})})"#)
        let error = try #require(f.run().error)
        #expect(error.kind == .protocolError)
        #expect(error.message.contains("its resolution of 'text' is malformed"), "\(error.message)")
        try f.expectNoProcessLeft()
    }

    // MARK: Errors the plugin reports

    @Test("an error response from a handler: pluginError with the plugin's message and code")
    func pluginError() throws {
        let f = try Fixture("throws", script: #"serve({"handle": lambda msg: reply_error(msg, -32000, "the soup pot is empty")})"#)
        let report = f.run()
        let error = try #require(report.error)
        #expect(error.kind == .pluginError)
        #expect(report.exitCode == 12)
        #expect(error.message == "test.throws answered handle with an error: the soup pot is empty (code -32000)")
        #expect(error.details == ["phase": "handle", "code": -32000])
        try f.expectNoProcessLeft()
    }

    @Test("methodNotFound from the plugin is a protocolError")
    func methodNotFound() throws {
        let f = try Fixture("nomethod", script: #"serve({"confirm": lambda msg: reply_error(msg, -32601, "what is confirm?")})"#)
        let error = try #require(f.run().error)
        #expect(error.kind == .protocolError)
        #expect(error.details["code"] == -32601)
        #expect(error.details["phase"] == "confirm")
        try f.expectNoProcessLeft()
    }

    // MARK: Output that is only log

    @Test("junk on stdout and stderr does not break the run: it is only log")
    func junkOnStdout() throws {
        let f = try Fixture("noisy", script: #"""
            print("Content-Length: 5\r\n\r\nhello")
            print("{\"jsonrpc\": \"2.0\", \"id\": 1, \"result\": {}}")
            sys.stdout.buffer.write(b"\xff\xfe\x00 binary junk\n")
            sys.stdout.write("line %d of a lot of output\n" * 5000 % tuple(range(5000)))
            sys.stdout.flush()
            sys.stderr.write("a warning on stderr\n")
            sys.stderr.flush()
            def handle(msg):
                print("handling now, no newline at the end", end="")
                sys.stdout.flush()
                default(msg)
            serve({"handle": handle})
            """#)
        let log = LogLines()
        let report = f.run(options: .with { $0.log = log.sink })
        #expect(report.error == nil, "\(String(describing: report.error))")
        #expect(report.response?.properties["echo"] == "hi")
        let lines = log.all
        #expect(lines.contains("[test.noisy stdout] Content-Length: 5\r"), "\(lines.prefix(5))")
        #expect(lines.contains("[test.noisy stdout] line 4999 of a lot of output"))
        #expect(lines.contains("[test.noisy stderr] a warning on stderr"))
        #expect(lines.contains("[test.noisy stdout] handling now, no newline at the end"), "a last line without a newline should still be logged")
        try f.expectNoProcessLeft()
    }

    @Test("log notifications reach the log; unknown notifications are ignored")
    func logNotifications() throws {
        let f = try Fixture("logger", script: #"""
            def handle(msg):
                send({"jsonrpc": "2.0", "method": "log", "params": {"level": "debug", "message": "stirring"}})
                send({"jsonrpc": "2.0", "method": "somethingElse", "params": [1, 2]})
                send({"jsonrpc": "2.0", "method": "progress", "params": {"fraction": 0.5}})
                default(msg)
            serve({"handle": handle})
            """#)
        let log = LogLines()
        let report = f.run(options: .with { $0.log = log.sink })
        #expect(report.exitCode == 0)
        #expect(log.all.contains("[test.logger log debug] stirring"), "\(log.all)")
        try f.expectNoProcessLeft()
    }

    @Test("a request for a service the host does not offer gets methodNotFound, and the run goes on")
    func requestToHost() throws {
        let f = try Fixture("asker", script: #"""
            def handle(msg):
                send({"jsonrpc": "2.0", "id": "q1", "method": "soup.order", "params": {"soup": "pea"}})
                answer = read_message()
                note("answer", json.dumps(answer))
                default(msg)
            serve({"handle": handle})
            """#)
        let report = f.run()
        #expect(report.exitCode == 0)
        let answer = try #require(f.plugin.note("answer"))
        let value = try JSONDecoder().decode(JSONValue.self, from: Data(answer.utf8))
        #expect(value["id"] == "q1")
        #expect(value["error"]?["code"] == .int(Int64(RPCError.methodNotFound)))
        #expect(value["error"]?["message"] == "the host does not offer 'soup.order'")
        try f.expectNoProcessLeft()
    }

    // MARK: Response codes

    @Test("custom response codes: declared success exits 0, others exit 1")
    func customCodes() throws {
        let intents = #"[{"name":"Echo","parameters":[{"name":"text","type":"string"}],"responses":[{"code":"ordered","success":true},{"code":"soldOut"}]}]"#
        let f = try Fixture("codes", intents: intents, script: #"serve({"handle": lambda msg: reply(msg, {"code": msg["params"]["parameters"]["text"]})})"#)
        let ordered = f.run(["text": "ordered"])
        #expect(ordered.response?.code == "ordered")
        #expect(ordered.responseIsSuccess)
        #expect(ordered.exitCode == 0)
        let soldOut = f.run(["text": "soldOut"])
        #expect(soldOut.response?.code == "soldOut")
        #expect(!soldOut.responseIsSuccess)
        #expect(soldOut.exitCode == 1)
        let failure = f.run(["text": "failure"])
        #expect(failure.exitCode == 1)
        #expect(failure.error == nil)
        try f.expectNoProcessLeft()
    }

    @Test("a confirm that is neither ready nor success is the answer: handle is not called")
    func confirmFailure() throws {
        let f = try Fixture("noconfirm", script: #"""
            def handle(msg):
                note("handled", "yes")
                default(msg)
            serve({"confirm": lambda msg: reply(msg, {"code": "failure", "dialog": {"full": "The kitchen is closed."}}),
                   "handle": handle})
            """#)
        let report = f.run()
        #expect(report.response?.code == "failure")
        #expect(report.response?.dialog?.full == "The kitchen is closed.")
        #expect(report.exitCode == 1)
        #expect(f.plugin.note("handled") == nil)
        try f.expectNoProcessLeft()
    }

    // MARK: Time

    @Test("never answers initialize: timeout in the launch phase, with deadlineMs and elapsedMs")
    func neverAnswersInitialize() throws {
        let f = try Fixture("silent", script: #"serve({"initialize": lambda msg: hang()})"#)
        let started = Date()
        let report = f.run(options: .with { $0.deadlineMs = 500 })
        let elapsed = Date().timeIntervalSince(started)
        let error = try #require(report.error)
        #expect(error.kind == .timeout)
        #expect(report.exitCode == 8)
        #expect(error.details["phase"] == "launch")
        #expect(error.details["deadlineMs"] == 500)
        let elapsedMs = try #require(error.details["elapsedMs"]?.doubleValue)
        #expect(elapsedMs >= 500)
        #expect(elapsedMs < 10_000)
        #expect(elapsed < 15, "the host took \(elapsed) s to give up")
        #expect(error.message.hasPrefix("test.silent did not answer launch within its deadline of 500 ms"), "\(error.message)")
        try f.expectNoProcessLeft()
    }

    @Test("never answers handle: timeout in the handle phase; the plugin is sent cancel, then its whole group is killed")
    func neverAnswersHandle() throws {
        let f = try Fixture("stuck", script: #"""
            def stuck(msg):
                spawn_sleeper("child")
                while True:
                    m = read_message()
                    if m is None:
                        hang()
                    if m.get("method") == "cancel":
                        note("cancel", json.dumps(m.get("params")))
            serve({"handle": stuck})
            """#)
        let report = f.run(options: .with { $0.deadlineMs = 2_000 })
        let error = try #require(report.error)
        #expect(error.kind == .timeout)
        #expect(error.details["phase"] == "handle")
        #expect(error.details["deadlineMs"] == 2_000)
        #expect((error.details["elapsedMs"]?.doubleValue ?? 0) >= 2_000)
        let cancel = try #require(f.plugin.note("cancel"), "the plugin was not sent cancel")
        #expect(try JSONDecoder().decode(JSONValue.self, from: Data(cancel.utf8)) == ["reason": "timeout"])
        try f.expectNoProcessLeft()
        let child = try #require(f.plugin.note("child").flatMap { pid_t($0) })
        expectGone(noted: child, mentioning: f.plugin.directory.path, "the plugin's child process")
    }

    @Test("does not exit after the channel closes: the response stands and the process is killed after exitGraceMs")
    func lingers() throws {
        let f = try Fixture("lingering", script: #"serve(at_eof=hang)"#)
        let started = Date()
        let report = f.run(options: .with { $0.policy = Fixture.policy { $0.exitGraceMs = 200 } })
        #expect(report.error == nil, "\(String(describing: report.error))")
        #expect(report.response?.properties["echo"] == "hi")
        #expect(Date().timeIntervalSince(started) < 10)
        try f.expectNoProcessLeft()
    }

    @Test("a daemonized grandchild that left the plugin's process group is killed when the plugin ends")
    func orphanedChild() throws {
        let f = try Fixture("parent", script: #"""
            spawn_sleeper("child", detach=True)
            serve()
            """#)
        let report = f.run()
        #expect(report.exitCode == 0)
        try f.expectNoProcessLeft()
        let child = try #require(f.plugin.note("child").flatMap { pid_t($0) })
        expectGone(noted: child, mentioning: f.plugin.directory.path, "the plugin's child process")
    }

    // MARK: Size

    @Test("closes its protocol channel and waits: reported at once (protocolError, the phase) and nothing is left")
    func closesChannel() throws {
        let f = try Fixture("mute", script: #"""
            def mute(msg):
                os.close(4)
                hang()
            serve({"initialize": mute})
            """#)
        let started = Date()
        let report = f.run(options: .with { $0.deadlineMs = 5_000 })
        let error = try #require(report.error)
        #expect(error.kind == .protocolError, "\(error)")
        #expect(error.message.contains("closed its channel"), "\(error.message)")
        #expect(error.details["phase"] == "launch")
        #expect(Date().timeIntervalSince(started) < 3)
        try f.expectNoProcessLeft()
    }

    @Test("a 5 MB request and a 5 MB response go through")
    func largeMessages() throws {
        let f = try Fixture("bulky", script: #"""
            def handle(msg):
                text = msg["params"]["parameters"]["text"]
                reply(msg, {"code": "success", "properties": {"length": len(text), "big": text[::-1] + "!"}})
            serve({"handle": handle})
            """#)
        let text = String(repeating: "abcdefghij", count: 500_000)
        // In-app mode: Python needs more than the extension mode's 30 MiB for several copies of 5 MB.
        let report = f.run(["text": .string(text)], options: .with { $0.mode = .inApp })
        #expect(report.error == nil, "\(String(describing: report.error))")
        let properties = try #require(report.response?.properties)
        #expect(properties["length"] == .int(5_000_000))
        let big = try #require(properties["big"]?.stringValue)
        #expect(big.utf8.count == 5_000_001)
        #expect(big.hasPrefix("jihgfedcba") && big.hasSuffix("a!"))
        try f.expectNoProcessLeft()
    }
}
