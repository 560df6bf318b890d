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

// Pid 1 of the plugin's pid namespace (docs/sandbox.md, "Nothing left behind").
// Everything below runs in processes forked from a multi-threaded host: only
// async-signal-safe calls (plain system calls), no malloc, no stdio, no locks.

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

/// Pid 1 of the plugin's pid namespace. The plugin must not be pid 1 itself:
/// the kernel drops signals that pid 1 sends itself with their default action
/// (`abort()`, `raise(SIGTERM)`), which would turn a crash into a hang. This
/// init forks the plugin, reaps whatever is re-parented to it, and when the
/// plugin ends reports its status and rusage and exits, which ends every
/// other process in the namespace. Never returns.
void extrun_run_init(const struct extrun_sandbox_request *request, int report_fd, int notify_socket, int exit_fd) {
    extrun_reset_signals();
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
        extrun_write_all(report_fd, &info, sizeof info);
    }
    if (request->pid_max > 0) {
        int fd = open("/proc/sys/kernel/pid_max", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            char text[24];
            extrun_format_int(text, sizeof text, request->pid_max);
            extrun_write_all(fd, text, strlen(text));
            close(fd);
        }
    }
    struct plugin_start start = {request, report_fd, notify_socket, {exit_fd, -1, -1, -1, -1}};
    pid_t plugin = extrun_start_plugin(&start);
    if (plugin < 0) {
        struct child_failure failure = {EXTRUN_STAGE_FORK, errno};
        extrun_write_all(report_fd, &failure, sizeof failure);
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
    extrun_close_all_except(keep, status_file >= 0 ? 2 : 1);
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
            extrun_write_all(exit_fd, &done, sizeof done);
            _exit(0);
        }
        if (reaped < 0 && errno != EINTR) _exit(0);
    }
}
