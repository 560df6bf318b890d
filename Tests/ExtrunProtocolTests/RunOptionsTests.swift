import ExtrunProtocol
import Testing

/// The run's options on the wire (ExtrunProtocol/RunOptions.swift): one reader and one
/// writer for the query and the JSON form, each the other's inverse.
@Suite struct RunOptionsTests {
    static var everyField: RunOptions {
        var options = RunOptions()
        options.mode = .inApp
        options.memoryLimitBytes = 64 << 20
        options.deadlineMs = 2500
        options.assumeYes = true
        options.appLaunch = false
        options.donate = false
        options.interactive = true
        options.text = true
        return options
    }

    @Test("The query and the JSON form read back what they wrote, for the defaults and for every field set")
    func roundTrips() throws {
        for options in [RunOptions(), Self.everyField] {
            let query = Dictionary(uniqueKeysWithValues: options.queryItems)
            #expect(try RunOptions(query: query) == options)
            #expect(try RunOptions(json: options.json) == options)
        }
        #expect(RunOptions().queryItems.isEmpty, "the defaults are not written")
        #expect(Self.everyField.queryItems.map(\.0) == RunOptions.Field.allCases.map(\.rawValue), "every field, in one order")
    }

    @Test("Sizes and durations as people write them; flags as true/false, 1/0, yes/no")
    func peoplesSpelling() throws {
        let options = try RunOptions(query: ["memoryLimit": "1GiB", "timeout": "1m", "yes": "YES", "donate": "0", "format": "json"])
        #expect(options.memoryLimitBytes == 1 << 30 && options.deadlineMs == 60_000 && options.assumeYes && !options.donate && !options.text)
        let json = try RunOptions(json: ["memoryLimit": 1024, "appLaunch": false, "mode": "extension"])
        #expect(json.memoryLimitBytes == 1024 && !json.appLaunch && json.mode == .extension)
    }

    @Test("A bad value or an unknown field is refused naming the field and what it takes", arguments: [
        (["mode": "app"], "mode", "?mode=app is not extension or in-app"),
        (["memoryLimit": "lots"], "memoryLimit", "?memoryLimit=lots is not a size"),
        (["timeout": "5"], "timeout", "?timeout=5 is not a duration"),
        (["yes": "maybe"], "yes", "?yes=maybe is not true or false"),
        (["format": "xml"], "format", "?format=xml is not json or text"),
        (["colour": "red"], "colour", "unknown query field 'colour'"),
    ])
    func refusals(query: [String: String], field: String, message: String) {
        #expect {
            _ = try RunOptions(query: query)
        } throws: { error in
            guard let error = error as? RunOptions.DecodingError else { return false }
            return error.field == field && error.message.hasPrefix(message)
        }
    }

    @Test("A field of the endpoint (extra) is let through; the JSON form refuses a value of another type")
    func extraAndTypes() throws {
        #expect(try RunOptions(query: ["parameter": "soup"], extra: ["parameter"]) == RunOptions())
        #expect(throws: RunOptions.DecodingError.self) { try RunOptions(json: ["donate": 1.5]) }
        #expect(throws: RunOptions.DecodingError.self) { try RunOptions(json: ["nope": true]) }
        #expect(throws: RunOptions.DecodingError.self) { try RunOptions(json: "in-app") }
    }
}
