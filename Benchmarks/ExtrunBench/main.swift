// ExtrunBench: in-process measurements of the host library, for Scripts/bench.
//
//   ExtrunBench dispatch --intent FILE --plugins DIR [--count N] [--warmup N] [--seconds S] [--variants LIST]
//       Runs the intent through Host.handle again and again in this one process
//       (each call starts a new plugin process: cold; `warm` reuses one).
//       LIST: comma-separated policy variants (sandboxed, unsandboxed,
//       seccomp-only, namespaces-only; default sandboxed). Each round runs every
//       variant once, in alternating order, so that their differences are the
//       sandbox's parts' costs without the CLI's process start.
//   ExtrunBench warm --intent FILE --plugins DIR [--count N] [--warmup N] [--seconds S] [--variants LIST]
//       The same intent through one PluginPool per variant (warm plugin reuse,
//       docs/protocol.md §15): the plugin process is started once, then every
//       intent is a new session in it. Variants alternate in blocks of 100
//       intents. Reports intents per second and per-intent latency percentiles.
//   ExtrunBench parallel --intent FILE --plugins DIR [--callers N] [--count N] [--warmup N] [--variant NAME]
//       The same intent through ONE PluginPool from N threads at once (default 2):
//       each intent in flight has a warm process of its own (N processes).
//       Reports the intents per second of all callers together (intents / wall
//       time) and the per-intent latency percentiles over all of them.
//   ExtrunBench store --home DIR [--count N]
//       Globals through the store library (Store, Globals: SQLite + AES-GCM):
//       set then get of N globals with 32-byte values, per second and p50/p99.
//       With EXTRUN_STORE set to a postgresql:// URL, the same on that server.
//   ExtrunBench pgbridge --store URL [--count N]
//       What the store's blocking bridge to postgres-nio's event loop costs per
//       statement (PostgresBridge.swift).
//   ExtrunBench donate --home DIR [--count N] [--callers N]
//       Donations through the store library alone (Donations.donate, durable: false,
//       as a run donates): a MakeUppercase-sized interaction sealed and written
//       N times from N callers' threads at once (group commit). Reports
//       donations per second, latency percentiles, and the process's CPU time per
//       donation (getrusage), so that the donation's share of a run can be told.
//   ExtrunBench exchange [--count N] [--warmup N] [--seconds S]
//       The framing and JSON cost of the four exchanges of one MakeUppercase
//       intent (initialize, resolve, confirm, handle), both sides, no I/O:
//       exactly the calls the host (PluginConnection, IntentLifecycle) and the SDK
//       (PluginChannel, Server) make per message.
//   ExtrunBench handle --intent FILE
//       What `extrun handle FILE` does (Sources/extrun/HandleCommand.swift:
//       read the intent file, Host().handle, print the report as pretty JSON,
//       exit with its status) without ArgumentParser: the CLI with a
//       hand-parsed fast path would cost this much.
//   ExtrunBench json [--count N]
//       What the parts of `exchange` cost, next to other ways to do the same
//       work: Message.decode (JSONParser) vs JSONSerialization;
//       JSONCoding.value(of:) and JSONCoding.decode(_:from: JSONValue) vs one
//       reused coder on the bytes.
//
// Prints one JSON object on stdout. Latencies are in microseconds.
import ExtrunHost
import ExtrunProtocol
import ExtrunStore
import ExtrunStoreFill
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

func nowNs() -> UInt64 {
    var t = timespec()
    clock_gettime(CLOCK_MONOTONIC, &t)
    return UInt64(t.tv_sec) * 1_000_000_000 + UInt64(t.tv_nsec)
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("ExtrunBench: \(message)\n".utf8))
    exit(1)
}

/// VmRSS and VmHWM of this process, in KiB.
func ownMemoryKB() -> (rss: Int, hwm: Int) {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return (0, 0) }
    func field(_ name: String) -> Int {
        for line in status.split(separator: "\n") where line.hasPrefix(name) {
            return Int(line.dropFirst(name.count).split(whereSeparator: { $0 == " " || $0 == "\t" }).first ?? "") ?? 0
        }
        return 0
    }
    return (field("VmRSS:"), field("VmHWM:"))
}

struct Summary: Encodable {
    var count: Int
    var meanUs: Double
    var p50Us: Double
    var p90Us: Double
    var p99Us: Double
    var minUs: Double
    var maxUs: Double
    var perSecond: Double

