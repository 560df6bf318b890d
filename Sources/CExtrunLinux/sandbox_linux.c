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

// Everything below runs in processes forked from a multi-threaded host: only
// async-signal-safe calls (plain system calls), no malloc, no stdio, no locks.

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef SECCOMP_FILTER_FLAG_NEW_LISTENER
#define SECCOMP_FILTER_FLAG_NEW_LISTENER (1UL << 3)
#endif
#ifndef SECCOMP_USER_NOTIF_FLAG_CONTINUE
#define SECCOMP_USER_NOTIF_FLAG_CONTINUE (1UL << 0)
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

/// A record on the report pipe with this stage is information, not a failure:
/// whether init could mount a /proc of the plugin's pid namespace (error 0: yes).
#define EXTRUN_REPORT_PROC_MOUNTED (-1)

struct child_failure {
    int stage;
    int error;
};

static void write_all(int fd, const void *data, size_t length) {
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

static void send_event(int fd, const struct extrun_event *event) { write_all(fd, event, sizeof *event); }

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

static void fail_child(int report_fd, int stage) __attribute__((noreturn));
static void fail_child(int report_fd, int stage) {
    struct child_failure failure = {stage, errno};
    write_all(report_fd, &failure, sizeof failure);
    _exit(127);
}

static void reset_signals(void) {
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        signal(sig, SIG_DFL);
    }
    sigset_t empty;
    sigemptyset(&empty);
    sigprocmask(SIG_SETMASK, &empty, NULL);
}

static int set_limit(int resource, uint64_t value) {
    if (value == 0) return 0;
    struct rlimit limit = {(rlim_t)value, (rlim_t)value};
    return setrlimit(resource, &limit);
}


/// The plugin process: limits, filter, exec. Never returns.
static void run_plugin(const struct extrun_sandbox_request *request, int report_fd, int notify_socket)
    __attribute__((noreturn));
