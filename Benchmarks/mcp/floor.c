// The floor under roundtrip.py: a server that answers each request line at once with a
// canned MakeUppercase result, so that roundtrip.py times only itself and the pipes.
//   cc -O2 -o /tmp/mcp-floor Benchmarks/mcp/floor.c
//   printf '#!/bin/sh\nexec /tmp/mcp-floor\n' > /tmp/mcp-floor.sh; chmod +x /tmp/mcp-floor.sh
//   python3 Benchmarks/mcp/roundtrip.py --extrun /tmp/mcp-floor.sh --count 3000
// (roundtrip.py passes `mcp --no-donate`, which the script drops.)
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>
int main(void) {
  static char buf[1 << 16]; size_t len = 0;
  for (;;) {
    ssize_t n = read(0, buf + len, sizeof buf - len);
    if (n <= 0) return 0;
    len += n;
    char *start = buf, *nl;
    while ((nl = memchr(start, '\n', buf + len - start))) {
      *nl = 0;
      char *id = strstr(start, "\"id\": ");
      if (id) {
        long v = strtol(id + 6, NULL, 10);
        char out[512];
        int m = snprintf(out, sizeof out, "{\"id\":%ld,\"jsonrpc\":\"2.0\",\"result\":{\"content\":[{\"text\":\"HELLO WORLD\",\"type\":\"text\"}],\"structuredContent\":{\"result\":\"HELLO WORLD\"}}}\n", v);
        if (write(1, out, (size_t)m) != m) return 1;
      }
      start = nl + 1;
    }
    memmove(buf, start, buf + len - start); len = buf + len - start;
  }
}
