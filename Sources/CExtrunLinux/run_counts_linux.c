#define _GNU_SOURCE
#include "CExtrunSandbox.h"
#include "sandbox_support_linux.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

// What the supervisor counts and ends of the run (sandbox_linux.c runs the loop): its
// processes (through the host's /proc), their memory and page tables together, the
// scratch directory's disk with the files held open unlinked, and the last kill and
// reap. Plain system calls, no malloc: the supervisor is forked from a multi-threaded host.

/// The host's /proc, opened before init mounts the plugin's pid namespace's
/// /proc over it (in the mount namespace the supervisor shares with the plugin):
/// the supervisor reads the plugin's processes there, by their host pids.
int extrun_host_proc_fd = -1;

/// `path` (relative to /proc, "N/..."), opened in the host's /proc.
static int open_in_host_proc(const char *path) {
    if (extrun_host_proc_fd >= 0) return openat(extrun_host_proc_fd, path, O_RDONLY | O_CLOEXEC);
    char absolute[96] = "/proc/";
    size_t at = strlen(absolute);
    for (size_t i = 0; path[i] != '\0' && at < sizeof absolute - 1; i++) absolute[at++] = path[i];
    absolute[at] = '\0';
    return open(absolute, O_RDONLY | O_CLOEXEC);
}

/// "PID/task/PID/children", relative to the host's /proc: the children of process `pid`.
static void children_path(char *path, size_t size, pid_t pid) {
    size_t at = 0;
    path[0] = '\0';
    extrun_append_int(path, size, &at, pid);
    extrun_append_text(path, size, &at, "/task/");
    extrun_append_int(path, size, &at, pid);
    extrun_append_text(path, size, &at, "/children");
}

/// Kills every child of this process (orphans reparented to it as a subreaper
/// included) and reaps them, until none is left.
void extrun_kill_and_reap_descendants(pid_t self, pid_t plugin_group) {
    if (plugin_group > 0) kill(-plugin_group, SIGKILL);
    char path[64];
    children_path(path, sizeof path, self);

    for (int round = 0; round < 10000; round++) {
        // Kill the children we have now; the dead ones' children become ours next round.
        int fd = open_in_host_proc(path);
        if (fd >= 0) {
            char buffer[4096];
            ssize_t n = read(fd, buffer, sizeof buffer - 1);
            close(fd);
            long pid = 0;
            int in_number = 0;
            for (ssize_t i = 0; i < n; i++) {
                if (buffer[i] >= '0' && buffer[i] <= '9') {
                    pid = pid * 10 + (buffer[i] - '0');
                    in_number = 1;
                } else if (in_number) {
                    kill((pid_t)pid, SIGKILL);
                    kill(-(pid_t)pid, SIGKILL);
                    pid = 0;
                    in_number = 0;
                }
            }
            if (in_number) kill((pid_t)pid, SIGKILL);
        }
        int status;
        pid_t reaped = waitpid(-1, &status, 0);
        if (reaped < 0 && errno == ECHILD) return;
        // The traced plugin stopped on its way out before the kill reached it: let it go.
        struct extrun_memory_figures ignored;
        if (reaped > 0 && WIFSTOPPED(status)) extrun_handle_trace_stop(reaped, status, -1, &ignored);
    }
}

/// /proc/PID/status of process `pid` (host pid), opened in the host's /proc, or -1.
int extrun_open_host_status(pid_t pid) {
    char path[48];
    size_t at = 0;
    path[0] = '\0';
    extrun_append_int(path, sizeof path, &at, pid);
    extrun_append_text(path, sizeof path, &at, "/status");
    return open_in_host_proc(path);
}

/// VmData of process `pid` (host pid) in bytes, or 0.
uint64_t extrun_private_memory_of(pid_t pid) {
    int fd = extrun_open_host_status(pid);
    struct extrun_memory_figures figures;
    int read = extrun_read_memory_figures(fd, &figures) == 0;
    if (fd >= 0) close(fd);
    return read ? figures.vm_data_kb * 1024 : 0;
}

/// The pids listed in a "children" file, appended to `pids` (at most `cap` in all).
static int append_children(const char *path, pid_t *pids, int count, int cap) {
    int fd = open_in_host_proc(path);
    if (fd < 0) return count;
    char buffer[4096];
    ssize_t n = read(fd, buffer, sizeof buffer - 1);
    close(fd);
    long pid = 0;
    int in_number = 0;
    for (ssize_t i = 0; i < n && count < cap; i++) {
        if (buffer[i] >= '0' && buffer[i] <= '9') {
            pid = pid * 10 + (buffer[i] - '0');
            in_number = 1;
        } else if (in_number) {
            pids[count++] = (pid_t)pid;
            pid = 0;
            in_number = 0;
        }
    }
    return count;
}

/// The entries of a /proc folder whose names are numbers (pids, tids, descriptors),
/// read with getdents64 (no allocation: the supervisor runs after fork).
struct numeric_entries {
    int dir;
    char buffer[4096];
    long got;
    long offset;
};

