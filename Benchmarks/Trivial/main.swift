// The baseline for "a process start": a trivial Swift program linked with
// Foundation (as the host and every Swift plugin are). It touches
// ProcessInfo so that Foundation is loaded and initialized, then exits 0.
import Foundation

if ProcessInfo.processInfo.arguments.count > 1 {
    print(ProcessInfo.processInfo.processIdentifier)
}
