import ExtrunHost
import Foundation
import CoreMetrics
import Metrics
import Prometheus
import NIOConcurrencyHelpers

/// The service's metrics (swift-metrics, rendered by swift-prometheus at `GET /metrics`;
/// docs/serve.md, "Metrics").
final class ServeMetrics: Sendable {
    let registry: PrometheusCollectorRegistry
    let factory: PrometheusMetricsFactory

    init() {
        registry = PrometheusCollectorRegistry()
        var factory = PrometheusMetricsFactory(registry: registry)
        factory.durationHistogramBuckets["extrun_intent_duration_seconds"] = [
            .microseconds(250), .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10),
            .milliseconds(25), .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1),
            .milliseconds(2500), .seconds(5), .seconds(10), .seconds(30),
        ]
        self.factory = factory
    }

    /// The counters and timers of finished intents by their labels, made once: making one
    /// looks it up in the registry (a lock, the labels hashed and compared) on every intent.
    private let made = NIOLockedValueBox<(counters: [String: CoreMetrics.Counter], timers: [String: Metrics.Timer])>(([:], [:]))

    /// One finished intent: its plugin, its outcome's code (the response code, or the error kind), its time.
    func intent(call: String, plugin: String?, outcome: String, durationNs: UInt64) {
        let plugin = plugin ?? "none"
        let key = "\(call)\u{0}\(plugin)\u{0}\(outcome)"
        let (counter, timer) = made.withLockedValue { made -> (CoreMetrics.Counter, Metrics.Timer) in
            // Bounded: plugins and outcomes are few, but a plugin may invent response codes.
            if made.counters.count > 4096 { made.counters.removeAll() }
            let counter =
                made.counters[key]
                ?? CoreMetrics.Counter(label: "extrun_intents_total", dimensions: [("call", call), ("plugin", plugin), ("outcome", outcome)], factory: factory)
            made.counters[key] = counter
            let timer = made.timers[call] ?? Metrics.Timer(label: "extrun_intent_duration_seconds", dimensions: [("call", call)], factory: factory)
            made.timers[call] = timer
            return (counter, timer)
        }
        counter.increment()
        timer.recordNanoseconds(Int64(min(durationNs, UInt64(Int64.max))))
    }

    /// A limit that refused or ended something: `queueFull`, `backoff`, `memoryLimitExceeded`, `timeout`...
    func breach(_ kind: String) {
        Counter(label: "extrun_limit_breaches_total", dimensions: [("kind", kind)], factory: factory).increment()
    }

    /// Connections refused at their accept or their head, by reason (`callerConnections`,
    /// `connections`), made once per reason.
    private let refusedConnections = NIOLockedValueBox<[String: CoreMetrics.Counter]>([:])

    func connectionRefused(reason: String) {
        let counter = refusedConnections.withLockedValue { made -> CoreMetrics.Counter in
            if let counter = made[reason] { return counter }
            let counter = Counter(label: "extrun_connections_refused_total", dimensions: [("reason", reason)], factory: factory)
            if made.count < 16 { made[reason] = counter }
            return counter
        }
        counter.increment()
        breach(reason)
    }

    /// The HTTP requests' counters by status, made once (as `made`: making one per request
    /// was 2.5% of the event loop's samples).
    private let requests = NIOLockedValueBox<[Int: CoreMetrics.Counter]>([:])

    func request(status: Int) {
        let counter = requests.withLockedValue { requests -> CoreMetrics.Counter in
            if let counter = requests[status] { return counter }
            let counter = Counter(label: "extrun_http_requests_total", dimensions: [("status", String(status))], factory: factory)
            // Statuses are the service's own, a handful; bounded all the same.
            if requests.count < 64 { requests[status] = counter }
            return counter
        }
        counter.increment()
    }

    /// The gauges, read now, then the whole text.
    func render(pool: PluginPool, admission: Admission, backedOff: Int, openConnections: Int) -> [UInt8] {
        func gauge(_ name: String, _ value: Double, _ labels: [(String, String)] = []) {
            Gauge(label: name, dimensions: labels, factory: factory).record(value)
        }
        gauge("extrun_running_intents", Double(admission.running))
        gauge("extrun_queue_depth", Double(admission.queued))
        gauge("extrun_warm_processes", Double(pool.idleProcessCount))
        gauge("extrun_plugin_launches", Double(pool.launches))
        gauge("extrun_plugin_reuses", Double(pool.reuses))
        gauge("extrun_warm_replaced", Double(pool.replacedProcesses))
        gauge("extrun_warm_retired", Double(pool.retiredProcesses))
        gauge("extrun_plugins_backed_off", Double(backedOff))
        gauge("extrun_open_connections", Double(openConnections))
        if let rss = ServeMemory.residentBytes() { gauge("extrun_service_resident_bytes", Double(rss)) }
        var buffer: [UInt8] = []
        registry.emit(into: &buffer)
        return buffer
    }
}
