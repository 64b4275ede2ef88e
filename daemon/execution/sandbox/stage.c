/* lmd's write stager: runs just before bubblewrap for a command that may write a tree.

       lmd-stage TREE STAGE [--idmap UID:GID --as UID:GID] -- PROGRAM [ARG...]
       lmd-stage --source          (prints the digest of the source it was built from)

   In a mount namespace of its own (as an ordinary user, inside a user namespace of its own
   too), mounts an overlay over TREE: the tree itself read-only beneath, STAGE/upper above
   (STAGE/work is overlayfs's scratch directory). Whatever PROGRAM and its children write
   under TREE lands in STAGE/upper and nowhere else: every created, changed and deleted path
   is recorded there by the kernel, and lmd applies afterwards only what the rule allows.

   As root (the command must not run as uid 0): --idmap UID:GID --as UID:GID first makes an
   idmapped copy of TREE's mount in which the files of UID:GID (the tree's owner) appear as
   the --as user's, stacks the overlay on that copy, then becomes the --as user (no groups)
   and runs PROGRAM (bwrap), so the unprivileged user can write the staged view of a tree it
   could not write itself, and nothing else.

   The mounts are private to this process tree and vanish with it. Fails closed: when a step
   fails PROGRAM does not run (exit 125, one line on stderr). Built by setup.py at install
   time or by daemon/execution/sandbox/helpers.py into the user's cache directory. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef LMD_SOURCE_ID
#define LMD_SOURCE_ID "unknown"
#endif
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#define OPEN_TREE_CLONE_ 1
#define MOVE_MOUNT_F_EMPTY_PATH_ 0x00000004
#define MOUNT_ATTR_IDMAP_ 0x00100000

struct mount_attr_ {
    unsigned long long attr_set, attr_clr, propagation, userns_fd;
};

static void die(const char *what) {
    fprintf(stderr, "lmd-stage: %s: %s\n", what, strerror(errno));
    exit(125);
}

static void put(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, text, strlen(text)) < 0) die(path);
    close(fd);
}

static void ids(const char *text, unsigned *uid, unsigned *gid) {
    if (sscanf(text, "%u:%u", uid, gid) != 2) {
        errno = EINVAL;
        die(text);
    }
}

/* A user namespace mapping UID:GID (on disk) to AS_UID:AS_GID, for an idmapped mount: a
   child unshares one and waits while root writes its maps; its namespace is kept by fd. */
static int idmapping(unsigned uid, unsigned gid, unsigned as_uid, unsigned as_gid) {
    int go[2], ready[2];
    if (pipe2(go, O_CLOEXEC) || pipe2(ready, O_CLOEXEC)) die("pipe");
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) {
        close(go[1]); /* the parent's closing it is the signal to end */
        close(ready[0]);
        char c = unshare(CLONE_NEWUSER) ? 'n' : 'y';
        if (write(ready[1], &c, 1) != 1) _exit(1);
        if (read(go[0], &c, 1) < 0) _exit(1);
        _exit(0);
    }
    close(go[0]);
    close(ready[1]);
    char c = 0, path[64], map[64];
    if (read(ready[0], &c, 1) != 1 || c != 'y') {
        errno = EPERM;
        die("a user namespace for the idmapped mount");
    }
    snprintf(map, sizeof map, "%u %u 1\n", uid, as_uid);
    snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
    put(path, map);
    snprintf(path, sizeof path, "/proc/%d/setgroups", (int)pid);
    put(path, "deny");
    snprintf(map, sizeof map, "%u %u 1\n", gid, as_gid);
    snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
    put(path, map);
    snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) die("the idmapping's user namespace");
    close(go[1]);
    close(ready[0]);
    waitpid(pid, NULL, 0);
    return fd;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--source") == 0) {
        printf("%s\n", LMD_SOURCE_ID);
        return 0;
    }
    if (argc < 5) {
        fprintf(stderr, "usage: lmd-stage TREE STAGE [--idmap UID:GID --as UID:GID] -- PROGRAM...\n");
        return 125;
    }
    const char *tree = argv[1], *stage = argv[2];
    int i = 3, idmap = 0, as = 0;
    unsigned uid = 0, gid = 0, as_uid = 0, as_gid = 0;
    for (; i < argc && strcmp(argv[i], "--") != 0; i += 2) {
        if (i + 1 >= argc) break;
        if (strcmp(argv[i], "--idmap") == 0) {
            ids(argv[i + 1], &uid, &gid);
            idmap = 1;
        } else if (strcmp(argv[i], "--as") == 0) {
            ids(argv[i + 1], &as_uid, &as_gid);
            as = 1;
        } else {
            errno = EINVAL;
            die(argv[i]);
        }
    }
    if (i + 1 >= argc || strcmp(argv[i], "--") != 0) {
        errno = EINVAL;
        die("no -- PROGRAM");
    }
    char upper[4096], work[4096], lower[4096], options[16384];
    snprintf(upper, sizeof upper, "%s/upper", stage);
    snprintf(work, sizeof work, "%s/work", stage);
    snprintf(lower, sizeof lower, "%s/lower", stage);
    int root = geteuid() == 0;
    if (root != as || (idmap && !root)) {
        errno = EINVAL;
        die("--idmap and --as are for root, and root needs --as");
    }
    if (root) {
        if (unshare(CLONE_NEWNS)) die("a mount namespace");
    } else {
        unsigned me = getuid(), my_group = getgid();
        char map[64];
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS)) die("a user and mount namespace");
        snprintf(map, sizeof map, "%u %u 1\n", me, me);
        put("/proc/self/uid_map", map);
        put("/proc/self/setgroups", "deny");
        snprintf(map, sizeof map, "%u %u 1\n", my_group, my_group);
        put("/proc/self/gid_map", map);
    }
    /* never propagate the overlay back to the host's mount namespace */
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL)) die("a private mount tree");
    const char *beneath = tree;
    if (idmap) {
        int userns = idmapping(uid, gid, as_uid, as_gid);
        int copy = syscall(SYS_open_tree, AT_FDCWD, tree, OPEN_TREE_CLONE_ | O_CLOEXEC);
        if (copy < 0) die("a copy of the tree's mount");
        struct mount_attr_ attr = {.attr_set = MOUNT_ATTR_IDMAP_, .userns_fd = userns};
        if (syscall(SYS_mount_setattr, copy, "", AT_EMPTY_PATH, &attr, sizeof attr))
            die("an idmapped mount of the tree (does its file system support them?)");
        if (syscall(SYS_move_mount, copy, "", AT_FDCWD, lower, MOVE_MOUNT_F_EMPTY_PATH_))
            die("mounting the idmapped copy");
        close(copy);
        close(userns);
        beneath = lower;
    }
    /* no redirects (a renamed directory of the tree is copied, so every path is plain in
       upper), no index, no metacopy (a changed file's data is all in upper) */
    snprintf(options, sizeof options,
             "lowerdir=%s,upperdir=%s,workdir=%s,redirect_dir=nofollow,index=off,metacopy=off%s",
             beneath, upper, work, root ? "" : ",userxattr");
    if (mount("overlay", tree, "overlay", 0, options)) die("the staging overlay");
    if (root) {
        if (setgroups(0, NULL)) die("dropping groups");
        if (setresgid(as_gid, as_gid, as_gid)) die("becoming the sandbox's group");
        if (setresuid(as_uid, as_uid, as_uid)) die("becoming the sandbox's user");
        if (geteuid() == 0 || getegid() == 0) {
            errno = EPERM;
            die("still root");
        }
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) die("no new privileges");
    execv(argv[i + 1], argv + i + 1);
    die(argv[i + 1]);
}
