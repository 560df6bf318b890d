/// An error reported to programs and people: a kind (a stable name, its raw value), a
/// message that names the file or the row and what is wrong, and details for tools. As
/// JSON (a report's `error` field) it is one object: the details, `kind` and `message`.
///
/// The host's errors are `HostError` (`KindedError<ErrorKind>`, each kind with its exit
/// status) and the store's `StoreError` (`KindedError<StoreErrorKind>`): one shape, two
/// lists of kinds, and `init(_:from:keepingKindAs:)` takes one to the other.
public struct KindedError<Kind: RawRepresentable & Hashable & Sendable>: Error, Sendable, Equatable, CustomStringConvertible
where Kind.RawValue == String {
    public var kind: Kind
    public var message: String
    public var details: [String: JSONValue]

    public init(_ kind: Kind, _ message: String, details: [String: JSONValue] = [:]) {
        self.kind = kind
        self.message = message
        self.details = details
    }

    /// `other` as an error of `kind`: its message and details, and its own kind's name
    /// under `details[key]` when a key is given (a store error the host reports as a
    /// configuration error keeps the store's kind as `problem`).
    public init<OtherKind>(_ kind: Kind, from other: KindedError<OtherKind>, keepingKindAs key: String? = nil) {
        var details = other.details
        if let key { details[key] = .string(other.kind.rawValue) }
        self.init(kind, other.message, details: details)
    }

    public var description: String { "\(kind.rawValue): \(message)" }

    /// The error as a JSON object: `details` plus `kind` and `message` (which win over
    /// details of the same names).
    public var json: JSONValue {
        var object = details
        object["kind"] = .string(kind.rawValue)
        object["message"] = .string(message)
        return .object(object)
    }

    /// The error a JSON object holds (`json` read back, as a service's client gets it);
    /// nil when it is not an object with a known `kind`.
    public init?(json: JSONValue) {
        guard case .object(var fields) = json, let kind = fields["kind"]?.stringValue.flatMap(Kind.init(rawValue:)) else { return nil }
        let message = fields["message"]?.stringValue ?? ""
        fields["kind"] = nil
        fields["message"] = nil
        self.init(kind, message, details: fields)
    }
}
