import ExtrunSDK
import Foundation

/// RenameFiles: adds the current date (in `dateFormat`) to each file's name,
/// before or after it, and optionally changes the name's case. The files are
/// values: the output is the same files under their new names.
///
/// intents.json declares it; RenameFilesIntent (with its NewCase and Position
/// enums), RenameFilesResponse, RenameFilesHandling and PluginMain are generated
/// from it. files, changeCase and position keep their default resolutions (a
/// non-empty list or the prompt; the value or its default).
struct RenameFilesHandler: RenameFilesHandling {
    typealias NewCase = RenameFilesIntent.NewCase
    typealias Position = RenameFilesIntent.Position

    func resolveDateFormat(for intent: RenameFilesIntent, context: IntentContext) async throws -> RenameFilesIntent.DateFormatResolution {
        let format = intent.dateFormat ?? RenameFilesIntent.defaultDateFormat
        if format.trimmingCharacters(in: .whitespaces).isEmpty { return .unsupported(.empty) }
        return .success(format)
    }

    /// Shown only when changeCase is on, as in the Shortcuts action; then it is needed.
    func resolveNewCase(for intent: RenameFilesIntent, context: IntentContext) async throws -> RenameFilesIntent.NewCaseResolution {
        guard intent.changeCase == true else { return .notRequired }
        guard let newCase = intent.newCase else { return .needsValue }
        return .success(newCase)
    }

    func handle(intent: RenameFilesIntent, context: IntentContext) async throws -> RenameFilesResponse {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = intent.dateFormat ?? RenameFilesIntent.defaultDateFormat
        let stamp = formatter.string(from: Date())
        let position = intent.position ?? RenameFilesIntent.defaultPosition
        let newCase = intent.changeCase == true ? intent.newCase : nil
        let renamed = (intent.files ?? []).map { file in
            var renamedFile = file
            renamedFile.filename = Self.newName(for: file.filename, stamp: stamp, position: position, newCase: newCase)
            return renamedFile
        }
        let names = renamed.map(\.filename)
        return .success(
            files: renamed,
            dialog: Dialog(full: "Renamed \(renamed.count) file\(renamed.count == 1 ? "" : "s").", supporting: names.joined(separator: ", ")))
    }

    static func newName(for filename: String, stamp: String, position: Position, newCase: NewCase?) -> String {
        let name = filename as NSString
        let ext = name.pathExtension
        var base = ext.isEmpty ? filename : name.deletingPathExtension
        base = position == .prepend ? "\(stamp) \(base)" : "\(base) \(stamp)"
        switch newCase {
        case .lowercase?: base = base.lowercased()
        case .uppercase?: base = base.uppercased()
        case nil: break
        }
        return ext.isEmpty ? base : "\(base).\(ext)"
    }
}

@main
struct RenameFilesPlugin {
    static func main() async {
        await PluginMain.run(renameFiles: RenameFilesHandler())
    }
}
