#ifndef CEXTRUN_SANDBOX_H
#define CEXTRUN_SANDBOX_H

#include <stdint.h>
#include <sys/types.h>
#include "CExtrunLinux.h"

/// Resource limits set in the plugin before exec. 0 leaves a limit as inherited.
struct extrun_limits {
    uint64_t data_bytes;   // RLIMIT_DATA: private writable memory (heap, anonymous maps, stacks)
    uint64_t stack_bytes;  // RLIMIT_STACK: also the default size of each thread's stack
    uint64_t open_files;   // RLIMIT_NOFILE
    uint64_t processes;    // RLIMIT_NPROC (not enforced for root by the kernel)
    uint64_t file_bytes;   // RLIMIT_FSIZE
    uint64_t cpu_seconds;  // RLIMIT_CPU
};

/// Namespace flags the caller asks for (CLONE_NEW*); those that cannot be had are dropped.
enum {
    EXTRUN_NS_PID = 1 << 0,
    EXTRUN_NS_NET = 1 << 1,
    EXTRUN_NS_IPC = 1 << 2,
    /// A mount namespace: `hide_path` is covered by an empty read-only tmpfs
    /// (with `reveal_paths` bound back), and /proc is remounted for a pid namespace.
    EXTRUN_NS_MOUNT = 1 << 3,
    /// A user namespace (only asked for when the host is not root): it lets an
    /// ordinary user have the other namespaces. The plugin keeps the host's uid.
    EXTRUN_NS_USER = 1 << 4,
    /// Reported only: /proc was remounted for the plugin's pid namespace.
    EXTRUN_NS_PROC = 1 << 5,
    /// Reported only: Landlock restricts the plugin.
    EXTRUN_NS_LANDLOCK = 1 << 6,
    /// With EXTRUN_NS_NET, for a root host: join the machine's one empty network namespace
    /// for plugins (/run/extrun/netns, made and pinned on first use) instead of making one
    /// per run. Reported when it was joined.
    EXTRUN_NS_NET_SHARED = 1 << 7,
};

struct extrun_sandbox_request {
    const char *path;          // also the only pointer value execve is allowed with
    char *const *argv;
    char *const *envp;
    const char *cwd;
    const struct extrun_fd_mapping *fds;
    int fd_count;
    struct extrun_limits limits;
    /// The seccomp program (struct sock_filter[]), or NULL for none.
    const void *filter;
    unsigned short filter_length;
    /// Whether the filter's SECCOMP_RET_USER_NOTIF actions have a listener (the supervisor).
    int filter_uses_notify;
    int namespaces;            // EXTRUN_NS_* wanted
    int pid_max;               // pid_max inside a new pid namespace (0: leave)
    /// A descriptor of a cgroup's cgroup.procs to join before exec, or -1.
    int cgroup_procs_fd;
    /// The plugin's credentials when the host is root: setgroups(0), setgid, setuid
    /// before seccomp and exec. `drop_privileges` 0 keeps the host's.
    int drop_privileges;
    uid_t plugin_uid;
    gid_t plugin_gid;
    /// With a mount namespace: the directories to hide (`$EXTRUN_HOME`, the
    /// scratch directories' parent; absolute paths without symbolic links, none
    /// inside another), each covered by an empty read-only tmpfs; and the
    /// directories under them the plugin still needs (its own directory, its
    /// scratch directory): each `reveal_sources[i]` (opened before the covers)
    /// is bound at `reveal_targets[i]`, a path inside one of `hide_paths`;
    /// read-only unless `reveal_writable[i]` (a plugin installed in the home must
    /// not rewrite its own manifest or executable).
    const char *const *hide_paths;
    int hide_count;
    const char *const *reveal_sources;
    const char *const *reveal_targets;
    const int *reveal_writable;
    int reveal_count;
    /// 1: `filter` leaves the signal-sending calls to the pid namespace (it does not send
    /// them to the supervisor), so it must not be used without one: when the plugin gets no
    /// pid namespace the supervisor reports EXTRUN_STAGE_PID_NAMESPACE instead of starting
    /// it, and the host starts again with the filter that checks them.
    int filter_needs_pid_ns;
    /// With a mount namespace: a /dev of the run's own (null, full, random, urandom, tty;
    /// no terminals, no /dev/zero), and, when `memory_files_bytes` > 0, one tmpfs of that
    /// size and `memory_files_inodes` files for /dev/shm, /tmp and /var/tmp, gone with the run.
    int private_dev;
    uint64_t memory_files_bytes;
    uint64_t memory_files_inodes;
    /// The scratch directory (opened by the supervisor before anything else) and its
    /// quota: past `disk_bytes` or `disk_files` (0: none) the plugin is killed and
    /// EXTRUN_EVENT_DISK_LIMIT reported; counted every `disk_check_ms` and after the end.
    const char *scratch_path;
    uint64_t disk_bytes;
    uint64_t disk_files;
    int disk_check_ms;
    /// Landlock (where the kernel has it): the paths the plugin may use, each with its
    /// EXTRUN_LANDLOCK_* kind; everything else is refused (EACCES). 0 paths: no Landlock.
    const char *const *landlock_paths;
    const int *landlock_kinds;
    int landlock_count;
};

