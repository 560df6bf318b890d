import ExtrunSDK
import Foundation

/// RenameFiles: adds the current date (in `dateFormat`) to each file's name,
/// before or after it, and optionally changes the name's case. The files are
/// values: the output is the same files under their new names.
struct RenameFilesHandler: IntentHandler {
    enum Case: String, Decodable, Sendable { case lowercase, uppercase }
    enum Position: String, Decodable, Sendable { case prepend, append }

    struct Parameters: Decodable, Sendable {
        var files: [IntentFile]?
        var dateFormat: String?
        var changeCase: Bool?
        var newCase: Case?
        var position: Position?
    }

    static let intentName = "RenameFiles"

    func resolve(_ parameter: String, _ request: IntentRequest<Parameters>) async throws -> ResolutionResult {
        let p = request.parameters
        switch parameter {
        case "files":
            guard let files = p.files, !files.isEmpty else {
                return .needsValue(prompt: "Which files would you like to rename?")
            }
            return .success(files)
        case "dateFormat":
            let format = p.dateFormat ?? "yyyy-MM-dd"
            if format.trimmingCharacters(in: .whitespaces).isEmpty {
                return .unsupported(reason: "empty", message: "Please enter a date format, such as yyyy-MM-dd")
            }
            return .success(format)
        case "changeCase":
            return .success(p.changeCase ?? false)
        case "newCase":
            // Shown only when changeCase is on, as in the Shortcuts action.
            guard p.changeCase == true else { return .notRequired }
            guard let newCase = p.newCase else { return .needsValue(prompt: "Which case should the names be in?") }
            return .success(newCase.rawValue)
        case "position":
            return .success((p.position ?? .prepend).rawValue)
        default:
            return .notRequired
        }
    }

    func handle(_ request: IntentRequest<Parameters>) async throws -> IntentResponse {
        let p = request.parameters
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = p.dateFormat ?? "yyyy-MM-dd"
        let stamp = formatter.string(from: Date())
        let renamed = (p.files ?? []).map { file in
            var renamedFile = file
            renamedFile.filename = Self.newName(
                for: file.filename, stamp: stamp, position: p.position ?? .prepend, newCase: p.changeCase == true ? p.newCase : nil)
            return renamedFile
        }
        let names = renamed.map(\.filename)
        return try .success(
            output: Output(files: renamed),
            dialog: Dialog(full: "Renamed \(renamed.count) file\(renamed.count == 1 ? "" : "s").", supporting: names.joined(separator: ", ")))
    }

    struct Output: Encodable { var files: [IntentFile] }

    static func newName(for filename: String, stamp: String, position: Position, newCase: Case?) -> String {
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
        await PluginRuntime.run(id: "com.example.renamefiles", version: "1.0.0", handlers: [RenameFilesHandler()])
    }
}