static void run_plugin(const struct extrun_sandbox_request *request, int report_fd, int notify_socket) {
    reset_signals();
    // Die with the supervisor. Its parent is a single thread, so this is reliable here.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    // Its own session, so no controlling terminal: /dev/tty cannot be opened (ENXIO), and
    // the terminal of whoever started the host can be neither read, written nor
    // taken over (tcsetpgrp). It also leads its own process group, which the supervisor kills.
    if (setsid() < 0) fail_child(report_fd, EXTRUN_STAGE_SETPGID);

    if (request->cgroup_procs_fd >= 0) {
        write_all(request->cgroup_procs_fd, "0\n", 2);
    }

    // Descriptors: move sources out of the way, install targets, close the rest.
    // The parking range starts above every descriptor involved: dup3 refuses to
    // copy a descriptor onto itself (EINVAL), and a host with many files open has
    // sources at any number.
    int high = 100;
    if (report_fd >= high) high = report_fd + 1;
    if (notify_socket >= high) high = notify_socket + 1;
    for (int i = 0; i < request->fd_count; i++) {
        if (request->fds[i].source >= high) high = request->fds[i].source + 1;
    }
    int keep_report = fcntl(report_fd, F_DUPFD_CLOEXEC, high + request->fd_count + 2);
    if (keep_report < 0) fail_child(report_fd, EXTRUN_STAGE_FDS);
    report_fd = keep_report;
    if (notify_socket >= 0) {
        int moved = fcntl(notify_socket, F_DUPFD_CLOEXEC, high + request->fd_count + 3);
        if (moved < 0) fail_child(report_fd, EXTRUN_STAGE_FDS);
        notify_socket = moved;
    }
    for (int i = 0; i < request->fd_count; i++) {
        if (dup3(request->fds[i].source, high + i, O_CLOEXEC) < 0) fail_child(report_fd, EXTRUN_STAGE_FDS);
    }
    for (int i = 0; i < request->fd_count; i++) {
        if (dup2(high + i, request->fds[i].target) < 0) fail_child(report_fd, EXTRUN_STAGE_FDS);
    }
    int max_target = 2;
    for (int i = 0; i < request->fd_count; i++) {
        if (request->fds[i].target > max_target) max_target = request->fds[i].target;
    }
    for (int fd = 0; fd < high + request->fd_count + 2; fd++) {
        int wanted = 0;
        for (int i = 0; i < request->fd_count; i++) wanted |= request->fds[i].target == fd;
        if (!wanted) close(fd);
    }
    int lowest_kept = report_fd < notify_socket || notify_socket < 0 ? report_fd : notify_socket;
    int highest_kept = report_fd > notify_socket ? report_fd : notify_socket;
    for (int fd = high + request->fd_count + 2; fd < highest_kept; fd++) {
        if (fd != lowest_kept) close(fd);
    }
    if (syscall(SYS_close_range, (unsigned)highest_kept + 1, ~0U, 0) != 0) {
        for (int fd = highest_kept + 1; fd < 1024; fd++) close(fd);
    }

    const struct extrun_limits *l = &request->limits;
    // RLIMIT_NPROC counts every process of the user: for plugins sharing the
    // plugin user, one fork bomb would stop all the others from starting. In a
    // pid namespace its pid_max bounds each run on its own, so NPROC is left as it is;
    // without one, a root host gives each run a uid of its own (pluginUidRange).
    uint64_t processes = request->drop_privileges && (request->namespaces & EXTRUN_NS_PID) ? 0 : l->processes;
    if (set_limit(RLIMIT_DATA, l->data_bytes) || set_limit(RLIMIT_STACK, l->stack_bytes) ||
        set_limit(RLIMIT_NOFILE, l->open_files) || set_limit(RLIMIT_NPROC, processes) ||
        set_limit(RLIMIT_FSIZE, l->file_bytes) || set_limit(RLIMIT_CPU, l->cpu_seconds)) {
        fail_child(report_fd, EXTRUN_STAGE_RLIMIT);
    }
    struct rlimit no_core = {0, 0};
    if (setrlimit(RLIMIT_CORE, &no_core) != 0) fail_child(report_fd, EXTRUN_STAGE_RLIMIT);
    // POSIX message queues hold kernel memory no other limit counts: none.
    if (setrlimit(RLIMIT_MSGQUEUE, &no_core) != 0) fail_child(report_fd, EXTRUN_STAGE_RLIMIT);

    // The plugin's own user: no supplementary groups, then the group, then the
    // user (after which the first two could no longer be changed). Raw system
    // calls: this process is the only thread, and the C library's versions
    // would try to reach threads of the host that do not exist here.
    if (request->drop_privileges) {
        uid_t uid = request->plugin_uid;
        gid_t gid = request->plugin_gid;
        if (syscall(SYS_setgroups, 0, NULL) != 0) fail_child(report_fd, EXTRUN_STAGE_CREDENTIALS);
        if (syscall(SYS_setresgid, gid, gid, gid) != 0) fail_child(report_fd, EXTRUN_STAGE_CREDENTIALS);
        if (syscall(SYS_setresuid, uid, uid, uid) != 0) fail_child(report_fd, EXTRUN_STAGE_CREDENTIALS);
        uid_t ruid, euid, suid;
        if (getresuid(&ruid, &euid, &suid) != 0 || ruid != uid || euid != uid || suid != uid ||
            getgroups(0, NULL) != 0 || getegid() != gid) {
            errno = EPERM;
            fail_child(report_fd, EXTRUN_STAGE_CREDENTIALS);
        }
        // Changing credentials cleared the parent-death signal: set it again, and
        // end here if the parent is already gone.
        pid_t parent = getppid();
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
    }
    // Entered as the plugin's user: the scratch directory must be its own.
    if (request->cwd != NULL && chdir(request->cwd) != 0) fail_child(report_fd, EXTRUN_STAGE_CHDIR);

    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) fail_child(report_fd, EXTRUN_STAGE_NO_NEW_PRIVS);
    if (request->landlock_count > 0) {
        int private_temporary = (request->namespaces & EXTRUN_NS_MOUNT) && request->private_dev && request->memory_files_bytes > 0;
        if (extrun_landlock_restrict(request, private_temporary) < 0) fail_child(report_fd, EXTRUN_STAGE_LANDLOCK);
    }

    if (request->filter != NULL) {
        struct sock_fprog program = {request->filter_length, (struct sock_filter *)request->filter};
        unsigned long flags = request->filter_uses_notify ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0;
        long listener = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &program);
        if (listener < 0) fail_child(report_fd, EXTRUN_STAGE_SECCOMP);
        if (request->filter_uses_notify) {
            // Hand the listener to the supervisor, then forget it.
            char dummy = 'L';
            struct iovec iov = {&dummy, 1};
            union {
                char buffer[CMSG_SPACE(sizeof(int))];
                struct cmsghdr align;
            } control;
            memset(&control, 0, sizeof control);
            struct msghdr message = {0};
            message.msg_iov = &iov;
            message.msg_iovlen = 1;
            message.msg_control = control.buffer;
            message.msg_controllen = sizeof control.buffer;
            struct cmsghdr *cmsg = CMSG_FIRSTHDR(&message);
            cmsg->cmsg_level = SOL_SOCKET;
            cmsg->cmsg_type = SCM_RIGHTS;
            cmsg->cmsg_len = CMSG_LEN(sizeof(int));
            int listener_fd = (int)listener;
            memcpy(CMSG_DATA(cmsg), &listener_fd, sizeof listener_fd);
            if (sendmsg(notify_socket, &message, MSG_NOSIGNAL) != 1) fail_child(report_fd, EXTRUN_STAGE_SECCOMP);
            close(listener_fd);
            close(notify_socket);
        }
    }

    execve(request->path, request->argv, request->envp);
    fail_child(report_fd, EXTRUN_STAGE_EXEC);
}

