#ifndef CEXTRUN_LINUX_H
#define CEXTRUN_LINUX_H

#include <sys/types.h>
#include <sys/resource.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <stdint.h>
#include "CExtrunHostMemory.h"

/// One descriptor to install in the child: `source` (in the parent) becomes `target`.
struct extrun_fd_mapping {
    int source;
    int target;
};

/// Where a plugin's set-up failed, reported back to the host with errno.
enum extrun_spawn_stage {
    EXTRUN_STAGE_NONE = 0,
    EXTRUN_STAGE_FORK = 1,
    EXTRUN_STAGE_FDS = 2,
    EXTRUN_STAGE_SETPGID = 3,
    EXTRUN_STAGE_CHDIR = 4,
    EXTRUN_STAGE_RLIMIT = 5,
    EXTRUN_STAGE_NO_NEW_PRIVS = 6,
    EXTRUN_STAGE_SECCOMP = 7,
    EXTRUN_STAGE_EXEC = 8,
    EXTRUN_STAGE_PIPE = 9,
    EXTRUN_STAGE_CREDENTIALS = 10,  // setgroups/setgid/setuid to the plugin's user
    EXTRUN_STAGE_MOUNT = 11,        // hiding $EXTRUN_HOME in the mount namespace
    EXTRUN_STAGE_LANDLOCK = 12,     // restricting the plugin with Landlock
    EXTRUN_STAGE_PID_NAMESPACE = 13,  // no pid namespace, and a filter that needs one (filter_needs_pid_ns)
};

/// pipe2(fds, O_CLOEXEC). 0, or -1 and errno.
int extrun_pipe_cloexec(int fds[2]);

/// fcntl(F_SETPIPE_SZ): best effort; returns the new size or -1.
int extrun_set_pipe_size(int fd, int size);

/// prctl(PR_SET_DUMPABLE, value): whether other processes of the same user may
/// read this one's memory and descriptors through /proc (0: they may not).
int extrun_set_dumpable(int value);

/// WIFEXITED & co. as functions, since Swift cannot call the macros.
int extrun_wexitstatus(int status);
int extrun_wifsignaled(int status);
int extrun_wtermsig(int status);

#include "CExtrunSandbox.h"

#endif
