import CExtrunLinux
import ExtrunProtocol
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// What this machine lets the sandbox use, detected once per process.
public struct SandboxCapabilities: Sendable {
    /// seccomp user notification: forbidden calls are reported by name.
    public var seccompNotify: Bool
    public var isRoot: Bool

    /// The Landlock ABI (0: none).
    public var landlockABI: Int32 = 0

    public static let current = SandboxCapabilities(
        seccompNotify: extrun_seccomp_notify_supported() != 0, isRoot: geteuid() == 0, landlockABI: extrun_landlock_abi())
}

/// The sandbox for one run: limits, filter and namespaces, in the form the launcher takes.
struct SandboxSettings {
    var limits = extrun_limits()
    var seccomp = true
    var seccompNotify = true
    var namespaces: Int32 = 0
    var pidMax = 0
    var cgroupProcsFD: Int32 = -1
    /// Who the plugin runs as.
    var identity: PluginCredentials
    /// With a mount namespace: the folders to hide (`$EXTRUN_HOME` and the
    /// scratch directory's parent, resolved; none inside another), and the
    /// folders under them the plugin needs (its own, its scratch directory).
    var hidePaths: [String] = []
    /// (the folder, where the plugin finds it): the resolved folder is bound at
    /// the path the host gives the plugin (only the last component may be a link).
    /// Folders (and an executable) bound back under the covers; only the scratch directory is writable.
    var reveals: [(source: String, target: String, writable: Bool)] = []
    var revealPaths: [String] { reveals.map(\.target) }
    /// `$EXTRUN_HOME`, resolved, when it is hidden.
    var hiddenHome: String?
    /// With a mount namespace: a /dev of the run's own, and one tmpfs of `memoryFilesBytes`
    /// (part of the memory cap) and `memoryFilesInodes` files at /tmp, /var/tmp and /dev/shm.
    var privateDev = false
    var memoryFilesBytes: UInt64 = 0
    var memoryFilesInodes: UInt64 = 0
    /// Landlock's rules (path, EXTRUN_LANDLOCK_* kind); empty: no Landlock.
    var landlock: [(path: String, kind: Int32)] = []