/// What the plugin's process closes before it becomes the plugin, then its setup.
struct plugin_start {
    const struct extrun_sandbox_request *request;
    int report_fd;
    int notify_socket;
    int close_fds[5];
};

static int plugin_entry(void *argument) {
    const struct plugin_start *start = argument;
    // Its own descriptor table (no CLONE_FILES): these closes are the child's only.
    for (int i = 0; i < 5; i++) {
        if (start->close_fds[i] >= 0) close(start->close_fds[i]);
    }
    run_plugin(start->request, start->report_fd, start->notify_socket);
}

/// Starts the plugin's process as vfork does (clone with CLONE_VM | CLONE_VFORK, on a
/// stack of its own): the caller's pages are neither copied nor marked copy-on-write,
/// which a fork of a process the size of the host costs ~0.3 ms for, and the caller
/// waits until the child has exec'd (or failed). Safe here because the child only
/// makes system calls on its own descriptors, credentials, limits and filter, and
/// writes no memory of the caller's; a plain fork if the stack cannot be had.
static pid_t start_plugin(struct plugin_start *start) {
    const size_t size = 256 * 1024;
    void *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) {
        pid_t pid = fork();
        if (pid == 0) plugin_entry(start);
        return pid;
    }
    pid_t pid = clone(plugin_entry, (char *)stack + size, CLONE_VM | CLONE_VFORK | SIGCHLD, start);
    int saved = errno;
    munmap(stack, size);
    errno = saved;
    return pid;
}

static void close_range_or_loop(unsigned first, unsigned last) {
    if (first > last) return;
    if (syscall(SYS_close_range, first, last, 0) == 0) return;
    for (unsigned fd = first; fd <= last && fd < 65536; fd++) close((int)fd);
}

