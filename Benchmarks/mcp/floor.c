// The floor under roundtrip.py: a server that answers each request line at once with a
// canned MakeUppercase result, so that roundtrip.py times only itself and the pipes.
//   cc -O2 -o /tmp/mcp-floor Benchmarks/mcp/floor.c
//   printf '#!/bin/sh\nexec /tmp/mcp-floor\n' > /tmp/mcp-floor.sh; chmod +x /tmp/mcp-floor.sh
//   python3 Benchmarks/mcp/roundtrip.py --extrun /tmp/mcp-floor.sh --count 3000
// (roundtrip.py passes `mcp --no-donate`, which the script drops.)
// Before each read it polls its input for up to 200 µs, yielding the CPU between tries, as
// `extrun mcp` does while a CPU is free (ReadSpin): a floor that slept in read(2) would pay
// a wake-up extrun mcp does not, and would not be a floor.
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}
int main(void) {
  static char buf[1 << 16]; size_t len = 0;
  for (;;) {
    long long until = now_ns() + 200000;
    do {
      struct pollfd ready = {.fd = 0, .events = POLLIN};
      if (poll(&ready, 1, 0) != 0) break;
      sched_yield();
    } while (now_ns() < until);
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