    /// The system's folders a plugin reads and executes (its runtime: the C library,
    /// Python, a Swift toolchain under /opt), and what of /sys runtimes read.
    static let systemFolders = [
        "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/opt", "/proc", "/sys/devices/system/cpu",
        "/sys/fs/cgroup",
    ]
    /// Devices: read and write (no /dev/zero: its shared mappings are shared memory).
    static let devices = ["/dev/null", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"]

    static func landlockRules(pluginDirectory: URL?, executable: URL?, scratch: URL?) -> [(path: String, kind: Int32)] {
        var rules = systemFolders.map { (path: $0, kind: Int32(EXTRUN_LANDLOCK_READ_EXECUTE)) }
        var own: [String] = []
        if let pluginDirectory { own += [pluginDirectory.path, resolved(pluginDirectory.path)].compactMap { $0 } }
        if let executable { own += [executable.path, resolved(executable.path).map { URL(fileURLWithPath: $0).deletingLastPathComponent().path }].compactMap { $0 } }
        rules += Set(own).sorted().map { (path: $0, kind: Int32(EXTRUN_LANDLOCK_READ_EXECUTE)) }
        rules += devices.map { (path: $0, kind: Int32(EXTRUN_LANDLOCK_DEVICES)) }
        if let scratch { rules.append((path: scratch.path, kind: Int32(EXTRUN_LANDLOCK_READ_WRITE))) }
        rules += replacedFolders.map { (path: $0, kind: Int32(EXTRUN_LANDLOCK_PRIVATE_TEMPORARY)) }
        return rules
    }

    /// The scratch directory and its quota, counted by the supervisor every `diskCheckMs`.
    var scratchPath: String?
    var diskBytes: UInt64 = 0
    var diskFiles: UInt64 = 0
    static let diskCheckMs: Int32 = 100
    /// Files and folders the run's memory filesystem may hold.
    static let memoryFilesInodes: UInt64 = 1024

    init(
        policy: SandboxPolicy, limits effective: EffectiveLimits, capabilities: SandboxCapabilities, cgroup: CgroupRun?,
        identity: PluginCredentials, home: URL?, pluginDirectory: URL?, scratch: URL?, executable: URL?
    ) {
        // No defaults: every launch says which user the plugin runs as and what it must not see.
        self.identity = identity
        limits.data_bytes = UInt64(effective.dataBytes)
        limits.stack_bytes = UInt64(effective.stackBytes)
        limits.open_files = UInt64(policy.openFiles)
        limits.processes = UInt64(policy.processes)
        limits.file_bytes = UInt64(policy.fileSizeBytes)
        // A CPU-time backstop well past the wall-clock deadline (which is what normally ends a run).
        limits.cpu_seconds = UInt64(effective.maxExtendedDeadlineMs / 1000 + 30)
        seccomp = policy.seccomp
        seccompNotify = capabilities.seccompNotify
        var flags: Int32 = 0
        if policy.namespaces.pid { flags |= Int32(EXTRUN_NS_PID) }
        if policy.namespaces.network { flags |= Int32(EXTRUN_NS_NET | EXTRUN_NS_NET_SHARED) }
        if policy.namespaces.ipc { flags |= Int32(EXTRUN_NS_IPC) }
        if policy.namespaces.mount { flags |= Int32(EXTRUN_NS_MOUNT) }
        if policy.namespaces.user && !capabilities.isRoot { flags |= Int32(EXTRUN_NS_USER) }
        namespaces = flags
        if policy.namespaces.mount {
            // The home, and the folder the scratch directories are made in ($TMPDIR, above
            // extrun's own folder: other runs' scratch directories, the host's temporary
            // files): only the outermost.
            // And a folder above the plugin's own that its user cannot enter (such as /root).
            let unreachable = pluginDirectory.flatMap { SandboxSettings.logical($0.path) }.flatMap {
                PathAccess.coverableAncestor(of: $0, identity: self.identity)
            }
            let candidates = ([home, scratch.map(ScratchDirectory.hiddenFolder(of:))].compactMap { $0.flatMap { SandboxSettings.resolved($0.path) } }
                + [unreachable].compactMap { $0 }).filter { $0 != "/" }
            hidePaths = candidates.filter { path in !candidates.contains { path.hasPrefix($0 + "/") } }
            hidePaths = hidePaths.enumerated().filter { index, path in !hidePaths[..<index].contains(path) }.map(\.element)
            // /tmp, /var/tmp and /dev/shm are the run's own memory filesystem: what the host has
            // there is hidden already, so a folder in them (the default $TMPDIR, /tmp, say) needs
            // no cover of its own; covering it would hide the run's /tmp behind a read-only one.
            let ownFolders = effective.memoryFilesBytes > 0 ? SandboxSettings.replacedFolders : []
            hidePaths = hidePaths.filter { path in !ownFolders.contains { path == $0 || path.hasPrefix($0 + "/") } }
            hiddenHome = home.flatMap { SandboxSettings.resolved($0.path) }.flatMap { path in
                (hidePaths + ownFolders).contains { path == $0 || path.hasPrefix($0 + "/") } ? path : nil
            }
            // Also covered: what lies in /tmp, /var/tmp and /dev/shm, which are the run's own.
            func isHidden(_ path: String) -> Bool {
                (hidePaths + SandboxSettings.replacedFolders).contains { path.hasPrefix($0 + "/") }
            }
            for folder in [pluginDirectory, scratch].compactMap({ $0 }) {
                guard let source = SandboxSettings.resolved(folder.path), let target = SandboxSettings.logical(folder.path) else { continue }
                // At the path the plugin is told (a link to it, say in $EXTRUN_HOME/plugins),
                // and at its own path, wherever either is covered.
                // A plugin installed in the home ($EXTRUN_HOME/plugins) is bound back read-only:
                // a plugin that is the host's user must not rewrite its manifest (its owner)
                // or its executable for the next run. Elsewhere its folder keeps its permissions.
                for place in Set([target, source]).sorted() where isHidden(place) {
                    let inHome = hiddenHome.map { place == $0 || place.hasPrefix($0 + "/") } ?? false
                    reveals.append((source, place, folder == scratch || !inHome))
                }
            }
            // An executable that is a link out of the plugin's folder (staged plugins link to
            // the build's products): the file it leads to, where it is covered and not already bound.
            if let executable, let file = SandboxSettings.resolved(executable.path), isHidden(file),
                !reveals.contains(where: { file.hasPrefix($0.target + "/") })
            {
                reveals.append((file, file, false))
            }
        }
        if policy.namespaces.mount {
            privateDev = true
            memoryFilesBytes = UInt64(effective.memoryFilesBytes)
            memoryFilesInodes = SandboxSettings.memoryFilesInodes
        }
        scratchPath = scratch?.path
        if policy.landlock && capabilities.landlockABI > 0 {
            landlock = SandboxSettings.landlockRules(pluginDirectory: pluginDirectory, executable: executable, scratch: scratch)
        }
        diskBytes = UInt64(effective.diskBytes)
        diskFiles = UInt64(effective.diskFiles)
        pidMax = policy.pidNamespaceMaxPids
        cgroupProcsFD = cgroup?.procsFD ?? -1
    }

    /// Folders the mount namespace replaces with the run's memory filesystem.
    static let replacedFolders = ["/tmp", "/var/tmp", "/dev/shm"]

    /// The path with symbolic links resolved in its folders but not in its last
    /// component: where a process that opens it finds it (nil if the folder is gone).
    static func logical(_ path: String) -> String? {
        let url = URL(fileURLWithPath: path).standardizedFileURL
        guard let parent = resolved(url.deletingLastPathComponent().path) else { return nil }
        return (parent == "/" ? "" : parent) + "/" + url.lastPathComponent
    }

    /// The path with symbolic links resolved, if it exists.
    static func resolved(_ path: String) -> String? {
        guard let real = realpath(path, nil) else { return nil }
        defer { free(real) }
        return String(cString: real)
    }

    /// For `--verbose`: what is in force.
    static func describe(namespaces active: Int32) -> String {
        var names: [String] = []
        if active & Int32(EXTRUN_NS_PID) != 0 { names.append("pid") }
        if active & Int32(EXTRUN_NS_NET) != 0 { names.append("network") }
        if active & Int32(EXTRUN_NS_IPC) != 0 { names.append("ipc") }
        if active & Int32(EXTRUN_NS_MOUNT) != 0 { names.append("mount") }
        if active & Int32(EXTRUN_NS_USER) != 0 { names.append("user (the host is not root)") }
        return names.isEmpty ? "none (not permitted here; descendants are tracked as a subreaper instead)" : names.joined(separator: ", ")
    }

    /// For `--verbose`: how the store and the keys are kept from the plugin, and
    /// how it is kept away from other processes, given the namespaces it got.
    func describeProtection(active: Int32, home: URL?) -> [String] {
        var lines = ["plugin user: \(identity.description)"]
        let hasMount = active & Int32(EXTRUN_NS_MOUNT) != 0
        let hasPid = active & Int32(EXTRUN_NS_PID) != 0
        if hasMount, hiddenHome != nil {
            let revealed = revealPaths.isEmpty ? "" : " (bound back: \(revealPaths.joined(separator: ", ")))"
            let covers = hidePaths.isEmpty ? "" : "\(hidePaths.joined(separator: " and ")) \(hidePaths.count == 1 ? "is an empty read-only tmpfs" : "are empty read-only tmpfs") for the plugin"
            let coveredHome = hiddenHome.map { home in hidePaths.contains { home == $0 || home.hasPrefix($0 + "/") } } ?? true
            let own = coveredHome ? "" : "\(covers.isEmpty ? "" : "; ")\(hiddenHome ?? "the home") lies in the run's own /tmp, /var/tmp or /dev/shm, where the host's files are not"
            lines.append("store and keys: hidden by a mount namespace: \(covers)\(own)\(revealed)")
        } else if let home, FileManager.default.fileExists(atPath: home.path) == false {
            lines.append("store and keys: \(home.path) does not exist (and could not be made)")
        } else if !identity.dropsPrivileges && active & Int32(EXTRUN_NS_LANDLOCK) != 0 {
            lines.append("store and keys: kept out by Landlock: no mount namespace here and the plugin runs as the host's user, but it may open only the system's folders, its own folder and its scratch directory, not \(home?.path ?? "$EXTRUN_HOME")")
        } else if identity.dropsPrivileges {
            lines.append("store and keys: no mount namespace\(hasMount ? "" : " here"): kept out by permissions alone (keys/ 700, store.sqlite and key files 600, owned by uid \(geteuid()); the plugin is uid \(identity.uid))")
        } else {
            lines.append("store and keys: NOT hidden: no mount namespace here and the plugin runs as the host's user, so permissions cannot keep it out of \(home?.path ?? "$EXTRUN_HOME"); run extrun as root (plugins then get their own uid) or allow user namespaces")
        }
        if active & Int32(EXTRUN_NS_LANDLOCK) != 0 {
            lines.append("landlock: ABI \(SandboxCapabilities.current.landlockABI): reads and executes only \(SandboxSettings.systemFolders.joined(separator: ", ")) and its own folder; writes only its scratch directory\(privateDev && active & Int32(EXTRUN_NS_MOUNT) != 0 ? " and the run's /tmp, /var/tmp, /dev/shm" : "")\(SandboxCapabilities.current.landlockABI >= 4 ? "; no TCP" : "")\(SandboxCapabilities.current.landlockABI >= 6 ? "; abstract Unix sockets and signals only within its run" : "")")
        } else {
            lines.append("landlock: \(landlock.isEmpty && SandboxCapabilities.current.landlockABI > 0 ? "OFF (policy)" : "not available on this kernel"): the plugin may read what its user may, and write where its user may\(hasMount ? " apart from what the mount namespace covers" : "")")
        }
        if privateDev && hasMount {
            lines.append("memory files: /tmp, /var/tmp and /dev/shm are one tmpfs of \(ByteCount.format(Int64(memoryFilesBytes))) and \(memoryFilesInodes) files for this run (part of its memory cap), gone with it; /dev holds null, full, random, urandom, tty only")
        } else {
            lines.append("memory files: no mount namespace here: /tmp, /var/tmp and /dev/shm are the host's\(active & Int32(EXTRUN_NS_LANDLOCK) != 0 ? " (Landlock keeps the plugin from writing them)" : ": what the plugin writes there outlives the run and is not counted")")
        }
        if seccomp {
            lines.append("sockets: no connect and no datagram sockets (seccomp): no Unix socket of the host's, named (D-Bus, docker.sock, /dev/log) or abstract, is reachable; socketpair works")
        } else {
            lines.append("sockets: seccomp OFF (policy): named Unix sockets of the host's are reachable where the plugin sees their path\(active & Int32(EXTRUN_NS_LANDLOCK) != 0 && SandboxCapabilities.current.landlockABI >= 6 ? "; abstract ones only within its run (Landlock)" : "")")
        }
        lines.append(active & Int32(EXTRUN_NS_NET_SHARED) != 0
            ? "network view: the machine's empty network namespace for plugins (/run/extrun/netns, shared by root hosts' runs): /proc/net shows a loopback and no socket of the host's"
            : active & Int32(EXTRUN_NS_NET) != 0
            ? "network view: a network namespace of its own: /proc/net shows only a loopback"
            : "network view: the host's network namespace (policy namespaces.network off): /proc/net shows the host's sockets and interfaces, none of which it can reach")
        lines.append("memory peak: read as the plugin ends (its parent traces it for its exit stop alone), else just before a kill; sampled only where that cannot be read")
        lines.append("scratch directory: at most \(ByteCount.format(Int64(diskBytes))) and \(diskFiles) files and folders (diskLimitExceeded past them), removed by descriptor after the run")
        lines.append("terminal: the plugin has a session of its own and no controlling terminal\(privateDev && hasMount ? "; no /dev/pts" : "")")
        if hasPid {
            lines.append("processes: pid namespace\(active & Int32(EXTRUN_NS_PROC) != 0 ? " with its own /proc" : ""): the plugin sees and can signal only its own processes; ptrace and process_vm_* are denied by seccomp")
        } else if seccomp && seccompNotify {
            lines.append("processes: no pid namespace: every signal the plugin sends is checked by the supervisor (only its own processes); ptrace and process_vm_* are denied by seccomp")
        } else {
            lines.append("processes: no pid namespace and no seccomp user notification: signals are limited by uid only\(identity.dropsPrivileges ? " (the plugin's own)" : " (the host's: it could signal the host)")")
        }
        return lines
    }
}
