import ExtrunProtocol
import Foundation
import Testing

@testable import ExtrunHost

#if canImport(Glibc)
import Glibc
#endif

/// The conversation with a plugin (`PluginConversation` over a `PluginChannel`) over
/// a socketpair, with no plugin process: the test plays the plugin on the other end.
@Suite("Plugin conversation over a socketpair")
struct PluginConversationTests {
    /// One end of a socketpair as a channel's ends (read and written), and the other
    /// end, where the test writes and reads as the plugin would. Both non-blocking.
    final class SocketEnds: ChannelEnds {
        let socket: Int32
        private(set) var peer: Int32
        private(set) var readFD: Int32
        private(set) var writeFD: Int32
        private var peerFrames = FrameDecoder()

        init() throws {
            // A write to a closed peer must fail with EPIPE, not end the test process.
            HostSignals.ignoreSIGPIPE()
            var fds: [Int32] = [-1, -1]
            let type = Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
            guard socketpair(AF_UNIX, type, 0, &fds) == 0 else { throw SystemError("socketpair: \(String(cString: strerror(errno)))") }
            socket = fds[0]
            peer = fds[1]
            readFD = socket
            writeFD = socket
        }

        func closeRead() {
            guard readFD >= 0 else { return }
            shutdown(socket, Int32(SHUT_RD))
            readFD = -1
        }

        func closeWrite() {
            guard writeFD >= 0 else { return }
            shutdown(socket, Int32(SHUT_WR))
            writeFD = -1
        }

        /// The plugin's end closes (a crash, or a plugin that closes its channels).
        func closePeer() {
            guard peer >= 0 else { return }
            #expect(close(peer) == 0)
            peer = -1
        }

        /// Closes both descriptors (each exactly once: a second close would fail with EBADF).
        func closeAll() {
            closePeer()
            #expect(close(socket) == 0)
        }

        /// Writes `bytes` whole from the plugin's end.
        func peerWrite(_ bytes: [UInt8]) throws {
            var offset = 0
            while offset < bytes.count {
                let written = bytes.withUnsafeBytes { raw in write(peer, raw.baseAddress.map { $0 + offset }, raw.count - offset) }
                if written > 0 {
                    offset += written
                } else if written < 0 && (errno == EAGAIN || errno == EINTR) {
                    var entry = pollfd(fd: peer, events: Int16(POLLOUT), revents: 0)
                    guard poll(&entry, 1, 2000) == 1 else { throw SystemError("the conversation's end took no more bytes") }
                } else {
                    throw SystemError("write: \(String(cString: strerror(errno)))")
                }
            }
        }

        func peerSend(_ message: Message) throws {
            try peerWrite(Framing.frame(message.encoded()))
        }

        /// The next message the conversation wrote, as the plugin reads it (nil if none comes within `timeoutMs`).
        func peerReceive(timeoutMs: Int32 = 1000) throws -> Message? {
            while true {
                if let body = try peerFrames.nextFrame() { return try Message.decode(body) }
                var buffer = [UInt8](repeating: 0, count: 64 << 10)
                let count = buffer.withUnsafeMutableBytes { read(peer, $0.baseAddress, $0.count) }
                if count > 0 {
                    peerFrames.append(buffer[0..<count])
                } else if count < 0 && errno == EAGAIN {
                    var entry = pollfd(fd: peer, events: Int16(POLLIN), revents: 0)
                    guard poll(&entry, 1, timeoutMs) == 1 else { return nil }
                } else {
                    return nil
                }
            }
        }

