#define _GNU_SOURCE
#include "CExtrunSandbox.h"
#include "sandbox_support_linux.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

// The supervisor: forked by the host, it makes the namespaces and mounts, starts the
// plugin (plugin_start_linux.c) or its pid namespace's init (init_linux.c), answers
// seccomp notifications, counts the scratch quota, and reports the plugin's fate.
// Everything below runs in processes forked from a multi-threaded host: only
// async-signal-safe calls (plain system calls), no malloc, no stdio, no locks.

void extrun_write_all(int fd, const void *data, size_t length) {
    const char *p = data;
    while (length > 0) {
        ssize_t n = write(fd, p, length);
        if (n < 0) {
            if (errno == EINTR) continue;
            return;
        }
        p += n;
        length -= (size_t)n;
    }
}

static void close_range_or_loop(unsigned first, unsigned last) {
    if (first > last) return;
    if (syscall(SYS_close_range, first, last, 0) == 0) return;
    for (unsigned fd = first; fd <= last && fd < 65536; fd++) close((int)fd);
}

/// Closes every descriptor from 3 up, except those in `keep` (sorted here in place).
void extrun_close_all_except(int *keep, int count) {
    for (int i = 1; i < count; i++) {
        int value = keep[i], j = i - 1;
        while (j >= 0 && keep[j] > value) {
            keep[j + 1] = keep[j];
            j--;
        }
        keep[j + 1] = value;
    }
    unsigned next = 3;
    for (int i = 0; i < count; i++) {
        if (keep[i] < (int)next) continue;
        if ((unsigned)keep[i] > next) close_range_or_loop(next, (unsigned)keep[i] - 1);
        next = (unsigned)keep[i] + 1;
    }
    close_range_or_loop(next, ~0U);
}

static void send_event(int fd, const struct extrun_event *event) { extrun_write_all(fd, event, sizeof *event); }

/// Tells the host the plugin could not be started (at `stage`, with `error`), and ends the supervisor.
static void report_setup_failure(int status_fd, int stage, int error) __attribute__((noreturn));
static void report_setup_failure(int status_fd, int stage, int error) {
    struct extrun_event event;
    memset(&event, 0, sizeof event);
    event.type = EXTRUN_EVENT_SETUP_FAILED;
    event.stage = stage;
    event.error = error;
    send_event(status_fd, &event);
    _exit(1);
}

