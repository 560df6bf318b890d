import ExtrunProtocol
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Reading an intent or activity file: never more than `host.maxIntentFileBytes`.
extension JSONInputFile {
    struct Input {
        var data: Data
        var source: String
        var baseDirectory: URL
    }

    /// The file's bytes; `-` reads standard input (relative paths in it are then taken
    /// from the current directory). A file larger than the policy's `host.maxIntentFileBytes`
    /// is refused from its size, before it is read; standard input once that much is read.
    static func read(path: String, what: String, maxBytes: Int? = nil) throws(HostError) -> Input {
        let source = path == "-" ? "<stdin>" : path
        let fd = path == "-" ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw HostError(
                .invalidIntent, "\(path): cannot read the \(what): \(String(cString: strerror(errno)))", details: ["file": .string(path)])
        }
        defer { if fd != STDIN_FILENO { close(fd) } }
        var limit = maxBytes ?? alwaysAcceptedBytes
        func tooLarge(_ size: Int, exact: Bool) -> HostError {
            HostError(
                .invalidIntent,
                "\(source): the \(what) is \(exact ? "" : "more than ")\(ByteCount.format(Int64(size))) (\(size) bytes), over the limit of \(ByteCount.format(Int64(limit))) on an \(what) (policy host.maxIntentFileBytes); it was not read",
                details: [
                    "file": .string(source), "limit": "host.maxIntentFileBytes", "limitValue": .int(Int64(limit)), "measured": .int(Int64(size)),
                ])
        }
        var info = stat()
        let size = fstat(fd, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG ? Int(info.st_size) : nil
        if maxBytes == nil, size.map({ $0 > limit }) ?? true { limit = policyLimit() }
        if let size, size > limit { throw tooLarge(size, exact: true) }
        // Read to the end, never more than the limit (a pipe, or a file that grows meanwhile).
        var data = Data(count: min(size ?? 64 << 10, limit) + 1)
        var filled = 0
        while true {
            if filled == data.count {
                if filled > limit { throw tooLarge(limit, exact: false) }
                data.count = min(data.count * 2, limit + 1)
            }
            let count = data.withUnsafeMutableBytes { raw in Glibc.read(fd, raw.baseAddress! + filled, raw.count - filled) }
            if count < 0 {
                if errno == EINTR { continue }
                throw HostError(
                    .invalidIntent, "\(path): cannot read the \(what): \(String(cString: strerror(errno)))", details: ["file": .string(path)])
            }
            if count == 0 { break }
            filled += count
        }
        if filled > limit { throw tooLarge(limit, exact: false) }
        data.count = filled
        let baseDirectory =
            path == "-" ? URL(fileURLWithPath: FileManager.default.currentDirectoryPath) : URL(fileURLWithPath: path).deletingLastPathComponent()
        return Input(data: data, source: source, baseDirectory: baseDirectory)
    }

    /// `host.maxIntentFileBytes` from `$EXTRUN_HOME/policy.json` (the default when it has
    /// none or cannot be read: the run reports a bad policy itself).
    static func policyLimit() -> Int {
        let home = HostPaths.fromEnvironment().home
        let limit = (try? SandboxPolicy.load(home: home).0.host.maxIntentFileBytes) ?? HostLimits.default.maxIntentFileBytes
        return max(limit, alwaysAcceptedBytes)
    }

}

extension IntentFileParser {
    /// Reads an intent file; `-` reads standard input.
    public static func read(path: String) throws(HostError) -> IntentInvocation {
        let input = try JSONInputFile.read(path: path, what: "intent file")
        return try parse(input.data, source: input.source, baseDirectory: input.baseDirectory)
    }

