#ifndef EXTRUN_SANDBOX_SUPPORT_LINUX_H
#define EXTRUN_SANDBOX_SUPPORT_LINUX_H

// Shared by the supervisor's C files (not part of the module's interface).
// Everything here runs in processes forked from a multi-threaded host: only
// async-signal-safe calls (plain system calls), no malloc, no stdio, no locks.

#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <linux/seccomp.h>
#include "CExtrunSandbox.h"

/// `value` in decimal into `buffer` (NUL-terminated).
void extrun_format_int(char *buffer, size_t size, long value);

/// Appends `text` at `buffer[*at]`, within `size` (NUL-terminated; what does not fit is cut).
void extrun_append_text(char *buffer, size_t size, size_t *at, const char *text);

/// Appends `value` in decimal, as `extrun_append_text`.
void extrun_append_int(char *buffer, size_t size, size_t *at, long value);

// exit_figures_linux.c

/// One "Name:   1234 kB" field of a /proc file's text (status, smaps_rollup), in kB (0 when missing).
uint64_t extrun_status_field(const char *text, const char *name);

// sandbox_linux.c

/// Writes one event to the host's status pipe.
void extrun_send_event(int fd, const struct extrun_event *event);

// run_counts_linux.c: what the supervisor counts and ends of the run

/// The host's /proc (O_PATH), opened by the supervisor before init mounts the pid
/// namespace's /proc over it; -1: /proc itself.
extern int extrun_host_proc_fd;

/// Kills every child of the calling process (orphans reparented to it as a subreaper
/// included; `plugin_group` > 0: that process group first) and reaps them, until none is left.
void extrun_kill_and_reap_descendants(pid_t self, pid_t plugin_group);

/// /proc/PID/status of process `pid` (host pid), opened in the host's /proc, or -1.
int extrun_open_host_status(pid_t pid);

/// VmData of process `pid` (host pid) in bytes, or 0.
uint64_t extrun_private_memory_of(pid_t pid);

/// The run's processes' private memory together (when more than one) and their page
/// tables, against `limit`: reports EXTRUN_EVENT_RUN_MEMORY_LIMIT and returns 1 past it.
int extrun_check_run_memory(pid_t self, pid_t init, uint64_t limit, int status_fd, pid_t plugin, int plugin_status_file);

/// The scratch directory's quota (with the files held open unlinked from it, unless
/// `final`): reports EXTRUN_EVENT_DISK_LIMIT and returns 1 past it (see run_counts_linux.c).
int extrun_check_disk(const struct extrun_sandbox_request *request, int scratch_fd, int status_fd, pid_t plugin, int *reported,
                      pid_t self, int final);

/// The plugin's pid in the supervisor's namespace: the one child of `init`, or -1.
pid_t extrun_only_child_of(pid_t init);

// namespaces_linux.c

/// Creates the namespaces asked for (EXTRUN_NS_*) that the kernel allows; returns
/// those it got, or -1 with errno when a user namespace was made but could not be set up.
int extrun_enter_namespaces(int wanted);

/// In the new mount namespace: nothing propagates back to the host's; each of
/// `hide` is covered by an empty, read-only tmpfs, with each of `reveal` bound
/// at `targets[i]` (a path inside one of them). 0, or -1 and errno.
/// With `private_dev`: first a /dev of the run's own, and one memory filesystem of
/// `memory_bytes` and `memory_inodes` (0: none) at /dev/shm, /tmp and /var/tmp.
int extrun_hide_directories(const char *const *hide, int hide_count, const char *const *reveal, const char *const *targets,
                            const int *writable, int reveal_count, uint64_t memory_bytes, uint64_t memory_inodes, int private_dev);

// signal_policy_linux.c

/// For a signal-sending call the filter sent to the supervisor: the process it
/// aims at (`group`: a process group, by its id) and the signal.
void extrun_signal_call_target(const struct seccomp_notif *call, pid_t *target, int *group, int *signal_number);

/// Whether a signal of the plugin's may go on: only towards the run's own processes
/// (the plugin, its descendants, groups they lead).
int extrun_signal_allowed(pid_t target, int group, pid_t plugin, pid_t self);

/// Whether a call on another process's limits or scheduling may go on (its target in `*target`).
int extrun_process_call_allowed(const struct seccomp_notif *call, pid_t plugin, pid_t self, pid_t *target);

// sandbox_linux.c, plugin_start_linux.c, init_linux.c: the supervisor, the plugin's
// process and the pid namespace's init.

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

/// What the plugin's process closes before it becomes the plugin, then its setup.
struct plugin_start {
    const struct extrun_sandbox_request *request;
    int report_fd;
    int notify_socket;
    int close_fds[5];
};

/// What the namespace's init tells the supervisor when the plugin ends.
struct plugin_exit {
    int status;
    struct rusage usage;
    struct extrun_memory_figures figures;  // read in its exit stop (zeros: unknown)
};

/// Writes all of `data` (retrying after EINTR); gives up on any other error.
void extrun_write_all(int fd, const void *data, size_t length);

/// Every signal back to its default action, none blocked.
void extrun_reset_signals(void);

/// Closes every descriptor from 3 up, except those in `keep` (sorted here in place).
void extrun_close_all_except(int *keep, int count);

/// Starts the plugin's process (plugin_start_linux.c): returns once it has exec'd or failed.
pid_t extrun_start_plugin(struct plugin_start *start);

/// Pid 1 of the plugin's pid namespace (init_linux.c). Never returns.
void extrun_run_init(const struct extrun_sandbox_request *request, int report_fd, int notify_socket, int exit_fd)
    __attribute__((noreturn));

// exit_figures_linux.c

/// Reads VmPeak, VmSize, VmData, VmHWM, RssAnon and RssShmem from an open
/// /proc/PID/status. 0, or -1 (figures zeroed) when the process has no memory any more.
int extrun_read_memory_figures(int status_fd, struct extrun_memory_figures *figures);

/// The plugin's parent traces it so that it stops once on its way out (PTRACE_O_TRACEEXIT).
int extrun_trace_exit(pid_t pid);

/// A stop of the traced plugin (`status` from wait): at its exit stop the figures are
/// read from `status_file_fd` and 1 returned; any other stop is passed through. Either
/// way the plugin goes on.
int extrun_handle_trace_stop(pid_t pid, int status, int status_file_fd, struct extrun_memory_figures *figures);

#endif