static int receive_fd(int socket_fd) {
    char dummy;
    struct iovec iov = {&dummy, 1};
    union {
        char buffer[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } control;
    struct msghdr message = {0};
    message.msg_iov = &iov;
    message.msg_iovlen = 1;
    message.msg_control = control.buffer;
    message.msg_controllen = sizeof control.buffer;
    ssize_t n;
    do {
        n = recvmsg(socket_fd, &message, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n != 1) return -1;
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&message);
    if (cmsg == NULL || cmsg->cmsg_type != SCM_RIGHTS) return -1;
    int fd;
    memcpy(&fd, CMSG_DATA(cmsg), sizeof fd);
    return fd;
}

/// The host's /proc, opened before init mounts the plugin's pid namespace's
/// /proc over it (in the mount namespace the supervisor shares with the plugin):
/// the supervisor reads the plugin's processes there, by their host pids.
static int host_proc_fd = -1;

/// `path` (relative to /proc, "N/..."), opened in the host's /proc.
static int open_in_host_proc(const char *path) {
    if (host_proc_fd >= 0) return openat(host_proc_fd, path, O_RDONLY | O_CLOEXEC);
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
static void kill_and_reap_descendants(pid_t self, pid_t plugin_group) {
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
static int open_host_status(pid_t pid) {
    char path[48];
    size_t at = 0;
    path[0] = '\0';
    extrun_append_int(path, sizeof path, &at, pid);
    extrun_append_text(path, sizeof path, &at, "/status");
    return open_in_host_proc(path);
}

/// VmData of process `pid` (host pid) in bytes, or 0.
static uint64_t private_memory_of(pid_t pid) {
    int fd = open_host_status(pid);
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

/// "Name:   1234 kB" in a /proc file's text: the number, or 0.
static uint64_t kb_field(const char *text, const char *name) {
    size_t length = strlen(name);
    for (const char *line = text; line != NULL && *line != '\0';) {
        if (strncmp(line, name, length) == 0) {
            const char *c = line + length;
            while (*c == ' ' || *c == '\t') c++;
            uint64_t value = 0;
            for (; *c >= '0' && *c <= '9'; c++) value = value * 10 + (uint64_t)(*c - '0');
            return value;
        }
        line = strchr(line, '\n');
        if (line != NULL) line++;
    }
    return 0;
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
            if (strstr(text, "Pss_Anon:") != NULL) return kb_field(text, "Pss_Anon:") * 1024;
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
    send_event(status_fd, &event);
}

/// The run's processes as many: RLIMIT_DATA bounds each process, so a plugin that forks
/// holds the cap once per process (20 children of 20 MiB held 401 MiB under a 30 MiB cap).
/// Sums the private memory of every process of the run (the supervisor's children and
/// their descendants; `init`, the pid namespace's, left out) when there is more than one,
/// and reports the run past `limit`. Page tables, which no rlimit counts, are summed too,
/// one process or many, against 1/EXTRUN_PAGE_TABLE_SHARE of `limit` (the plugin's own
/// from `plugin_status_file`, already open). Returns 1 when it reported.
static int check_run_memory(pid_t self, pid_t init, uint64_t limit, int status_fd, pid_t plugin, int plugin_status_file) {
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
        int fd = open_host_status(pids[i]);
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

static uint64_t monotonic_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
}

/// Whether the scratch directory (with the files the run holds open unlinked from it) is
/// past its quota; if so, reports it (once). `final`: the count after the end, when nothing
/// can write any more: counted in full, and reported again if it is past what was reported
/// (a burst between two counts: the report then says what was really written).
static int check_disk(const struct extrun_sandbox_request *request, int scratch_fd, int status_fd, pid_t plugin, int *reported,
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
    send_event(status_fd, &event);
    *reported = 1;
    return 1;
}

/// The plugin's pid in the supervisor's namespace: the one child of `init`.
static pid_t only_child_of(pid_t init) {
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


static void supervise(const struct extrun_sandbox_request *request, int status_fd, int lifeline_fd) __attribute__((noreturn));
static void supervise(const struct extrun_sandbox_request *request, int status_fd, int lifeline_fd) {
    extrun_reset_signals();
    pid_t self = getpid();
    struct extrun_event event;
    // The scratch directory, for its quota: opened before any mount can hide its path.
    int scratch_fd = request->scratch_path != NULL && (request->disk_bytes || request->disk_files)
        ? open(request->scratch_path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;

    // Leave the host's process group: a Ctrl-C meant for the host should reach
    // the host, whose death then ends the plugin through the lifeline.
    setpgid(0, 0);
    prctl(PR_SET_CHILD_SUBREAPER, 1);

    // /proc/self must be ours to write the user namespace's maps: the host may
    // have made itself (and so this fork) not dumpable. Undone below.
    if (request->namespaces & EXTRUN_NS_USER) prctl(PR_SET_DUMPABLE, 1);
    int active = extrun_enter_namespaces(request->namespaces);
    if (active < 0) report_setup_failure(status_fd, EXTRUN_STAGE_MOUNT, errno);
    if (active & EXTRUN_NS_MOUNT) {
        // The folders made on the tmpfs must be searchable by the plugin's user, whatever the host's umask.
        mode_t mask = umask(022);
        int hidden = extrun_hide_directories(
            request->hide_paths, request->hide_count, request->reveal_sources, request->reveal_targets, request->reveal_writable,
            request->reveal_count, request->memory_files_bytes, request->memory_files_inodes, request->private_dev);
        int saved = errno;
        umask(mask);
        if (hidden != 0) report_setup_failure(status_fd, EXTRUN_STAGE_MOUNT, saved);
    }
    // Not dumpable (after the user namespace's maps, which need /proc/self to be
    // ours): a plugin of the same user cannot read this process's memory or
    // descriptors through /proc.
    prctl(PR_SET_DUMPABLE, 0);

    // Without a pid namespace to keep the plugin away from other processes, its filter must
    // send the signal-sending calls here: one that leaves them to the namespace is not used
    // (the host builds the one that checks them, only then, and starts again).
    if (!(active & EXTRUN_NS_PID) && request->filter != NULL && request->filter_needs_pid_ns) {
        report_setup_failure(status_fd, EXTRUN_STAGE_PID_NAMESPACE, EPERM);
    }
    // What the plugin gets: the namespaces it got.
    struct extrun_sandbox_request chosen = *request;
    chosen.namespaces = active;
    request = &chosen;

    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) report_setup_failure(status_fd, EXTRUN_STAGE_PIPE, errno);
    int notify_pair[2] = {-1, -1};
    if (request->filter_uses_notify && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, notify_pair) != 0) {
        report_setup_failure(status_fd, EXTRUN_STAGE_PIPE, errno);
    }

    // In a pid namespace the child is its init, which forks the plugin; otherwise the child is the plugin.
    int in_pid_ns = (active & EXTRUN_NS_PID) != 0;
    if (in_pid_ns && (active & EXTRUN_NS_MOUNT)) {
        host_proc_fd = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (host_proc_fd < 0) report_setup_failure(status_fd, EXTRUN_STAGE_MOUNT, errno);
    }
    int exit_pipe[2] = {-1, -1};
    if (in_pid_ns && pipe2(exit_pipe, O_CLOEXEC) != 0) report_setup_failure(status_fd, EXTRUN_STAGE_PIPE, errno);
    pid_t child;
    if (in_pid_ns) {
        child = fork();
        if (child == 0) {
            // Never the host's /proc for the plugin's side.
            if (host_proc_fd >= 0) close(host_proc_fd);
            host_proc_fd = -1;
            close(report[0]);
            if (notify_pair[0] >= 0) close(notify_pair[0]);
            close(status_fd);
            close(lifeline_fd);
            close(exit_pipe[0]);
            extrun_run_init(request, report[1], notify_pair[1], exit_pipe[1]);
        }
    } else {
        // The plugin itself: started without copying this process (start_plugin).
        struct plugin_start start = {request, report[1], notify_pair[1], {host_proc_fd, report[0], notify_pair[0], status_fd, lifeline_fd}};
        child = extrun_start_plugin(&start);
        // Its memory as it ends (exit_figures_linux.c): this process is its parent and tracer.
        if (child > 0) extrun_trace_exit(child);
    }
    close(report[1]);
    if (notify_pair[1] >= 0) close(notify_pair[1]);
    if (exit_pipe[1] >= 0) close(exit_pipe[1]);
    if (child < 0) report_setup_failure(status_fd, EXTRUN_STAGE_FORK, errno);
    // (No setpgid from here: the plugin's process has made its own session before this
    // returns (CLONE_VFORK), and setsid fails in a process that already leads a group.)
    // The plugin's descriptors are its own now: without this process's copies, the host
    // sees the end of a channel the plugin closes (docs/protocol.md, "Limits").
    for (int i = 0; i < request->fd_count; i++) {
        int fd = request->fds[i].source;
        if (fd > 2 && fd != status_fd && fd != lifeline_fd) close(fd);
    }

    int listener = -1;
    if (notify_pair[0] >= 0) {
        listener = receive_fd(notify_pair[0]);  // returns -1 if the child failed before sending
        close(notify_pair[0]);
    }
    struct child_failure failure = {0, 0};
    ssize_t got;
    for (;;) {
        do {
            got = read(report[0], &failure, sizeof failure);
        } while (got < 0 && errno == EINTR);
        if (got == (ssize_t)sizeof failure && failure.stage == EXTRUN_REPORT_PROC_MOUNTED) {
            if (failure.error == 0) active |= EXTRUN_NS_PROC;
            continue;
        }
        break;
    }
    close(report[0]);
    if (got == (ssize_t)sizeof failure) {
        kill(child, SIGKILL);
        kill_and_reap_descendants(self, 0);
        report_setup_failure(status_fd, failure.stage, failure.error);
    }
    // The plugin has exec'd: in a namespace, it is init's one child by now.
    pid_t plugin = in_pid_ns ? only_child_of(child) : child;
    if (plugin <= 0) {
        kill(child, SIGKILL);
        kill_and_reap_descendants(self, 0);
        report_setup_failure(status_fd, EXTRUN_STAGE_FORK, ESRCH);
    }

    if (request->landlock_count > 0 && extrun_landlock_abi() > 0) active |= EXTRUN_NS_LANDLOCK;
    memset(&event, 0, sizeof event);
    event.type = EXTRUN_EVENT_STARTED;
    event.pid = plugin;
    event.namespaces = active;
    send_event(status_fd, &event);

    int plugin_fd = (int)syscall(SYS_pidfd_open, child, 0);
    // The plugin's memory figures: from its exit stop, or read just before a kill.
    int plugin_status_file = open_host_status(plugin);
    struct extrun_memory_figures final_figures;
    memset(&final_figures, 0, sizeof final_figures);
    // Without a pid namespace this process traces the plugin, whose stops make no
    // descriptor readable: SIGCHLD through a signalfd wakes the loop for them.
    int child_signals = -1;
    if (!in_pid_ns) {
        sigset_t chld;
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        sigprocmask(SIG_BLOCK, &chld, NULL);
        child_signals = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
    }
    int killed = 0;
    int disk_reported = 0;
    int check_ms = scratch_fd >= 0 && request->disk_check_ms > 0 ? request->disk_check_ms : -1;
    // The run's memory over all its processes is counted at the same pace (or alone at its own).
    if (request->limits.data_bytes > 0 && check_ms < 0) check_ms = EXTRUN_RUN_MEMORY_CHECK_MS;
    uint64_t last_check = monotonic_ms();
    for (;;) {
        struct pollfd fds[4];
        int count = 0;
        if (child_signals >= 0) fds[count++] = (struct pollfd){.fd = child_signals, .events = POLLIN};
        fds[count++] = (struct pollfd){.fd = lifeline_fd, .events = POLLIN};
        if (plugin_fd >= 0) fds[count++] = (struct pollfd){.fd = plugin_fd, .events = POLLIN};
        if (listener >= 0) fds[count++] = (struct pollfd){.fd = listener, .events = POLLIN};
        int ready = poll(fds, (nfds_t)count, plugin_fd >= 0 ? check_ms : 20);
        if (ready < 0 && errno != EINTR) break;
        if (check_ms > 0 && !killed && monotonic_ms() - last_check >= (uint64_t)check_ms) {
            last_check = monotonic_ms();
            if (check_disk(request, scratch_fd, status_fd, plugin, &disk_reported, self, 0) ||
                check_run_memory(self, in_pid_ns ? child : 0, request->limits.data_bytes, status_fd, plugin, plugin_status_file)) {
                if (!killed) extrun_read_memory_figures(plugin_status_file, &final_figures);
                kill(child, SIGKILL);
                kill(-plugin, SIGKILL);
                killed = 1;
            }
        }

        for (int i = 0; ready > 0 && i < count; i++) {
            if (fds[i].revents == 0) continue;
            if (fds[i].fd == child_signals) {
                struct signalfd_siginfo info[8];
                while (read(child_signals, info, sizeof info) > 0) {}
            } else if (fds[i].fd == lifeline_fd) {
                char command;
                ssize_t n = read(lifeline_fd, &command, 1);
                if (n <= 0 || command == 'K') {
                    // The host died or asked: the plugin and all it started go.
                    if (!killed) extrun_read_memory_figures(plugin_status_file, &final_figures);
                    kill(child, SIGKILL);
                    kill(-plugin, SIGKILL);
                    killed = 1;
                    if (n <= 0) {
                        close(lifeline_fd);
                        lifeline_fd = -1;
                    }
                }
            } else if (fds[i].fd == listener) {
                struct seccomp_notif request_buffer;
                memset(&request_buffer, 0, sizeof request_buffer);
                if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &request_buffer) == 0) {
                    struct seccomp_notif_resp response;
                    memset(&response, 0, sizeof response);
                    response.id = request_buffer.id;
                    response.error = -EPERM;
                    if (extrun_is_large_private_mapping(&request_buffer.data)) {
                        // Will the cap refuse it? The evidence for a death that may follow.
                        uint64_t in_use = private_memory_of(request_buffer.pid);
                        uint64_t limit = request->limits.data_bytes;
                        if (limit > 0 && !killed && in_use + request_buffer.data.args[1] > limit) {
                            memset(&event, 0, sizeof event);
                            event.type = EXTRUN_EVENT_ALLOCATION_REFUSED;
                            event.pid = (int32_t)request_buffer.pid;
                            event.arg0 = request_buffer.data.args[1];
                            event.arg1 = in_use;
                            send_event(status_fd, &event);
                        }
                        response.error = 0;
                        response.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
                        ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &response);
                        continue;
                    }
                    // (Only x86_64's own numbers: a call through another ABI is a violation.)
                    if (extrun_syscall_abi(request_buffer.data.arch, request_buffer.data.nr) == EXTRUN_ABI_NATIVE &&
                        extrun_syscall_sends_signal(request_buffer.data.nr)) {
                        // A signal: it goes on if it is aimed at the run's own processes.
                        pid_t target;
                        int group, signal_number;
                        extrun_signal_call_target(&request_buffer, &target, &group, &signal_number);
                        // In a pid namespace (a program that checks signals is used there after
                        // a run of this host had none) every pid the plugin can name is the run's.
                        if (in_pid_ns || extrun_signal_allowed(target, group, plugin, self)) {
                            response.error = 0;
                            response.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
                        } else if (!killed) {
                            memset(&event, 0, sizeof event);
                            event.type = EXTRUN_EVENT_DENIED;
                            event.pid = (int32_t)request_buffer.pid;
                            event.syscall_nr = request_buffer.data.nr;
                            event.arch = request_buffer.data.arch;
                            event.arg0 = (uint64_t)(int64_t)(group ? -target : target);
                            event.arg1 = (uint64_t)signal_number;
                            send_event(status_fd, &event);
                        }
                        ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &response);
                        continue;
                    }
                    if (extrun_syscall_abi(request_buffer.data.arch, request_buffer.data.nr) == EXTRUN_ABI_NATIVE &&
                        extrun_syscall_controls_process(request_buffer.data.nr)) {
                        // Limits, priority or scheduling of a process: only the run's own.
                        pid_t target = 0;
                        if (in_pid_ns || extrun_process_call_allowed(&request_buffer, plugin, self, &target)) {
                            response.error = 0;
                            response.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
                        } else if (!killed) {
                            memset(&event, 0, sizeof event);
                            event.type = EXTRUN_EVENT_DENIED;
                            event.pid = (int32_t)request_buffer.pid;
                            event.syscall_nr = request_buffer.data.nr;
                            event.arch = request_buffer.data.arch;
                            event.arg0 = (uint64_t)(int64_t)target;
                            event.arg1 = (uint64_t)(int64_t)-1;  // not a signal
                            send_event(status_fd, &event);
                        }
                        ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &response);
                        continue;
                    }
                    if (!killed) {
                        memset(&event, 0, sizeof event);
                        event.type = EXTRUN_EVENT_VIOLATION;
                        event.pid = (int32_t)request_buffer.pid;
                        event.syscall_nr = request_buffer.data.nr;
                        event.arch = request_buffer.data.arch;
                        event.arg0 = request_buffer.data.args[0];
                        event.arg1 = request_buffer.data.args[3];  // mmap's flags
                        send_event(status_fd, &event);
                        extrun_read_memory_figures(plugin_status_file, &final_figures);
                        kill(child, SIGKILL);
                        kill(-plugin, SIGKILL);
                        killed = 1;
                    }
                    ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &response);
                } else if (errno != EINTR && errno != ENOENT) {
                    close(listener);
                    listener = -1;
                }
            }
        }
        int status;
        struct rusage usage;
        pid_t done = wait4(child, &status, WNOHANG, &usage);
        if (done == child && WIFSTOPPED(status)) {
            // The traced plugin (no pid namespace): its exit stop, or a signal to pass on.
            struct extrun_memory_figures at_exit;
            memset(&at_exit, 0, sizeof at_exit);
            if (extrun_handle_trace_stop(child, status, plugin_status_file, &at_exit) && at_exit.vm_size_kb > 0) {
                final_figures = at_exit;
            }
            continue;
        }
        if (done == child) {
            if (listener >= 0) close(listener);
            if (in_pid_ns) {
                // The plugin's own fate, from init; none if init was killed (with the plugin).
                struct plugin_exit reported;
                ssize_t n;
                do {
                    n = read(exit_pipe[0], &reported, sizeof reported);
                } while (n < 0 && errno == EINTR);
                if (n == (ssize_t)sizeof reported) {
                    status = reported.status;
                    usage = reported.usage;
                    if (reported.figures.vm_size_kb > 0) final_figures = reported.figures;
                } else {
                    status = SIGKILL;  // a wait status meaning "killed by SIGKILL"
                    memset(&usage, 0, sizeof usage);
                }
            }
            kill_and_reap_descendants(self, plugin);
            // What it left, counted once more now that nothing can write.
            check_disk(request, scratch_fd, status_fd, plugin, &disk_reported, self, 1);
            memset(&event, 0, sizeof event);
            event.type = EXTRUN_EVENT_EXITED;
            event.pid = plugin;
            event.status = status;
            event.utime_us = (int64_t)usage.ru_utime.tv_sec * 1000000 + usage.ru_utime.tv_usec;
            event.stime_us = (int64_t)usage.ru_stime.tv_sec * 1000000 + usage.ru_stime.tv_usec;
            event.maxrss_kb = usage.ru_maxrss;
            event.final_memory = final_figures;
            send_event(status_fd, &event);
            _exit(0);
        }
        if (lifeline_fd < 0 && !killed) {
            extrun_read_memory_figures(plugin_status_file, &final_figures);
            kill(child, SIGKILL);
            kill(-plugin, SIGKILL);
            killed = 1;
        }
    }
    kill(child, SIGKILL);
    kill(-plugin, SIGKILL);
    kill_and_reap_descendants(self, plugin);
    _exit(1);
}

