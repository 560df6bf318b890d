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

void extrun_send_event(int fd, const struct extrun_event *event) { extrun_write_all(fd, event, sizeof *event); }

/// Tells the host the plugin could not be started (at `stage`, with `error`), and ends the supervisor.
static void report_setup_failure(int status_fd, int stage, int error) __attribute__((noreturn));
static void report_setup_failure(int status_fd, int stage, int error) {
    struct extrun_event event;
    memset(&event, 0, sizeof event);
    event.type = EXTRUN_EVENT_SETUP_FAILED;
    event.stage = stage;
    event.error = error;
    extrun_send_event(status_fd, &event);
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

/// Tells the host that a call naming another process was refused (EPERM): `target` the
/// pid it named (negative: a process group), `signal_number` the signal, or -1.
static void report_denied(int status_fd, const struct seccomp_notif *request, int64_t target, int64_t signal_number) {
    struct extrun_event event;
    memset(&event, 0, sizeof event);
    event.type = EXTRUN_EVENT_DENIED;
    event.pid = (int32_t)request->pid;
    event.syscall_nr = request->data.nr;
    event.arch = request->data.arch;
    event.arg0 = (uint64_t)target;
    event.arg1 = (uint64_t)signal_number;
    extrun_send_event(status_fd, &event);
}

static uint64_t monotonic_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
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
        extrun_host_proc_fd = open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (extrun_host_proc_fd < 0) report_setup_failure(status_fd, EXTRUN_STAGE_MOUNT, errno);
    }
    int exit_pipe[2] = {-1, -1};
    if (in_pid_ns && pipe2(exit_pipe, O_CLOEXEC) != 0) report_setup_failure(status_fd, EXTRUN_STAGE_PIPE, errno);
    pid_t child;
    if (in_pid_ns) {
        child = fork();
        if (child == 0) {
            // Never the host's /proc for the plugin's side.
            if (extrun_host_proc_fd >= 0) close(extrun_host_proc_fd);
            extrun_host_proc_fd = -1;
            close(report[0]);
            if (notify_pair[0] >= 0) close(notify_pair[0]);
            close(status_fd);
            close(lifeline_fd);
            close(exit_pipe[0]);
            extrun_run_init(request, report[1], notify_pair[1], exit_pipe[1]);
        }
    } else {
        // The plugin itself: started without copying this process (start_plugin).
        struct plugin_start start = {request, report[1], notify_pair[1], {extrun_host_proc_fd, report[0], notify_pair[0], status_fd, lifeline_fd}};
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
        extrun_kill_and_reap_descendants(self, 0);
        report_setup_failure(status_fd, failure.stage, failure.error);
    }
    // The plugin has exec'd: in a namespace, it is init's one child by now.
    pid_t plugin = in_pid_ns ? extrun_only_child_of(child) : child;
    if (plugin <= 0) {
        kill(child, SIGKILL);
        extrun_kill_and_reap_descendants(self, 0);
        report_setup_failure(status_fd, EXTRUN_STAGE_FORK, ESRCH);
    }

    if (request->landlock_count > 0 && extrun_landlock_abi() > 0) active |= EXTRUN_NS_LANDLOCK;
    memset(&event, 0, sizeof event);
    event.type = EXTRUN_EVENT_STARTED;
    event.pid = plugin;
    event.namespaces = active;
    extrun_send_event(status_fd, &event);

    int plugin_fd = (int)syscall(SYS_pidfd_open, child, 0);
    // The plugin's memory figures: from its exit stop, or read just before a kill.
    int plugin_status_file = extrun_open_host_status(plugin);
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
            if (extrun_check_disk(request, scratch_fd, status_fd, plugin, &disk_reported, self, 0) ||
                extrun_check_run_memory(self, in_pid_ns ? child : 0, request->limits.data_bytes, status_fd, plugin, plugin_status_file)) {
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
                if (!(fds[i].revents & POLLIN)) {
                    // POLLHUP (with POLLERR): no process uses the filter any more (the plugin
                    // and all it started have exited), so no call can come: stop listening,
                    // or every poll would return at once until pid 1 has gone.
                    close(listener);
                    listener = -1;
                    continue;
                }
                struct seccomp_notif request_buffer;
                memset(&request_buffer, 0, sizeof request_buffer);
                if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &request_buffer) == 0) {
                    struct seccomp_notif_resp response;
                    memset(&response, 0, sizeof response);
                    response.id = request_buffer.id;
                    response.error = -EPERM;
                    if (extrun_is_large_private_mapping(&request_buffer.data)) {
                        // Will the cap refuse it? The evidence for a death that may follow.
                        uint64_t in_use = extrun_private_memory_of(request_buffer.pid);
                        uint64_t limit = request->limits.data_bytes;
                        if (limit > 0 && !killed && in_use + request_buffer.data.args[1] > limit) {
                            memset(&event, 0, sizeof event);
                            event.type = EXTRUN_EVENT_ALLOCATION_REFUSED;
                            event.pid = (int32_t)request_buffer.pid;
                            event.arg0 = request_buffer.data.args[1];
                            event.arg1 = in_use;
                            extrun_send_event(status_fd, &event);
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
                            report_denied(status_fd, &request_buffer, (int64_t)(group ? -target : target), (int64_t)signal_number);
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
                            report_denied(status_fd, &request_buffer, (int64_t)target, -1);  // -1: not a signal
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
                        extrun_send_event(status_fd, &event);
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
            extrun_kill_and_reap_descendants(self, plugin);
            // What it left, counted once more now that nothing can write.
            extrun_check_disk(request, scratch_fd, status_fd, plugin, &disk_reported, self, 1);
            memset(&event, 0, sizeof event);
            event.type = EXTRUN_EVENT_EXITED;
            event.pid = plugin;
            event.status = status;
            event.utime_us = (int64_t)usage.ru_utime.tv_sec * 1000000 + usage.ru_utime.tv_usec;
            event.stime_us = (int64_t)usage.ru_stime.tv_sec * 1000000 + usage.ru_stime.tv_usec;
            event.maxrss_kb = usage.ru_maxrss;
            event.final_memory = final_figures;
            extrun_send_event(status_fd, &event);
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
    extrun_kill_and_reap_descendants(self, plugin);
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
