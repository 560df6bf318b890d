#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import NIOConcurrencyHelpers

/// The entry point of a Swift plugin: serves the protocol on fds 3 and 4,
/// dispatching each intent to its handler, until the host closes the channel.
///
/// ```swift
/// @main struct Main {
///     static func main() async {
///         await PluginRuntime.run(id: "com.example.uppercase", version: "1.0.0", handlers: [MakeUppercase()])
///     }
/// }
/// ```
public enum PluginRuntime {
    /// - Parameter activities: the `ActivityHandler`s for the activity types the manifest
    ///   declares (continued in in-app mode, docs/protocol.md §5.4b).
    /// - Parameter reusable: whether the process offers the host further sessions
    ///   after the first (warm reuse, docs/protocol.md §15). Handlers are then called
    ///   for several intents in one process, one session after another; pass `false`
    ///   when a handler keeps state that must not outlive its intent.
    public static func run(
        id: String, version: String, handlers: [any IntentHandler], activities: [any ActivityHandler] = [], reusable: Bool = true
    ) async -> Never {
        let channel = PluginChannel()
        guard channel.isConnected else {
            FileHandle.standardError.write(Data("""
                \(id) is an extrun plugin: it speaks the extrun protocol on file descriptors 3 and 4.
                Run it through the host, e.g. `extrun handle intent.json` (see docs/protocol.md).

                """.utf8))
            exit(64)
        }
        let server = Server(
            identity: PluginIdentity(id: id, version: version), handlers: handlers, activities: activities, channel: channel, reusable: reusable)
        await server.serve()
    }
}

final class Server: Sendable {
    let identity: PluginIdentity
    let handlers: [String: any IntentHandler]
    let activities: [String: any ActivityHandler]
    let channel: PluginChannel
    let mode = NIOLockedValueBox<Mode>(.extension)
    /// The requests in progress, for `cancel`. A task that finishes before the serve
    /// loop has registered it leaves its id in `finished` instead, so that nothing
    /// stays in the table (a reused process serves thousands of requests).
    let running = NIOLockedValueBox<(tasks: [RequestID: Task<Void, Never>], finished: Set<RequestID>)>(([:], []))
    /// Declared in every `initialize` result: the host may start another session afterwards.
    let reusable: Bool

    init(
        identity: PluginIdentity, handlers: [any IntentHandler], activities: [any ActivityHandler] = [], channel: PluginChannel,
        reusable: Bool = true
    ) {
        self.identity = identity
        self.reusable = reusable
        var byName: [String: any IntentHandler] = [:]
        for handler in handlers { byName[type(of: handler).intentName] = handler }
        self.handlers = byName
        var byType: [String: any ActivityHandler] = [:]
        for handler in activities { byType[type(of: handler).activityType] = handler }
        self.activities = byType
        self.channel = channel
    }

    /// Serves the protocol until the host closes the channel: the channel's loop reads
    /// the messages and runs each request's task (`ChannelLoop`), and the calling task
    /// waits for ever (the loop ends the process).
    func serve() async -> Never {
        let loop = ChannelLoop(
            inputFD: channel.inputFD,
            onMessage: { [self] message, loop in receive(message, on: loop) },
            onError: { [identity] error in
                FileHandle.standardError.write(Data("\(identity.id): protocol error: \(error)\n".utf8))
                exit(70)
            })
        loop.start()
        while true { try? await Task.sleep(for: .seconds(3600)) }
    }

