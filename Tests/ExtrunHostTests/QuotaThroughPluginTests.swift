import ExtrunHost
import ExtrunProtocol
import ExtrunStore
import Foundation
import Testing

/// A plugin writing in a loop is stopped by its owner's quota, and the store is as
/// it was before the refused write (issue 16: one plugin stored 600 MB in six seconds).
@Suite("Quotas stop a plugin writing in a loop")
struct QuotaThroughPluginTests {
    /// Sets globals of 64 KiB until the host refuses one; answers how many it set and the refusal.
    static let filler = #"""
        def call(method, params):
            call.n = getattr(call, "n", 0) + 1
            rid = "q%d" % call.n
            send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
            while True:
                msg = read_message()
                if msg is not None and msg.get("id") == rid and "method" not in msg:
                    return msg

        def handle(msg):
            value = "x" * 65536
            count = 0
            while count < 10000:
                answer = call("globals.set", {"name": "fill%05d" % count, "value": value})
                if "error" in answer:
                    reply(msg, {"code": "success", "properties": {"echo": json.dumps({"count": count, "error": answer["error"]})}})
                    return
                count += 1
            reply(msg, {"code": "success", "properties": {"echo": json.dumps({"count": count})}})
        serve({"handle": handle})
        """#

    @Test("a plugin setting globals in a loop gets quotaExceeded with the limit and usage; the refused write left nothing")
    func loopIsStopped() throws {
        let tmp = try TempDirectory("quota-loop")
        let plugin = try ScriptPlugin(in: tmp.url.appendingPathComponent("plugins"), name: "filler", script: Self.filler)
        let home = tmp.url.appendingPathComponent("home")
        let host = ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [tmp.url.appendingPathComponent("plugins")]))
        let limit: Int64 = 1 << 20
        try Store(home: home).setQuota(of: "TESTTEAM", ["bytes": limit])
        try host.sign(pluginIn: plugin.directory)

        var options = HandleOptions()
        options.donate = false  // the run's own donation would add to the usage
        let report = host.handle(IntentInvocation(intent: "Echo", parameters: ["text": "go"], source: "test"), options: options)
        let echo = try #require(report.response?.properties["echo"]?.stringValue, "\(String(describing: report.error))")
        let answer = try JSONCoding.parse(json: Data(echo.utf8))
        let count = try #require(answer["count"]?.intValue)
        #expect(count > 0 && count < 20, "\(count) globals of 64 KiB under 1 MiB")
        let data = try #require(answer["error"]?["data"])
        #expect(data["kind"] == "quotaExceeded")
        #expect(data["quota"] == "bytes")
        #expect(data["limit"] == .int(limit))
        let usage = try #require(data["usage"]?.intValue)
        let adding = try #require(data["adding"]?.intValue)
        #expect(usage <= limit && usage + adding > limit)
        #expect(answer["error"]?["message"]?.stringValue?.contains("Nothing was written") == true)

        let store = try Store(home: home)
        let names = try store.globals(of: "TESTTEAM").list().map(\.name)
        #expect(names.count == Int(count))
        #expect(!names.contains(String(format: "fill%05d", count)), "the refused global is not there")
        #expect(try store.quota(of: "TESTTEAM").usage.bytes == usage, "the usage is what it was before the refused write")
        #expect(processes(mentioning: plugin.directory.path).isEmpty)
    }
}
