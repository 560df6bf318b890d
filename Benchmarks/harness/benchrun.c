// benchrun: times whole commands, interleaved, so that they can be compared
// on a shared machine.
//
// Usage: benchrun [-w WARMUP] [-n MAXROUNDS] [-m MINROUNDS] [-t SECONDS] [-o OUT.tsv] [-a] [-F MAXFAILED]
//                 -- NAME [-x COUNT] [-s STATUS] [VAR=VALUE...] PROGRAM [ARG...] [:: NAME ...]...
//
// One round runs every command once, in an order rotated by one each round
// (so that no command always follows the same one). Warm-up rounds are run
// first and not recorded. Rounds stop after MAXROUNDS, or once SECONDS have
// passed and at least MINROUNDS were recorded. "-x COUNT" after a name runs
// that command COUNT times back to back and records the total as one sample;
// "-s STATUS" makes STATUS its expected exit status (default 0).
// VAR=VALUE words before the program are added to its environment. PROGRAM is
// looked up in PATH (execvp); nothing goes through a shell. Its stdout goes to
// /dev/null, its stderr to a file that is shown if it fails; a command that
// exits non-zero stops the benchmark (exit status 1), unless -a (any exit
// status is accepted: for timing error paths) or -F: up to MAXFAILED failed
// runs are tolerated (a shared checkout where someone re-stages plugins
// mid-run); each is written as a sample with wall_us -1 and dropped.
//
// Output (OUT.tsv, or stdout): one line per sample:
//   name <TAB> round <TAB> wall_us <TAB> cpu_us <TAB> maxrss_kb
// wall_us: fork to reaped (CLOCK_MONOTONIC); cpu_us: user + system time of the
// process and every descendant it reaped (wait4's rusage); maxrss_kb: the
// largest resident set among them.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct command {
    const char *name;
    int repeat;
    int expected_status;
    char **assignments;
    int assignment_count;
    char **argv;
    char log_path[64];
};

static int accept_any_status;
static int max_failed, failed_runs;

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void show_log(const char *path) {
    FILE *f = fopen(path, "r");
    if (f == NULL) return;
    char line[1024];
    int lines = 0;
    while (fgets(line, sizeof line, f) != NULL && lines++ < 40) fputs(line, stderr);
    fclose(f);
}

// Runs the command once. Returns 0 and fills the numbers, or -1 (reported) on failure.
static int run(struct command *c, long *wall_us, long *cpu_us, long *maxrss_kb) {
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    pid_t pid = fork();
    if (pid < 0) {
        perror("benchrun: fork");
        return -1;
    }
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        int log = open(c->log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (null < 0 || log < 0) _exit(126);
        dup2(null, 0);
        dup2(null, 1);
        dup2(log, 2);
        for (int i = 0; i < c->assignment_count; i++) putenv(c->assignments[i]);
        execvp(c->argv[0], c->argv);
        fprintf(stderr, "benchrun: cannot execute %s: %s\n", c->argv[0], strerror(errno));
        _exit(127);
    }
    int status;
    struct rusage usage;
    while (wait4(pid, &status, 0, &usage) < 0) {
        if (errno != EINTR) {
            perror("benchrun: wait4");
            return -1;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    if (!WIFEXITED(status) || (WEXITSTATUS(status) != c->expected_status && !accept_any_status)) {
        fprintf(stderr, "benchrun: '%s' failed (%s %d); its stderr:\n", c->name,
                WIFEXITED(status) ? "exit status" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        show_log(c->log_path);
        return -1;
    }
    *wall_us = (end.tv_sec - start.tv_sec) * 1000000L + (end.tv_nsec - start.tv_nsec) / 1000;
    *cpu_us = usage.ru_utime.tv_sec * 1000000L + usage.ru_utime.tv_usec + usage.ru_stime.tv_sec * 1000000L +
              usage.ru_stime.tv_usec;
    *maxrss_kb = usage.ru_maxrss;
    return 0;
}

static void usage_error(void) {
    fprintf(stderr,
            "usage: benchrun [-w WARMUP] [-n MAXROUNDS] [-m MINROUNDS] [-t SECONDS] [-o OUT.tsv] [-a] [-F MAXFAILED] "
            "-- NAME [-x COUNT] [-s STATUS] [VAR=VALUE...] PROGRAM [ARG...] [:: NAME ...]...\n");
    exit(2);
}

int main(int argc, char **argv) {
    int warmup = 3, max_rounds = 30, min_rounds = 5;
    double seconds = 0;
    const char *out_path = NULL;
    int i = 1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        if (strcmp(argv[i], "-a") == 0) {
            accept_any_status = 1;
            continue;
        }
        if (i + 1 >= argc) usage_error();
        if (strcmp(argv[i], "-w") == 0) warmup = atoi(argv[++i]);
        else if (strcmp(argv[i], "-n") == 0) max_rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "-m") == 0) min_rounds = atoi(argv[++i]);
        else if (strcmp(argv[i], "-t") == 0) seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "-o") == 0) out_path = argv[++i];
        else if (strcmp(argv[i], "-F") == 0) max_failed = atoi(argv[++i]);
        else usage_error();
    }
    struct command commands[64];
    int count = 0;
    while (i < argc) {
        if (count == 64) usage_error();
        struct command *c = &commands[count];
        memset(c, 0, sizeof *c);
        c->name = argv[i++];
        c->repeat = 1;
        for (;;) {
            if (i + 1 < argc && strcmp(argv[i], "-x") == 0) c->repeat = atoi(argv[i + 1]);
            else if (i + 1 < argc && strcmp(argv[i], "-s") == 0) c->expected_status = atoi(argv[i + 1]);
            else break;
            i += 2;
        }
        c->assignments = &argv[i];
        while (i < argc && strchr(argv[i], '=') != NULL && argv[i][0] != '/' && strcmp(argv[i], "::") != 0) {
            c->assignment_count++;
            i++;
        }
        c->argv = &argv[i];
        while (i < argc && strcmp(argv[i], "::") != 0) i++;
        if (c->argv == &argv[i] || c->repeat < 1) usage_error();
        if (i < argc) argv[i++] = NULL;  // terminates this command's argv
        snprintf(c->log_path, sizeof c->log_path, "/tmp/benchrun-%d-%d.log", (int)getpid(), count);
        count++;
    }
    if (count == 0) usage_error();

    FILE *out = out_path ? fopen(out_path, "w") : stdout;
    if (out == NULL) {
        perror("benchrun: output");
        return 2;
    }
    int failed = 0;
    double started = 0;
    for (int round = -warmup; round < max_rounds && !failed; round++) {
        if (round == 0) started = now_seconds();
        if (round >= min_rounds && seconds > 0 && now_seconds() - started > seconds) break;
        int first = ((round % count) + count) % count;
        for (int k = 0; k < count && !failed; k++) {
            struct command *c = &commands[(first + k) % count];
            long wall = 0, cpu = 0, rss = 0;
            int dropped = 0;
            for (int r = 0; r < c->repeat; r++) {
                long w, u, m;
                if (run(c, &w, &u, &m) != 0) {
                    if (++failed_runs > max_failed) failed = 1;
                    dropped = 1;
                    break;
                }
                wall += w;
                cpu += u;
                if (m > rss) rss = m;
            }
            if (dropped) wall = -1;
            if (!failed && round >= 0) fprintf(out, "%s\t%d\t%ld\t%ld\t%ld\n", c->name, round, wall, cpu, rss);
        }
        fflush(out);
    }
    for (int k = 0; k < count; k++) unlink(commands[k].log_path);
    if (out != stdout) fclose(out);
    return failed ? 1 : 0;
}
