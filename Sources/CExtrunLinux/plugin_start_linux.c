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

// The plugin's process, from its clone to its exec: its descriptors, limits, user,
// scratch directory, no_new_privs, Landlock and seccomp (docs/sandbox.md, "How a plugin
// is started", step 2). The supervisor (sandbox_linux.c) and init (init_linux.c) start it.
// Everything below runs in processes forked from a multi-threaded host: only
// async-signal-safe calls (plain system calls), no malloc, no stdio, no locks.

static void fail_child(int report_fd, int stage) __attribute__((noreturn));
static void fail_child(int report_fd, int stage) {
    struct child_failure failure = {stage, errno};
    extrun_write_all(report_fd, &failure, sizeof failure);
    _exit(127);
}

void extrun_reset_signals(void) {
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
    extrun_reset_signals();
    // Die with the supervisor. Its parent is a single thread, so this is reliable here.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    // Its own session, so no controlling terminal: /dev/tty cannot be opened (ENXIO), and
    // the terminal of whoever started the host can be neither read, written nor
    // taken over (tcsetpgrp). It also leads its own process group, which the supervisor kills.
    if (setsid() < 0) fail_child(report_fd, EXTRUN_STAGE_SETPGID);

    if (request->cgroup_procs_fd >= 0) {
        extrun_write_all(request->cgroup_procs_fd, "0\n", 2);
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
    // Queued signals (sigqueue, timers) are kernel memory counted per user: without a limit
    // a plugin queued 96k and the user's own sigqueue then failed. The count is its user's,
    // so the plugin can add at most this many to it.
    struct rlimit pending = {EXTRUN_PENDING_SIGNALS, EXTRUN_PENDING_SIGNALS};
    if (setrlimit(RLIMIT_SIGPENDING, &pending) != 0) fail_child(report_fd, EXTRUN_STAGE_RLIMIT);

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
pid_t extrun_start_plugin(struct plugin_start *start) {
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