    /// Checks the parameters against the intent's definition and turns them into
    /// wire values: defaults filled in, files loaded, single values listed where a
    /// list is expected. A missing value is left out (resolution asks for it).
    public static func wireParameters(
        for invocation: IntentInvocation, definition: IntentDefinition
    ) throws(HostError) -> [String: JSONValue] {
        func fail(_ field: String, _ message: String) -> HostError {
            HostError(
                .invalidIntent, "\(invocation.source): \(field): \(message)",
                details: ["file": .string(invocation.source), "field": .string(field)])
        }
        for name in invocation.parameters.keys.sorted() where definition.parameter(named: name) == nil {
            let known = definition.parameters.map(\.name)
            throw fail(
                "parameters.\(name)",
                "unknown parameter of \(definition.name) (its parameters: \(known.isEmpty ? "none" : known.joined(separator: ", ")))")
        }
        var wire: [String: JSONValue] = [:]
        var fileBytes = 0
        for parameter in definition.parameters {
            let field = "parameters.\(parameter.name)"
            guard var value = invocation.parameters[parameter.name], !value.isNull else {
                if let value = parameter.default, !value.isNull { wire[parameter.name] = value }
                continue
            }
            if parameter.multiple, value.arrayValue == nil { value = .array([value]) }
            if parameter.type == .file {
                value = try loadFiles(value, parameter: parameter, field: field, invocation: invocation)
                fileBytes += value.fileByteCount
                if fileBytes > maxTotalFileBytes {
                    throw fail(field, "the files of this intent add up to more than \(maxTotalFileBytes) bytes, the most the host passes to a plugin in one intent")
                }
            } else if case .double(let d) = value, parameter.type == .integer, d.rounded() == d, abs(d) < 9.0e15 {
                value = .int(Int64(d))
            }
            if let problem = ParameterValueCheck.problem(value, for: parameter) {
                throw fail(field, problem)
            }
            wire[parameter.name] = value
        }
        return wire
    }

    static func loadFiles(_ value: JSONValue, parameter: ParameterDefinition, field: String, invocation: IntentInvocation)
        throws(HostError) -> JSONValue
    {
        if case .array(let items) = value {
            var loaded: [JSONValue] = []
            for (i, item) in items.enumerated() {
                loaded.append(try loadFile(item, parameter: parameter, field: "\(field)[\(i)]", invocation: invocation))
            }
            return .array(loaded)
        }
        return try loadFile(value, parameter: parameter, field: field, invocation: invocation)
    }

    /// Set (with the reason) while a front end runs intents for callers who must not
    /// make the host read a path with its rights (`extrun serve`: the service may be
    /// root, its caller not). Every way a file parameter's path reaches the host — an
    /// intent's parameters, a prompt's answer, a phrase's slot, an activity's
    /// interaction — goes through `readFile`, which then refuses the path: such a caller
    /// sends files inline (`{"filename", "data"|"text"}`). Bound on the run's thread with
    /// `$pathsRefused.withValue(reason) { ... }`.
    @TaskLocal public static var pathsRefused: String?

    /// The largest file the host passes to a plugin.
    public static let maxFileBytes = 32 << 20
    /// The most file bytes in one intent (base64 on the wire stays under the 64 MiB frame limit).
    public static let maxTotalFileBytes = 40 << 20

    static func loadFile(_ value: JSONValue, parameter: ParameterDefinition, field: String, invocation: IntentInvocation)
        throws(HostError) -> JSONValue
    {
        func fail(_ message: String) -> HostError {
            HostError(
                .invalidIntent, "\(invocation.source): \(field): \(message)",
                details: ["file": .string(invocation.source), "field": .string(field)])
        }
        var filename: String
        var data: Data
        var typeIdentifier: String?
        switch value {
        case .string(let path):
            (filename, data) = try readFile(path, invocation: invocation, fail: fail)
        case .object(let fields):
            typeIdentifier = fields["typeIdentifier"]?.stringValue
            if let path = fields["path"]?.stringValue {
                (filename, data) = try readFile(path, invocation: invocation, fail: fail)
                if let name = fields["filename"]?.stringValue { filename = name }
            } else if let name = fields["filename"]?.stringValue {
                filename = name
                if let text = fields["text"]?.stringValue {
                    data = Data(text.utf8)
                } else if let base64 = fields["data"]?.stringValue {
                    guard let decoded = Data(base64Encoded: base64) else { throw fail("'data' is not valid base64") }
                    data = decoded
                } else {
                    throw fail("a file object needs 'path', or 'filename' with 'text' or 'data' (base64)")
                }
            } else {
                throw fail("a file object needs 'path', or 'filename' with 'text' or 'data' (base64)")
            }
        default:
            throw fail("expected a file: a path string, or an object with 'path', or 'filename' and 'text'/'data'; got \(value.typeName)")
        }
        let type = typeIdentifier ?? TypeIdentifiers.forFilename(filename)
        if let allowed = parameter.allowedTypes, !allowed.isEmpty, !allowed.contains(where: { TypeIdentifiers.conforms(type, to: $0) }) {
            throw fail("'\(filename)' is of type \(type); \(parameter.name) accepts \(allowed.joined(separator: ", "))")
        }
        return .object(["filename": .string(filename), "typeIdentifier": .string(type), "data": .string(data.base64EncodedString())])
    }

