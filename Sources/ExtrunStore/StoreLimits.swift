/// The store's documented limits (docs/store.md, "Limits").
public enum StoreLimits {
    /// Owner names: UTF-8 bytes. Short enough that the escaped key file name
    /// (at most three bytes per byte, plus `.key`) stays under NAME_MAX.
    public static let maxOwnerNameBytes = 64
    /// The write-ahead log of a store opened without a checkpoint at close
    /// (`Store(home:checkpointOnClose: false)`): past this, a write folds it back.
    public static let maxLogBytes = 256 << 10
    /// The same limit for a long-lived host's stores (`extrun serve`, `extrun mcp`,
    /// `extrun batch`: a `PluginPool`), which fold the log when they stop. Folding is a
    /// copy and two fsyncs; at 256 KiB a host donating every intent folded every ~8
    /// donations and its intents waited for it (docs/benchmarks.md, "extrun serve").
    public static let maxLogBytesLongLived = 4 << 20
    /// Global and bookmark names: UTF-8 bytes.
    public static let maxNameBytes = 256
    /// A global's value, serialized as compact JSON: 4 MiB.
    public static let maxValueBytes = 4 * 1024 * 1024
    /// A file read through a bookmark: 64 MiB.
    public static let maxReadBytes = 64 * 1024 * 1024
    /// Entries returned by one bookmark listing.
    public static let maxListEntries = 100_000
    /// A path inside a bookmark: bytes (PATH_MAX).
    public static let maxPathBytes = 4096
    /// A glob pattern for a listing: bytes.
    public static let maxGlobBytes = 1024
    /// How long a write waits for another process's lock before `storeBusy`.
    public static let busyTimeoutSeconds: Double = 10
}
