@_exported import ExtrunProtocol
import Foundation

/// What a plugin author implements for one intent.
///
/// The host calls `resolve` once per parameter (in the manifest's order),
/// then `confirm`, then `handle`. `Parameters` is a `Decodable` struct whose
/// properties are the intent's parameters; make them optional, since a value
/// may be missing until it is resolved.
///
/// ```swift
/// struct MakeUppercase: IntentHandler {
///     struct Parameters: Decodable, Sendable { var text: String? }
///     static let intentName = "MakeUppercase"
///     func handle(_ request: IntentRequest<Parameters>) async throws -> IntentResponse {
///         .success(["result": .string(request.parameters.text?.uppercased() ?? "")])
///     }
/// }
/// ```
public protocol IntentHandler: Sendable {
    associatedtype Parameters: Decodable & Sendable

    /// The intent name this handler serves, as in the manifest.
    static var intentName: String { get }

    /// Resolves one parameter. The default accepts the value as given
    /// (`success`), or answers `notRequired` when there is none; the host
    /// then asks for a value the manifest marks as required.
    func resolve(_ parameter: String, _ request: IntentRequest<Parameters>) async throws -> ResolutionResult

    /// Confirms that the intent can be handled. The default answers `ready`.
    func confirm(_ request: IntentRequest<Parameters>) async throws -> IntentResponse

    /// Handles the intent and answers with a response code and output properties.
    func handle(_ request: IntentRequest<Parameters>) async throws -> IntentResponse

    /// The possible values of a parameter whose manifest entry has `dynamicOptions`,
    /// narrowed by `search` when given. The default offers none.
    func provideOptions(_ parameter: String, _ request: IntentRequest<Parameters>, search: String?) async throws -> OptionsResult

    /// In in-app mode: carries on with the intent after the extension answered
    /// `continueInApp` or `failureRequiringAppLaunch` (`extensionResponse`), with the
    /// user activity it handed over. `request` holds the parameters as the extension
    /// resolved them. The default handles the intent, now with in-app limits.
    func continueInApp(_ activity: UserActivity, _ request: IntentRequest<Parameters>, extensionResponse: IntentResponse?) async throws
        -> IntentResponse
}

extension IntentHandler {
    public func resolve(_ parameter: String, _ request: IntentRequest<Parameters>) async throws -> ResolutionResult {
        if let value = request.values[parameter], !value.isNull { return .success(value) }
        return .notRequired
    }

    public func confirm(_ request: IntentRequest<Parameters>) async throws -> IntentResponse {
        IntentResponse(code: ResponseCode.ready)
    }

    public func provideOptions(_ parameter: String, _ request: IntentRequest<Parameters>, search: String?) async throws -> OptionsResult {
        OptionsResult(sections: [])
    }

    public func continueInApp(_ activity: UserActivity, _ request: IntentRequest<Parameters>, extensionResponse: IntentResponse?) async throws
        -> IntentResponse
    {
        try await handle(request)
    }
}

/// Continues user activities of one type in in-app mode (`extrun continue`), like an
/// app given an `NSUserActivity`. Declare the type in the manifest's `activityTypes`.
///
/// ```swift
/// struct ShowOrder: ActivityHandler {
///     static let activityType = "com.example.soupchef.showOrder"
///     func continueActivity(_ activity: UserActivity, interaction: Interaction?, context: IntentContext) async throws -> IntentResponse {
///         .success(["order": activity.userInfo?["order"] ?? .null])
///     }
/// }
/// ```
public protocol ActivityHandler: Sendable {
    static var activityType: String { get }

    /// Answers with a response code (and properties) as `handle` does. `interaction`
    /// is the intent and the extension's response, when an extension handed it over.
    func continueActivity(_ activity: UserActivity, interaction: Interaction?, context: IntentContext) async throws -> IntentResponse
}

/// One call's view of an intent: the typed parameters, their raw JSON values, and the context.
public struct IntentRequest<Parameters: Sendable>: Sendable {
    public let intent: String
    public let parameters: Parameters
    /// The raw JSON values, keyed by parameter name.
    public let values: [String: JSONValue]
    public let context: IntentContext
}

/// A file parameter's value: its name, its type identifier, its bytes.
public struct IntentFile: Codable, Sendable, Hashable {
    public var filename: String
    /// A uniform type identifier such as `public.jpeg`, `public.plain-text` or `public.data`.
    public var typeIdentifier: String
    public var data: Data

    public init(filename: String, typeIdentifier: String = "public.data", data: Data) {
        self.filename = filename
        self.typeIdentifier = typeIdentifier
        self.data = data
    }
}

extension ResolutionResult {
    /// `success` with any encodable value (a `String`, an `Int`, an `IntentFile`, a list...).
    public static func success(_ value: some Encodable & Sendable) -> ResolutionResult {
        let make: (JSONValue) -> ResolutionResult = ResolutionResult.success
        return make((try? JSONCoding.value(of: value)) ?? .null)
    }

    /// `confirmationRequired` with any encodable value.
    public static func confirmationRequired(_ value: some Encodable & Sendable, prompt: String? = nil) -> ResolutionResult {
        let make: (JSONValue, String?) -> ResolutionResult = ResolutionResult.confirmationRequired
        return make((try? JSONCoding.value(of: value)) ?? .null, prompt)
    }
}

extension IntentResponse {
    /// A `success` response with the given output properties.
    public static func success(_ properties: [String: JSONValue] = [:], dialog: Dialog? = nil) -> IntentResponse {
        IntentResponse(code: ResponseCode.success, properties: properties, dialog: dialog)
    }

    /// A `success` response whose properties are the fields of an encodable output struct.
    public static func success(output: some Encodable, dialog: Dialog? = nil) throws -> IntentResponse {
        IntentResponse(code: ResponseCode.success, properties: try properties(of: output), dialog: dialog)
    }

    /// A `failure` response, with an optional dialog for the user.
    public static func failure(_ dialog: String? = nil, properties: [String: JSONValue] = [:]) -> IntentResponse {
        IntentResponse(code: ResponseCode.failure, properties: properties, dialog: dialog.map { Dialog(full: $0) })
    }

    /// A response with a custom code the manifest declares.
    public static func custom(_ code: String, properties: [String: JSONValue] = [:], dialog: Dialog? = nil) -> IntentResponse {
        IntentResponse(code: code, properties: properties, dialog: dialog)
    }

    static func properties(of output: some Encodable) throws -> [String: JSONValue] {
        guard case .object(let fields) = try JSONCoding.value(of: output) else {
            throw PluginError.outputNotAnObject
        }
        return fields
    }
}

public enum PluginError: Error, CustomStringConvertible {
    case outputNotAnObject

    public var description: String {
        switch self {
        case .outputNotAnObject: "response output must encode as a JSON object (a struct with properties)"
        }
    }
}
