import ExtrunHost
import ExtrunProtocol
import ExtrunTestSupport
import Foundation
import Testing

struct PolicyTests {
    @Test func aPolicyFileOverridesOnlyWhatItNames() throws {
        let policy = try JSONCoding.decode(
            SandboxPolicy.self, fromJSON: Data(#"{"extension": {"memoryBytes": 20971520}, "openFiles": 64}"#.utf8))
        #expect(policy.extension.memoryBytes == 20 << 20)
        #expect(policy.extension.deadlineMs == 10_000)
        #expect(policy.openFiles == 64)
        #expect(policy.inApp == SandboxPolicy.default.inApp)
    }

    @Test func theConfinementFieldsHaveTheirDefaultsAndAreChecked() throws {
        let policy = SandboxPolicy.default
        #expect(policy.extension.memoryFilesBytes == 4 << 20 && policy.inApp.memoryFilesBytes == 64 << 20)
        #expect(policy.extension.diskBytes == 256 << 20 && policy.extension.diskFiles == 4096)
        #expect(policy.inApp.diskBytes == 2 << 30 && policy.inApp.diskFiles == 65_536)
        #expect(policy.landlock && policy.pluginUidRange == SandboxPolicy.UidRange(first: 0x7000_0000, count: 65_536))
        // The memory files are part of the cap: at most a quarter of it.
        let limits = try EffectiveLimits.resolve(
            policy: policy, mode: .extension, manifest: nil, manifestFile: "m.json", memoryOverride: 8 << 20, deadlineOverride: nil)
        #expect(limits.memoryFilesBytes == 2 << 20 && limits.dataBytes == 6 << 20)
        let decoded = try JSONCoding.decode(
            SandboxPolicy.self,
            fromJSON: Data(#"{"extension": {"diskFiles": 10}, "pluginUidRange": {"first": 1000, "count": 10}, "landlock": false}"#.utf8))
        #expect(!decoded.landlock)
        #expect(decoded.problems().contains { $0.hasPrefix("extension.diskFiles") }, "\(decoded.problems())")
        #expect(decoded.problems().contains { $0.hasPrefix("pluginUidRange") }, "\(decoded.problems())")
    }

    @Test func anInvalidPolicyFileIsAConfigurationErrorNamingTheFile() throws {
        let home = try makeTemporaryFolder("sandbox-home")
        try writePolicy(#"{"extension": {"memoryBytes": 999999999999}}"#, home: home)
        #expect(throws: HostError.self) { try SandboxPolicy.load(home: home) }
        do {
            _ = try SandboxPolicy.load(home: home)
        } catch {
            #expect(error.kind == .configurationError)
            #expect(error.message.contains("policy.json"))
            #expect(error.message.contains("extension.memoryBytes"))
        }
        try writePolicy("{not json", home: home)
        do {
            _ = try SandboxPolicy.load(home: home)
            Issue.record("malformed policy accepted")
        } catch {
            #expect(error.message.contains("line 1"))
        }
    }

    /// Found by Scripts/serve-conformance: a cap at or below 64 KiB left negative private
    /// memory (dataBytes), and converting it for the sandbox trapped the host.
    @Test func aMemoryCapAtOrBelowTheMemoryFilesystemsLeastIsRefused() throws {
        for tiny: Int64 in [1, 1000, 64 << 10] {
            #expect(throws: HostError.self) {
                _ = try EffectiveLimits.resolve(
                    policy: .default, mode: .inApp, manifest: nil, manifestFile: "m.json", memoryOverride: tiny, deadlineOverride: nil)
            }
            do {
                _ = try EffectiveLimits.resolve(
                    policy: .default, mode: .extension, manifest: nil, manifestFile: "m.json", memoryOverride: tiny, deadlineOverride: nil)
            } catch {
                #expect(error.kind == .invalidIntent && error.details["minimum"]?.intValue == 65_537, "\(error)")
                #expect(error.message.contains("only a limit above 64 KiB"), "\(error.message)")
            }
            let manifest = ManifestLimits(extension: .init(memoryBytes: tiny, deadlineMs: nil))
            do {
                _ = try EffectiveLimits.resolve(
                    policy: .default, mode: .extension, manifest: manifest, manifestFile: "m.json", memoryOverride: nil, deadlineOverride: nil)
                Issue.record("a manifest's memoryBytes of \(tiny) accepted")
            } catch {
                #expect(error.kind == .configurationError && error.message.contains("m.json"), "\(error)")
            }
            var policy = SandboxPolicy.default
            policy.extension.memoryBytes = tiny
            #expect(policy.problems().contains { $0.hasPrefix("extension.memoryBytes: must be above 65536") }, "\(policy.problems())")
        }
        let least = try EffectiveLimits.resolve(
            policy: .default, mode: .extension, manifest: nil, manifestFile: "m.json", memoryOverride: (64 << 10) + 1, deadlineOverride: nil)
        #expect(least.dataBytes > 0, "\(least)")
    }

    @Test func limitsResolveFromPolicyThenManifestThenCommandLine() throws {
        let manifest = ManifestLimits(extension: .init(memoryBytes: 60 << 20, deadlineMs: 20_000))
        let fromManifest = try EffectiveLimits.resolve(
            policy: .default, mode: .extension, manifest: manifest, manifestFile: "m.json", memoryOverride: nil, deadlineOverride: nil)
        #expect(fromManifest.memoryBytes == 60 << 20)
        #expect(fromManifest.deadlineMs == 20_000)
        let fromCLI = try EffectiveLimits.resolve(
            policy: .default, mode: .extension, manifest: manifest, manifestFile: "m.json", memoryOverride: 10 << 20, deadlineOverride: 500)
        #expect(fromCLI.memoryBytes == 10 << 20)
        #expect(fromCLI.deadlineMs == 500)
        let inApp = try EffectiveLimits.resolve(
            policy: .default, mode: .inApp, manifest: manifest, manifestFile: "m.json", memoryOverride: nil, deadlineOverride: nil)
        #expect(inApp.memoryBytes == 1 << 30)
        #expect(inApp.maxExtendedDeadlineMs == inApp.deadlineMs)
    }

    @Test func askingAboveTheMaximaIsAnErrorNotAClamp() {
        let greedy = ManifestLimits(extension: .init(memoryBytes: 1 << 30))
        #expect {
            try EffectiveLimits.resolve(
                policy: .default, mode: .extension, manifest: greedy, manifestFile: "/p/manifest.json", memoryOverride: nil,
                deadlineOverride: nil)
        } throws: { error in
            guard let error = error as? HostError else { return false }
            return error.kind == .configurationError && error.message.contains("/p/manifest.json") && error.message.contains("120 MiB")
        }
        #expect {
            try EffectiveLimits.resolve(
                policy: .default, mode: .inApp, manifest: nil, manifestFile: "m", memoryOverride: nil, deadlineOverride: 61_000)
        } throws: { error in
            (error as? HostError)?.message.contains("at most 60000 ms") ?? false
        }
    }

    @Test(arguments: [
        ("30MiB", Int64(30 << 20)), ("1GiB", Int64(1 << 30)), ("512k", Int64(512 << 10)), ("100MB", Int64(100_000_000)),
        ("4096", Int64(4096)),
    ])
    func sizesParse(text: String, bytes: Int64) {
        #expect(ByteCount.parse(text) == bytes)
    }

    @Test func durationsParse() {
        #expect(DurationText.parseMilliseconds("5s") == 5000)
        #expect(DurationText.parseMilliseconds("2500ms") == 2500)
        #expect(DurationText.parseMilliseconds("1.5s") == 1500)
        #expect(DurationText.parseMilliseconds("1m") == 60_000)
        #expect(DurationText.parseMilliseconds("soon") == nil)
        #expect(ByteCount.parse("lots") == nil)
    }
}

struct CgroupDetectionTests {
    let mountInfo = "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"

    /// A directory standing in for a delegated group (`group` in `folder`, which stands in for
    /// the mount): only its files matter to detection. It goes with `folder`.
    func fakeGroup(controllers: String, in folder: TempDirectory) throws -> URL {
        let dir = try folder.directory("group")
        try Data(controllers.utf8).write(to: dir.appendingPathComponent("cgroup.controllers"))
        return dir
    }

    @Test func withoutADelegationItFallsBackAndSaysWhy() {
        guard case .unavailable(let reason) = CgroupSupport.detect(directory: nil, mountInfo: mountInfo) else {
            Issue.record("detected a cgroup without a delegation")
            return
        }
        #expect(reason.contains("/sys/fs/cgroup/unified"))
    }

    @Test func aDelegatedGroupWithTheMemoryControllerIsUsed() throws {
        let folder = try TempDirectory("fake-cgroup")
        defer { withExtendedLifetime(folder) {} }
        let dir = try fakeGroup(controllers: "cpu io memory pids\n", in: folder)
        let tmpMount = "50 31 0:40 / \(dir.deletingLastPathComponent().path) rw - cgroup2 cgroup2 rw\n"
        guard case .available(let found) = CgroupSupport.detect(directory: dir.path, mountInfo: tmpMount) else {
            Issue.record("a delegated group with memory was not detected")
            return
        }
        #expect(found.standardizedFileURL.path == dir.standardizedFileURL.path)
    }

    @Test func aGroupWithoutMemoryOrOutsideCgroup2IsRefusedWithTheReason() throws {
        let folder = try TempDirectory("fake-cgroup")
        defer { withExtendedLifetime(folder) {} }
        let dir = try fakeGroup(controllers: "hugetlb\n", in: folder)
        let tmpMount = "50 31 0:40 / \(dir.deletingLastPathComponent().path) rw - cgroup2 cgroup2 rw\n"
        guard case .unavailable(let reason) = CgroupSupport.detect(directory: dir.path, mountInfo: tmpMount) else {
            Issue.record("accepted a group without memory")
            return
        }
        #expect(reason.contains("no memory controller"))
        guard case .unavailable(let outside) = CgroupSupport.detect(directory: dir.path, mountInfo: mountInfo) else {
            Issue.record("accepted a directory outside cgroup2")
            return
        }
        #expect(outside.contains("not inside a cgroup v2 hierarchy"))
    }
}
