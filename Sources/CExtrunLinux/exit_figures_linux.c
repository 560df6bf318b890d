#define _GNU_SOURCE
#include "CExtrunSandbox.h"
#include "sandbox_support_linux.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

// The plugin's memory as it ends, exact rather than sampled. The kernel keeps no
// high-water mark of private memory, and the figures of /proc/PID/status are gone
// once the process has dropped its memory, which it does before it becomes a zombie.
// So its parent (init, or the supervisor without a pid namespace) traces it with
// PTRACE_O_TRACEEXIT only: the plugin stops once on its way out, its memory still
// there, and the tracer reads VmPeak, VmSize, VmData, VmHWM, RssAnon and RssShmem,
// then lets it go on. Every other stop is passed straight through (signals re-injected,
// group stops kept with PTRACE_LISTEN). Async-signal-safe calls only.

#ifndef PTRACE_EVENT_STOP
#define PTRACE_EVENT_STOP 128
#endif

uint64_t extrun_status_field(const char *buffer, const char *name) {
    size_t length = strlen(name);
    for (const char *line = buffer; line != NULL && *line != '\0';) {
        if (strncmp(line, name, length) == 0) {
            const char *p = line + length;
            while (*p == ' ' || *p == '\t') p++;
            uint64_t value = 0;
            for (; *p >= '0' && *p <= '9'; p++) value = value * 10 + (uint64_t)(*p - '0');
            return value;
        }
        line = strchr(line, '\n');
        if (line != NULL) line++;
    }
    return 0;
}

int extrun_read_memory_figures(int status_fd, struct extrun_memory_figures *figures) {
    memset(figures, 0, sizeof *figures);
    if (status_fd < 0) return -1;
    char buffer[4096];
    ssize_t n;
    do {
        n = pread(status_fd, buffer, sizeof buffer - 1, 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return -1;
    buffer[n] = '\0';
    figures->vm_peak_kb = extrun_status_field(buffer, "VmPeak:");
    figures->vm_size_kb = extrun_status_field(buffer, "VmSize:");
    figures->vm_data_kb = extrun_status_field(buffer, "VmData:");
    figures->vm_hwm_kb = extrun_status_field(buffer, "VmHWM:");
    figures->rss_anon_kb = extrun_status_field(buffer, "RssAnon:");
    figures->rss_shmem_kb = extrun_status_field(buffer, "RssShmem:");
    figures->vm_pte_kb = extrun_status_field(buffer, "VmPTE:");
    // A process that has dropped its memory shows none of these.
    return figures->vm_size_kb > 0 ? 0 : -1;
}

int extrun_trace_exit(pid_t pid) {
    // PTRACE_O_EXITKILL: should the tracer die first, the plugin dies with it.
    return ptrace(PTRACE_SEIZE, pid, 0, (void *)(long)(PTRACE_O_TRACEEXIT | PTRACE_O_EXITKILL)) == 0 ? 0 : -1;
}

int extrun_handle_trace_stop(pid_t pid, int status, int status_file_fd, struct extrun_memory_figures *figures) {
    if (!WIFSTOPPED(status)) return 0;
    int event = (status >> 16) & 0xff;
    if (event == PTRACE_EVENT_EXIT) {
        struct extrun_memory_figures read;
        if (extrun_read_memory_figures(status_file_fd, &read) == 0) *figures = read;
        ptrace(PTRACE_CONT, pid, 0, 0);
        return 1;
    }
    if (event == PTRACE_EVENT_STOP) {
        // A group stop (SIGSTOP and the like): stay stopped, as without a tracer.
        ptrace(PTRACE_LISTEN, pid, 0, 0);
        return 0;
    }
    // A signal on its way to the plugin: deliver it.
    ptrace(PTRACE_CONT, pid, 0, (void *)(long)WSTOPSIG(status));
    return 0;
}
