// plugdrive: the smallest host that can run one intent through an extrun plugin.
//
// Usage: plugdrive [-n COUNT] [-s FILE] PROGRAM [ARG...]
//
// Starts PROGRAM ARG... (execve, no PATH search: give a path) with fd 3 reading
// our requests and fd 4 carrying its answers, stdin /dev/null, stdout and
// stderr inherited, and the environment the host gives a plugin. Then it
// speaks the same four requests `extrun handle Examples/intents/make-uppercase.json`
// sends (initialize, resolve "text", confirm, handle), one at a time, each
// after the previous answer, closes fd 3 and waits for the process to exit.
// -n COUNT repeats the whole thing COUNT times (one process each).
// -s FILE opens FILE as fd 9 in the child (for `bwrap --seccomp 9`).
//
// No sandbox, no manifest, no catalog, no JSON parser: this is the floor a host
// could reach for one cold dispatch of the MakeUppercase plugin. PROGRAM may be
// a wrapper (bwrap ... -- plugin) that passes fds 3 and 4 through.
//
// Exit status: 0 when every run answered handle with "HELLO WORLD" and exited 0.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const requests[] = {
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"hostVersion\":\"0.1.0\",\"intent\":"
    "\"MakeUppercase\",\"mode\":\"extension\",\"protocolVersion\":1}}",
    "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"resolve\",\"params\":{\"intent\":\"MakeUppercase\",\"parameter\":"
    "\"text\",\"parameters\":{\"text\":\"hello world\"}}}",
    "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"confirm\",\"params\":{\"intent\":\"MakeUppercase\",\"parameters\":"
    "{\"text\":\"hello world\"}}}",
    "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"handle\",\"params\":{\"intent\":\"MakeUppercase\",\"parameters\":"
    "{\"text\":\"hello world\"}}}",
};

static void die(const char *what) {
    fprintf(stderr, "plugdrive: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void write_all(int fd, const char *data, size_t length) {
    while (length > 0) {
        ssize_t n = write(fd, data, length);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("write to the plugin");
        }
        data += n;
        length -= (size_t)n;
    }
}

// Reads one frame's body into buffer (NUL-terminated). Returns its length, or -1 at end of file.
static char inbox[1 << 16];
static size_t inbox_used;
static ssize_t read_frame(int fd, char *body, size_t capacity) {
    for (;;) {
        char *end = memmem(inbox, inbox_used, "\r\n\r\n", 4);
        if (end != NULL) {
            inbox[inbox_used < sizeof inbox ? inbox_used : sizeof inbox - 1] = '\0';
            char *field = strcasestr(inbox, "content-length:");
            if (field == NULL || field > end) {
                fprintf(stderr, "plugdrive: a frame without Content-Length\n");
                exit(2);
            }
            size_t length = strtoul(field + 15, NULL, 10);
            size_t header = (size_t)(end - inbox) + 4;
            if (length + 1 > capacity || header + length > sizeof inbox) {
                fprintf(stderr, "plugdrive: frame too large (%zu bytes)\n", length);
                exit(2);
            }
            if (inbox_used >= header + length) {
                memcpy(body, inbox + header, length);
                body[length] = '\0';
                memmove(inbox, inbox + header + length, inbox_used - header - length);
                inbox_used -= header + length;
                return (ssize_t)length;
            }
        }
        if (inbox_used == sizeof inbox) {
            fprintf(stderr, "plugdrive: header too long\n");
            exit(2);
        }
        ssize_t n = read(fd, inbox + inbox_used, sizeof inbox - inbox_used);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("read from the plugin");
        }
        if (n == 0) return -1;
        inbox_used += (size_t)n;
    }
}

static const char *fd9_path;

static int run_once(char **argv) {
    int to_plugin[2], from_plugin[2];
    if (pipe2(to_plugin, O_CLOEXEC) != 0 || pipe2(from_plugin, O_CLOEXEC) != 0) die("pipe");
    // The environment extrun gives a plugin (its scratch directory is /tmp here).
    static char *envp[] = {
        "PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "TMPDIR=/tmp", "EXTRUN_PROTOCOL_FDS=3,4",
        "EXTRUN_MODE=extension", "EXTRUN_PLUGIN_ID=com.example.uppercase", "SWIFT_BACKTRACE=enable=no", NULL,
    };
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (null < 0 || dup2(null, 0) < 0) _exit(126);
        // Move the ends out of the way first, then put them at 3 and 4 (without O_CLOEXEC).
        int in = fcntl(to_plugin[0], F_DUPFD_CLOEXEC, 10), out = fcntl(from_plugin[1], F_DUPFD_CLOEXEC, 10);
        if (in < 0 || out < 0 || dup2(in, 3) < 0 || dup2(out, 4) < 0) _exit(126);
        if (fd9_path != NULL) {
            int fd = open(fd9_path, O_RDONLY);
            if (fd < 0 || dup2(fd, 9) < 0) _exit(126);
        }
        execve(argv[0], argv, envp);
        fprintf(stderr, "plugdrive: cannot execute %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    close(to_plugin[0]);
    close(from_plugin[1]);
    inbox_used = 0;
    static char body[1 << 16];
    int ok = 1;
    for (size_t i = 0; i < sizeof requests / sizeof requests[0]; i++) {
        char header[64];
        size_t length = strlen(requests[i]);
        int header_length = snprintf(header, sizeof header, "Content-Length: %zu\r\n\r\n", length);
        // One write per frame, as the host does.
        char frame[1024];
        memcpy(frame, header, (size_t)header_length);
        memcpy(frame + header_length, requests[i], length);
        write_all(to_plugin[1], frame, (size_t)header_length + length);
        if (read_frame(from_plugin[0], body, sizeof body) < 0) {
            fprintf(stderr, "plugdrive: the plugin closed its channel before answering request %zu\n", i + 1);
            ok = 0;
            break;
        }
        if (strstr(body, "\"error\"") != NULL) {
            fprintf(stderr, "plugdrive: request %zu failed: %s\n", i + 1, body);
            ok = 0;
            break;
        }
        if (i == 3 && strstr(body, "HELLO WORLD") == NULL) {
            fprintf(stderr, "plugdrive: unexpected handle answer: %s\n", body);
            ok = 0;
        }
    }
    close(to_plugin[1]);
    close(from_plugin[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) die("waitpid");
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "plugdrive: the plugin ended with status 0x%x\n", status);
        ok = 0;
    }
    return ok;
}

int main(int argc, char **argv) {
    long count = 1;
    int first = 1;
    while (first + 1 < argc && argv[first][0] == '-') {
        if (strcmp(argv[first], "-n") == 0) count = strtol(argv[first + 1], NULL, 10);
        else if (strcmp(argv[first], "-s") == 0) fd9_path = argv[first + 1];
        else break;
        first += 2;
    }
    if (first >= argc || count < 1) {
        fprintf(stderr, "usage: plugdrive [-n COUNT] [-s FILE] PROGRAM [ARG...]\n");
        return 2;
    }
    for (long i = 0; i < count; i++) {
        if (!run_once(argv + first)) return 1;
    }
    return 0;
}
