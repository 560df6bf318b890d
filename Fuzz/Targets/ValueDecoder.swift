// libFuzzer target: JSONValueDecoder (behind JSONCoding.decode) against JSONDecoder reading the
// same value written out, as JSONValueDecoderTests does over its corpus: for any JSON the parser
// takes, both give the same value or both fail with the same words. A difference stops the run.
import ExtrunProtocol
import Foundation

enum Color: String, Codable, Equatable { case red, green }
enum Shape: Codable, Equatable {
    case circle(radius: Double)
    case square(Int)
}
struct Inner: Codable, Equatable {
    var name: String
    var count: Int8?
    var ratio: Float?
}
struct Outer: Codable, Equatable {
    var a: Int
    var b: String?
    var c: [Double]?
    var d: Bool?
    var inner: Inner?
    var items: [Inner?]?
    var color: Color?
    var shape: Shape?
    var when: Date?
    var blob: Data?
    var link: URL?
    var any: JSONValue?
    var small: UInt16?
    var big: UInt64?
    var exact: Decimal?
}

func compare<T: Decodable & Equatable>(_ type: T.Type, _ value: JSONValue) {
    let fast = Result { try JSONCoding.decode(type, from: value) }
    let reference = Result { try JSONCoding.decoder().decode(type, from: Data(JSONWriter.bytes(value))) }
    switch (fast, reference) {
    case (.success(let a), .success(let b)):
        if a != b { fatalError("\(T.self) from \(JSONWriter.bytes(value).count) bytes: \(a) against \(b)") }
    case (.failure(let a), .failure(let b)):
        let (x, y) = (JSONCoding.describe(a), JSONCoding.describe(b))
        if x != y { fatalError("\(T.self): '\(x)' against '\(y)'") }
    case (.success(let a), .failure(let b)):
        fatalError("\(T.self): \(a) against the error '\(JSONCoding.describe(b))'")
    case (.failure(let a), .success(let b)):
        fatalError("\(T.self): the error '\(JSONCoding.describe(a))' against \(b)")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let value = try? JSONCoding.parse(json: bytes) else { return 0 }
    compare(Outer.self, value)
    compare([Outer].self, value)
    compare(Inner.self, value)
    compare(Shape.self, value)
    compare([Int?].self, value)
    compare(Int32.self, value)
    compare(Double.self, value)
    compare(Date.self, value)
    compare(String.self, value)
    compare(Bool.self, value)
    // (A JSONValue itself is returned as it is by JSONCoding.decode, before any decoder: not compared.)
    compare([JSONValue].self, value)
    return 0
}
