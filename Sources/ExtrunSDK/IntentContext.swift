import Foundation

/// What a handler can ask of the host while it runs.
public struct IntentContext: Sendable {
    /// The mode the plugin was started in.
    public let mode: Mode
    let channel: PluginChannel

    /// Sends a line to the host's log (shown with `extrun handle --verbose`).
    public func log(_ message: String, level: String = "info") {
        channel.notify(Method.log, LogParams(level: level, message: message))
    }

    /// The global variables of the plugin's owner (through the host).
    public var globals: Globals { Globals(channel: channel) }

    /// The owner's bookmarked files and folders (through the host).
    public var bookmarks: Bookmarks { Bookmarks(channel: channel) }

    /// The owner's donation log: donate related intents, delete donations (through the host).
    public var donations: Donations { Donations(channel: channel) }

    /// Reports progress of long work (0...1). In extension mode this also
    /// extends the deadline, up to the host's maximum.
    public func reportProgress(_ fraction: Double?, message: String? = nil) {
        channel.notify(Method.progress, ProgressParams(fraction: fraction, message: message))
    }
}