enum {
    EXTRUN_LANDLOCK_READ_EXECUTE = 0,       // read and execute (system folders, the plugin's)
    EXTRUN_LANDLOCK_READ_WRITE = 1,         // everything (the scratch directory)
    EXTRUN_LANDLOCK_PRIVATE_TEMPORARY = 2,  // everything, when it is the run's own memory filesystem
    EXTRUN_LANDLOCK_DEVICES = 3,            // read, write, ioctl (the run's /dev)
};

/// The Landlock ABI this kernel offers (0: none).
int extrun_landlock_abi(void);

/// In the plugin's process, after no_new_privs: restricts it to the request's paths.
/// 1 restricted, 0 Landlock unavailable, -1 and errno on failure.
int extrun_landlock_restrict(const struct extrun_sandbox_request *request, int private_temporary);

/// Events the supervisor writes to the status pipe, fixed size.
enum extrun_event_type {
    EXTRUN_EVENT_STARTED = 1,    // pid: the plugin's pid in the host's namespace; namespaces: those active
    EXTRUN_EVENT_VIOLATION = 2,  // syscall_nr, arch, arg0, arg1 (its 4th argument): a forbidden system call; the plugin is being killed
    EXTRUN_EVENT_EXITED = 3,     // status (wait status), rusage fields; every descendant is gone
    EXTRUN_EVENT_SETUP_FAILED = 4, // stage, error: the plugin could not be started
    EXTRUN_EVENT_DENIED = 5,     // syscall_nr, arg0 (target), arg1 (signal): a call refused with EPERM; the plugin goes on
    /// arg0 (bytes asked for), arg1 (its private memory then), pid: a mapping that the
    /// memory cap (RLIMIT_DATA) refuses; the plugin goes on (and gets ENOMEM).
    EXTRUN_EVENT_ALLOCATION_REFUSED = 6,
    /// arg0 (bytes), arg1 (files), status (1: nested too deep): the scratch directory
    /// went past its quota (sent while it runs, the plugin then killed, or after its end).
    EXTRUN_EVENT_DISK_LIMIT = 7,
    /// arg0 (bytes), arg1 (processes): the run's processes together held more private
    /// memory than the cap allows (Pss_Anon summed; counted while there is more than one
    /// process, every disk_check_ms or EXTRUN_RUN_MEMORY_CHECK_MS); the plugin is being killed.
    /// status 1: arg0 is instead the page tables of the run's processes, past
    /// EXTRUN_PAGE_TABLE_SHARE of the cap (counted at the same pace, one process or many).
    EXTRUN_EVENT_RUN_MEMORY_LIMIT = 8,
};

/// The run's page tables may take this fraction (1/N) of the private memory the cap
/// allows: a read-only private mapping is not counted by RLIMIT_DATA, but touching one
/// page per 2 MiB of it costs the kernel 4 KiB of page table (64 GiB gave 128 MiB).
/// Page tables are ~1/512 of the memory they map, so 1/8 leaves a legitimate plugin 64x.
#define EXTRUN_PAGE_TABLE_SHARE 8

/// How often the run's memory over all its processes is counted without a disk quota.
#define EXTRUN_RUN_MEMORY_CHECK_MS 100
/// At most this many of the run's processes are counted (a pid namespace's pid_max is 301).
#define EXTRUN_RUN_PROCESSES_COUNTED 1024

/// Private anonymous mappings at least this large are checked against the cap by the supervisor.
#define EXTRUN_LARGE_MAPPING_BYTES (4UL << 20)

struct seccomp_data;
/// Whether a notified call is such a mapping (not a violation).
int extrun_is_large_private_mapping(const struct seccomp_data *data);

