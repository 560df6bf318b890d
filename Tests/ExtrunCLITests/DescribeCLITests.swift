import ExtrunProtocol
import Foundation
import Testing

/// `extrun describe` shows an intent's typed outputs (text and JSON).
struct DescribeCLITests {
    @Test("describe: the typed outputs, with their types, titles and enum values; the JSON carries them and the types they use")
    func outputs() throws {
        let cli = try CLI()
        let text = try cli.run(["describe", "OrderSoup"])
        #expect(text.status == 0, "\(text)")
        #expect(text.stdout.contains("Outputs:\n  soup: Soup (Soup)\n"), "\(text)")
        #expect(text.stdout.contains("  toppings: list of enum (Toppings)\n      values: cheese (Cheese), red_pepper (Red Pepper), croutons (Croutons)"), "\(text)")
        #expect(text.stdout.contains("  total: number (Total)\n      In dollars."), "\(text)")
        let json = try cli.run(["describe", "OrderSoup", "--format", "json"]).json()
        let outputs = json["intent"]?["outputs"]?.arrayValue ?? []
        #expect(outputs.compactMap { $0["name"]?.stringValue } == ["soup", "quantity", "toppings", "total", "waitTime", "summary"])
        #expect(outputs.first?["customType"] == "Soup")
        #expect(json["types"]?.arrayValue?.first?["name"] == "Soup")
        // An intent without typed outputs shows none (MakeUppercase has one; AllocateMemory's manifest declares none).
        let bare = try cli.run(["describe", "AllocateMemory"])
        #expect(bare.status == 0 && !bare.stdout.contains("Outputs:"), "\(bare)")
    }
}
