#if canImport(ExtrunHost)
import ExtrunHost
#endif
import ExtrunProtocol
import Foundation

/// What a caller may ask of `extrun serve` (docs/serve.md, "API"), decoded from an HTTP
/// request's method, target and body: no I/O here, so the fuzz target drives it directly
/// (Fuzz/Targets/ServeRequest).
public enum ServeCall: Sendable {
    case health
    case metrics
    /// The intents the service can run (`GET /v1/intents`), or one (`GET /v1/intents/NAME`).
    case describe(intent: String?)
    case handle(IntentInvocation, RunOptions)
    case options(IntentInvocation, parameter: String, search: String?, RunOptions)
    case continueActivity(ActivityInvocation, RunOptions)
    case phrase(String, RunOptions)
    /// An answer to a prompt of an interactive run (`POST /v1/runs/RUN/answers`).
    case answer(run: String, prompt: String, answer: JSONValue)

    /// The report's intent, for logs and metrics.
    public var label: String {
        switch self {
        case .health: "health"
        case .metrics: "metrics"
        case .describe: "describe"
        case .handle: "handle"
        case .options: "options"
        case .continueActivity: "continue"
        case .phrase: "phrase"
        case .answer: "answer"
        }
    }

    /// Runs an intent (and so takes a place among the concurrent runs).
    public var runsIntent: Bool {
        switch self {
        case .handle, .options, .continueActivity, .phrase: true
        default: false
        }
    }
}

/// A request the service refuses before running anything: its HTTP status and the
/// typed error of its body (the CLI's `error` object).
public struct ServeRequestError: Error, Sendable, Equatable {
    public var status: Int
    public var error: HostError
    /// Answered as `{"error": ...}`, the shape of every other answer of its endpoint (the
    /// answers, the intents, health, metrics: docs/serve-openapi.json's `ErrorOnly`), not in
    /// a run's envelope `{"exitStatus", "report"}`.
    public var bare = false

    public init(_ status: Int, _ kind: ErrorKind, _ message: String, details: [String: JSONValue] = [:]) {
        self.status = status
        error = HostError(kind, message, details: details)
    }

    /// The methods the endpoint takes, for a 405's `Allow` header (RFC 9110 §15.5.6).
    public var allow: String? { status == 405 ? error.details["allow"]?.stringValue : nil }
}

public enum ServeRequestDecoder {
    /// The most bytes of a request target (path and query).
    public static let maxTargetBytes = 8 << 10

    /// Decodes one request. `target` is the request's target as sent (`/v1/handle?mode=extension`).
    public static func decode(method: String, target: String, body: [UInt8]) throws(ServeRequestError) -> ServeCall {
        // The path's segments as sent, to know which endpoint refuses (and so in which shape).
        let raw = target.prefix { $0 != "?" }.prefix(maxTargetBytes).split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        do throws(ServeRequestError) {
            guard target.utf8.count <= maxTargetBytes else {
                throw ServeRequestError(414, .invalidIntent, "the request target is \(target.utf8.count) bytes, over the limit of \(maxTargetBytes)")
            }
            let (path, query) = try split(target)
            // Each segment percent-decoded after the split: `/v1/intents/Make%20Uppercase` names
            // "Make Uppercase", and an encoded `/` (`%2F`) stays inside its segment.
            var segments: [String] = []
            for text in raw {
                guard let segment = PercentDecoding.decoded(Substring(text), plusIsSpace: false) else {
                    throw ServeRequestError(400, .invalidIntent, "the path segment '\(text.prefix(200))' is not percent-encoded text")
                }
                segments.append(segment)
            }
            return try decode(method: method, path: path, segments: segments, query: query, body: body)
        } catch {
            var error = error
            // A refusal by an endpoint that answers `{"error"}` has that shape too; a run's
            // (and an unknown endpoint's) is a run's envelope.
            error.bare = answersBare(raw)
            throw error
        }
    }

    /// Whether the endpoint of `segments` answers `{"error"}` (not a run's envelope).
    static func answersBare(_ segments: [String]) -> Bool {
        let versioned = segments.first == "v1"
        let endpoint = (versioned ? segments.dropFirst().first : segments.first) ?? ""
        return ["health", "metrics"].contains(endpoint) || versioned && ["intents", "runs"].contains(endpoint)
    }