    /// One message from the host (in order; requests' tasks run on `loop`).
    func receive(_ message: Message, on loop: ChannelLoop) {
        switch message {
        case .request(let id, let method, let params):
            if method == Method.shutdown {
                channel.send(.response(id: id, result: .null))
                exit(0)
            }
            // The host's hint for the wait after this answer (docs/protocol.md §15.1).
            var pollAfterUs: Int?
            if method == Method.session, case .object(let fields)? = params, case .int(let value)? = fields["pollAfterUs"] {
                pollAfterUs = Int(clamping: value)
            }
            let task = Task(executorPreference: loop) {
                let result = await self.answer(method: method, params: params)
                self.running.withLockedValue { state in
                    if state.tasks.removeValue(forKey: id) == nil { state.finished.insert(id) }
                }
                loop.pollAfter(microseconds: pollAfterUs)
                switch result {
                case .success(let value): self.channel.send(.response(id: id, result: value))
                case .failure(let error): self.channel.send(.errorResponse(id: id, error: error))
                }
            }
            running.withLockedValue { state in
                if state.finished.remove(id) == nil { state.tasks[id] = task }
            }
        case .notification(let method, _):
            if method == Method.cancel {
                for task in running.withLockedValue({ Array($0.tasks.values) }) { task.cancel() }
            }
        case .response(let id, let result):
            channel.deliver(id: id, .success(result))
        case .errorResponse(let id, let error):
            channel.deliver(id: id, .failure(error))
        }
    }

    func answer(method: String, params: JSONValue?) async -> Result<JSONValue, RPCError> {
        do {
            switch method {
            case Method.initialize:
                let p = try readParams(params, InitializeParams.init(jsonValue:))
                mode.withLockedValue { $0 = p.mode }
                // A later session's initialize is answered the same way: the server keeps no
                // state between sessions but the mode, which each initialize sets again.
                let result = InitializeResult(
                    plugin: identity, intents: handlers.keys.sorted(), reusable: reusable ? true : nil, session: reusable ? true : nil)
                return .success(result.jsonValue)
            case Method.resolve:
                let p = try readParams(params, ResolveParams.init(jsonValue:))
                let handler = try handler(for: p.intent)
                let result = try await resolve(handler, parameter: p.parameter, intent: p.intent, values: p.parameters)
                return .success(result.jsonValue)
            case Method.options:
                let p = try readParams(params) { try JSONCoding.decode(OptionsParams.self, from: $0) }
                let handler = try handler(for: p.intent)
                let result = try await options(handler, parameter: p.parameter, intent: p.intent, values: p.parameters, search: p.search)
                return .success(try JSONCoding.value(of: result))
            case Method.confirm, Method.handle:
                let p = try readParams(params, IntentParams.init(jsonValue:))
                let handler = try handler(for: p.intent)
                let response = try await run(handler, confirm: method == Method.confirm, intent: p.intent, values: p.parameters)
                return .success(response.jsonValue)
            case Method.session:
                let p = try readParams(params, SessionParams.init(jsonValue:))
                return .success(try await session(try handler(for: p.intent), p).jsonValue)
            case Method.continue:
                let p = try readParams(params) { try JSONCoding.decode(ContinueParams.self, from: $0) }
                let response = try await continueActivity(p.activity, interaction: p.interaction)
                return .success(try JSONCoding.value(of: response))
            default:
                return .failure(RPCError(code: RPCError.methodNotFound, message: "\(identity.id) does not know the method '\(method)'"))
            }
        } catch let error as RPCError {
            return .failure(error)
        } catch is CancellationError {
            return .failure(RPCError(code: RPCError.cancelled, message: "cancelled by the host"))
        } catch {
            return .failure(RPCError(code: RPCError.internalError, message: "\(error)"))
        }
    }

    /// An activity handler for the type, else the intent's handler (the interaction's
    /// intent, or the intent the activity type is named after, its user info as parameters).
    private func continueActivity(_ activity: UserActivity, interaction: Interaction?) async throws -> IntentResponse {
        if let handler = activities[activity.activityType] {
            return try await handler.continueActivity(activity, interaction: interaction, context: IntentContext(mode: mode.withLockedValue { $0 }, channel: channel))
        }
        if let interaction {
            return try await continueIntent(try handler(for: interaction.intent), activity, intent: interaction.intent, values: interaction.parameters, extensionResponse: interaction.response)
        }
        if let handler = handlers[activity.activityType] {
            return try await continueIntent(handler, activity, intent: activity.activityType, values: activity.userInfo ?? [:], extensionResponse: nil)
        }
        throw RPCError(
            code: RPCError.methodNotFound,
            message: "\(identity.id) does not continue the activity type '\(activity.activityType)' (it continues: \((activities.keys.sorted() + handlers.keys.sorted()).joined(separator: ", ")))")
    }

