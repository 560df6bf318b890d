/// Where an intent's lifecycle gets its plugin session, and where the session goes
/// after the intent. The host runs every intent the same way over either source
/// (`IntentLifecycle.execute`); the sources differ only in whether a process outlives
/// its intent.
protocol SessionSource {
    /// A session that fits `spec`: a new process, or a warm one that is still alive.
    func session(for spec: SessionSpec) throws(HostError) -> PluginSession
    /// The session after an intent: kept for the next when `session.isReusable`;
    /// otherwise it has ended already.
    func finished(_ session: PluginSession)
}

/// A new process for every intent, ended after it (`extrun handle`, `extrun continue`,
/// and the app's step after an extension's).
struct OneShotSessions: SessionSource {
    func session(for spec: SessionSpec) throws(HostError) -> PluginSession {
        try PluginSession.launch(spec)
    }

    func finished(_ session: PluginSession) {
        // A one-shot session does not keep warm: its intent ended it.
        session.close()
    }
}
