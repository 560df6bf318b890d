import Foundation

/// What loading a program costs before its first instruction: the private writable
/// memory of its ELF image (`.data`, `.bss`, and the relocated data the loader writes),
/// which `RLIMIT_DATA` counts. A program whose image needs more than the memory cap
/// dies inside `execve` (the kernel cannot map it: SIGSEGV, or SIGKILL past the point
/// of no return), before it could print a word; this is the evidence that says why.
enum ExecutableImage {
    /// The sum of the writable `PT_LOAD` segments' sizes in memory, or nil when `path`
    /// is not a readable 64-bit little-endian ELF file.
    static func writableBytes(atPath path: String) -> Int64? {
        guard let file = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? file.close() }
        guard let header = try? file.read(upToCount: 64), header.count == 64,
            header.prefix(4) == Data([0x7F, 0x45, 0x4C, 0x46]), header[4] == 2, header[5] == 1  // ELF, 64-bit, little-endian
        else { return nil }
        let programHeaders = integer(header, at: 0x20, size: 8)
        let entrySize = integer(header, at: 0x36, size: 2)
        let count = integer(header, at: 0x38, size: 2)
        guard entrySize >= 56, count > 0, count <= 4096 else { return nil }
        guard (try? file.seek(toOffset: programHeaders)) != nil,
            let table = try? file.read(upToCount: Int(entrySize * count)), table.count == Int(entrySize * count)
        else { return nil }
        var writable: UInt64 = 0
        for index in 0..<Int(count) {
            let entry = index * Int(entrySize)
            let type = integer(table, at: entry, size: 4)
            let flags = integer(table, at: entry + 4, size: 4)
            if type == 1 && flags & 2 != 0 {  // PT_LOAD, PF_W
                writable = writable &+ integer(table, at: entry + 40, size: 8)  // p_memsz
            }
        }
        return writable > UInt64(Int64.max) ? nil : Int64(writable)
    }

    /// For a Swift plugin, the usual cause.
    static let linkingAdvice =
        " (a Swift plugin linked with --static-swift-stdlib carries the standard library's data in its own image: link it dynamically, docs/plugin-guide.md §1.2)"

    private static func integer(_ data: Data, at offset: Int, size: Int) -> UInt64 {
        var value: UInt64 = 0
        let start = data.startIndex + offset
        for byte in (0..<size).reversed() { value = value << 8 | UInt64(data[start + byte]) }
        return value
    }
}