    static func readFile(_ path: String, invocation: IntentInvocation, fail: (String) -> HostError) throws(HostError) -> (String, Data) {
        if let reason = pathsRefused {
            var error = fail("'\(path)' is a path, and \(reason); send the file inline, as {\"filename\": NAME, \"data\": BASE64} or {\"filename\": NAME, \"text\": TEXT}")
            error.details["reason"] = "path"
            throw error
        }
        let url = path.hasPrefix("/") ? URL(fileURLWithPath: path) : invocation.baseDirectory.appendingPathComponent(path)
        let attributes = try? FileManager.default.attributesOfItem(atPath: url.path)
        if let size = attributes?[.size] as? Int, size > maxFileBytes {
            throw fail("\(url.path) is \(size) bytes; files passed to plugins are limited to \(maxFileBytes) bytes")
        }
        do {
            return (url.lastPathComponent, try Data(contentsOf: url))
        } catch {
            throw fail("cannot read \(url.path): \(reason(error))")
        }
    }

    static func reason(_ error: any Error) -> String {
        let nsError = error as NSError
        if let underlying = nsError.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
            return String(cString: strerror(Int32(underlying.code)))
        }
        switch nsError.code {
        case NSFileReadNoSuchFileError: return "no such file"
        case NSFileReadNoPermissionError: return "permission denied"
        default: return nsError.localizedDescription
        }
    }
}

extension JSONValue {
    /// The decoded size of the file objects in this value (base64 `data` fields).
    var fileByteCount: Int {
        switch self {
        case .array(let items): return items.reduce(0) { $0 + $1.fileByteCount }
        case .object(let fields): return (fields["data"]?.stringValue?.utf8.count ?? 0) * 3 / 4
        default: return 0
        }
    }
}

/// Uniform type identifiers for common files, and the few parent types plugins ask for.
public enum TypeIdentifiers {
    static let byExtension: [String: String] = [
        "txt": "public.plain-text", "text": "public.plain-text", "md": "net.daringfireball.markdown",
        "json": "public.json", "html": "public.html", "htm": "public.html", "csv": "public.comma-separated-values-text",
        "xml": "public.xml", "jpg": "public.jpeg", "jpeg": "public.jpeg", "png": "public.png", "gif": "com.compuserve.gif",
        "heic": "public.heic", "tif": "public.tiff", "tiff": "public.tiff", "pdf": "com.adobe.pdf", "zip": "public.zip-archive",
        "mp3": "public.mp3", "m4a": "com.apple.m4a-audio", "mov": "com.apple.quicktime-movie", "mp4": "public.mpeg-4",
        "swift": "public.swift-source", "py": "public.python-script", "sh": "public.shell-script",
    ]
    static let parents: [String: Set<String>] = [
        "public.image": ["public.jpeg", "public.png", "com.compuserve.gif", "public.heic", "public.tiff"],
        "public.text": [
            "public.plain-text", "net.daringfireball.markdown", "public.json", "public.html", "public.comma-separated-values-text",
            "public.xml", "public.swift-source", "public.python-script", "public.shell-script",
        ],
        "public.audiovisual-content": ["public.mp3", "com.apple.m4a-audio", "com.apple.quicktime-movie", "public.mpeg-4"],
    ]

    public static func forFilename(_ filename: String) -> String {
        let ext = (filename as NSString).pathExtension.lowercased()
        return byExtension[ext] ?? "public.data"
    }

    /// Whether `type` is `parent` or one of its kinds. Everything is `public.data` and `public.item`.
    public static func conforms(_ type: String, to parent: String) -> Bool {
        type == parent || parent == "public.data" || parent == "public.item" || (parents[parent]?.contains(type) ?? false)
    }
}
