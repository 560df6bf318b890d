import ExtrunSDK
import Foundation

// Soup Chef, after Apple's sample app. intents.json declares the plugin and the
// OrderSoup intent; the IntentGenerator plugin generates OrderSoupIntent, Soup,
// Topping, OrderSoupResponse, OrderSoupHandling and PluginMain from it.

/// Today's menu.
enum Menu {
    static let soups: [Soup] = [
        Soup(identifier: "clam_chowder", name: "Clam Chowder", price: 6.95, available: true, imageName: "clam_chowder.png"),
        Soup(identifier: "tomato_soup", name: "Tomato Soup", price: 4.95, available: true, imageName: "tomato_soup.png"),
        Soup(identifier: "chicken_noodle_soup", name: "Chicken Noodle Soup", price: 5.95, available: true, imageName: "chicken_noodle_soup.png"),
        Soup(identifier: "chili", name: "Chili", price: 7.25, available: false, imageName: "chili.png"),
    ]

    static let toppingPrice = 0.5

    static func soup(identifier: String) -> Soup? {
        soups.first { $0.identifier == identifier }
    }

    /// The soups whose name contains `text` (any case).
    static func soups(matching text: String) -> [Soup] {
        let needle = text.trimmingCharacters(in: .whitespaces)
        guard !needle.isEmpty else { return soups }
        return soups.filter { ($0.name ?? "").localizedCaseInsensitiveContains(needle) }
    }
}

struct OrderSoupHandler: OrderSoupHandling {
    /// A soup from the menu: by identifier, or by (part of) its name.
    func resolveSoup(for intent: OrderSoupIntent, context: IntentContext) async throws -> OrderSoupIntent.SoupResolution {
        guard let soup = intent.soup else { return .needsValue }
        if let item = Menu.soup(identifier: soup.identifier) { return .success(item) }
        let matches = Menu.soups(matching: soup.title ?? soup.identifier)
        switch matches.count {
        case 0: return .unsupported(.notOnMenu)
        case 1: return .confirmationRequired(matches[0])
        default: return .disambiguation(matches, prompt: "Which one would you like?")
        }
    }

    /// What can be ordered today.
    func provideSoupOptions(for intent: OrderSoupIntent, search: String?, context: IntentContext) async throws -> [Soup] {
        Menu.soups(matching: search ?? "").filter { $0.available == true }
    }

    func resolveQuantity(for intent: OrderSoupIntent, context: IntentContext) async throws -> OrderSoupIntent.QuantityResolution {
        let quantity = intent.quantity ?? OrderSoupIntent.defaultQuantity
        if quantity < 1 { return .unsupported(.tooFew) }
        if quantity > 10 { return .unsupported(.tooMany) }
        return .success(quantity)
    }

    /// Chili is on the menu, but not today.
    func confirm(intent: OrderSoupIntent, context: IntentContext) async throws -> OrderSoupResponse {
        guard let soup = intent.soup else { return .failure("No soup was chosen.") }
        if soup.available != true { return .failureOutOfStock(soup: soup) }
        return .ready
    }

    func handle(intent: OrderSoupIntent, context: IntentContext) async throws -> OrderSoupResponse {
        guard let soup = intent.soup.flatMap({ Menu.soup(identifier: $0.identifier) }) else {
            return .failure("That soup is not on the menu.")
        }
        let quantity = intent.quantity ?? OrderSoupIntent.defaultQuantity
        let toppings = intent.toppings ?? []
        let total = Double(quantity) * ((soup.price ?? 0) + Double(toppings.count) * Menu.toppingPrice)
        let waitTime = 5 + 2 * quantity
        let with = toppings.isEmpty ? "" : " with " + toppings.map(\.title).joined(separator: ", ")
        let summary = "\(quantity) × \(soup.displayRepresentation.title)\(with): $\(String(format: "%.2f", total))"
        context.log("order: \(summary)")
        return .success(soup: soup, quantity: quantity, toppings: toppings, total: total, waitTime: waitTime, summary: summary)
    }
}

@main
struct SoupChefMain {
    static func main() async {
        await PluginMain.run(orderSoup: OrderSoupHandler())
    }
}
