// ExtrunHTTPFloor: the floor under `extrun serve`'s throughput rows (Scripts/bench, section 7;
// docs/benchmarks.md, "Locks, and the floor under `extrun serve`"). The service's own listener
// (`ServeService.listener`: a Unix socket, one SwiftNIO event loop thread, the same HTTP/1.1
// pipeline), with no intent behind it, answering every request with the same bytes: a report
// the real service gave for the same intent.
//
//   ExtrunHTTPFloor --socket PATH --body FILE [--hop]
//
// --hop: each request crosses to a worker thread and back (the service's `Workers`, then
// `eventLoop.execute`), as every intent of the service does; without it the event loop answers
// at once. What the same clients (Benchmarks/harness/serveload.c) reach against it is the most
// any service on this listener could do here; the service's rows are read against it.
// Runs until SIGTERM or SIGINT.
import ExtrunHost
import ExtrunServe
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

#if canImport(Glibc)
import Glibc
#endif

final class FixedAnswer: ChannelInboundHandler, Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let body: [UInt8]
    let hop: Workers?

    init(body: [UInt8], hop: Workers?) {
        self.body = body
        self.hop = hop
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .end = unwrapInboundIn(data) else { return }
        guard let hop else {
            answer(context: context)
            return
        }
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        let eventLoop = context.eventLoop
        hop.run { eventLoop.execute { self.answer(context: bound.value) } }
    }

    private func answer(context: ChannelHandlerContext) {
        var headers = HTTPHeaders()
        headers.add(name: "content-type", value: "application/json")
        headers.add(name: "content-length", value: String(body.count))
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: headers))), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("ExtrunHTTPFloor: \(message)\n".utf8))
    exit(64)
}

var socketPath: String?
var bodyPath: String?
var hops = false
var arguments = CommandLine.arguments.dropFirst()
while let argument = arguments.popFirst() {
    switch argument {
    case "--socket": socketPath = arguments.popFirst()
    case "--body": bodyPath = arguments.popFirst()
    case "--hop": hops = true
    default: fail("unknown argument \(argument) (usage: ExtrunHTTPFloor --socket PATH --body FILE [--hop])")
    }
}
guard let socketPath, let bodyPath else { fail("usage: ExtrunHTTPFloor --socket PATH --body FILE [--hop]") }
guard let body = FileManager.default.contents(atPath: bodyPath), !body.isEmpty else { fail("cannot read \(bodyPath), or it is empty") }

let hop = hops ? Workers() : nil
let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
let bytes = [UInt8](body)
// The service's own listener (ServeService.listener), with the fixed answer as its handler.
let bootstrap = ServeService.listener(group: group) { FixedAnswer(body: bytes, hop: hop) }
unlink(socketPath)
let channel: any Channel
do {
    channel = try bootstrap.bind(unixDomainSocketPath: socketPath).wait()
} catch {
    fail("cannot listen on \(socketPath): \(error)")
}
signal(SIGTERM, SIG_IGN)
signal(SIGINT, SIG_IGN)
let stop = DispatchSemaphore(value: 0)
var sources: [any DispatchSourceSignal] = []
for number in [SIGTERM, SIGINT] {
    let source = DispatchSource.makeSignalSource(signal: number)
    source.setEventHandler { stop.signal() }
    source.resume()
    sources.append(source)
}
stop.wait()
try? channel.close().wait()
unlink(socketPath)
try? group.syncShutdownGracefully()
