// serveload: C clients of `extrun serve` for Scripts/bench (docs/benchmarks.md, "extrun serve").
// Each of CLIENTS threads keeps one HTTP/1.1 connection on the Unix socket and sends
// POST /v1/handle with the intent file, one at a time, until TOTAL intents are answered
// (after WARMUP each). Prints one JSON object: intents, seconds, intents per second,
// latency quantiles (µs), failures, and the service's VmRSS (-p PID) after the warmup
// and at the end, so that the rows "8 concurrent clients" and "RSS flat over N intents"
// come from one tool.
//
//   serveload -s SOCKET -f INTENT.json -c 8 -n 100000 -w 200 [-p SERVICE_PID] [-q QUERY | -m TOOL]
//
// -q adds a query to the request's target (e.g. -q donate=false: the intents are not
// donated, docs/serve.md "Performance").
//
// -m TOOL sends the file to POST /mcp instead: a 2026-07-28 MCP `tools/call` of TOOL (the
// file is the JSON-RPC message, with its `_meta`), with the headers that era asks for; an
// answer counts as a success when it is a 200 whose result is complete and not an error.
//
// With -p, also the CPU time (user + system, from /proc) per measured intent: of the
// service's process, of its descendants alive at both ends (the plugins and their
// supervisors), and of this client (getrusage): where each intent's CPU goes, so that the
// rows read as costs and not only as rates (docs/benchmarks.md).
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static const char *socket_path;
static const char *query = "";
static const char *mcp_tool;
static char *request;
static size_t request_len;
static long total, warmup;
static long next_index;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t *latencies;
static long failures;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int connect_socket(void) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    strncpy(address.sun_path, socket_path, sizeof(address.sun_path) - 1);
    if (fd < 0 || connect(fd, (struct sockaddr *)&address, sizeof(address)) != 0) {
        perror("serveload: connect");
        exit(1);
    }
    return fd;
}

