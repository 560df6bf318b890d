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

int extrun_pidfd_open(pid_t pid) {
    return (int)syscall(SYS_pidfd_open, pid, 0);
}

int extrun_wifexited(int status) { return WIFEXITED(status); }
int extrun_wexitstatus(int status) { return WEXITSTATUS(status); }
int extrun_wifsignaled(int status) { return WIFSIGNALED(status); }
int extrun_wtermsig(int status) { return WTERMSIG(status); }

int extrun_pipe_cloexec(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

int extrun_set_pipe_size(int fd, int size) { return fcntl(fd, F_SETPIPE_SZ, size); }
