/// Where a run gets its plugin process, and what a long-lived caller (a pool) already
/// knows: the plugins, that the home's permissions hold, how old a signature check may be.
/// `Host`'s verbs run one-shot (`oneShot`: a new process, everything looked up now);
/// `PluginPool`'s with its warm sessions and caches.
struct RunContext {
    var sessions: any SessionSource
    /// The plugins a caller keeps (a pool's, at most a second old); nil: looked up now.
    var catalog: PluginCatalog?
    /// False when the caller checked the home's permissions itself a moment ago (a pool checks them at most once a second).
    var checkHome = true
    /// How old a check of the plugin's signature may be (a pool's 10 ms); 0: checked now.
    var sealMaxAgeNs: UInt64 = 0

    init(sessions: any SessionSource, catalog: PluginCatalog? = nil, checkHome: Bool = true, sealMaxAgeNs: UInt64 = 0) {
        self.sessions = sessions
        self.catalog = catalog
        self.checkHome = checkHome
        self.sealMaxAgeNs = sealMaxAgeNs
    }

    /// A new process for the run, ended after it; nothing cached.
    static var oneShot: RunContext { RunContext(sessions: OneShotSessions()) }
}
