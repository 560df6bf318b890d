#define _GNU_SOURCE
#include "CExtrunLinux.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

int extrun_wexitstatus(int status) { return WEXITSTATUS(status); }
int extrun_wifsignaled(int status) { return WIFSIGNALED(status); }
int extrun_wtermsig(int status) { return WTERMSIG(status); }

int extrun_pipe_cloexec(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

int extrun_set_pipe_size(int fd, int size) { return fcntl(fd, F_SETPIPE_SZ, size); }

int extrun_set_dumpable(int value) { return prctl(PR_SET_DUMPABLE, value, 0, 0, 0); }
