#define _GNU_SOURCE
#include "CExtrunLinux.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif

struct child_failure {
    int stage;
    int error;
};

/// Runs in the forked child: async-signal-safe calls only.
static void report_and_exit(int pipe_fd, int stage) __attribute__((noreturn));
static void report_and_exit(int pipe_fd, int stage) {
    struct child_failure failure = {stage, errno};
    ssize_t ignored = write(pipe_fd, &failure, sizeof failure);
    (void)ignored;
    _exit(127);
}

static void close_from(int lowest) {
    if (syscall(SYS_close_range, (unsigned)lowest, ~0U, 0) == 0) return;
    for (int fd = lowest; fd < 4096; fd++) close(fd);
}

static void child(const struct extrun_spawn_request *request, int report_fd) {
    // Signals: default dispositions (ignored ones survive exec otherwise), nothing blocked.
    for (int sig = 1; sig < NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        signal(sig, SIG_DFL);
    }
    sigset_t empty;
    sigemptyset(&empty);
    sigprocmask(SIG_SETMASK, &empty, NULL);

    if (setpgid(0, 0) != 0) report_and_exit(report_fd, EXTRUN_STAGE_SETPGID);

    // Move the report pipe and every source out of the way of the targets, then install.
    int high = 64 + request->fd_count;
    int moved_report = fcntl(report_fd, F_DUPFD_CLOEXEC, high + request->fd_count + 1);
    if (moved_report < 0) report_and_exit(report_fd, EXTRUN_STAGE_FDS);
    report_fd = moved_report;
    for (int i = 0; i < request->fd_count; i++) {
        if (dup3(request->fds[i].source, high + i, O_CLOEXEC) < 0) report_and_exit(report_fd, EXTRUN_STAGE_FDS);
    }
    for (int i = 0; i < request->fd_count; i++) {
        if (dup2(high + i, request->fds[i].target) < 0) report_and_exit(report_fd, EXTRUN_STAGE_FDS);
    }
    // Close everything else except the report pipe (close-on-exec).
    int max_target = 2;
    for (int i = 0; i < request->fd_count; i++) {
        if (request->fds[i].target > max_target) max_target = request->fds[i].target;
    }
    for (int fd = 0; fd <= max_target; fd++) {
        int wanted = 0;
        for (int i = 0; i < request->fd_count; i++) wanted |= request->fds[i].target == fd;
        if (!wanted) close(fd);
    }
    for (int fd = max_target + 1; fd < report_fd; fd++) close(fd);
    close_from(report_fd + 1);

    if (request->cwd != NULL && chdir(request->cwd) != 0) report_and_exit(report_fd, EXTRUN_STAGE_CHDIR);

    execve(request->path, request->argv, request->envp);
    report_and_exit(report_fd, EXTRUN_STAGE_EXEC);
}

void extrun_spawn(const struct extrun_spawn_request *request, struct extrun_spawn_result *result) {
    result->pid = -1;
    result->error = 0;
    result->stage = EXTRUN_STAGE_NONE;

    int report[2];
    if (pipe2(report, O_CLOEXEC) != 0) {
        result->error = errno;
        result->stage = EXTRUN_STAGE_PIPE;
        return;
    }
    pid_t pid = fork();
    if (pid < 0) {
        result->error = errno;
        result->stage = EXTRUN_STAGE_FORK;
        close(report[0]);
        close(report[1]);
        return;
    }
    if (pid == 0) {
        close(report[0]);
        child(request, report[1]);
        _exit(127);
    }
    close(report[1]);
    // Set the group from the parent too, so that it exists before anyone signals it.
    setpgid(pid, pid);

    struct child_failure failure = {0, 0};
    ssize_t got;
    do {
        got = read(report[0], &failure, sizeof failure);
    } while (got < 0 && errno == EINTR);
    close(report[0]);
    if (got == (ssize_t)sizeof failure) {
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
        result->error = failure.error;
        result->stage = (enum extrun_spawn_stage)failure.stage;
        return;
    }
    result->pid = pid;
}

int extrun_pidfd_open(pid_t pid) {
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

int extrun_wifexited(int status) { return WIFEXITED(status); }
int extrun_wexitstatus(int status) { return WEXITSTATUS(status); }
int extrun_wifsignaled(int status) { return WIFSIGNALED(status); }
int extrun_wtermsig(int status) { return WTERMSIG(status); }

int extrun_pipe_cloexec(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

int extrun_set_pipe_size(int fd, int size) { return fcntl(fd, F_SETPIPE_SZ, size); }
