import ExtrunProtocol
import Foundation

/// The rules for owner, global and bookmark names (docs/store.md, "Names").
///
/// Names are compared byte for byte (SQLite BINARY), so they must be in
/// Unicode NFC: otherwise "é" typed two ways would be two different names.
package enum NameRules {
    /// Owners become key file names: no path separators, no `.`/`..`, at most 64 bytes.
    package static func validateOwner(_ owner: String) throws {
        if isPlain(owner, limit: StoreLimits.maxOwnerNameBytes, slashes: false) && owner != "." && owner != ".." { return }
        try validateCommon(owner, what: "owner name", limit: StoreLimits.maxOwnerNameBytes)
        if owner.utf8.contains(where: { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "\\") }) {
            throw StoreError(.invalidName, "owner name '\(owner)' must not contain '/' or '\\'", details: ["owner": .string(owner)])
        }
        if owner == "." || owner == ".." {
            throw StoreError(.invalidName, "owner name must not be '.' or '..'", details: ["owner": .string(owner)])
        }
    }

    /// Global and bookmark names: 1–256 bytes of NFC text without control characters.
    static func validateName(_ name: String, kind: SealKind) throws {
        if isPlain(name, limit: StoreLimits.maxNameBytes, slashes: true) { return }
        try validateCommon(name, what: "\(kind.rawValue) name", limit: StoreLimits.maxNameBytes)
    }

    /// Printable ASCII without spaces (and without `/` or `\\` unless `slashes`), 1 to `limit`
    /// bytes: valid under every rule below, so taken at once. The full checks (Unicode
    /// properties, Foundation's `contains`, the details built before any failure) were ~2%
    /// of a donating service's CPU, run for every intent (docs/benchmarks.md).
    static func isPlain(_ name: String, limit: Int, slashes: Bool) -> Bool {
        let utf8 = name.utf8
        guard !utf8.isEmpty, utf8.count <= limit else { return false }
        return utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && (slashes || ($0 != UInt8(ascii: "/") && $0 != UInt8(ascii: "\\"))) }
    }

    private static func validateCommon(_ name: String, what: String, limit: Int) throws {
        let details: [String: JSONValue] = ["name": .string(name)]
        let bytes = name.utf8.count
        if bytes == 0 {
            throw StoreError(.invalidName, "\(what) must not be empty", details: details)
        }
        if bytes > limit {
            throw StoreError(
                .invalidName, "\(what) is \(bytes) bytes long; the limit is \(limit) bytes (UTF-8)",
                details: details.merging(["limit": .int(Int64(limit))]) { a, _ in a })
        }
        if let scalar = name.unicodeScalars.first(where: { isControl($0) }) {
            let code = String(scalar.value, radix: 16, uppercase: true)
            throw StoreError(.invalidName, "\(what) '\(printable(name))' contains the control character U+\(String(repeating: "0", count: max(0, 4 - code.count)))\(code)", details: details)
        }
        if let first = name.unicodeScalars.first, let last = name.unicodeScalars.last,
            first.properties.isWhitespace || last.properties.isWhitespace
        {
            throw StoreError(.invalidName, "\(what) '\(name)' must not start or end with whitespace", details: details)
        }
        // ASCII is always NFC: only other names pay for the normalization (ICU's, costly on first use).
        if !name.utf8.allSatisfy({ $0 < 0x80 }) && !name.utf8.elementsEqual(name.precomposedStringWithCanonicalMapping.utf8) {
            throw StoreError(.invalidName, "\(what) '\(name)' is not in Unicode NFC (composed) form; normalize it first", details: details)
        }
    }

    private static func isControl(_ scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }

    /// The name with control characters shown as `?`, for messages.
    static func printable(_ name: String) -> String {
        String(String.UnicodeScalarView(name.unicodeScalars.map { isControl($0) ? "?" : $0 }))
    }
}
