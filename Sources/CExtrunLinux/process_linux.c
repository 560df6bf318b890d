#define _GNU_SOURCE
#include "CExtrunLinux.h"
#include "sandbox_support_linux.h"

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

void extrun_format_int(char *buffer, size_t size, long value) {
    char digits[24];
    int n = 0;
    do {
        digits[n++] = (char)('0' + value % 10);
        value /= 10;
    } while (value > 0 && n < 23);
    size_t i = 0;
    while (n > 0 && i < size - 1) buffer[i++] = digits[--n];
    buffer[i] = '\0';
}

void extrun_append_text(char *buffer, size_t size, size_t *at, const char *text) {
    if (size == 0) return;
    for (size_t i = 0; text[i] != '\0' && *at < size - 1; i++) buffer[(*at)++] = text[i];
    buffer[*at] = '\0';
}

void extrun_append_int(char *buffer, size_t size, size_t *at, long value) {
    char number[24];
    extrun_format_int(number, sizeof number, value);
    extrun_append_text(buffer, size, at, number);
}
