import ExtrunDefinitions
import Testing

@Suite("Parsing definition files")
struct ParsingTests {
    @Test("placeholder") func placeholder() {}
}