/// The next numeric name in `entries`, or NULL at the end.
static const char *next_numeric_entry(struct numeric_entries *entries) {
    for (;;) {
        if (entries->offset >= entries->got) {
            entries->got = syscall(SYS_getdents64, entries->dir, entries->buffer, sizeof entries->buffer);
            entries->offset = 0;
            if (entries->got <= 0) return NULL;
        }
        // struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name.
        unsigned short length;
        memcpy(&length, entries->buffer + entries->offset + 16, sizeof length);
        const char *name = entries->buffer + entries->offset + 19;
        if (length == 0) {
            entries->got = 0;
            continue;
        }
        entries->offset += length;
        if (name[0] >= '0' && name[0] <= '9') return name;
    }
}

/// Appends the children of every thread of process `pid` (a thread's children are
/// listed under that thread) to `pids`.
static int append_children_of_process(pid_t pid, pid_t *pids, int count, int cap) {
    char path[64];
    size_t at = 0;
    path[0] = '\0';
    extrun_append_int(path, sizeof path, &at, pid);
    extrun_append_text(path, sizeof path, &at, "/task");
    int dir = open_in_host_proc(path);
    if (dir < 0) return count;
    struct numeric_entries entries = {.dir = dir};
    for (const char *name; (name = next_numeric_entry(&entries)) != NULL;) {
        long tid = 0;
        for (const char *c = name; *c >= '0' && *c <= '9'; c++) tid = tid * 10 + (*c - '0');
        char children[96];
        size_t k = 0;
        children[0] = '\0';
        extrun_append_int(children, sizeof children, &k, pid);
        extrun_append_text(children, sizeof children, &k, "/task/");
        extrun_append_int(children, sizeof children, &k, (pid_t)tid);
        extrun_append_text(children, sizeof children, &k, "/children");
        count = append_children(children, pids, count, cap);
    }
    close(dir);
    return count;
}

/// Every process of the run into `pids` (the supervisor's children and their
/// descendants, init included): how many.
static int run_processes(pid_t self, pid_t *pids) {
    char path[64];
    children_path(path, sizeof path, self);
    int count = append_children(path, pids, 0, EXTRUN_RUN_PROCESSES_COUNTED);
    for (int i = 0; i < count; i++) count = append_children_of_process(pids[i], pids, count, EXTRUN_RUN_PROCESSES_COUNTED);
    return count;
}

/// The blocks (in bytes) of files on device `device` that the run's processes hold open
/// with no name left (unlinked after being opened): disk the scratch quota's walk of its
/// folder cannot see (8 such files held 2 GiB under a 256 MiB quota). Each file once.
static uint64_t unlinked_open_bytes(pid_t self, dev_t device) {
    static pid_t pids[EXTRUN_RUN_PROCESSES_COUNTED];
    static ino_t seen[512];
    int seen_count = 0;
    uint64_t bytes = 0;
    int count = run_processes(self, pids);
    for (int i = 0; i < count; i++) {
        char path[64];
        size_t at = 0;
        path[0] = '\0';
        extrun_append_int(path, sizeof path, &at, pids[i]);
        extrun_append_text(path, sizeof path, &at, "/fd");
        int dir = open_in_host_proc(path);
        if (dir < 0) continue;
        struct numeric_entries entries = {.dir = dir};
        for (const char *name; (name = next_numeric_entry(&entries)) != NULL;) {
            struct stat info;
            // (fstatat on the fd entry follows its magic link to the open file itself.)
            if (fstatat(dir, name, &info, 0) != 0) continue;
            if (!S_ISREG(info.st_mode) || info.st_nlink != 0 || info.st_dev != device) continue;
            int known = 0;
            for (int k = 0; k < seen_count && !known; k++) known = seen[k] == info.st_ino;
            if (known) continue;
            if (seen_count < (int)(sizeof seen / sizeof seen[0])) seen[seen_count++] = info.st_ino;
            bytes += (uint64_t)info.st_blocks * 512;
        }
        close(dir);
    }
    return bytes;
}

/// The private memory process `pid` holds, in bytes: its proportional share of resident
/// anonymous memory (Pss_Anon of smaps_rollup: a page a fork shares is counted once over
/// the processes sharing it), or its RssAnon where that cannot be read.
static uint64_t held_anonymous_memory(pid_t pid, const struct extrun_memory_figures *figures) {
    char path[48];
    size_t at = 0;
    path[0] = '\0';
    extrun_append_int(path, sizeof path, &at, pid);
    extrun_append_text(path, sizeof path, &at, "/smaps_rollup");
    char text[4096];
    int fd = open_in_host_proc(path);
    if (fd >= 0) {
        ssize_t n = read(fd, text, sizeof text - 1);
        close(fd);
        if (n > 0) {
            text[n] = '\0';
            if (strstr(text, "Pss_Anon:") != NULL) return extrun_status_field(text, "Pss_Anon:") * 1024;
        }
    }
    return figures->rss_anon_kb * 1024;
}

