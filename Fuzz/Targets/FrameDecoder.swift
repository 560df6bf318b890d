// libFuzzer target: the frame decoder, fed the input in pieces whose sizes the input picks.
import ExtrunProtocol

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let first = bytes.first else { return 0 }
    let step = Int(first % 64) + 1
    var decoder = FrameDecoder(maxFrameBytes: 1 << 16)
    var index = 1
    var total = 0
    while index < bytes.count {
        let end = min(bytes.count, index + step)
        decoder.append(bytes[index..<end])
        index = end
        do {
            while let body = try decoder.nextFrame() {
                total += body.count
                // What is framed decodes to the same body.
                var again = FrameDecoder(maxFrameBytes: 1 << 16)
                again.append(Framing.frame(body))
                guard let same = try? again.nextFrame(), same == body else { fatalError("a framed body did not decode to itself") }
            }
        } catch {
            return 0
        }
    }
    if total > bytes.count { fatalError("more body bytes than input bytes") }
    return 0
}
