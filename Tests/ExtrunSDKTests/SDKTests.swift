import Foundation
import Testing

@testable import ExtrunSDK

@Suite("SDK helpers")
struct SDKHelperTests {
    @Test("IntentFile codes its data as base64, as file parameters travel on the wire")
    func intentFileCoding() throws {
        let file = IntentFile(filename: "a.txt", typeIdentifier: "public.plain-text", data: Data("hi\n".utf8))
        let value = try JSONCoding.value(of: file)
        #expect(value == ["filename": "a.txt", "typeIdentifier": "public.plain-text", "data": "aGkK"])
        #expect(try JSONCoding.decode(IntentFile.self, from: value) == file)
        #expect(IntentFile(filename: "b", data: Data()).typeIdentifier == "public.data")
        // A wire value that fits the host's check for file parameters.
        #expect(ParameterValueCheck.problem(value, for: ParameterDefinition(name: "f", type: .file)) == nil)
    }

    @Test("ResolutionResult.success takes any Encodable value")
    func successHelpers() throws {
        // Typed values, so that the generic helper is used rather than the JSONValue case.
        let text: String = "x"
        let number: Int = 42
        let fraction: Double = 2.5
        let flag: Bool = true
        let list: [String] = ["a", "b"]
        #expect(ResolutionResult.success(text) == .success(.string("x")))
        #expect(ResolutionResult.success(number) == .success(.int(42)))
        #expect(ResolutionResult.success(fraction) == .success(.double(2.5)))
        #expect(ResolutionResult.success(flag) == .success(.bool(true)))
        #expect(ResolutionResult.success(list) == .success(["a", "b"]))
        let file = IntentFile(filename: "a", data: Data([0xFF]))
        #expect(ResolutionResult.success([file]) == .success([["filename": "a", "typeIdentifier": "public.data", "data": "/w=="]]))
        #expect(ResolutionResult.confirmationRequired(number, prompt: "Seven?") == .confirmationRequired(.int(42), prompt: "Seven?"))
        #expect(ResolutionResult.confirmationRequired(text) == .confirmationRequired(.string("x"), prompt: nil))
    }

    @Test("IntentResponse helpers")
    func responseHelpers() throws {
        #expect(IntentResponse.success(["result": "A"]) == IntentResponse(code: "success", properties: ["result": "A"]))
        #expect(IntentResponse.success() == IntentResponse(code: "success"))
        #expect(IntentResponse.failure("No soup today.") == IntentResponse(code: "failure", dialog: Dialog(full: "No soup today.")))
        #expect(IntentResponse.failure() == IntentResponse(code: "failure"))
        #expect(IntentResponse.custom("soldOut", properties: ["soup": "pea"]) == IntentResponse(code: "soldOut", properties: ["soup": "pea"]))

        struct Output: Encodable {
            var count: Int
            var names: [String]
            var note: String?
        }
        let response = try IntentResponse.success(output: Output(count: 2, names: ["a", "b"], note: nil), dialog: Dialog(full: "Done."))
        #expect(response.code == "success")
        #expect(response.properties == ["count": 2, "names": ["a", "b"]])
        #expect(response.dialog?.full == "Done.")
    }

    @Test("an output that is not an object is refused")
    func outputNotAnObject() {
        #expect(throws: PluginError.self) { try IntentResponse.success(output: [1, 2]) }
        #expect(PluginError.outputNotAnObject.description.contains("JSON object"))
    }
}

/// The defaults a handler gets for free.
struct DefaultsHandler: IntentHandler {
    struct Parameters: Decodable, Sendable {
        var text: String?
    }
    static let intentName = "Defaults"
    func handle(_ request: IntentRequest<Parameters>) async throws -> IntentResponse {
        .success(["text": .string(request.parameters.text ?? "")])
    }
}

@Suite("IntentHandler defaults")
struct IntentHandlerDefaultTests {
    func request(_ values: [String: JSONValue]) throws -> IntentRequest<DefaultsHandler.Parameters> {
        let parameters = try JSONCoding.decode(DefaultsHandler.Parameters.self, from: .object(values))
        // A channel on closed descriptors: these tests never send anything.
        let context = IntentContext(mode: .extension, channel: PluginChannel(inputFD: -1, outputFD: -1))
        return IntentRequest(intent: "Defaults", parameters: parameters, values: values, context: context)
    }

    @Test("resolve accepts a given value as it is, and a missing or null one as notRequired")
    func defaultResolve() async throws {
        let handler = DefaultsHandler()
        #expect(try await handler.resolve("text", request(["text": "hi"])) == .success("hi"))
        #expect(try await handler.resolve("text", request([:])) == .notRequired)
        #expect(try await handler.resolve("text", request(["text": nil])) == .notRequired)
        #expect(try await handler.resolve("other", request(["text": "hi"])) == .notRequired)
    }

    @Test("confirm answers ready")
    func defaultConfirm() async throws {
        #expect(try await DefaultsHandler().confirm(request([:])) == IntentResponse(code: "ready"))
    }

    @Test("a channel on closed descriptors is not connected")
    func notConnected() {
        #expect(!PluginChannel(inputFD: -1, outputFD: -1).isConnected)
    }

    @Test("the host's pollAfterUs sets until when the waits after an answer read without sleeping")
    func pollAfterHint() throws {
        var fds: [Int32] = [-1, -1]
        #expect(pipe(&fds) == 0)
        defer { for fd in fds { close(fd) } }
        let loop = ChannelLoop(inputFD: fds[0], onMessage: { _, _ in }, onError: { error in fatalError("\(error)") })
        func ahead() -> Int64 { Int64(bitPattern: loop.spinUntil() &- MonotonicNow.ns()) }
        // No hint: the loop's own spinNs.
        #expect(abs(ahead() - Int64(ChannelLoop.spinNs)) < 5_000_000)
        loop.pollAfter(microseconds: nil)
        #expect(abs(ahead() - Int64(ChannelLoop.spinNs)) < 5_000_000)
        // 0: sleep at once (a time already past).
        loop.pollAfter(microseconds: 0)
        #expect(loop.spinUntil() == 1)
        // A hint counts from the answer, and is capped.
        loop.pollAfter(microseconds: 200)
        #expect(ahead() <= 200_000 && ahead() > -5_000_000)
        loop.pollAfter(microseconds: 1_000_000)
        #expect(ahead() <= Int64(ChannelLoop.maxPollAfterUs) * 1_000)
        loop.pollAfter(microseconds: -5)
        #expect(loop.spinUntil() == 1)
    }
}

/// CLOCK_MONOTONIC in ns, as the loop reads it.
enum MonotonicNow {
    static func ns() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }
}
