import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The service's own memory (VmRSS of /proc/self/status).
enum ServeMemory {
    /// glibc's malloc_trim (left out of the Glibc module), looked up once.
    private typealias MallocTrim = @convention(c) (Int) -> Int32
    private static let mallocTrim: MallocTrim? = dlsym(dlopen(nil, RTLD_NOW), "malloc_trim").map { unsafeBitCast($0, to: MallocTrim.self) }

    /// Gives the allocator's free memory back to the system (glibc's malloc_trim, every arena).
    static func trim() {
        _ = mallocTrim?(0)
    }

    static func residentBytes() -> Int64? {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("VmRSS:") {
            let digits = line.dropFirst(6).filter(\.isNumber)
            return Int64(digits).map { $0 * 1024 }
        }
        return nil
    }
}
