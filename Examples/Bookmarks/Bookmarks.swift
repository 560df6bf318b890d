import ExtrunSDK
import Foundation

/// ListBookmarkFolder and ReadBookmarkFile: files outside the sandbox, reached
/// only through bookmarks the user made (`extrun bookmarks add NAME PATH --owner EXAMPLETEAM`),
/// by a path relative to the bookmark. The host refuses any path leading out.
struct ListBookmarkFolder: IntentHandler {
    struct Parameters: Decodable, Sendable {
        var bookmark: String?
        var glob: String?
        var recursive: Bool?
    }

    static let intentName = "ListBookmarkFolder"

    func resolve(_ parameter: String, _ request: IntentRequest<Parameters>) async throws -> ResolutionResult {
        switch parameter {
        case "bookmark":
            guard let bookmark = request.parameters.bookmark else { return .needsValue(prompt: "Which bookmarked folder?") }
            return .success(bookmark)
        default:
            return try await resolveDefault(parameter, request)
        }
    }

    func resolveDefault(_ parameter: String, _ request: IntentRequest<Parameters>) async throws -> ResolutionResult {
        if let value = request.values[parameter], !value.isNull { return .success(value) }
        return .notRequired
    }

    func handle(_ request: IntentRequest<Parameters>) async throws -> IntentResponse {
        let bookmark = request.parameters.bookmark ?? ""
        do {
            let entries = try await request.context.bookmarks.listFolder(
                bookmark, glob: request.parameters.glob, recursive: request.parameters.recursive ?? false)
            let files: [JSONValue] = entries.map { entry in
                .object(["path": .string(entry.path), "kind": .string(entry.kind), "size": .int(entry.size)])
            }
            return .success(["files": .array(files), "count": .int(Int64(files.count))],
                            dialog: Dialog(full: "\(files.count) item\(files.count == 1 ? "" : "s") in \(bookmark)."))
        } catch let error as HostServiceError {
            return .failure("Could not list \(bookmark): \(error.message)", properties: ["reason": .string(error.kind)])
        }
    }
}

struct ReadBookmarkFile: IntentHandler {
    struct Parameters: Decodable, Sendable {
        var bookmark: String?
        var path: String?
    }

    static let intentName = "ReadBookmarkFile"

    func resolve(_ parameter: String, _ request: IntentRequest<Parameters>) async throws -> ResolutionResult {
        switch parameter {
        case "bookmark":
            guard let bookmark = request.parameters.bookmark else { return .needsValue(prompt: "Which bookmark?") }
            return .success(bookmark)
        case "path":
            return .success(request.parameters.path ?? "")
        default:
            return .notRequired
        }
    }

    func handle(_ request: IntentRequest<Parameters>) async throws -> IntentResponse {
        let bookmark = request.parameters.bookmark ?? ""
        let path = request.parameters.path ?? ""
        do {
            let data = try await request.context.bookmarks.read(bookmark, path: path)
            let name = path.isEmpty ? bookmark : (path as NSString).lastPathComponent
            let file = IntentFile(filename: name, typeIdentifier: "public.data", data: data)
            var properties: [String: JSONValue] = ["file": try JSONCoding.value(of: file), "size": .int(Int64(data.count))]
            if let text = String(data: data, encoding: .utf8) { properties["text"] = .string(text) }
            return .success(properties)
        } catch let error as HostServiceError {
            return .failure("Could not read \(path) in \(bookmark): \(error.message)", properties: ["reason": .string(error.kind)])
        }
    }
}

@main
struct BookmarksPlugin {
    static func main() async {
        await PluginRuntime.run(id: "com.example.bookmarks", version: "1.0.0", handlers: [ListBookmarkFolder(), ReadBookmarkFile()])
    }
}
