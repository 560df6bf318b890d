import CExtrunStoreShims
import ExtrunProtocol
import ExtrunSystem
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The rights a root process takes on for a bookmark's files: its creator's uid, primary gid
/// and supplementary groups, as the calling thread's file system credentials (setfsuid,
/// setfsgid and the raw setgroups system call, which act on that thread alone). The kernel
/// then checks every open, rename and new file against the creator, as if the creator had
/// asked itself, and a new file belongs to the creator. Nil when there is nothing to take
/// on: the process is not root (it can only act as itself), or the creator is root.
struct CreatorRights: Sendable {
    let uid: UInt32
    let gid: UInt32
    let groups: [UInt32]
    /// What the thread goes back to (the process's own).
    let serviceUID: UInt32
    let serviceGID: UInt32
    let serviceGroups: [UInt32]

    static func forCreator(_ uid: UInt32) -> CreatorRights? {
        guard geteuid() == 0, uid != 0 else { return nil }
        let (gid, groups) = LocalUsers.groups(of: uid)
        var own = [UInt32](repeating: 0, count: max(0, Int(extrun_thread_groups(nil, 0))))
        let count = own.withUnsafeMutableBufferPointer { extrun_thread_groups($0.baseAddress, Int32($0.count)) }
        return CreatorRights(
            uid: uid, gid: gid, groups: groups, serviceUID: geteuid(), serviceGID: getegid(), serviceGroups: Array(own.prefix(max(0, Int(count)))))
    }

    /// Takes on the creator's rights on this thread.
    func enter() throws {
        try set(uid, gid, groups, "the rights of uid \(uid), the bookmark's maker")
    }

    /// Goes back to the process's own rights on this thread.
    func leave() throws {
        try set(serviceUID, serviceGID, serviceGroups, "the service's own rights")
    }

    private func set(_ uid: UInt32, _ gid: UInt32, _ groups: [UInt32], _ what: String) throws {
        let result = groups.withUnsafeBufferPointer { extrun_thread_fs_credentials(uid, gid, $0.baseAddress, $0.count) }
        if result != 0 {
            let code = errno
            throw StoreError(.ioError, "cannot take on \(what) for a bookmark's files: \(SystemCall.reason(code))")
        }
    }

    /// Runs `body` with the creator's rights, and goes back after it, whatever it throws.
    func run<T>(_ body: () throws -> T) throws -> T {
        do {
            try enter()
        } catch {
            // Taken on in part (the groups, say): back to the process's own before the error.
            try? leave()
            throw error
        }
        defer { try? leave() }
        return try body()
    }

    /// Within `run`: `body` with the process's own rights (the store, the trash, the home),
    /// then the creator's again; if they cannot be taken on again, the operation fails
    /// rather than carry on with the process's rights.
    func asService<T>(_ body: () throws -> T) throws -> T {
        try leave()
        let result = Result { try body() }
        try enter()
        return try result.get()
    }
}

/// The local users and groups, read from /etc/passwd and /etc/group (no NSS: the CLI is a
/// static executable, and a module loaded at run time would be someone else's code).
public enum LocalUsers {
    /// The uid of the user `name` in /etc/passwd.
    public static func uid(named name: String) -> UInt32? {
        for line in lines("/etc/passwd") {
            let fields = line.split(separator: ":", omittingEmptySubsequences: false)
            if fields.count >= 3, fields[0] == name { return UInt32(fields[2]) }
        }
        return nil
    }

    /// The primary gid and the supplementary groups of `uid`. A uid without a line in
    /// /etc/passwd gets the overflow group (65534) and no others: the fewest rights.
    static func groups(of uid: UInt32) -> (gid: UInt32, groups: [UInt32]) {
        var name: String?
        var gid: UInt32 = 65_534
        for line in lines("/etc/passwd") {
            let fields = line.split(separator: ":", omittingEmptySubsequences: false)
            guard fields.count >= 4, UInt32(fields[2]) == uid, let primary = UInt32(fields[3]) else { continue }
            name = String(fields[0])
            gid = primary
            break
        }
        var groups: [UInt32] = [gid]
        if let name {
            for line in lines("/etc/group") {
                let fields = line.split(separator: ":", omittingEmptySubsequences: false)
                guard fields.count >= 4, let group = UInt32(fields[2]) else { continue }
                if fields[3].split(separator: ",").contains(where: { $0 == name }), !groups.contains(group) { groups.append(group) }
            }
        }
        return (gid, groups)
    }

    private static func lines(_ path: String) -> [Substring] {
        guard let data = FileManager.default.contents(atPath: path) else { return [] }
        return String(decoding: data, as: UTF8.self).split(separator: "\n")
    }
}
