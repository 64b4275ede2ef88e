/* lmd's Landlock applier: the first program inside the bubblewrap sandbox.

       lmd-landlock PATH... -- COMMAND [ARG...]
       lmd-landlock --abi          (prints the kernel's Landlock ABI version, 0 without one)
       lmd-landlock --source       (prints the digest of the source it was built from)

   Restricts opening files for writing (and moving files between directories) to beneath the
   PATHs, then runs COMMAND. A read-only mount does not stop opening a named pipe (FIFO) or a
   device node for writing; Landlock does. Built by setup.py at install time, or by
   daemon/execution/sandbox/helpers.py into the user's cache directory; a few hundred microseconds per command, where a Python applier would
   cost tens of milliseconds. Fails closed: when the rules cannot be applied, the command does
   not run (exit 126). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef LMD_SOURCE_ID
#define LMD_SOURCE_ID "unknown"
#endif
#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#define __NR_landlock_add_rule 445
#define __NR_landlock_restrict_self 446
#endif

#define CREATE_RULESET_VERSION (1U << 0)
#define RULE_PATH_BENEATH 1
#define ACCESS_WRITE_FILE (1ULL << 1)
#define ACCESS_REFER (1ULL << 13) /* ABI 2; always denied where not granted */

struct ruleset_attr {
    uint64_t handled_access_fs;
};

struct path_beneath_attr {
    uint64_t allowed_access;
    int32_t parent_fd;
} __attribute__((packed));

static int fail(const char *what) {
    fprintf(stderr, "lmd-landlock: %s: %s\n", what, strerror(errno));
    return 126;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--source") == 0) {
        printf("%s\n", LMD_SOURCE_ID);
        return 0;
    }
    long abi = syscall(__NR_landlock_create_ruleset, NULL, 0, CREATE_RULESET_VERSION);
    if (argc == 2 && strcmp(argv[1], "--abi") == 0) {
        printf("%ld\n", abi < 0 ? 0 : abi);
        return 0;
    }
    if (abi < 2) { /* ABI 1 cannot grant moves between directories: mv would break */
        errno = abi < 0 ? errno : ENOTSUP;
        return fail("Landlock (ABI 2 or later) is not available");
    }
    int i = 1;
    struct ruleset_attr attr = {ACCESS_WRITE_FILE | ACCESS_REFER};
    int ruleset = (int)syscall(__NR_landlock_create_ruleset, &attr, sizeof attr, 0);
    if (ruleset < 0)
        return fail("landlock_create_ruleset");
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        int fd = open(argv[i], O_PATH | O_CLOEXEC);
        if (fd < 0) {
            if (errno == ENOENT)
                continue; /* e.g. no /dev/shm: nothing to allow there */
            return fail(argv[i]);
        }
        struct stat st;
        if (fstat(fd, &st) != 0)
            return fail(argv[i]);
        struct path_beneath_attr rule = {ACCESS_WRITE_FILE, fd};
        if (S_ISDIR(st.st_mode))
            rule.allowed_access |= ACCESS_REFER; /* a directory-only right */
        if (syscall(__NR_landlock_add_rule, ruleset, RULE_PATH_BENEATH, &rule, 0) != 0)
            return fail(argv[i]);
        close(fd);
    }
    if (i + 1 >= argc) {
        fprintf(stderr, "usage: lmd-landlock PATH... -- COMMAND [ARG...]\n");
        return 126;
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return fail("no_new_privs");
    if (syscall(__NR_landlock_restrict_self, ruleset, 0) != 0)
        return fail("landlock_restrict_self");
    close(ruleset);
    execvp(argv[i + 1], argv + i + 1);
    fprintf(stderr, "lmd-landlock: %s: %s\n", argv[i + 1], strerror(errno));
    return errno == ENOENT ? 127 : 126;
}