    init(samplesNs: [UInt64]) {
        let sorted = samplesNs.sorted()
        func at(_ q: Double) -> Double {
            guard !sorted.isEmpty else { return 0 }
            // Nearest rank.
            let rank = min(sorted.count - 1, max(0, Int((q * Double(sorted.count)).rounded(.up)) - 1))
            return Double(sorted[rank]) / 1000
        }
        count = sorted.count
        let total = sorted.reduce(0.0) { $0 + Double($1) }
        meanUs = sorted.isEmpty ? 0 : total / Double(sorted.count) / 1000
        p50Us = at(0.50)
        p90Us = at(0.90)
        p99Us = at(0.99)
        minUs = Double(sorted.first ?? 0) / 1000
        maxUs = Double(sorted.last ?? 0) / 1000
        perSecond = total > 0 ? Double(sorted.count) / (total / 1e9) : 0
    }
}

// MARK: Arguments

var arguments = Array(CommandLine.arguments.dropFirst())
guard let command = arguments.first else {
    fail("usage: ExtrunBench dispatch|exchange [options] (see Benchmarks/ExtrunBench/main.swift)")
}
arguments.removeFirst()
var options: [String: String] = [:]
while !arguments.isEmpty {
    let name = arguments.removeFirst()
    guard name.hasPrefix("--"), !arguments.isEmpty else { fail("bad argument \(name)") }
    options[String(name.dropFirst(2))] = arguments.removeFirst()
}
@MainActor func option(_ name: String, _ fallback: Int) -> Int { options[name].flatMap { Int($0) } ?? fallback }
@MainActor func option(_ name: String, _ fallback: Double) -> Double { options[name].flatMap { Double($0) } ?? fallback }

let encoder = JSONEncoder()
encoder.outputFormatting = [.sortedKeys]

// MARK: populate

/// Fills an owner of `$EXTRUN_HOME` with generated globals and bookmarks, fast, for the
/// migration benchmark (Scripts/bench, docs/migration.md): `ExtrunBench populate --owner OLD
/// --globals N [--value-bytes 32] [--bookmarks N --bookmark-target PATH] [--container-files N]`.
/// The fill is ExtrunStoreFill (Benchmarks/StoreFill), outside every product; with EXTRUN_STORE
/// naming a PostgreSQL server, PostgresFill.swift (globals only).
@MainActor func populate() {
    guard let owner = options["owner"] else { fail("populate needs --owner OWNER (and --globals N, --bookmarks N, ...)") }
    do {
        let store = try Store(home: HostPaths.fromEnvironment().home)
        if case .postgres(let server) = store.backend {
            // EXTRUN_STORE names a server (PostgresFill.swift): globals only.
            guard option("bookmarks", 0) == 0, option("container-files", 0) == 0 else { fail("populate on PostgreSQL fills globals only") }
            try populatePostgres(store, server, owner: owner, globals: option("globals", 0), valueBytes: option("value-bytes", 32))
            return
        }
        try store.populateForBenchmark(
            owner: owner,
            BulkFill(
                globals: option("globals", 0), valueBytes: option("value-bytes", 32), bookmarks: option("bookmarks", 0),
                bookmarkTarget: options["bookmark-target"], containerFiles: option("container-files", 0)))
    } catch {
        fail("populate: \(error)")
    }
}

// MARK: dispatch

@MainActor func dispatch() {
    guard let intentPath = options["intent"], let pluginDirectory = options["plugins"] else {
        fail("dispatch needs --intent FILE --plugins DIR")
    }
    let count = option("count", 200)
    let warmup = option("warmup", 5)
    let seconds = option("seconds", 0.0)
    let sandbox = options["variants"] ?? "sandboxed"

    let (host, home, invocation) = benchHost(pluginDirectory: pluginDirectory, intentPath: intentPath)
    defer { try? FileManager.default.removeItem(at: home) }
    let known = policyVariants()
    var variants: [(name: String, options: HandleOptions)] = []
    for name in sandbox.split(separator: ",").map(String.init) {
        guard let options = known[name] else { fail("--variants: unknown variant \(name) (sandboxed, unsandboxed, seccomp-only, namespaces-only)") }
        variants.append((name, options))
    }
    guard !variants.isEmpty else { fail("--variants is empty") }
    _dispatch(host: host, invocation: invocation, variants: variants, count: count, warmup: warmup, seconds: seconds)
}

