/// The "Did you mean …?" of a mistyped name: an intent (`MakeUpperCase`), a subcommand
/// (`handel`, `plugins instal`).
public enum Suggestion {
    /// The candidate closest to `name`: one that differs only in case, else the nearest by
    /// edit distance when it is within a third of the name's length (at least 1, at most 3);
    /// nil when none is that close (or two are equally close).
    public static func closest(to name: String, among candidates: [String]) -> String? {
        let lowered = name.lowercased()
        let unique = Array(Set(candidates)).sorted()
        if let same = unique.first(where: { $0.lowercased() == lowered && $0 != name }) { return same }
        let allowed = min(3, max(1, name.count / 3))
        var best: (name: String, distance: Int)?
        var tied = false
        for candidate in unique where candidate != name {
            let distance = editDistance(lowered, candidate.lowercased())
            guard distance <= allowed else { continue }
            if let current = best {
                if distance == current.distance {
                    tied = true
                } else if distance < current.distance {
                    best = (candidate, distance)
                    tied = false
                }
            } else {
                best = (candidate, distance)
            }
        }
        return tied ? nil : best?.name
    }

    /// Levenshtein distance, counting a swap of two neighbours as one edit.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a)
        let b = Array(b)
        if a.isEmpty { return b.count }
        if b.isEmpty { return a.count }
        var before = [Int](repeating: 0, count: b.count + 1)
        var previous = Array(0...b.count)
        var current = [Int](repeating: 0, count: b.count + 1)
        for i in 1...a.count {
            current[0] = i
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    current[j] = min(current[j], before[j - 2] + 1)
                }
            }
            before = previous
            previous = current
        }
        return previous[b.count]
    }
}