/// A process's memory from /proc/PID/status, in kB (0: unknown).
struct extrun_memory_figures {
    uint64_t vm_peak_kb;    // largest address space it had (libraries and reservations included)
    uint64_t vm_size_kb;    // its address space now
    uint64_t vm_data_kb;    // private writable memory now (what RLIMIT_DATA counts)
    uint64_t vm_hwm_kb;     // largest resident set it had (the kernel's high-water mark)
    uint64_t rss_anon_kb;   // resident anonymous memory now
    uint64_t rss_shmem_kb;  // resident shared memory now
    uint64_t vm_pte_kb;     // its page tables now (kernel memory no rlimit counts)
};

struct extrun_event {
    int32_t type;
    int32_t pid;
    int32_t status;
    int32_t syscall_nr;
    int32_t error;
    int32_t stage;
    int32_t namespaces;
    uint32_t arch;
    uint64_t arg0;
    uint64_t arg1;
    int64_t utime_us;
    int64_t stime_us;
    int64_t maxrss_kb;
    /// EXITED: the plugin's memory as it ended, read in its exit stop before its memory
    /// was released (or, when the supervisor killed it, just before the kill); zeros when unknown.
    struct extrun_memory_figures final_memory;
};

struct extrun_sandbox_result {
    pid_t supervisor_pid;
    int status_fd;    // read end: struct extrun_event records
    int lifeline_fd;  // write end: closing it (or the host dying) kills the plugin; writing 'K' kills it
    int error;
    enum extrun_spawn_stage stage;
};

/// Starts a supervisor process that starts the plugin in its sandbox, forwards
/// its fate as events, and removes every process the plugin left behind.
void extrun_sandbox_spawn(const struct extrun_sandbox_request *request, struct extrun_sandbox_result *result);

/// Builds the default seccomp program into a malloc'd buffer (free it).
/// `exec_path` is the only filename pointer execve may be called with.
/// `notify`: forbidden calls go to a listener (SECCOMP_RET_USER_NOTIF) instead of killing.
/// `check_signals` (with `notify`): the signal-sending calls (kill, tkill, tgkill,
/// rt_sigqueueinfo, rt_tgsigqueueinfo, pidfd_send_signal) go to the listener too,
/// which allows or refuses each one (for a plugin without a pid namespace).
/// Returns the number of instructions, or -errno.
int extrun_seccomp_build(const char *exec_path, int notify, int check_signals, void **program_out);

/// Whether `nr` is one of the signal-sending calls `check_signals` routes to the supervisor.
int extrun_syscall_sends_signal(int nr);

/// RLIMIT_SIGPENDING of every plugin.
#define EXTRUN_PENDING_SIGNALS 256

/// Whether `nr` is one of the calls on another process's limits or scheduling (prlimit64,
/// setpriority, ioprio_set, sched_set*, migrate_pages, move_pages) `check_signals` routes
/// to the supervisor when they name a process other than the caller.
int extrun_syscall_controls_process(int nr);

/// The name of a syscall number on this architecture (static storage or NULL).
const char *extrun_syscall_name(int nr);

/// The ABI a call came through (seccomp_data's arch and nr): x86_64's own, i386 (`int 0x80`), x32.
enum { EXTRUN_ABI_NATIVE = 0, EXTRUN_ABI_I386 = 1, EXTRUN_ABI_X32 = 2, EXTRUN_ABI_OTHER = 3 };
int extrun_syscall_abi(uint32_t arch, int nr);

/// The name of call `nr` of `abi` (static storage or NULL).
const char *extrun_syscall_name_abi(int abi, int nr);

/// Whether this kernel supports SECCOMP_FILTER_FLAG_NEW_LISTENER.
int extrun_seccomp_notify_supported(void);

/// What a folder holds: every entry below it (folders included) and their blocks.
struct extrun_disk_usage {
    uint64_t bytes;
    uint64_t files;
    int too_deep;  // folders nested deeper than 256 (counted as over the quota)
};

/// Counts what `folder_fd` holds, by descriptor (no links followed); stops once past
/// `max_bytes` or `max_files` (0: no limit). 0, or -1 and errno. Async-signal-safe.
int extrun_disk_usage(int folder_fd, uint64_t max_bytes, uint64_t max_files, struct extrun_disk_usage *usage);

/// Removes `path` and all it holds by descriptor (openat/unlinkat: no path-length limit,
/// links removed, never followed; folders the plugin closed are opened again first),
/// then checks it is gone. 0, or -1 with "what: why" in `failure`.
int extrun_remove_tree(const char *path, char *failure, size_t failure_size);

#endif