    private func continueIntent<H: IntentHandler>(
        _ handler: H, _ activity: UserActivity, intent: String, values: [String: JSONValue], extensionResponse: IntentResponse?
    ) async throws -> IntentResponse {
        try await handler.continueInApp(activity, request(handler, intent: intent, values: values), extensionResponse: extensionResponse)
    }

    private func handler(for intent: String) throws -> any IntentHandler {
        guard let handler = handlers[intent] else {
            throw RPCError(
                code: RPCError.unknownIntent,
                message: "\(identity.id) does not handle the intent '\(intent)' (it handles: \(handlers.keys.sorted().joined(separator: ", ")))")
        }
        return handler
    }

    /// The request's params as `read` makes them; what it refuses is `invalidParams`.
    private func readParams<T>(_ params: JSONValue?, _ read: (JSONValue) throws -> T) throws -> T {
        do {
            return try read(params ?? .null)
        } catch {
            throw RPCError(code: RPCError.invalidParams, message: "invalid params: \(JSONCoding.describe(error))")
        }
    }

    private func request<H: IntentHandler>(_ handler: H, intent: String, values: [String: JSONValue]) throws -> IntentRequest<H.Parameters> {
        let parameters: H.Parameters
        do {
            parameters = try JSONCoding.decode(H.Parameters.self, from: .object(values))
        } catch {
            throw RPCError(
                code: RPCError.invalidParams,
                message: "the parameters of \(intent) do not decode as \(H.Parameters.self): \(JSONCoding.describe(error))")
        }
        let context = IntentContext(mode: mode.withLockedValue { $0 }, channel: channel)
        return IntentRequest(intent: intent, parameters: parameters, values: values, context: context)
    }

    private func resolve<H: IntentHandler>(_ handler: H, parameter: String, intent: String, values: [String: JSONValue]) async throws
        -> ResolutionResult
    {
        try await handler.resolve(parameter, request(handler, intent: intent, values: values))
    }

    private func options<H: IntentHandler>(
        _ handler: H, parameter: String, intent: String, values: [String: JSONValue], search: String?
    ) async throws -> OptionsResult {
        try await handler.provideOptions(parameter, request(handler, intent: intent, values: values), search: search)
    }

    /// A whole session in one request (docs/protocol.md §15): each step as the host
    /// would drive it, stopping where the host has to act (a person, a failure). The
    /// parameters are decoded again only when a resolution changed them.
    private func session<H: IntentHandler>(_ handler: H, _ p: SessionParams) async throws -> SessionResult {
        var values = p.parameters
        var decoded: (values: [String: JSONValue], request: IntentRequest<H.Parameters>)?
        func request() throws -> IntentRequest<H.Parameters> {
            if let decoded, decoded.values == values { return decoded.request }
            let made = try self.request(handler, intent: p.intent, values: values)
            decoded = (values, made)
            return made
        }
        var result = SessionResult()
        for entry in p.resolve {
            guard entry.isShown(given: values) else {
                values[entry.parameter] = nil
                continue
            }
            let resolution = try await handler.resolve(entry.parameter, request())
            result.resolutions.append(SessionResolution(parameter: entry.parameter, result: resolution))
            SessionParameter.apply(resolution, to: entry.parameter, values: &values)
            guard entry.goesOn(after: resolution, values: values) else { return result }
        }
        let confirmation = try await handler.confirm(request())
        result.confirm = confirmation
        guard p.handle, confirmation.letsHandlingProceed else { return result }
        result.handle = try await handler.handle(request())
        return result
    }

    private func run<H: IntentHandler>(_ handler: H, confirm: Bool, intent: String, values: [String: JSONValue]) async throws
        -> IntentResponse
    {
        let request = try request(handler, intent: intent, values: values)
        return confirm ? try await handler.confirm(request) : try await handler.handle(request)
    }
}
