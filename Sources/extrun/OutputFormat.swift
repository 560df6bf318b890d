import ArgumentParser
import ExtrunProtocol
import Foundation

enum OutputFormat: String, ExpressibleByArgument, CaseIterable {
    case json, text
}

enum Output {
    static func printJSON(_ value: JSONValue) {
        let data = (try? JSONCoding.encoder(pretty: true).encode(value)) ?? Data("{}".utf8)
        FileHandle.standardOutput.write(data)
        FileHandle.standardOutput.write(Data("\n".utf8))
    }

    static func printLine(_ text: String) {
        FileHandle.standardOutput.write(Data((text + "\n").utf8))
    }

    static func printError(_ text: String) {
        FileHandle.standardError.write(Data((text + "\n").utf8))
    }
}