/// The policy variants: the defaults (seccomp, pid and ipc namespaces), and
/// the same with parts of the sandbox turned off. Rlimits and the supervisor
/// process are always there.
func policyVariants() -> [String: HandleOptions] {
    func policy(seccomp: Bool, namespaces: Bool) -> HandleOptions {
        var policy = SandboxPolicy.default
        policy.seccomp = seccomp
        if !namespaces {
            policy.namespaces.pid = false
            policy.namespaces.network = false
            policy.namespaces.ipc = false
            policy.namespaces.mount = false
            policy.namespaces.user = false
        }
        var options = HandleOptions()
        options.policy = policy
        // Dispatch alone: the donation of each successful intent (a store write) is
        // measured with the store, and by the CLI rows, which donate as users do.
        options.donate = false
        return options
    }
    return [
        "sandboxed": policy(seccomp: true, namespaces: true),
        "unsandboxed": policy(seccomp: false, namespaces: false),
        "seccomp-only": policy(seccomp: true, namespaces: false),
        "namespaces-only": policy(seccomp: false, namespaces: true),
    ]
}

@MainActor func _dispatch(host: ExtrunHost.Host, invocation: IntentInvocation, variants: [(name: String, options: HandleOptions)], count: Int, warmup: Int, seconds: Double) {
    func once(_ options: HandleOptions) -> UInt64 {
        let start = nowNs()
        let report = host.handle(invocation, options: options)
        let elapsed = nowNs() - start
        if let error = report.error { fail("Host.handle failed: \(error.kind.rawValue): \(error.message)") }
        guard report.responseIsSuccess else { fail("Host.handle: the plugin did not answer success") }
        return elapsed
    }

    for i in 0..<warmup { for variant in variants { _ = once(variant.options) }; _ = i }
    let memoryBefore = ownMemoryKB()
    var samples: [String: [UInt64]] = [:]
    let started = nowNs()
    var rounds = 0
    while rounds < count {
        if seconds > 0, rounds >= 10, Double(nowNs() - started) / 1e9 > seconds { break }
        // Alternate the order (ABBA) so that no variant always runs first.
        let order = rounds % 2 == 0 ? variants : variants.reversed()
        for variant in order { samples[variant.name, default: []].append(once(variant.options)) }
        rounds += 1
    }
    let elapsed = Double(nowNs() - started) / 1e9
    let memoryAfter = ownMemoryKB()

    struct Output: Encodable {
        var kind = "dispatch"
        var rounds: Int
        var elapsedSeconds: Double
        var summary: [String: Summary]
        var samplesUs: [String: [Double]]
        var rssBeforeKB: Int
        var rssAfterKB: Int
        var peakRSSKB: Int
        var note = "each Host.handle starts a new plugin process (cold); `warm` measures warm reuse"
    }
    let output = Output(
        rounds: rounds, elapsedSeconds: elapsed, summary: samples.mapValues { Summary(samplesNs: $0) },
        samplesUs: samples.mapValues { $0.map { Double($0) / 1000 } },
        rssBeforeKB: memoryBefore.rss, rssAfterKB: memoryAfter.rss, peakRSSKB: memoryAfter.hwm)
    FileHandle.standardOutput.write(try! encoder.encode(output))
    FileHandle.standardOutput.write(Data("\n".utf8))
}

// MARK: warm