    private static func decode(
        method: String, path: String, segments: [String], query: [String: String], body: [UInt8]
    ) throws(ServeRequestError) -> ServeCall {
        func require(_ expected: String) throws(ServeRequestError) {
            guard method == expected else {
                throw ServeRequestError(
                    405, .invalidIntent, "\(path) takes \(expected), not \(method)", details: ["allow": .string(expected)])
            }
        }
        switch segments {
        case ["v1", "health"], ["health"]:
            try require("GET")
            return .health
        case ["metrics"], ["v1", "metrics"]:
            try require("GET")
            return .metrics
        case ["v1", "intents"]:
            try require("GET")
            return .describe(intent: nil)
        case let s where s.count == 3 && s[0] == "v1" && s[1] == "intents":
            try require("GET")
            return .describe(intent: s[2])
        case ["v1", "handle"]:
            try require("POST")
            return .handle(try intent(body), try callOptions(query))
        case ["v1", "options"]:
            try require("POST")
            guard let parameter = query["parameter"], !parameter.isEmpty else {
                throw ServeRequestError(400, .invalidIntent, "POST /v1/options needs ?parameter=NAME (the parameter whose options to list)")
            }
            return .options(try intent(body), parameter: parameter, search: query["search"], try callOptions(query))
        case ["v1", "continue"]:
            try require("POST")
            let activity: ActivityInvocation
            do throws(HostError) {
                activity = try ActivityFileParser.parse(Data(body), source: "<request>")
            } catch {
                throw ServeRequestError(400, error.kind, error.message, details: error.details)
            }
            return .continueActivity(activity, try callOptions(query))
        case ["v1", "phrase"]:
            try require("POST")
            let object = try json(body)
            guard let text = object["phrase"]?.stringValue, !text.isEmpty else {
                throw ServeRequestError(400, .invalidIntent, "the body of POST /v1/phrase is {\"phrase\": \"what the person said\"}")
            }
            return .phrase(text, try callOptions(query))
        case let s where s.count == 4 && s[0] == "v1" && s[1] == "runs" && s[3] == "answers":
            try require("POST")
            let object = try json(body)
            guard let prompt = object["prompt"]?.stringValue else {
                throw ServeRequestError(
                    400, .invalidIntent, "an answer is {\"prompt\": ID, \"answer\": VALUE} (the prompt event's id; answer null to decline)")
            }
            return .answer(run: s[2], prompt: prompt, answer: object["answer"] ?? .null)
        default:
            throw ServeRequestError(
                404, .notFound,
                "no such endpoint: \(method) \(path) (the API: GET /v1/health, GET /v1/intents[/NAME], POST /v1/handle, /v1/options, /v1/continue, /v1/phrase, /v1/runs/RUN/answers, GET /metrics, POST and DELETE /mcp, GET /.well-known/oauth-protected-resource; docs/serve.md)"
            )
        }
    }

    /// An intent file's JSON, as the request's body. File parameters must be inline
    /// (`{"filename", "text"|"data"}`): a path would be read with the service's rights,
    /// not the caller's, so relative paths resolve nowhere and absolute ones are refused
    /// (`ServeCalls.refusePaths`).
    static func intent(_ body: [UInt8]) throws(ServeRequestError) -> IntentInvocation {
        do {
            return try IntentFileParser.parse(Data(body), source: "<request>", baseDirectory: nowhere)
        } catch {
            throw ServeRequestError(400, error.kind, error.message, details: error.details)
        }
    }

    /// Where an intent's relative paths would resolve: nowhere (made once; a `URL` per request cost a path walk).
    static let nowhere = URL(fileURLWithPath: "/nonexistent/extrun-serve", isDirectory: true)

    static func json(_ body: [UInt8]) throws(ServeRequestError) -> [String: JSONValue] {
        do {
            guard case .object(let object) = try JSONParser.parse(body) else {
                throw ServeRequestError(400, .invalidIntent, "the request's body is not a JSON object")
            }
            return object
        } catch let error as ServeRequestError {
            throw error
        } catch {
            throw ServeRequestError(400, .invalidIntent, "the request's body is not JSON: \(error)")
        }
    }

    /// The path and the query's fields (percent-decoded; `+` is a space).
    static func split(_ target: String) throws(ServeRequestError) -> (String, [String: String]) {
        let parts = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let path = String(parts.first ?? "")
        guard path.hasPrefix("/") else {
            throw ServeRequestError(400, .invalidIntent, "the request target '\(target.prefix(200))' is not a path")
        }
        var query: [String: String] = [:]
        if parts.count > 1 {
            for pair in parts[1].split(separator: "&") {
                let field = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                func decoded(_ text: Substring) throws(ServeRequestError) -> String {
                    guard let value = PercentDecoding.decoded(text, plusIsSpace: true) else {
                        throw ServeRequestError(400, .invalidIntent, "the query field '\(pair.prefix(200))' is not percent-encoded text")
                    }
                    return value
                }
                query[try decoded(field[0])] = field.count > 1 ? try decoded(field[1]) : "true"
            }
        }
        return (path, query)
    }

    /// The run's options from the query (their names: ExtrunProtocol/RunOptions.swift);
    /// `parameter` and `search` are `/v1/options`' own, and taken (unused) by the others.
    static func callOptions(_ query: [String: String]) throws(ServeRequestError) -> RunOptions {
        do throws(RunOptions.DecodingError) {
            return try RunOptions(query: query, extra: ["parameter", "search"])
        } catch {
            throw ServeRequestError(400, .invalidIntent, error.message, details: ["field": .string(error.field)])
        }
    }
}
