// `JSONParser.parseLocated`: values and keys with their line and column, for files
// people write (intent definitions, manifests in `plugins check`).

/// Where a value or a key starts in a JSON text.
public struct JSONTextPosition: Sendable, Hashable, CustomStringConvertible {
    /// Zero-based byte offset.
    public var offset: Int
    /// One-based line and column (columns count characters, not bytes).
    public var line: Int
    public var column: Int

    public init(offset: Int, line: Int, column: Int) {
        self.offset = offset
        self.line = line
        self.column = column
    }

    /// "3:8".
    public var description: String { "\(line):\(column)" }
}

/// A JSON value with the position of every value and key in it (`JSONParser.parseLocated`).
public struct LocatedJSON: Sendable, Hashable {
    public indirect enum Content: Sendable, Hashable {
        case null
        case bool(Bool)
        case int(Int64)
        case double(Double)
        case string(String)
        case array([LocatedJSON])
        /// Members in the order of the text.
        case object([Member])
    }

    public struct Member: Sendable, Hashable {
        public var key: String
        public var keyPosition: JSONTextPosition
        public var value: LocatedJSON

        public init(key: String, keyPosition: JSONTextPosition, value: LocatedJSON) {
            self.key = key
            self.keyPosition = keyPosition
            self.value = value
        }
    }

    public var content: Content
    public var position: JSONTextPosition

    public init(content: Content, position: JSONTextPosition) {
        self.content = content
        self.position = position
    }

    /// The same value without positions (of a key given twice, the last wins).
    public var json: JSONValue {
        switch content {
        case .null: .null
        case .bool(let b): .bool(b)
        case .int(let i): .int(i)
        case .double(let d): .double(d)
        case .string(let s): .string(s)
        case .array(let items): .array(items.map(\.json))
        case .object(let members): .object(Dictionary(members.map { ($0.key, $0.value.json) }, uniquingKeysWith: { _, last in last }))
        }
    }
}


struct LocatingBuilder: JSONBuilder {
    struct Object {
        var position: JSONTextPosition
        var members: [LocatedJSON.Member] = []
        var seen: [String: JSONTextPosition] = [:]
        var pendingKey = JSONTextPosition(offset: 0, line: 1, column: 1)
    }
    struct List {
        var position: JSONTextPosition
        var items: [LocatedJSON] = []
    }

    let bytes: UnsafeBufferPointer<UInt8>
    let refuseDuplicates: Bool
    // Values are met in the text's order: lines and columns are counted once, forward.
    var cursor = 0
    var line = 1
    var column = 1

    init(bytes: UnsafeBufferPointer<UInt8>, refuseDuplicates: Bool) {
        self.bytes = bytes
        self.refuseDuplicates = refuseDuplicates
    }

    mutating func position(_ offset: Int) -> JSONTextPosition {
        while cursor < offset {
            let byte = bytes[cursor]
            if byte == 10 {
                line += 1
                column = 1
            } else if byte & 0xC0 != 0x80 {
                column += 1
            }
            cursor += 1
        }
        return JSONTextPosition(offset: offset, line: line, column: column)
    }

    mutating func null(at offset: Int) -> LocatedJSON { LocatedJSON(content: .null, position: position(offset)) }
    mutating func bool(_ value: Bool, at offset: Int) -> LocatedJSON { LocatedJSON(content: .bool(value), position: position(offset)) }
    mutating func int(_ value: Int64, at offset: Int) -> LocatedJSON { LocatedJSON(content: .int(value), position: position(offset)) }
    mutating func double(_ value: Double, at offset: Int) -> LocatedJSON { LocatedJSON(content: .double(value), position: position(offset)) }
    mutating func string(_ value: String, at offset: Int) -> LocatedJSON { LocatedJSON(content: .string(value), position: position(offset)) }
    mutating func beginObject(at offset: Int) -> Object { Object(position: position(offset)) }
    mutating func key(_ key: String, at offset: Int, in object: inout Object) -> Int? {
        let here = position(offset)
        if refuseDuplicates {
            if let first = object.seen[key] { return first.offset }
            object.seen[key] = here
        }
        object.pendingKey = here
        return nil
    }
    mutating func add(_ key: String, _ value: LocatedJSON, to object: inout Object) {
        object.members.append(LocatedJSON.Member(key: key, keyPosition: object.pendingKey, value: value))
    }
    mutating func end(_ object: Object) -> LocatedJSON { LocatedJSON(content: .object(object.members), position: object.position) }
    mutating func beginList(at offset: Int) -> List { List(position: position(offset)) }
    mutating func append(_ value: LocatedJSON, to list: inout List) { list.items.append(value) }
    mutating func end(_ list: List) -> LocatedJSON { LocatedJSON(content: .array(list.items), position: list.position) }
}