@MainActor func warm() {
    guard let intentPath = options["intent"], let pluginDirectory = options["plugins"] else {
        fail("warm needs --intent FILE --plugins DIR")
    }
    let count = option("count", 20_000)
    let warmup = option("warmup", 200)
    let seconds = option("seconds", 0.0)
    let names = (options["variants"] ?? "sandboxed").split(separator: ",").map(String.init)
    let (host, home, invocation) = benchHost(pluginDirectory: pluginDirectory, intentPath: intentPath)
    defer { try? FileManager.default.removeItem(at: home) }
    let known = policyVariants()
    var variants: [(name: String, options: HandleOptions, pool: PluginPool)] = []
    for name in names {
        guard let options = known[name] else { fail("--variants: unknown variant \(name)") }
        variants.append((name, options, PluginPool(host: host)))
    }
    func once(_ pool: PluginPool, _ options: HandleOptions) -> UInt64 {
        let start = nowNs()
        let report = pool.handle(invocation, options: options)
        let elapsed = nowNs() - start
        if let error = report.error { fail("PluginPool.handle failed: \(error.kind.rawValue): \(error.message)") }
        guard report.responseIsSuccess else { fail("PluginPool.handle: the plugin did not answer success") }
        return elapsed
    }
    for variant in variants { for _ in 0..<warmup { _ = once(variant.pool, variant.options) } }
    let memoryBefore = ownMemoryKB()
    var samples: [String: [UInt64]] = [:]
    var busy: [String: UInt64] = [:]
    let started = nowNs()
    var done = 0
    var block = 0
    while done < count {
        if seconds > 0, done >= 1000, Double(nowNs() - started) / 1e9 > seconds { break }
        let order = block % 2 == 0 ? variants : variants.reversed()
        for variant in order {
            let blockStart = nowNs()
            for _ in 0..<100 { samples[variant.name, default: []].append(once(variant.pool, variant.options)) }
            busy[variant.name, default: 0] += nowNs() - blockStart
        }
        done += 100
        block += 1
    }
    let memoryAfter = ownMemoryKB()
    struct VariantOutput: Encodable {
        var summary: Summary
        var intentsPerSecond: Double
        var launches: Int
        var reuses: Int
    }
    struct Output: Encodable {
        var kind = "warm"
        var elapsedSeconds: Double
        var variants: [String: VariantOutput]
        var rssBeforeKB: Int
        var rssAfterKB: Int
        var peakRSSKB: Int
    }
    var outputs: [String: VariantOutput] = [:]
    for variant in variants {
        let list = samples[variant.name] ?? []
        outputs[variant.name] = VariantOutput(
            summary: Summary(samplesNs: list), intentsPerSecond: Double(list.count) / (Double(busy[variant.name] ?? 1) / 1e9),
            launches: variant.pool.launches, reuses: variant.pool.reuses)
        variant.pool.close()
    }
    let output = Output(
        elapsedSeconds: Double(nowNs() - started) / 1e9, variants: outputs,
        rssBeforeKB: memoryBefore.rss, rssAfterKB: memoryAfter.rss, peakRSSKB: memoryAfter.hwm)
    FileHandle.standardOutput.write(try! encoder.encode(output))
    FileHandle.standardOutput.write(Data("\n".utf8))
}

// MARK: parallel

@MainActor func parallel() {
    guard let intentPath = options["intent"], let pluginDirectory = options["plugins"] else {
        fail("parallel needs --intent FILE --plugins DIR")
    }
    let callers = max(1, option("callers", 2))
    let count = option("count", 20_000)
    let warmup = option("warmup", 200)
    let name = options["variant"] ?? "sandboxed"
    let (host, home, invocation) = benchHost(pluginDirectory: pluginDirectory, intentPath: intentPath, home: options["home"])
    defer { if options["home"] == nil { try? FileManager.default.removeItem(at: home) } }
    guard var variantOptions = policyVariants()[name] else { fail("--variant: unknown variant \(name)") }
    // --donate 1: each successful intent donated, as `extrun serve` and the CLI do by default.
    if options["donate"] != nil { variantOptions.donate = true }
    let handleOptions = variantOptions
    let pool = PluginPool(host: host, maxIdleProcesses: callers)
    /// Runs `n` intents on this thread; their latencies in ns.
    @Sendable func run(_ n: Int) -> [UInt64] {
        var samples: [UInt64] = []
        samples.reserveCapacity(n)
        for _ in 0..<n {
            let start = nowNs()
            let report = pool.handle(invocation, options: handleOptions)
            samples.append(nowNs() - start)
            if let error = report.error { fail("PluginPool.handle failed: \(error.kind.rawValue): \(error.message)") }
            guard report.responseIsSuccess else { fail("PluginPool.handle: the plugin did not answer success") }
            if handleOptions.donate, report.donation?.donated != true {
                fail("--donate: the run was not donated (\(report.donation?.reason ?? "no outcome")): is the plugin signed and its owner trusted in --home?")
            }
        }
        return samples
    }
    /// Runs `n` intents on each of `callers` threads at once; all latencies and the wall time.
    func together(_ n: Int) -> ([UInt64], UInt64) { onThreads(callers) { _ in run(n) } }
    _ = together(warmup)
    let memoryBefore = ownMemoryKB()
    let (samples, elapsed) = together(max(1, count / callers))
    let memoryAfter = ownMemoryKB()
    struct Output: Encodable {
        var kind = "parallel"
        var variant: String
        var callers: Int
        var elapsedSeconds: Double
        var intentsPerSecond: Double
        var summary: Summary
        var launches: Int
        var reuses: Int
        var rssBeforeKB: Int
        var rssAfterKB: Int
        var peakRSSKB: Int
    }
    let output = Output(
        variant: name, callers: callers, elapsedSeconds: Double(elapsed) / 1e9, intentsPerSecond: Double(samples.count) / (Double(elapsed) / 1e9),
        summary: Summary(samplesNs: samples), launches: pool.launches, reuses: pool.reuses,
        rssBeforeKB: memoryBefore.rss, rssAfterKB: memoryAfter.rss, peakRSSKB: memoryAfter.hwm)
    pool.close()
    FileHandle.standardOutput.write(try! encoder.encode(output))
    FileHandle.standardOutput.write(Data("\n".utf8))
}

