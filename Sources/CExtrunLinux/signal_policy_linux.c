#define _GNU_SOURCE
#include "CExtrunSandbox.h"
#include "sandbox_support_linux.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

// Which signals a plugin without a pid namespace may send: the supervisor gets
// each signal-sending call from the seccomp filter and lets it go on only when
// it aims at the run's own processes (docs/sandbox.md, "Privileges").

/// The parent of process (or thread) `pid`, from /proc/PID/stat; -1 if it is gone.
static pid_t parent_of(pid_t pid) {
    char path[48];
    size_t at = 0;
    extrun_append_text(path, sizeof path, &at, "/proc/");
    extrun_append_int(path, sizeof path, &at, pid);
    extrun_append_text(path, sizeof path, &at, "/stat");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buffer[1024];
    ssize_t n = read(fd, buffer, sizeof buffer - 1);
    close(fd);
    if (n <= 0) return -1;
    buffer[n] = '\0';
    // "pid (comm) S ppid ...": comm may hold anything, so from the last ')'.
    ssize_t close_paren = -1;
    for (ssize_t i = 0; i < n; i++) {
        if (buffer[i] == ')') close_paren = i;
    }
    if (close_paren < 0 || close_paren + 4 >= n) return -1;
    long parent = 0;
    for (ssize_t i = close_paren + 4; i < n && buffer[i] >= '0' && buffer[i] <= '9'; i++) parent = parent * 10 + (buffer[i] - '0');
    return (pid_t)parent;
}

/// The pid a pidfd of process `owner` refers to, from /proc/OWNER/fdinfo/FD; -1 if none.
static pid_t pid_of_pidfd(pid_t owner, int fd_number) {
    if (fd_number < 0) return -1;
    char path[80];
    size_t at = 0;
    extrun_append_text(path, sizeof path, &at, "/proc/");
    extrun_append_int(path, sizeof path, &at, owner);
    extrun_append_text(path, sizeof path, &at, "/fdinfo/");
    extrun_append_int(path, sizeof path, &at, fd_number);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    char buffer[2048];
    ssize_t n = read(fd, buffer, sizeof buffer - 1);
    close(fd);
    if (n <= 0) return -1;
    buffer[n] = '\0';
    for (ssize_t i = 0; i + 5 < n; i++) {
        if ((i == 0 || buffer[i - 1] == '\n') && memcmp(buffer + i, "Pid:", 4) == 0) {
            ssize_t k = i + 4;
            while (k < n && (buffer[k] == ' ' || buffer[k] == '\t')) k++;
            if (buffer[k] == '-') return -1;
            long pid = 0;
            for (; k < n && buffer[k] >= '0' && buffer[k] <= '9'; k++) pid = pid * 10 + (buffer[k] - '0');
            return pid > 0 ? (pid_t)pid : -1;
        }
    }
    return -1;
}

/// Whether `target` is one of the run's processes: the plugin or a descendant
/// of it (orphans among them are children of this supervisor, a subreaper).
static int belongs_to_run(pid_t target, pid_t plugin, pid_t self) {
    if (target <= 1 || target == self) return 0;
    for (int depth = 0; depth < 4096; depth++) {
        if (target == plugin) return 1;
        pid_t parent = parent_of(target);
        if (parent == self) return 1;
        if (parent <= 1) return 0;
        target = parent;
    }
    return 0;
}

/// For a signal-sending call the filter sent here: the process it aims at
/// (0: its own process group; -1: every process it may signal) and the signal.
void extrun_signal_call_target(const struct seccomp_notif *call, pid_t *target, int *group, int *signal_number) {
    long a0 = (long)(int)call->data.args[0];
    *group = 0;
    switch (call->data.nr) {
    case SYS_kill:
        *signal_number = (int)call->data.args[1];
        if (a0 == 0) {
            // The caller's own process group, which it may have moved into any group of the session.
            *group = 1;
            *target = getpgid((pid_t)call->pid);
            if (*target <= 0) *target = -2;
        } else if (a0 < -1) {
            *group = 1;
            *target = (pid_t)-a0;
        } else {
            *target = (pid_t)a0;
        }
        break;
    case SYS_pidfd_send_signal:
        *signal_number = (int)call->data.args[1];
        *target = pid_of_pidfd((pid_t)call->pid, (int)a0);
        if (*target <= 0) *target = -2;  // not a pidfd of a live process: refuse
        break;
    case SYS_tgkill:
    case SYS_rt_tgsigqueueinfo:
        *signal_number = (int)call->data.args[2];
        *target = (pid_t)a0;
        break;
    default:  // tkill, rt_sigqueueinfo
        *signal_number = (int)call->data.args[1];
        *target = (pid_t)a0;
        break;
    }
}

/// Whether a signal call of the plugin's may go on: only towards the run's own processes.
int extrun_signal_allowed(pid_t target, int group, pid_t plugin, pid_t self) {
    if (target <= 0) return 0;   // -1 (every process of its user), an unknown pidfd or group
    if (group && target == plugin) return 1;  // the group the plugin leads
    return belongs_to_run(target, plugin, self);
}


/// For a call on another process's limits or scheduling the filter sent here (setpriority,
/// ioprio_set, prlimit64, sched_set*, migrate_pages, move_pages): whether it may go on, that
/// is whether it names only the run's own processes. `*target` gets what it named (negative:
/// a process group; -1: a user).
int extrun_process_call_allowed(const struct seccomp_notif *call, pid_t plugin, pid_t self, pid_t *target) {
    int nr = call->data.nr;
    if (nr == SYS_setpriority || nr == SYS_ioprio_set) {
        // which: setpriority's PRIO_PROCESS 0, PRIO_PGRP 1, PRIO_USER 2; ioprio_set's one more.
        int which = (int)call->data.args[0] - (nr == SYS_ioprio_set ? 1 : 0);
        pid_t who = (pid_t)(int)call->data.args[1];
        if (which == 0) {
            *target = who;
            return who == 0 || belongs_to_run(who, plugin, self);
        }
        if (which == 1) {
            // 0: the caller's own group, in the plugin's own session (it called setsid),
            // which only the run's processes can be in.
            *target = who == 0 ? -getpgid((pid_t)call->pid) : -who;
            return who == 0 || extrun_signal_allowed(who, 1, plugin, self);
        }
        *target = -1;  // every process of a user (or an unknown `which`)
        return 0;
    }
    pid_t pid = (pid_t)(int)call->data.args[0];
    *target = pid;
    return pid == 0 || belongs_to_run(pid, plugin, self);
}
