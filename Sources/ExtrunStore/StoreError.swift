import ExtrunProtocol

/// What went wrong, as a stable machine-readable kind. The table, with what
/// each kind guarantees about the data, is in docs/store.md; keep the two in step.
public enum StoreErrorKind: String, Codable, Sendable, CaseIterable {
    // Caller mistakes: nothing was written.
    /// An owner, global or bookmark name breaks the naming rules.
    case invalidName
    /// A value cannot be stored (not representable as JSON, e.g. a non-finite number).
    case invalidValue
    /// A value, a file or a listing is over a documented limit.
    case tooLarge
    /// A path inside a bookmark is malformed (empty where a name is needed, a symlink loop...).
    case invalidPath
    /// A path inside a bookmark tries to leave it (`..`, an absolute path, a symlink pointing out).
    case pathEscape
    /// A file is a folder where a file is needed, or the other way round.
    case wrongType
    /// The owner, global, bookmark or file does not exist.
    case notFound
    /// The owner, bookmark or file already exists.
    case alreadyExists
    /// A compare-and-set found another version than the one expected.
    case versionConflict
    /// The bookmark is read-only and the operation would change its files.
    case readOnly
    /// The bookmark's target moved, vanished or was replaced.
    case staleBookmark
    /// An export document is malformed or belongs to another owner.
    case invalidDocument
    /// The item (a donation) belongs to another owner, which alone may change it.
    case notYours
    /// The bookmark was made by another user than the caller, and only its maker may use it
    /// (details: `bookmark`, `creator`, `caller`); nothing was read or written.
    case accessDenied
    /// The write would take the owner over one of its quotas (details: `quota`, `limit`, `usage`, `adding`).
    case quotaExceeded

    // Plugins: who may use an owner's data (docs/store.md, "Signing keys"). Nothing was read or written.
    /// The plugin has no signature, so it gets none of its owner's data.
    case unsignedPlugin
    /// The plugin is signed with a key its owner does not trust.
    case untrustedSigner

    // Keys: the store was not touched.
    /// The owner has data in the store but its key file is gone.
    case keyMissing
    /// The owner's key file holds another key than the one its data was sealed with.
    case wrongKey
    /// A key file is unreadable, malformed, or belongs to another owner.
    case invalidKeyFile
    /// A key file or the keys folder can be read by other users.
    case insecurePermissions

    // The store itself: reported, never repaired or recreated silently.
    /// A sealed row does not open with its owner's key: it was modified, or copied from another owner or name.
    case sealBroken
    /// store.sqlite is truncated, overwritten or otherwise damaged.
    case corruptStore
    /// store.sqlite is gone although keys show a store existed.
    case storeMissing
    /// store.sqlite is not an extrun store, or was written by a newer extrun.
    case incompatibleStore
    /// Another process kept the store locked longer than the busy timeout.
    case storeBusy
    /// The store's PostgreSQL server cannot be reached (down, restarting, a wrong socket, user,
    /// password or database); the message names the server, the cause and what to check.
    /// Nothing was changed, or (the connection lost during a commit) the outcome is unknown.
    case storeUnavailable
    /// The file system refused (permissions, disk full, another file system...).
    case ioError
    /// SQLite reported something unexpected.
    case databaseError
}

/// An error from the store: a kind for programs, a message for people that names the
/// file or the row and what is wrong, and details for tools (`KindedError`, the shape
/// the host's errors share).
public typealias StoreError = KindedError<StoreErrorKind>