// MARK: store

@MainActor func store() {
    guard let homePath = options["home"] else { fail("store needs --home DIR") }
    let count = option("count", 5_000)
    let home = URL(fileURLWithPath: homePath, isDirectory: true)
    do {
        let store = try Store(home: home)
        let globals = try store.globals(of: "BENCHOWNER")
        let value = JSONValue.string(String(repeating: "x", count: 32))
        // Warm-up: the first statements compile, the key is derived.
        for i in 0..<50 { _ = try globals.set("warm\(i)", to: value) }
        var setSamples: [UInt64] = []
        var getSamples: [UInt64] = []
        setSamples.reserveCapacity(count)
        getSamples.reserveCapacity(count)
        for i in 0..<count {
            let t0 = nowNs()
            _ = try globals.set("g\(i)", to: value)
            setSamples.append(nowNs() - t0)
        }
        for i in 0..<count {
            let t0 = nowNs()
            guard try globals.get("g\(i)") != nil else { fail("g\(i) is missing after set") }
            getSamples.append(nowNs() - t0)
        }
        struct Output: Encodable {
            var kind = "store"
            var set: Summary
            var get: Summary
        }
        FileHandle.standardOutput.write(try encoder.encode(Output(set: Summary(samplesNs: setSamples), get: Summary(samplesNs: getSamples))))
        FileHandle.standardOutput.write(Data("\n".utf8))
    } catch {
        fail("store: \(error)")
    }
}

// MARK: donate

@MainActor func donate() {
    guard let homePath = options["home"] else { fail("donate needs --home DIR") }
    let count = option("count", 5_000)
    let callers = max(1, option("callers", 1))
    // --uuids 1: random identifiers, as a run's (UUIDs), instead of sequential names.
    let uuids = options["uuids"] != nil
    // --thrash KB: between donations, touch KB of memory (what a run does between two donations
    // to the caches), and time only the donation.
    let thrashBytes = option("thrash", 0) * 1024
    let home = URL(fileURLWithPath: homePath, isDirectory: true)
    do {
        let store = try Store(home: home)
        let donations = try store.donations(of: "BENCHOWNER")
        let response = IntentResponse(code: "success", properties: ["text": .string("HELLO WORLD")])
        @Sendable func one(_ name: String) throws {
            try donations.donate(
                Donation(
                    identifier: name, owner: "BENCHOWNER", plugin: "com.example.make-uppercase", intent: "MakeUppercase", source: "handle",
                    parameters: ["text": .string("hello world")], response: response),
                durable: false)
        }
        for i in 0..<50 { try one("warm-\(i)") }
        let failures = Atomic<Int>(0)
        let cpuBefore = processCPUNs()
        let (samples, elapsed) = onThreads(callers) { caller in
            var samples: [UInt64] = []
            samples.reserveCapacity(count / callers)
            var scratch = [UInt8](repeating: 1, count: max(thrashBytes, 1))
            for i in 0..<(count / callers) {
                if thrashBytes > 0 {
                    var sum: UInt8 = 0
                    for j in stride(from: 0, to: thrashBytes, by: 64) { scratch[j] &+= 1; sum &+= scratch[(j &* 7919) % thrashBytes] }
                    if sum == 255 { scratch[0] = sum }
                }
                let t0 = nowNs()
                do { try one(uuids ? RandomIdentifier.uuid() : "d-\(caller)-\(i)") } catch { failures.add(1, ordering: .relaxed) }
                samples.append(nowNs() - t0)
            }
            return samples
        }
        let cpu = processCPUNs() - cpuBefore
        if failures.load(ordering: .relaxed) > 0 { fail("donate: \(failures.load(ordering: .relaxed)) donations failed") }
        struct Output: Encodable {
            var kind = "donate"
            var callers: Int
            var perSecond: Double
            var cpuUsPerDonation: Double
            var summary: Summary
            var batches: Int
        }
        let counts = store.donationBatchCounts
        let output = Output(
            callers: callers, perSecond: Double(samples.count) / (Double(elapsed) / 1e9), cpuUsPerDonation: Double(cpu) / 1000 / Double(samples.count),
            summary: Summary(samplesNs: samples), batches: counts.batches)
        FileHandle.standardOutput.write(try encoder.encode(output))
        FileHandle.standardOutput.write(Data("\n".utf8))
    } catch {
        fail("donate: \(error)")
    }
}