/// Closes every descriptor from 3 up, except those in `keep` (sorted here in place).
static void close_all_except(int *keep, int count) {
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

/// VmData of process `pid` (host pid) in bytes, or 0.
static uint64_t private_memory_of(pid_t pid) {
    char path[64];
    size_t at = 0;
    path[0] = '\0';
    extrun_append_int(path, sizeof path, &at, pid);
    extrun_append_text(path, sizeof path, &at, "/status");
    int fd = open_in_host_proc(path);
    if (fd < 0) return 0;
    char buffer[4096];
    ssize_t n = read(fd, buffer, sizeof buffer - 1);
    close(fd);
    if (n <= 0) return 0;
    buffer[n] = '\0';
    const char *line = strstr(buffer, "\nVmData:");
    if (line == NULL) return 0;
    uint64_t kb = 0;
    for (line += 8; *line == ' ' || *line == '\t'; line++) {}
    for (; *line >= '0' && *line <= '9'; line++) kb = kb * 10 + (uint64_t)(*line - '0');
    return kb * 1024;
}

static uint64_t monotonic_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
}

/// Whether the scratch directory is past its quota; if so, reports it (once).
static int check_disk(const struct extrun_sandbox_request *request, int scratch_fd, int status_fd, pid_t plugin, int *reported) {
    if (scratch_fd < 0 || *reported) return 0;
    struct extrun_disk_usage usage;
    if (extrun_disk_usage(scratch_fd, request->disk_bytes, request->disk_files, &usage) != 0) return 0;
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

/// What the namespace's init tells the supervisor when the plugin ends.
struct plugin_exit {
    int status;
    struct rusage usage;
    struct extrun_memory_figures figures;  // read in its exit stop (zeros: unknown)
};

/// Pid 1 of the plugin's pid namespace. The plugin must not be pid 1 itself:
/// the kernel drops signals that pid 1 sends itself with their default action
/// (`abort()`, `raise(SIGTERM)`), which would turn a crash into a hang. This
/// init forks the plugin, reaps whatever is re-parented to it, and when the
/// plugin ends reports its status and rusage and exits, which ends every
/// other process in the namespace. Never returns.
static void run_init(const struct extrun_sandbox_request *request, int report_fd, int notify_socket, int exit_fd)
    __attribute__((noreturn));
/// Blanks this process's command line (its copy of the host's argv, which /proc/1/cmdline
/// would show the plugin): fields 48 and 49 of /proc/self/stat are where it lies.
static void blank_command_line(void) {
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    char buffer[1024];
    ssize_t n = read(fd, buffer, sizeof buffer - 1);
    close(fd);
    if (n <= 0) return;
    buffer[n] = '\0';
    // After the command's closing parenthesis, fields start at 3.
    char *p = NULL;
    for (ssize_t i = n - 1; i >= 0; i--) {
        if (buffer[i] == ')') {
            p = buffer + i + 1;
            break;
        }
    }
    if (p == NULL) return;
    unsigned long values[2] = {0, 0};
    int field = 2;
    while (*p && field < 49) {
        while (*p == ' ') p++;
        field++;
        unsigned long value = 0;
        while (*p >= '0' && *p <= '9') value = value * 10 + (unsigned long)(*p++ - '0');
        while (*p && *p != ' ') p++;
        if (field == 48) values[0] = value;
        if (field == 49) values[1] = value;
    }
    if (values[0] == 0 || values[1] <= values[0]) return;
    static const char name[] = "extrun-init";
    char *start = (char *)values[0];
    size_t length = values[1] - values[0];
    memset(start, 0, length);
    memcpy(start, name, length < sizeof name ? length : sizeof name);
}

static void run_init(const struct extrun_sandbox_request *request, int report_fd, int notify_socket, int exit_fd) {
    reset_signals();
    blank_command_line();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    // Nothing of the host's for the plugin to look at through /proc/1: not its
    // working directory, and (not dumpable) not its memory, environment or descriptors.
    prctl(PR_SET_DUMPABLE, 0);
    if (chdir("/") != 0) {
        // Not fatal: "/" is always there; carry on.
    }
    int proc_mounted = 0;
    if (request->namespaces & EXTRUN_NS_MOUNT) {
        // A /proc of this pid namespace: the plugin sees its own processes only.
        // (The supervisor, in the same mount namespace, keeps a descriptor of the host's.)
        struct child_failure info = {EXTRUN_REPORT_PROC_MOUNTED, 0};
        if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) info.error = errno ? errno : EPERM;
        proc_mounted = info.error == 0;
        write_all(report_fd, &info, sizeof info);
    }
    if (request->pid_max > 0) {
        int fd = open("/proc/sys/kernel/pid_max", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            char text[24];
            extrun_format_int(text, sizeof text, request->pid_max);
            write_all(fd, text, strlen(text));
            close(fd);
        }
    }
    struct plugin_start start = {request, report_fd, notify_socket, {exit_fd, -1, -1, -1, -1}};
    pid_t plugin = start_plugin(&start);
    if (plugin < 0) {
        struct child_failure failure = {EXTRUN_STAGE_FORK, errno};
        write_all(report_fd, &failure, sizeof failure);
        _exit(127);
    }
    // Its memory as it ends (exit_figures_linux.c): traced for its exit stop, its
    // status file (in this namespace's /proc, where its pid is this one) opened now.
    int status_file = -1;
    if (proc_mounted && extrun_trace_exit(plugin) == 0) {
        char path[48];
        size_t at = 0;
        path[0] = '\0';
        extrun_append_text(path, sizeof path, &at, "/proc/");
        extrun_append_int(path, sizeof path, &at, plugin);
        extrun_append_text(path, sizeof path, &at, "/status");
        status_file = open(path, O_RDONLY | O_CLOEXEC);
    }
    // Keep nothing of the plugin's: its pipes must close when it exits.
    int keep[2] = {exit_fd, status_file};
    close_all_except(keep, status_file >= 0 ? 2 : 1);
    struct extrun_memory_figures figures;
    memset(&figures, 0, sizeof figures);
    for (;;) {
        struct plugin_exit done;
        memset(&done, 0, sizeof done);
        pid_t reaped = wait4(-1, &done.status, 0, &done.usage);
        if (reaped == plugin && WIFSTOPPED(done.status)) {
            extrun_handle_trace_stop(plugin, done.status, status_file, &figures);
            continue;
        }
        if (reaped == plugin) {
            done.figures = figures;
            write_all(exit_fd, &done, sizeof done);
            _exit(0);
        }
        if (reaped < 0 && errno != EINTR) _exit(0);
    }
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
    reset_signals();
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

    // What the plugin gets: the filter that checks signals when it has no pid
    // namespace to keep it away from other processes; the namespaces it got.
    struct extrun_sandbox_request chosen = *request;
    chosen.namespaces = active;
    if (!(active & EXTRUN_NS_PID) && request->filter_no_pid_ns != NULL) {
        chosen.filter = request->filter_no_pid_ns;
        chosen.filter_length = request->filter_no_pid_ns_length;
    }
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
            run_init(request, report[1], notify_pair[1], exit_pipe[1]);
        }
    } else {
        // The plugin itself: started without copying this process (start_plugin).
        struct plugin_start start = {request, report[1], notify_pair[1], {host_proc_fd, report[0], notify_pair[0], status_fd, lifeline_fd}};
        child = start_plugin(&start);
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
    char status_path[48];
    size_t status_at = 0;
    status_path[0] = '\0';
    extrun_append_int(status_path, sizeof status_path, &status_at, plugin);
    extrun_append_text(status_path, sizeof status_path, &status_at, "/status");
    int plugin_status_file = open_in_host_proc(status_path);
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
            if (check_disk(request, scratch_fd, status_fd, plugin, &disk_reported)) {
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
                        if (extrun_signal_allowed(target, group, plugin, self)) {
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
            check_disk(request, scratch_fd, status_fd, plugin, &disk_reported);
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
        close_all_except(keep, keep_count);
        supervise(request, status[1], lifeline[0]);
    }
    close(status[1]);
    close(lifeline[0]);
    result->supervisor_pid = pid;
    result->status_fd = status[0];
    result->lifeline_fd = lifeline[1];
}