        /// Reads and drops whatever the conversation wrote so far; the bytes read.
        @discardableResult
        func peerDrain() -> Int {
            var total = 0
            var buffer = [UInt8](repeating: 0, count: 64 << 10)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(peer, $0.baseAddress, $0.count) }
                guard count > 0 else { return total }
                total += count
            }
        }
    }

    struct SystemError: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    /// No deadline: the tests do not wait.
    static let never: @Sendable () -> UInt64 = { UInt64.max }

    /// A conversation over a new socketpair, closed when `body` returns.
    func withConversation(_ limits: ConnectionLimits = ConnectionLimits(), _ body: (PluginConversation, SocketEnds) throws -> Void) throws {
        let ends = try SocketEnds()
        defer { ends.closeAll() }
        let conversation = PluginConversation(ends: ends, limits: limits)
        try body(conversation, ends)
    }

    @Test("a request goes out framed with id 1, 2...; its answer (a result or an error) is the conversation's answer")
    func requestAndAnswer() throws {
        try withConversation { conversation, peer in
            let id = conversation.send("initialize", ["hostVersion": "1.0"])
            #expect(id == .int(1))
            #expect(try peer.peerReceive() == .request(id: .int(1), method: "initialize", params: ["hostVersion": "1.0"]))
            #expect(try conversation.answer() == nil)
            #expect(!conversation.hasAnswer)

            try peer.peerSend(.response(id: .int(1), result: ["protocolVersion": "1.0"]))
            #expect(conversation.readChannel(deadline: Self.never))
            #expect(conversation.hasAnswer)
            #expect(try conversation.answer() == .success(["protocolVersion": "1.0"]))
            conversation.endRequest(abandoned: false)

            #expect(conversation.send("handle", nil) == .int(2))
            #expect(try peer.peerReceive() == .request(id: .int(2), method: "handle", params: nil))
            let refusal = RPCError(code: RPCError.unknownIntent, message: "no such intent")
            try peer.peerSend(.errorResponse(id: .int(2), error: refusal))
            conversation.readChannel(deadline: Self.never)
            #expect(try conversation.answer() == .failure(refusal))
            #expect(conversation.failure == nil)
        }
    }

    @Test("an answer split across reads is the answer once its last byte is read")
    func answerAcrossReads() throws {
        try withConversation { conversation, peer in
            conversation.send("handle", nil)
            let frame = Framing.frame(Message.response(id: .int(1), result: ["result": "DONE"]).encoded())
            // The header alone, then half the body, then the rest.
            let cuts = [0, 10, 24, frame.count / 2 + 12, frame.count]
            for (from, to) in zip(cuts, cuts.dropFirst()) {
                #expect(try conversation.answer() == nil)
                try peer.peerWrite(Array(frame[from..<to]))
                #expect(conversation.readChannel(deadline: Self.never))
            }
            #expect(try conversation.answer() == .success(["result": "DONE"]))
        }
    }

    @Test("a request larger than the socket takes goes out in pieces, a large body queued apart from its header, as the peer reads")
    func largeRequestInPieces() throws {
        try withConversation { conversation, peer in
            let text = JSONValue.string(String(repeating: "x", count: 1 << 20))
            conversation.send("handle", ["text": text])
            #expect(conversation.hasPendingOutput)  // 1 MiB: more than the socket holds
            var received: Message?
            for _ in 0..<10_000 where received == nil {
                received = try peer.peerReceive(timeoutMs: 0)
                conversation.writeQueued()
            }
            #expect(received == .request(id: .int(1), method: "handle", params: ["text": text]))
            #expect(!conversation.hasPendingOutput)
            #expect(conversation.channel.pendingBytes == 0)
        }
    }

    @Test("answers out of order: a late answer to an abandoned request, read with the next one's, is dropped")
    func lateAnswerToAbandonedRequest() throws {
        try withConversation { conversation, peer in
            conversation.send("resolve", nil)
            conversation.endRequest(abandoned: true)  // its deadline passed
            conversation.send("confirm", nil)
            #expect(try peer.peerReceive() == .request(id: .int(1), method: "resolve", params: nil))
            #expect(try peer.peerReceive() == .request(id: .int(2), method: "confirm", params: nil))
            // Both answers in one write, the newer first.
            try peer.peerWrite(
                Framing.frame(Message.response(id: .int(2), result: "confirmed").encoded())
                    + Framing.frame(Message.errorResponse(id: .int(1), error: RPCError(code: RPCError.cancelled, message: "cancelled")).encoded()))
            conversation.readChannel(deadline: Self.never)
            #expect(try conversation.answer() == .success("confirmed"))
            #expect(conversation.failure == nil)
        }
    }

    @Test(
        "an answer to a request answered already, or never sent, ends the conversation",
        arguments: [
            (Int64(2), "the plugin answered request 2 twice"),
            (Int64(1), "the plugin answered request 1 twice"),
            (Int64(3), "the plugin answered request 3, which the host never sent"),
            (Int64(0), "the plugin answered request 0, which the host never sent"),
        ])
    func answerNotAwaited(id: Int64, message: String) throws {
        try withConversation { conversation, peer in
            conversation.send("initialize", nil)
            try peer.peerSend(.response(id: .int(1), result: "first"))
            conversation.readChannel(deadline: Self.never)
            conversation.endRequest(abandoned: false)
            conversation.send("handle", nil)
            try peer.peerSend(.response(id: .int(2), result: "second"))
            conversation.readChannel(deadline: Self.never)
            #expect(try conversation.answer() == .success("second"))

            try peer.peerSend(.response(id: .int(id), result: "again"))
            conversation.readChannel(deadline: Self.never)
            #expect(throws: ConversationError.protocolViolation(message)) { try conversation.answer() }
        }
    }

    @Test("a notification reaches onNotification, between a request and its answer")
    func notification() throws {
        try withConversation { conversation, peer in
            var seen: [(String, JSONValue?)] = []
            conversation.onNotification = { method, params in seen.append((method, params)) }
            conversation.send("handle", nil)
            try peer.peerWrite(
                Framing.frame(Message.notification(method: "progress", params: ["fraction": 0.5]).encoded())
                    + Framing.frame(Message.notification(method: "log", params: nil).encoded())
                    + Framing.frame(Message.response(id: .int(1), result: "done").encoded()))
            conversation.readChannel(deadline: Self.never)
            #expect(seen.map(\.0) == ["progress", "log"])
            #expect(seen.first?.1 == ["fraction": 0.5])
            #expect(seen.last?.1 == nil)
            #expect(try conversation.answer() == .success("done"))
        }
    }

    @Test("a frame over maxMessageBytes is refused from its header, with the limit and the length")
    func oversizedFrame() throws {
        var limits = ConnectionLimits()
        limits.maxFrameBytes = 1000
        try withConversation(limits) { conversation, peer in
            conversation.send("handle", nil)
            try peer.peerWrite(Array("Content-Length: 5000\r\n\r\n{\"jsonrpc\":".utf8))
            conversation.readChannel(deadline: Self.never)
            let breach = LimitBreach(
                limit: "maxMessageBytes", limitValue: 1000, measured: 5000,
                what: "it sent a frame of 5000 bytes exceeds the limit of 1000 bytes (maxMessageBytes)")
            #expect(throws: ConversationError.overLimit(breach)) { try conversation.answer() }
            #expect(CallFailure(.overLimit(breach)).breach?.details["measured"] == .int(5000))
        }
    }

    @Test("an answer over host.maxResponseBytes and a notification over host.maxNotificationBytes end the conversation")
    func oversizedAnswerAndNotification() throws {
        var limits = ConnectionLimits()
        limits.maxResponseBytes = 100
        limits.maxNotificationBytes = 80
        let answer = Message.response(id: .int(1), result: .string(String(repeating: "a", count: 200))).encoded()
        try withConversation(limits) { conversation, peer in
            conversation.send("handle", nil)
            try peer.peerWrite(Framing.frame(answer))
            conversation.readChannel(deadline: Self.never)
            #expect(
                throws: ConversationError.overLimit(
                    LimitBreach(
                        limit: "host.maxResponseBytes", limitValue: 100, measured: answer.count,
                        what: "its answer to handle is \(answer.count) bytes, over the limit of 100 bytes on an answer (host.maxResponseBytes)"))
            ) { try conversation.answer() }
        }
        let notification = Message.notification(method: "progress", params: ["message": .string(String(repeating: "p", count: 100))]).encoded()
        try withConversation(limits) { conversation, peer in
            var notified = false
            conversation.onNotification = { _, _ in notified = true }
            conversation.send("handle", nil)
            try peer.peerWrite(Framing.frame(notification))
            conversation.readChannel(deadline: Self.never)
            #expect(!notified)
            #expect(
                throws: ConversationError.overLimit(
                    LimitBreach(
                        limit: "host.maxNotificationBytes", limitValue: 80, measured: notification.count,
                        what: "it sent a notification 'progress' of \(notification.count) bytes, over the limit of 80 bytes (host.maxNotificationBytes)"))
            ) { try conversation.answer() }
        }
    }

    @Test("a message of more JSON values than host.maxMessageNodes, a malformed frame and invalid JSON end the conversation")
    func malformedMessages() throws {
        var limits = ConnectionLimits()
        limits.maxMessageNodes = 10
        let many = Message.response(id: .int(1), result: .array((0..<20).map { .int(Int64($0)) })).encoded()
        try withConversation(limits) { conversation, peer in
            conversation.send("handle", nil)
            try peer.peerWrite(Framing.frame(many))
            conversation.readChannel(deadline: Self.never)
            #expect(
                throws: ConversationError.overLimit(
                    LimitBreach(
                        limit: "host.maxMessageNodes", limitValue: 10, measured: 11,
                        what: "it sent a message of \(many.count) bytes holding more than 10 JSON values (host.maxMessageNodes)",
                        extra: ["messageBytes": .int(Int64(many.count))]))
            ) { try conversation.answer() }
        }
        try withConversation { conversation, peer in
            conversation.send("handle", nil)
            try peer.peerWrite(Array("{\"jsonrpc\":\"2.0\"}\n".utf8))
            conversation.readChannel(deadline: Self.never)
            #expect(throws: ConversationError.protocolViolation("the plugin sent a malformed frame: malformed frame header line '{\"jsonrpc\":\"2.0\"}' (expected 'Name: value')")) {
                try conversation.answer()
            }
        }
        try withConversation { conversation, peer in
            conversation.send("handle", nil)
            try peer.peerWrite(Framing.frame(Array("{\"id\":1,".utf8)))
            conversation.readChannel(deadline: Self.never)
            do throws(ConversationError) {
                _ = try conversation.answer()
                Issue.record("invalid JSON was accepted")
            } catch {
                guard case .protocolViolation(let what) = error else { throw error }
                #expect(what.hasPrefix("the plugin sent an invalid message: "))
            }
        }
    }

    @Test("the plugin's requests are answered: by onRequest, or refused (unknown method, a name too long, an answer too large)")
    func requestsToTheHost() throws {
        var limits = ConnectionLimits()
        limits.maxFrameBytes = 1000
        try withConversation(limits) { conversation, peer in
            var asked: [String] = []
            conversation.onRequest = { method, params in
                asked.append(method)
                switch method {
                case "globals.get": return .success(["value": params?["name"] ?? .null])
                case "bookmarks.read": return .success(.string(String(repeating: "b", count: 2000)))
                default: return .failure(RPCError(code: RPCError.methodNotFound, message: "the host does not offer '\(method)'"))
                }
            }
            let longName = String(repeating: "m", count: 300)
            try peer.peerWrite(
                Framing.frame(Message.request(id: .int(7), method: "globals.get", params: ["name": "count"]).encoded())
                    + Framing.frame(Message.request(id: .string("b"), method: "bookmarks.read", params: nil).encoded())
                    + Framing.frame(Message.request(id: .int(8), method: longName, params: nil).encoded()))
            conversation.readChannel(deadline: Self.never)
            #expect(asked == ["globals.get", "bookmarks.read"])
            #expect(try peer.peerReceive() == .response(id: .int(7), result: ["value": "count"]))
            let tooLarge = try peer.peerReceive()
            guard case .errorResponse(.string("b"), let error)? = tooLarge else {
                Issue.record("expected an error for the answer too large, got \(String(describing: tooLarge))")
                return
            }
            #expect(error.code == RPCError.serviceError)
            #expect(error.message.hasPrefix("the answer to bookmarks.read is 2 KiB, over the limit of 1000 bytes on a message (maxMessageBytes)"))
            #expect(error.data?["kind"] == "tooLarge")
            #expect(error.data?["limitValue"] == .int(1000))
            #expect(
                try peer.peerReceive()
                    == .errorResponse(
                        id: .int(8), error: RPCError(code: RPCError.methodNotFound, message: "a method name of 300 bytes (the host's are under 256)")))
            #expect(conversation.failure == nil)
        }
        try withConversation { conversation, peer in
            try peer.peerSend(.request(id: .int(1), method: "store.drop", params: nil))
            conversation.readChannel(deadline: Self.never)
            #expect(
                try peer.peerReceive()
                    == .errorResponse(id: .int(1), error: RPCError(code: RPCError.methodNotFound, message: "the host does not offer 'store.drop'")))
        }
    }

    @Test("the plugin's end closing mid-message: no answer, and once the grace has passed a running plugin broke the protocol")
    func peerClosesMidMessage() throws {
        var limits = ConnectionLimits()
        limits.closedChannelGraceMs = 10_000
        try withConversation(limits) { conversation, peer in
            conversation.send("handle", nil)
            try peer.peerWrite(Array("Content-Length: 100\r\n\r\n{\"jsonrpc\":\"2.0\",".utf8))
            peer.closePeer()
            #expect(conversation.readChannel(deadline: Self.never))
            #expect(!conversation.readChannel(deadline: Self.never))
            #expect(conversation.channel.readFD == -1)
            #expect(peer.readFD == -1)
            #expect(!conversation.wantsInput)
            #expect(try conversation.answer() == nil)

            var asked = false
            let closed = MonotonicClock.now()
            // Within the grace the plugin is not even looked at (it may be ending).
            try conversation.checkStalls(now: closed, peerIsRunning: { asked = true; return true })
            #expect(!asked)
            let later = closed + 10_000_000_000
            // A plugin that has ended: its exit tells the rest.
            try conversation.checkStalls(now: later, peerIsRunning: { false })
            #expect(
                throws: ConversationError.protocolViolation(
                    "it closed its channel (fd 4, its output) and kept running: no answer to handle can come (waited 10000 ms for its exit)")
            ) { try conversation.checkStalls(now: later, peerIsRunning: { true }) }
            // Not waiting for an answer, a closed channel is no one's business.
            conversation.endRequest(abandoned: false)
            try conversation.checkStalls(now: later, peerIsRunning: { true })
        }
    }

    @Test("the plugin's end closed before a request: the write fails, the queue is dropped, and after the grace it broke the protocol")
    func peerClosedItsInput() throws {
        var limits = ConnectionLimits()
        limits.closedChannelGraceMs = 20
        try withConversation(limits) { conversation, peer in
            peer.closePeer()
            conversation.send("confirm", ["intent": "x"])
            #expect(conversation.channel.writeFD == -1)
            #expect(!conversation.hasPendingOutput)
            let later = MonotonicClock.now() + 20_000_000
            #expect(
                throws: ConversationError.protocolViolation(
                    "it closed its channel (fd 3, its input) and kept running: it cannot read confirm (waited 20 ms for its exit)")
            ) { try conversation.checkStalls(now: later, peerIsRunning: { true }) }
        }
    }

    @Test("answers the plugin leaves unread: its requests wait past the high-water mark, and after unreadAnswersMs it went over its memory budget")
    func unreadAnswers() throws {
        var limits = ConnectionLimits()
        limits.memoryBytes = 64 << 10  // answers held: at most 32 KiB
        limits.unreadAnswersMs = 10_000
        try withConversation(limits) { conversation, peer in
            var small = Int32(4096)
            #expect(setsockopt(peer.socket, SOL_SOCKET, SO_SNDBUF, &small, socklen_t(MemoryLayout<Int32>.size)) == 0)
            let answer = JSONValue.string(String(repeating: "g", count: 4000))
            var served = 0
            conversation.onRequest = { _, _ in
                served += 1
                return .success(answer)
            }
            // 200 requests of the same size (4-digit ids), in one write, and none of the answers read.
            let requests = (1000..<1200).map { Message.request(id: .int(Int64($0)), method: "globals.get", params: ["name": "g"]).encoded() }
            try peer.peerWrite(requests.flatMap { Framing.frame($0) })
            while conversation.readChannel(deadline: Self.never) {}
            #expect(conversation.isBackpressured)
            #expect(!conversation.wantsInput)
            #expect(served > 0 && served < 200)
            #expect(conversation.channel.pendingBytes >= 32 << 10)

            // Not yet: the queue grew just now.
            try conversation.checkStalls(now: MonotonicClock.now(), peerIsRunning: { true })
            let pending = conversation.channel.pendingBytes
            do throws(ConversationError) {
                try conversation.checkStalls(now: MonotonicClock.now() + 10_000_000_000, peerIsRunning: { true })
                Issue.record("answers left unread for unreadAnswersMs were not a breach")
            } catch {
                guard case .overLimit(let breach) = error else { throw error }
                #expect(breach.limit == "host.extensionMemoryBytes")
                #expect(breach.limitValue == 64 << 10)
                #expect(breach.measured == pending)
                #expect(breach.extra == ["requests": .int(Int64(served)), "requestBytes": .int(Int64(served * requests[0].count))])
                #expect(breach.what.hasPrefix("it sent \(served) requests ("))
                #expect(breach.what.contains("for 10000 ms; the host holds at most half of its budget of 64 KiB (host.extensionMemoryBytes)"))
            }

            // The plugin reads its answers: the requests left are served, and every one is answered.
            var answered = 0
            while answered < 200 {
                conversation.writeQueued()
                if conversation.hasUnservedInput { conversation.serveBuffered(deadline: Self.never) }
                if conversation.wantsInput { conversation.readChannel(deadline: Self.never) }
                guard let message = try peer.peerReceive() else { break }
                guard case .response = message else { break }
                answered += 1
            }
            #expect(answered == 200)
            #expect(served == 200)
            try conversation.checkStalls(now: MonotonicClock.now() + 10_000_000_000, peerIsRunning: { true })
        }
    }

    @Test("stopReading: nothing more of the plugin's is read or served")
    func stopReading() throws {
        try withConversation { conversation, peer in
            var asked = 0
            conversation.onRequest = { _, _ in
                asked += 1
                return .success(nil)
            }
            conversation.stopReading()
            try peer.peerSend(.request(id: .int(1), method: "globals.get", params: nil))
            #expect(!conversation.wantsInput)
            #expect(!conversation.hasUnservedInput)
            #expect(asked == 0)
        }
    }
}

extension CallFailure {
    fileprivate var breach: LimitBreach? {
        if case .overLimit(let breach) = self { breach } else { nil }
    }
}