/// Runs `body` on `callers` threads at once (each given its number); all their samples and the wall time in ns.
func onThreads(_ callers: Int, _ body: @escaping @Sendable (Int) -> [UInt64]) -> ([UInt64], UInt64) {
    let results = Mutex<[UInt64]>([])
    let group = DispatchGroup()
    let started = nowNs()
    for caller in 0..<callers {
        group.enter()
        let thread = Thread {
            let samples = body(caller)
            results.withLock { $0.append(contentsOf: samples) }
            group.leave()
        }
        thread.start()
    }
    group.wait()
    return (results.withLock { $0 }, nowNs() - started)
}

/// The process's user + system CPU time so far, in ns.
func processCPUNs() -> UInt64 {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    func ns(_ t: timeval) -> UInt64 { UInt64(t.tv_sec) * 1_000_000_000 + UInt64(t.tv_usec) * 1000 }
    return ns(usage.ru_utime) + ns(usage.ru_stime)
}

// MARK: exchange

/// One side's framing state, as a PluginConnection or a PluginChannel keeps it.
struct Side {
    var decoder = FrameDecoder()

    /// What the sender does: typed params → JSONValue → message → frame.
    static func send(_ message: Message) -> [UInt8] {
        Framing.frame(message.encoded())
    }

    /// What the receiver does with the bytes of one read: frames → messages.
    mutating func receive(_ bytes: [UInt8]) -> Message {
        bytes.withUnsafeBytes { decoder.append($0) }
        do {
            guard let body = try decoder.nextFrame() else { fail("incomplete frame") }
            return try Message.decode(body)
        } catch {
            fail("decode failed: \(error)")
        }
    }
}