void extrun_sandbox_spawn(const struct extrun_sandbox_request *request, struct extrun_sandbox_result *result) {
    result->supervisor_pid = -1;
    result->status_fd = -1;
    result->lifeline_fd = -1;
    result->error = 0;
    result->stage = EXTRUN_STAGE_NONE;

    int status[2], lifeline[2];
    if (pipe2(status, O_CLOEXEC) != 0) {
        result->error = errno;
        result->stage = EXTRUN_STAGE_PIPE;
        return;
    }
    if (pipe2(lifeline, O_CLOEXEC) != 0) {
        result->error = errno;
        result->stage = EXTRUN_STAGE_PIPE;
        close(status[0]);
        close(status[1]);
        return;
    }
    pid_t pid = fork();
    if (pid < 0) {
        result->error = errno;
        result->stage = EXTRUN_STAGE_FORK;
        close(status[0]);
        close(status[1]);
        close(lifeline[0]);
        close(lifeline[1]);
        return;
    }
    if (pid == 0) {
        close(status[0]);
        close(lifeline[1]);
        // Keep only what the supervisor and the plugin need: the plugin's
        // sources, the status pipe, the lifeline, the cgroup descriptor.
        int keep[64 + 4];
        int keep_count = 0;
        for (int i = 0; i < request->fd_count && i < 64; i++) keep[keep_count++] = request->fds[i].source;
        keep[keep_count++] = status[1];
        keep[keep_count++] = lifeline[0];
        if (request->cgroup_procs_fd >= 0) keep[keep_count++] = request->cgroup_procs_fd;
        extrun_close_all_except(keep, keep_count);
        supervise(request, status[1], lifeline[0]);
    }
    close(status[1]);
    close(lifeline[0]);
    result->supervisor_pid = pid;
    result->status_fd = status[0];
    result->lifeline_fd = lifeline[1];
}