// Sends the request and reads one answer; 0 when it is a 200 with exitStatus 0.
static int exchange(int fd, char *buffer, size_t capacity) {
    size_t sent = 0;
    while (sent < request_len) {
        ssize_t n = write(fd, request + sent, request_len - sent);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        sent += (size_t)n;
    }
    size_t filled = 0;
    long body_start = -1, length = -1;
    for (;;) {
        ssize_t n = read(fd, buffer + filled, capacity - filled - 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        filled += (size_t)n;
        buffer[filled] = 0;
        if (body_start < 0) {
            char *end = strstr(buffer, "\r\n\r\n");
            if (!end) continue;
            body_start = end + 4 - buffer;
            char *field = strcasestr(buffer, "content-length:");
            if (!field) return -1;
            length = strtol(field + 15, NULL, 10);
        }
        if ((long)filled >= body_start + length) break;
        if (filled + 1 >= capacity) return -1;
    }
    int ok = strncmp(buffer, "HTTP/1.1 200", 12) == 0 &&
             (mcp_tool ? strstr(buffer + body_start, "\"resultType\":\"complete\"") != NULL && strstr(buffer + body_start, "\"isError\":true") == NULL
                       : strstr(buffer + body_start, "\"exitStatus\":0") != NULL);
    return ok ? 0 : 1;
}

static void *client(void *unused) {
    (void)unused;
    size_t capacity = 1 << 20;
    char *buffer = malloc(capacity);
    int fd = connect_socket();
    for (long i = 0; i < warmup; i++) {
        if (exchange(fd, buffer, capacity) != 0) __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
    }
    for (;;) {
        pthread_mutex_lock(&lock);
        long index = next_index < total ? next_index++ : -1;
        pthread_mutex_unlock(&lock);
        if (index < 0) break;
        uint64_t start = now_ns();
        int result = exchange(fd, buffer, capacity);
        if (result < 0) {  // the connection broke: count it and reconnect
            close(fd);
            fd = connect_socket();
        }
        if (result != 0) __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
        uint64_t us = (now_ns() - start) / 1000;
        latencies[index] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
    }
    close(fd);
    free(buffer);
    return NULL;
}

static long rss_bytes(long pid) {
    if (pid <= 0) return -1;
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%ld/status", pid);
    FILE *file = fopen(path, "r");
    if (!file) return -1;
    long kb = -1;
    while (fgets(line, sizeof(line), file))
        if (strncmp(line, "VmRSS:", 6) == 0) kb = strtol(line + 6, NULL, 10);
    fclose(file);
    return kb < 0 ? -1 : kb * 1024;
}

// utime + stime (clock ticks) and the parent of PID, from /proc/PID/stat; -1 when unreadable.
static long long stat_ticks(long pid, long *parent) {
    char path[64], text[1024];
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    FILE *file = fopen(path, "r");
    if (!file) return -1;
    size_t n = fread(text, 1, sizeof(text) - 1, file);
    fclose(file);
    text[n] = 0;
    char *close = strrchr(text, ')');  // the command may hold spaces and parentheses
    if (!close) return -1;
    // After ")": state (3), ppid (4), ..., utime (14), stime (15).
    char state;
    long ppid;
    unsigned long long utime, stime;
    if (sscanf(close + 1, " %c %ld %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &state, &ppid, &utime, &stime) != 4) return -1;
    if (parent) *parent = ppid;
    return (long long)(utime + stime);
}

// The CPU ticks of ROOT itself (*own) and of its descendants alive now (returned).
static long long tree_ticks(long root, long long *own) {
    enum { MAX = 65536 };
    static long pids[MAX], parents[MAX];
    static long long ticks[MAX];
    static char inside[MAX];
    int count = 0;
    *own = stat_ticks(root, NULL);
    DIR *proc = opendir("/proc");
    if (!proc) return -1;
    struct dirent *entry;
    while ((entry = readdir(proc)) && count < MAX) {
        char *end;
        long pid = strtol(entry->d_name, &end, 10);
        if (*end || pid <= 0) continue;
        long parent = 0;
        long long t = stat_ticks(pid, &parent);
        if (t < 0) continue;
        pids[count] = pid, parents[count] = parent, ticks[count] = t, inside[count] = 0;
        count++;
    }
    closedir(proc);
    // Descendants: whoever's parent is ROOT or a descendant, until nothing is added.
    for (int added = 1; added;) {
        added = 0;
        for (int i = 0; i < count; i++) {
            if (inside[i]) continue;
            int found = parents[i] == root;
            for (int j = 0; !found && j < count; j++) found = inside[j] && pids[j] == parents[i];
            if (found) inside[i] = 1, added = 1;
        }
    }
    long long sum = 0;
    for (int i = 0; i < count; i++)
        if (inside[i]) sum += ticks[i];
    return sum;
}

static double own_cpu_seconds(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

static int compare(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    const char *intent_path = NULL;
    int clients = 8;
    long pid = 0;
    total = 10000;
    warmup = 100;
    int option;
    while ((option = getopt(argc, argv, "s:f:c:n:w:p:q:m:")) != -1) {
        switch (option) {
        case 's': socket_path = optarg; break;
        case 'f': intent_path = optarg; break;
        case 'c': clients = atoi(optarg); break;
        case 'n': total = atol(optarg); break;
        case 'w': warmup = atol(optarg); break;
        case 'p': pid = atol(optarg); break;
        case 'q': query = optarg; break;
        case 'm': mcp_tool = optarg; break;
        default: fprintf(stderr, "usage: serveload -s SOCKET -f INTENT.json [-c CLIENTS] [-n TOTAL] [-w WARMUP] [-p PID] [-q QUERY]\n"); return 64;
        }
    }
    if (!socket_path || !intent_path || clients < 1 || total < 1) {
        fprintf(stderr, "serveload: -s SOCKET and -f INTENT.json are required\n");
        return 64;
    }
    FILE *file = fopen(intent_path, "r");
    if (!file) {
        perror(intent_path);
        return 1;
    }
    char body[65536];
    size_t body_len = fread(body, 1, sizeof(body), file);
    fclose(file);
    if (strlen(query) > 200 || (mcp_tool && strlen(mcp_tool) > 200)) {
        fprintf(stderr, "serveload: -q QUERY or -m TOOL is longer than 200 bytes\n");
        return 64;
    }
    request = malloc(body_len + 1024);
    if (mcp_tool) {
        request_len = (size_t)snprintf(request, 1024,
                                       "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                                       "Mcp-Method: tools/call\r\nMcp-Name: %s\r\nMCP-Protocol-Version: 2026-07-28\r\nContent-Length: %zu\r\n\r\n",
                                       mcp_tool, body_len);
    } else {
        request_len = (size_t)snprintf(request, 512, "POST /v1/handle%s%s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                                       query[0] ? "?" : "", query, body_len);
    }
    memcpy(request + request_len, body, body_len);
    request_len += body_len;
    latencies = calloc((size_t)total, sizeof(uint32_t));

    // The warmup happens in the threads first; the RSS "after warmup" is read once every
    // thread has started (a second of settling would be a guess: we read it at the start
    // of the measured part, which begins as soon as the first thread finishes its warmup).
    pthread_t threads[clients];
    for (int i = 0; i < clients; i++) pthread_create(&threads[i], NULL, client, NULL);
    while (__atomic_load_n(&next_index, __ATOMIC_RELAXED) == 0) usleep(1000);
    long rss_start = rss_bytes(pid);
    long long service_start = 0, tree_start = pid > 0 ? tree_ticks(pid, &service_start) : -1;
    double client_start = own_cpu_seconds();
    uint64_t start = now_ns();
    for (int i = 0; i < clients; i++) pthread_join(threads[i], NULL);
    double seconds = (double)(now_ns() - start) / 1e9;
    double client_end = own_cpu_seconds();
    long long service_end = 0, tree_end = pid > 0 ? tree_ticks(pid, &service_end) : -1;
    long rss_end = rss_bytes(pid);
    double tick_us = 1e6 / (double)sysconf(_SC_CLK_TCK);
    double service_us = -1, descendants_us = -1;
    if (pid > 0 && service_start >= 0 && service_end >= 0 && tree_start >= 0 && tree_end >= 0) {
        service_us = (double)(service_end - service_start) * tick_us / (double)total;
        descendants_us = (double)(tree_end - tree_start) * tick_us / (double)total;
    }
    double client_us = (client_end - client_start) * 1e6 / (double)total;
    qsort(latencies, (size_t)total, sizeof(uint32_t), compare);
    printf("{\"clients\": %d, \"intents\": %ld, \"seconds\": %.3f, \"perSecond\": %.1f, \"p50us\": %u, \"p90us\": %u, \"p99us\": %u, "
           "\"maxus\": %u, \"failures\": %ld, \"rssStartBytes\": %ld, \"rssEndBytes\": %ld, "
           "\"serviceCpuUsPerIntent\": %.1f, \"descendantsCpuUsPerIntent\": %.1f, \"clientCpuUsPerIntent\": %.1f}\n",
           clients, total, seconds, (double)total / seconds, latencies[total / 2], latencies[total * 9 / 10], latencies[total * 99 / 100],
           latencies[total - 1], failures, rss_start, rss_end, service_us, descendants_us, client_us);
    return failures == 0 ? 0 : 1;
}