@MainActor func exchange() {
    let count = option("count", 20_000)
    let warmup = option("warmup", 1_000)
    let seconds = option("seconds", 0.0)

    let intent = "MakeUppercase"
    let values: [String: JSONValue] = ["text": .string("hello world")]
    var host = Side()
    var plugin = Side()
    var nextID: Int64 = 1

    /// One request and its answer, with the conversions each side makes.
    func roundTrip<Params: Codable, Result: Codable>(
        _ method: String, _ params: Params, answer: (Params) -> Result
    ) -> Result {
        do {
            // Host: IntentLifecycle.call → JSONCoding.value(of:), PluginConnection.enqueue → encoded + frame.
            let id = RequestID.int(nextID)
            nextID += 1
            let request = Side.send(.request(id: id, method: method, params: try JSONCoding.value(of: params)))
            // Plugin: PluginChannel.messages → FrameDecoder + Message.decode; Server.decodeParams.
            guard case .request(let gotID, _, let gotParams) = plugin.receive(request) else { fail("not a request") }
            let decoded = try JSONCoding.decode(Params.self, from: gotParams ?? .null)
            // Plugin: Server.answer → JSONCoding.value(of: result); PluginChannel.send → encoded + frame.
            let response = Side.send(.response(id: gotID, result: try JSONCoding.value(of: answer(decoded))))
            // Host: PluginConnection.readProtocol → FrameDecoder + Message.decode; IntentLifecycle → JSONCoding.decode.
            guard case .response(_, let result) = host.receive(response) else { fail("not a response") }
            return try JSONCoding.decode(Result.self, from: result)
        } catch {
            fail("exchange \(method) failed: \(error)")
        }
    }

    let identity = PluginIdentity(id: "com.example.uppercase", version: "1.0.0")
    let steps: [(String, () -> Void)] = [
        ("initialize", {
            let r = roundTrip(Method.initialize, InitializeParams(hostVersion: Host.version, mode: .extension, intent: intent)) { _ in
                InitializeResult(plugin: identity, intents: [intent])
            }
            precondition(r.plugin.id == identity.id)
        }),
        ("resolve", {
            let r = roundTrip(Method.resolve, ResolveParams(intent: intent, parameter: "text", parameters: values)) { p in
                ResolutionResult.success(p.parameters["text"] ?? .null)
            }
            precondition(r == .success(.string("hello world")))
        }),
        ("confirm", {
            let r = roundTrip(Method.confirm, IntentParams(intent: intent, parameters: values)) { _ in
                IntentResponse(code: ResponseCode.ready)
            }
            precondition(r.code == ResponseCode.ready)
        }),
        ("handle", {
            let r = roundTrip(Method.handle, IntentParams(intent: intent, parameters: values)) { p in
                IntentResponse(code: ResponseCode.success, properties: ["result": .string((p.parameters["text"]?.stringValue ?? "").uppercased())])
            }
            precondition(r.code == ResponseCode.success)
        }),
    ]

    /// A later warm session: one `session` request and its answer (docs/protocol.md §15), as
    /// IntentLifecycle.requestSession and the SDK's Server.session convert them.
    func session() {
        do {
            let id = RequestID.int(nextID)
            nextID += 1
            let params = SessionParams(intent: intent, parameters: values, resolve: [SessionParameter(parameter: "text", required: true)], handle: true)
            let request = Side.send(.request(id: id, method: Method.session, params: params.jsonValue))
            guard case .request(let gotID, _, let gotParams) = plugin.receive(request) else { fail("not a request") }
            let decoded = try SessionParams(jsonValue: gotParams ?? .null)
            let text = decoded.parameters["text"] ?? .null
            let answer = SessionResult(
                resolutions: [SessionResolution(parameter: "text", result: .success(text))], confirm: IntentResponse(code: ResponseCode.ready),
                handle: IntentResponse(code: ResponseCode.success, properties: ["result": .string((text.stringValue ?? "").uppercased())]))
            let response = Side.send(.response(id: gotID, result: answer.jsonValue))
            guard case .response(_, let result) = host.receive(response) else { fail("not a response") }
            let answered = try SessionResult(jsonValue: result)
            precondition(answered.handle?.code == ResponseCode.success)
        } catch {
            fail("session exchange failed: \(error)")
        }
    }

    for _ in 0..<warmup {
        for step in steps { step.1() }
        session()
    }
    var perSession: [UInt64] = []
    perSession.reserveCapacity(count)
    var perStep: [String: [UInt64]] = [:]
    var perIntent: [UInt64] = []
    perIntent.reserveCapacity(count)
    let started = nowNs()
    var rounds = 0
    while rounds < count {
        if seconds > 0, rounds >= 100, rounds % 100 == 0, Double(nowNs() - started) / 1e9 > seconds { break }
        let intentStart = nowNs()
        for step in steps {
            let t0 = nowNs()
            step.1()
            perStep[step.0, default: []].append(nowNs() - t0)
        }
        perIntent.append(nowNs() - intentStart)
        let sessionStart = nowNs()
        session()
        perSession.append(nowNs() - sessionStart)
        rounds += 1
    }
    let all = perStep.values.flatMap { $0 }
    struct Output: Encodable {
        var kind = "exchange"
        var rounds: Int
        var elapsedSeconds: Double
        var perExchange: Summary
        var perIntent: Summary
        var perSession: Summary
        var perMethod: [String: Summary]
    }
    let output = Output(
        rounds: rounds, elapsedSeconds: Double(nowNs() - started) / 1e9, perExchange: Summary(samplesNs: all),
        perIntent: Summary(samplesNs: perIntent), perSession: Summary(samplesNs: perSession), perMethod: perStep.mapValues { Summary(samplesNs: $0) })
    FileHandle.standardOutput.write(try! encoder.encode(output))
    FileHandle.standardOutput.write(Data("\n".utf8))
}

// MARK: json

/// JSONSerialization's tree as a JSONValue (booleans, integers and doubles kept apart).
func jsonValue(fromFoundation object: Any) -> JSONValue {
    switch object {
    case let string as String: return .string(string)
    case let number as NSNumber:
        let type = String(cString: number.objCType)
        if type == "c" || type == "B" { return .bool(number.boolValue) }
        if type == "d" || type == "f" { return .double(number.doubleValue) }
        return .int(number.int64Value)
    case let array as [Any]: return .array(array.map(jsonValue(fromFoundation:)))
    case let dictionary as [String: Any]: return .object(dictionary.mapValues(jsonValue(fromFoundation:)))
    default: return .null
    }
}