/// Reports the run past its memory (`page_tables`: past its page tables' share) once.
static void report_run_memory(int status_fd, pid_t plugin, uint64_t bytes, int processes, int page_tables) {
    struct extrun_event event;
    memset(&event, 0, sizeof event);
    event.type = EXTRUN_EVENT_RUN_MEMORY_LIMIT;
    event.pid = plugin;
    event.status = page_tables;
    event.arg0 = bytes;
    event.arg1 = (uint64_t)processes;
    extrun_send_event(status_fd, &event);
}

/// The run's processes as many: RLIMIT_DATA bounds each process, so a plugin that forks
/// holds the cap once per process (20 children of 20 MiB held 401 MiB under a 30 MiB cap).
/// Sums the private memory of every process of the run (the supervisor's children and
/// their descendants; `init`, the pid namespace's, left out) when there is more than one,
/// and reports the run past `limit`. Page tables, which no rlimit counts, are summed too,
/// one process or many, against 1/EXTRUN_PAGE_TABLE_SHARE of `limit` (the plugin's own
/// from `plugin_status_file`, already open). Returns 1 when it reported.
int extrun_check_run_memory(pid_t self, pid_t init, uint64_t limit, int status_fd, pid_t plugin, int plugin_status_file) {
    if (limit == 0) return 0;
    static pid_t pids[EXTRUN_RUN_PROCESSES_COUNTED];
    int count = run_processes(self, pids);
    int processes = count - (init > 0 ? 1 : 0);
    struct extrun_memory_figures figures;
    if (processes <= 1) {
        // One process: RLIMIT_DATA bounds its private memory; only its page tables to count.
        if (extrun_read_memory_figures(plugin_status_file, &figures) != 0) return 0;
        if (figures.vm_pte_kb * 1024 <= limit / EXTRUN_PAGE_TABLE_SHARE) return 0;
        report_run_memory(status_fd, plugin, figures.vm_pte_kb * 1024, 1, 1);
        return 1;
    }
    uint64_t sum = 0, page_tables = 0;
    for (int i = 0; i < count; i++) {
        if (pids[i] == init) continue;
        int fd = extrun_open_host_status(pids[i]);
        int read_ok = extrun_read_memory_figures(fd, &figures) == 0;
        if (fd >= 0) close(fd);
        if (!read_ok) continue;  // gone, or its memory already dropped
        sum += held_anonymous_memory(pids[i], &figures);
        page_tables += figures.vm_pte_kb * 1024;
    }
    if (page_tables > limit / EXTRUN_PAGE_TABLE_SHARE) {
        report_run_memory(status_fd, plugin, page_tables, processes, 1);
        return 1;
    }
    if (sum <= limit) return 0;
    report_run_memory(status_fd, plugin, sum, processes, 0);
    return 1;
}

/// Whether the scratch directory (with the files the run holds open unlinked from it) is
/// past its quota; if so, reports it (once). `final`: the count after the end, when nothing
/// can write any more: counted in full, and reported again if it is past what was reported
/// (a burst between two counts: the report then says what was really written).
int extrun_check_disk(const struct extrun_sandbox_request *request, int scratch_fd, int status_fd, pid_t plugin, int *reported,
                      pid_t self, int final) {
    if (scratch_fd < 0 || (*reported && !final)) return 0;
    struct extrun_disk_usage usage;
    int stop = !(final && *reported);
    if (extrun_disk_usage(scratch_fd, stop ? request->disk_bytes : 0, stop ? request->disk_files : 0, &usage) != 0) return 0;
    struct stat scratch;
    if (!final && fstat(scratch_fd, &scratch) == 0) usage.bytes += unlinked_open_bytes(self, scratch.st_dev);
    int over = usage.too_deep || (request->disk_bytes && usage.bytes > request->disk_bytes) ||
               (request->disk_files && usage.files > request->disk_files);
    if (!over) return 0;
    struct extrun_event event;
    memset(&event, 0, sizeof event);
    event.type = EXTRUN_EVENT_DISK_LIMIT;
    event.pid = plugin;
    event.status = usage.too_deep;
    event.arg0 = usage.bytes;
    event.arg1 = usage.files;
    extrun_send_event(status_fd, &event);
    *reported = 1;
    return 1;
}

/// The plugin's pid in the supervisor's namespace: the one child of `init`.
pid_t extrun_only_child_of(pid_t init) {
    char path[64];
    children_path(path, sizeof path, init);
    int fd = open_in_host_proc(path);
    if (fd < 0) return -1;
    char buffer[64];
    ssize_t n = read(fd, buffer, sizeof buffer - 1);
    close(fd);
    long pid = 0;
    for (ssize_t i = 0; i < n && buffer[i] >= '0' && buffer[i] <= '9'; i++) pid = pid * 10 + (buffer[i] - '0');
    return pid > 0 ? (pid_t)pid : -1;
}
