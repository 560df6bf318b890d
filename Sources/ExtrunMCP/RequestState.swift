import Crypto
import ExtrunHost
import ExtrunProtocol
import ExtrunSystem
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The 32-byte key that seals the modern era's `requestState` (docs/mcp.md, "The sealed
/// request state"). Every host of a fleet that shares the key file continues any other's
/// rounds.
public struct RequestStateKey: Sendable {
    let key: SymmetricKey

    /// The default key file: `$EXTRUN_HOME/mcp-request-state.key`.
    public static func defaultFile(paths: HostPaths = .fromEnvironment()) -> URL {
        paths.home.appendingPathComponent("mcp-request-state.key")
    }

    public struct Refused: Error, CustomStringConvertible {
        public var description: String
    }

    /// Reads the key from `file`, making it first when there is none (32 random bytes,
    /// mode 0600, its folder made 0700 when absent; two processes starting at once make one
    /// key between them). Refused: a file that others may read or write (any group or other
    /// permission bit), that is not a regular file, or whose size is not 32 bytes.
    public static func load(from file: URL) throws(Refused) -> RequestStateKey {
        let path = file.path
        for _ in 0..<50 {
            let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
            if fd >= 0 {
                defer { close(fd) }
                var info = stat()
                guard fstat(fd, &info) == 0 else { throw Refused(description: "cannot read the request-state key \(path): \(String(cString: strerror(errno)))") }
                guard info.st_mode & S_IFMT == S_IFREG else { throw Refused(description: "the request-state key \(path) is not a regular file") }
                if info.st_mode & 0o077 != 0 {
                    throw Refused(
                        description: "the request-state key \(path) has mode \(String(info.st_mode & 0o777, radix: 8)): others may read it; make it 0600 (chmod 600 \(path)) or remove it to have a new one made"
                    )
                }
                if info.st_size == 0 {
                    // Another process is writing it (it links the file only once written; a leftover empty file stays empty).
                    usleep(20_000)
                    continue
                }
                guard info.st_size == 32 else {
                    throw Refused(description: "the request-state key \(path) is \(info.st_size) bytes; a key is 32 bytes (remove the file to have a new one made)")
                }
                var bytes = [UInt8](repeating: 0, count: 32)
                let count = (try? SystemCall.read(fd, into: &bytes)) ?? -1
                guard count == 32 else { throw Refused(description: "cannot read the 32 bytes of the request-state key \(path)") }
                return RequestStateKey(key: SymmetricKey(data: bytes))
            }
            guard errno == ENOENT else {
                throw Refused(description: "cannot open the request-state key \(path): \(String(cString: strerror(errno)))")
            }
            try create(file)
        }
        throw Refused(description: "the request-state key \(path) stays empty: remove it to have a new one made")
    }

    /// Writes a new key to a temporary file beside `file` and links it in place: a reader
    /// sees no file or the whole key; of two processes making one at once, one key wins.
    static func create(_ file: URL) throws(Refused) {
        let folder = file.deletingLastPathComponent().path
        if mkdir(folder, 0o700) != 0 && errno != EEXIST {
            // Its parents too (a home not made yet).
            do {
                try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw Refused(description: "cannot make the folder of the request-state key \(folder): \(error)")
            }
        }
        let temporary = "\(file.path).\(getpid()).\(UInt32.random(in: 0...UInt32.max)).new"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Refused(description: "cannot make the request-state key \(file.path): \(String(cString: strerror(errno)))") }
        defer { unlink(temporary) }
        let bytes = SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) }
        let written = (try? SystemCall.writeAll(fd, bytes)) != nil && fsync(fd) == 0
        close(fd)
        guard written else { throw Refused(description: "cannot write the request-state key \(file.path)") }
        if link(temporary, file.path) != 0 && errno != EEXIST {
            throw Refused(description: "cannot make the request-state key \(file.path): \(String(cString: strerror(errno)))")
        }
    }

    /// The key's bytes (tests compare keys).
    var bytes: [UInt8] { key.withUnsafeBytes { Array($0) } }

    /// A key of the given bytes (tests).
    init(bytes: [UInt8]) {
        key = SymmetricKey(data: bytes)
    }

    init(key: SymmetricKey) {
        self.key = key
    }
}

/// What a modern `tools/call` resolved so far, between its rounds: sealed with
/// ChaChaPoly (an AEAD: encrypted and authenticated) under the request-state key, so the
/// client carries it without reading or changing it. It is bound to the principal, the
/// tool, a SHA-256 digest of the canonical arguments and an expiry; `open` refuses it
/// for anything else.
struct RequestState: Sendable, Equatable {
    /// The format; another is refused.
    static let version: Int64 = 1
    /// What the sealed bytes start with (in the clear; also bound as the AEAD's associated data).
    static let prefix = "xr1."