@MainActor func json() {
    let count = option("count", 5_000)
    let params = ResolveParams(intent: "MakeUppercase", parameter: "text", parameters: ["text": .string("hello world")])
    let body = Message.request(id: .int(2), method: Method.resolve, params: try! JSONCoding.value(of: params)).encoded()
    let bodyData = Data(body)
    let reusedEncoder = JSONCoding.encoder()
    let reusedDecoder = JSONCoding.decoder()
    let paramsValue = try! JSONCoding.value(of: params)
    let paramsBytes = try! reusedEncoder.encode(params)

    var results: [String: Summary] = [:]
    func measure(_ name: String, _ body: @MainActor () throws -> Void) {
        let measured = Result { () throws -> [UInt64] in
            for _ in 0..<(count / 10) { try body() }
            var samples: [UInt64] = []
            samples.reserveCapacity(count)
            for _ in 0..<count {
                let t0 = nowNs()
                try body()
                samples.append(nowNs() - t0)
            }
            return samples
        }
        switch measured {
        case .success(let samples): results[name] = Summary(samplesNs: samples)
        case .failure(let error): fail("\(name): \(error)")
        }
    }
    // Decoding one resolve request body (what both sides do for every message).
    measure("message body → JSONValue: Message.decode (JSONParser)") {
        _ = try Message.decode(body)
    }
    measure("message body → JSONValue via JSONSerialization (for comparison)") {
        let object = try JSONSerialization.jsonObject(with: bodyData, options: [])
        _ = try Message.decode(jsonValue(fromFoundation: object))
    }
    // Typed params → JSONValue (before sending).
    measure("params → JSONValue: JSONCoding.value(of:) (JSONEncoder + JSONParser)") {
        _ = try JSONCoding.value(of: params)
    }
    measure("params → JSON bytes: one reused JSONEncoder") {
        _ = try reusedEncoder.encode(params)
    }
    // JSONValue → typed result (after receiving).
    measure("JSONValue → params: JSONCoding.decode(_:from:) (JSONWriter + JSONDecoder)") {
        _ = try JSONCoding.decode(ResolveParams.self, from: paramsValue)
    }
    measure("JSON bytes → params: one reused JSONDecoder") {
        _ = try reusedDecoder.decode(ResolveParams.self, from: paramsBytes)
    }
    measure("new JSONEncoder + JSONDecoder (JSONCoding.encoder() + decoder())") {
        _ = JSONCoding.encoder()
        _ = JSONCoding.decoder()
    }
    struct Output: Encodable {
        var kind = "json"
        var results: [String: Summary]
    }
    FileHandle.standardOutput.write(try! encoder.encode(Output(results: results)))
    FileHandle.standardOutput.write(Data("\n".utf8))
}

// MARK: handle

@MainActor func handleOnce() -> Never {
    guard let path = options["intent"] else { fail("handle needs --intent FILE") }
    var report: HandleReport
    do {
        report = Host().handle(try IntentFileParser.read(path: path), options: HandleOptions())
    } catch {
        report = HandleReport(intent: nil)
        report.error = error
    }
    FileHandle.standardOutput.write((try? JSONCoding.encoder(pretty: true).encode(report.json)) ?? Data("{}".utf8))
    FileHandle.standardOutput.write(Data("\n".utf8))
    exit(report.exitCode)
}

switch command {
case "handle": handleOnce()
case "dispatch": dispatch()
case "warm": warm()
case "parallel": parallel()
case "store": store()
case "donate": donate()
case "exchange": exchange()
case "json": json()
case "populate": populate()
case "pgbridge": postgresBridge()
default: fail("unknown command \(command) (dispatch, warm, parallel, store, donate, exchange, handle, json, populate or pgbridge)")
}

/// A host over a fresh temporary home (remove it afterwards) and the plugins in
/// `pluginDirectory`, and the intent to send it.
func benchHost(pluginDirectory: String, intentPath: String, home given: String? = nil) -> (ExtrunHost.Host, URL, IntentInvocation) {
    var template = Array("/tmp/extrun-bench-home-XXXXXX".utf8CString)
    guard let made = mkdtemp(&template) else { fail("mkdtemp failed") }
    var home = URL(fileURLWithPath: String(cString: made), isDirectory: true)
    // --home: an existing home (with the owners' keys the staged plugins are signed for), kept.
    if let given {
        rmdir(made)
        home = URL(fileURLWithPath: given, isDirectory: true)
    } else if geteuid() == 0 {
        // As root a plugin runs as the plugin's user, from the signed plugin's copy in
        // <home>/cache/plugin-copies/; without a mount namespace (the unsandboxed variants)
        // it reaches the copy through these folders, so others may search them (not list or
        // write them), as Scripts/bench's homes and the test suite's.
        let copies = home.path + "/cache/plugin-copies"
        for path in [home.path, home.path + "/cache", copies] {
            guard mkdir(path, 0o711) == 0 || errno == EEXIST, chmod(path, 0o711) == 0 else {
                fail("cannot make \(path) searchable for the plugin's user: \(String(cString: strerror(errno)))")
            }
        }
    }
    let host = ExtrunHost.Host(paths: HostPaths(home: home, pluginSearchPath: [URL(fileURLWithPath: pluginDirectory, isDirectory: true)]))
    do {
        return (host, home, try IntentFileParser.read(path: intentPath))
    } catch {
        fail("cannot read \(intentPath): \(error.message)")
    }
}
