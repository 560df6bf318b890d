#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import NIOConcurrencyHelpers

/// The plugin's end of the protocol channels: it reads the host's frames from
/// fd 3 on a thread of its own and writes frames to fd 4.
final class PluginChannel: Sendable {
    let inputFD: Int32
    let outputFD: Int32
    private let writeLock = NIOLockedValueBox<Void>(())
    private let nextID = NIOLockedValueBox<Int64>(1)
    private let pending = NIOLockedValueBox<[RequestID: CheckedContinuation<Result<JSONValue, RPCError>, Never>]>([:])

    init(inputFD: Int32 = ProtocolChannels.hostToPlugin, outputFD: Int32 = ProtocolChannels.pluginToHost) {
        self.inputFD = inputFD
        self.outputFD = outputFD
    }

    /// Whether both protocol descriptors are open (they are not when a person runs the plugin by hand).
    var isConnected: Bool {
        fcntl(inputFD, F_GETFD) != -1 && fcntl(outputFD, F_GETFD) != -1
    }

    func send(_ message: Message) {
        let frame = Framing.frame(message.encoded())
        writeLock.withLockedValue { _ in
            frame.withUnsafeBytes { raw in
                var offset = 0
                while offset < raw.count {
                    let written = write(outputFD, raw.baseAddress! + offset, raw.count - offset)
                    if written < 0 {
                        if errno == EINTR || errno == EAGAIN { continue }
                        // The host is gone: nobody is left to answer.
                        exit(0)
                    }
                    offset += written
                }
            }
        }
    }

    func notify(_ method: String, _ params: some Encodable) {
        send(.notification(method: method, params: try? JSONCoding.value(of: params)))
    }

    /// Sends a request to the host and waits for its answer.
    func request(_ method: String, _ params: JSONValue?) async -> Result<JSONValue, RPCError> {
        let id = RequestID.int(nextID.withLockedValue { value in
            defer { value += 1 }
            return value
        })
        return await withCheckedContinuation { continuation in
            pending.withLockedValue { $0[id] = continuation }
            send(.request(id: id, method: method, params: params))
        }
    }

    /// Delivers the host's answer to a request this plugin sent.
    func deliver(id: RequestID?, _ result: Result<JSONValue, RPCError>) {
        guard let id, let continuation = pending.withLockedValue({ $0.removeValue(forKey: id) }) else { return }
        continuation.resume(returning: result)
    }
}