    struct Answer: Sendable, Equatable {
        /// The question's fingerprint (`Question.fingerprint`).
        var fingerprint: String
        /// The accepted value, as the elicitation's content carried it.
        var value: JSONValue
    }

    var principal: String
    var tool: String
    /// SHA-256 of the arguments as JSONWriter writes them (sorted keys), hex.
    var argumentsDigest: String
    /// Milliseconds since 1970.
    var expiresMs: Int64
    /// The answers given in the earlier rounds, in the order the run asks its questions.
    var answers: [Answer]
    /// The question the last round stopped at, whose answer the next round's `inputResponses` carries.
    var pending: String?

    static func digest(of arguments: JSONValue) -> String {
        SHA256.hash(data: JSONWriter.bytes(arguments)).map { String(format: "%02x", $0) }.joined()
    }

    var json: JSONValue {
        var fields: [String: JSONValue] = [
            "v": .int(Self.version), "p": .string(principal), "t": .string(tool), "a": .string(argumentsDigest),
            "e": .int(expiresMs),
            "r": .array(answers.map { ["f": .string($0.fingerprint), "v": $0.value] }),
        ]
        if let pending { fields["q"] = .string(pending) }
        return .object(fields)
    }

    /// The state as the opaque `requestState` string: the prefix, then base64url of
    /// ChaChaPoly's nonce (12 random bytes), ciphertext and tag.
    func seal(with key: RequestStateKey) -> String {
        let plain = JSONWriter.bytes(json)
        // ChaChaPoly.seal draws a random nonce; it fails only for a malformed nonce, which it makes itself.
        guard let box = try? ChaChaPoly.seal(plain, using: key.key, authenticating: Array(Self.prefix.utf8)) else { return "" }
        return Self.prefix + Self.base64url(Array(box.combined))
    }

    enum Refusal: Error, Equatable {
        case malformed
        case tampered
        case otherVersion(Int64)
        case expired(secondsAgo: Int64)
        case otherPrincipal
        case otherTool(String)
        case otherArguments

        var message: String {
            switch self {
            case .malformed: "the requestState is not one this server made (not a sealed extrun state)"
            case .tampered: "the requestState does not open with this server's key: it was changed, or sealed under another key"
            case .otherVersion(let v): "the requestState is of format \(v); this server reads format \(RequestState.version)"
            case .expired(let ago): "the requestState expired \(ago) s ago: call the tool again without it, and answer its questions anew"
            case .otherPrincipal: "the requestState was issued to another principal"
            case .otherTool(let tool): "the requestState was issued for the tool \(tool), not this one"
            case .otherArguments: "the requestState was issued for other arguments: a retry must repeat the original call's arguments"
            }
        }
    }

    /// Opens `sealed` and checks what it is bound to.
    static func open(
        _ sealed: String, with key: RequestStateKey, principal: String, tool: String, argumentsDigest: String, nowMs: Int64
    ) -> Result<RequestState, Refusal> {
        guard sealed.hasPrefix(prefix), let bytes = base64urlDecode(sealed.dropFirst(prefix.count)), bytes.count >= 12 + 16 else {
            return .failure(.malformed)
        }
        guard let box = try? ChaChaPoly.SealedBox(combined: bytes),
            let plain = try? ChaChaPoly.open(box, using: key.key, authenticating: Array(prefix.utf8))
        else { return .failure(.tampered) }
        guard let json = try? JSONParser.parse(Array(plain)), let version = json["v"]?.intValue else { return .failure(.malformed) }
        guard version == Self.version else { return .failure(.otherVersion(version)) }
        guard let statePrincipal = json["p"]?.stringValue, let stateTool = json["t"]?.stringValue, let digest = json["a"]?.stringValue,
            let expires = json["e"]?.intValue, let answers = json["r"]?.arrayValue
        else { return .failure(.malformed) }
        if nowMs > expires { return .failure(.expired(secondsAgo: (nowMs - expires) / 1000)) }
        if statePrincipal != principal { return .failure(.otherPrincipal) }
        if stateTool != tool { return .failure(.otherTool(stateTool)) }
        if digest != argumentsDigest { return .failure(.otherArguments) }
        var recorded: [Answer] = []
        for answer in answers {
            guard let fingerprint = answer["f"]?.stringValue, let value = answer["v"] else { return .failure(.malformed) }
            recorded.append(Answer(fingerprint: fingerprint, value: value))
        }
        return .success(
            RequestState(
                principal: statePrincipal, tool: stateTool, argumentsDigest: digest, expiresMs: expires, answers: recorded,
                pending: json["q"]?.stringValue))
    }

    static func base64url(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func base64urlDecode(_ text: Substring) -> [UInt8]? {
        var standard = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while standard.count % 4 != 0 { standard += "=" }
        return Data(base64Encoded: standard).map { Array($0) }
    }
}
