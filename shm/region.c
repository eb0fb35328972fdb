/* region.c — instances, named regions and the cleanup of dead instances.
 *
 * The key idea: liveness is a lock the kernel keeps for us.  An instance's
 * creator holds flock(LOCK_EX) on its owner object "/nebula-<id>-owner" from
 * creation to destroy; when the process dies, however it dies, the kernel
 * drops the lock.  A later start that can take the lock knows the instance is
 * dead and unlinks everything named "/nebula-<id>-*".  No pid file to go
 * stale, no pid-reuse guess (the pid in the id is only the fallback for
 * regions whose owner object is already gone).
 *
 * The one race: between the creator's shm_open(O_EXCL) and its flock() the
 * owner object exists unlocked.  The creator writes the owner record only
 * once it holds the lock, so a cleaner that finds the lock free and no record
 * yet asks whether the pid in the name still runs, and leaves it if so. */
#include "shm/shm.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/util/err.h"

#define OWNER_WHAT "owner"
#define OWNER_MAGIC 0x574f424eu /* "NBOW" little-endian */
#define OWNER_VERSION 1u

/* The owner object's contents (docs/PROTOCOL.md, "Owner object"). */
struct owner_record {
    uint32_t magic;
    uint32_t version;
    uint32_t pid;
    uint32_t reserved;
    uint64_t created_unix_ns;
};

struct shm_instance {
    char id[SHM_ID_MAX];
    int owner_fd; /* holds the flock for the instance's life */
};

const char *shm_strerror(int code)
{
    switch (code) {
    case SHM_EEXIST: return "already exists";
    case SHM_EBUSY: return "busy";
    case SHM_ETIMEDOUT: return "timed out";
    case SHM_EPEER: return "peer gone";
    default: return nb_strerror(code);
    }
}

const char *shm_instance_id(const shm_instance *inst) { return inst->id; }

/* Splits "nebula-<pid>-<tag>-<what>" (a /dev/shm entry, no leading slash).
 * Fills id ("<pid>-<tag>") and pid; returns a pointer to <what>, or NULL when
 * the name is not one of ours. */
static const char *parse_entry(const char *entry, char id[SHM_ID_MAX], long *pid)
{
    size_t plen = strlen(SHM_PREFIX);
    if (strncmp(entry, SHM_PREFIX, plen) != 0) return NULL;
    const char *p = entry + plen, *q = p;
    while (isdigit((unsigned char)*q)) q++;
    if (q == p || q - p > 10 || *q != '-') return NULL;
    const char *tag = q + 1;
    for (int i = 0; i < 8; i++)
        if (!isxdigit((unsigned char)tag[i])) return NULL;
    if (tag[8] != '-' || tag[9] == '\0') return NULL;
    size_t idlen = (size_t)(tag + 8 - p);
    memcpy(id, p, idlen);
    id[idlen] = '\0';
    *pid = strtol(p, NULL, 10);
    return tag + 9;
}

static bool what_valid(const char *what)
{
    size_t n = strlen(what);
    if (n == 0 || n >= SHM_WHAT_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)what[i];
        if (!(islower(c) || isdigit(c) || c == '_' || c == '.' || c == '-')) return false;
    }
    return true;
}

static bool id_valid(const char *id)
{
    char name[SHM_NAME_MAX], parsed[SHM_ID_MAX];
    long pid;
    if (strlen(id) >= SHM_ID_MAX) return false;
    snprintf(name, sizeof name, SHM_PREFIX "%s-x", id);
    return parse_entry(name, parsed, &pid) && strcmp(parsed, id) == 0;
}

static void make_name(char out[SHM_NAME_MAX], const char *id, const char *what)
{
    snprintf(out, SHM_NAME_MAX, "/" SHM_PREFIX "%s-%s", id, what);
}

/* True unless the pid is certainly gone.  A zombie is gone: it holds no
 * mappings or locks any more, only its exit status. */
static bool pid_alive(long pid)
{
    if (pid <= 0 || (kill((pid_t)pid, 0) != 0 && errno == ESRCH)) return false;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return true;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close_paren = strrchr(buf, ')'); /* "pid (comm) S ..." */
    return !(close_paren && (close_paren[2] == 'Z' || close_paren[2] == 'X'));
}

/* Is the instance with this id dead?  See the comment at the top. */
static bool instance_dead(const char *id, long pid)
{
    char name[SHM_NAME_MAX];
    make_name(name, id, OWNER_WHAT);
    int fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return errno == ENOENT && !pid_alive(pid); /* EACCES: another user's, not ours to judge */
    bool dead = false;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        struct owner_record rec = {0};
        bool has_record = pread(fd, &rec, sizeof rec, 0) == (ssize_t)sizeof rec && rec.magic == OWNER_MAGIC;
        dead = has_record || !pid_alive(pid);
        flock(fd, LOCK_UN);
    }
    close(fd);
    return dead;
}

/* Our entries in SHM_DIR, as (id, name) pairs: named like ours and owned by
 * our uid (root sees everyone's), so another user's leftovers never make our
 * cleanup fail. */
struct entry {
    char id[SHM_ID_MAX];
    char name[SHM_NAME_MAX];
    long pid;
    bool is_owner;
};

static int list_entries(struct entry **out, int *n_out, const char *only_id, char *err, size_t errlen)
{
    DIR *d = opendir(SHM_DIR);
    if (!d) return nb_errf(err, errlen, NB_EIO, "cannot list %s: %s", SHM_DIR, strerror(errno));
    struct entry *v = NULL;
    int n = 0, cap = 0;
    uid_t euid = geteuid();
    struct dirent *de;
    while ((de = readdir(d))) {
        struct entry e;
        const char *what = parse_entry(de->d_name, e.id, &e.pid);
        if (!what || (only_id && strcmp(e.id, only_id) != 0) || strlen(de->d_name) + 2 > SHM_NAME_MAX) continue;
        struct stat st;
        if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || (euid != 0 && st.st_uid != euid))
            continue;
        snprintf(e.name, sizeof e.name, "/%.*s", (int)sizeof e.name - 2, de->d_name); /* fits: length checked above */
        e.is_owner = strcmp(what, OWNER_WHAT) == 0;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            struct entry *grown = realloc(v, (size_t)cap * sizeof *v);
            if (!grown) {
                free(v);
                closedir(d);
                return nb_errf(err, errlen, NB_ENOMEM, "out of memory listing %s", SHM_DIR);
            }
            v = grown;
        }
        v[n++] = e;
    }
    closedir(d);
    *out = v;
    *n_out = n;
    return 0;
}

/* Unlinks the entries whose id is `id`, the owner last so that a crash half
 * way leaves the instance findable.  Returns the first error; counts removals
 * into *n_removed. */
static int unlink_instance(const struct entry *v, int n, const char *id, int *n_removed, char *err, size_t errlen)
{
    int rc = 0;
    for (int pass = 0; pass < 2; pass++) { /* pass 0: regions; pass 1: the owner */
        for (int i = 0; i < n; i++) {
            if (strcmp(v[i].id, id) != 0 || v[i].is_owner != (pass == 1)) continue;
            if (shm_unlink(v[i].name) == 0) {
                (*n_removed)++;
            } else if (errno != ENOENT && rc == 0) { /* ENOENT: another cleaner was faster */
                rc = nb_errf(err, errlen, NB_EIO, "shm_unlink %s: %s", v[i].name, strerror(errno));
            }
        }
    }
    return rc;
}

int shm_cleanup_stale(int *n_removed, char *err, size_t errlen)
{
    struct entry *v;
    int n, removed = 0, rc;
    if ((rc = list_entries(&v, &n, NULL, err, errlen)) != 0) return rc;
    for (int i = 0; i < n && rc == 0; i++) {
        bool first = true; /* judge each instance once: at its first entry */
        for (int j = 0; j < i && first; j++) first = strcmp(v[j].id, v[i].id) != 0;
        if (first && instance_dead(v[i].id, v[i].pid)) rc = unlink_instance(v, n, v[i].id, &removed, err, errlen);
    }
    free(v);
    if (n_removed) *n_removed = removed;
    return rc;
}

/* O_EXCL create with mode 0600 whatever the umask (fchmod: the umask may only
 * take bits away, but say it explicitly). */
static int create_object(const char *name, char *err, size_t errlen, int *fd_out)
{
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (errno == EEXIST) return nb_errf(err, errlen, SHM_EEXIST, "shared-memory region %s exists already", name);
        return nb_errf(err, errlen, NB_EIO, "shm_open %s: %s", name, strerror(errno));
    }
    if (fchmod(fd, 0600) != 0) {
        int e = errno;
        close(fd);
        shm_unlink(name);
        return nb_errf(err, errlen, NB_EIO, "fchmod %s: %s", name, strerror(e));
    }
    *fd_out = fd;
    return 0;
}

int shm_instance_create(shm_instance **out, int *n_stale, char *err, size_t errlen)
{
    int rc = shm_cleanup_stale(n_stale, err, errlen);
    if (rc != 0) return rc;
    shm_instance *inst = calloc(1, sizeof *inst);
    if (!inst) return nb_errf(err, errlen, NB_ENOMEM, "out of memory");
    char name[SHM_NAME_MAX];
    int fd = -1;
    for (int attempt = 0; attempt < 8; attempt++) { /* a tag collision is 2^-32 per try: retry */
        uint32_t tag;
        if (getrandom(&tag, sizeof tag, 0) != (ssize_t)sizeof tag) tag = (uint32_t)time(NULL) ^ (uint32_t)attempt;
        snprintf(inst->id, sizeof inst->id, "%ld-%08x", (long)getpid(), tag);
        make_name(name, inst->id, OWNER_WHAT);
        rc = create_object(name, err, errlen, &fd);
        if (rc != SHM_EEXIST) break;
    }
    if (rc != 0) {
        free(inst);
        return rc;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct owner_record rec = {OWNER_MAGIC, OWNER_VERSION, (uint32_t)getpid(), 0,
                               (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec};
    /* Blocking flock: a cleaner may hold it for a moment while it judges us. */
    if (flock(fd, LOCK_EX) != 0 || pwrite(fd, &rec, sizeof rec, 0) != (ssize_t)sizeof rec) {
        rc = nb_errf(err, errlen, NB_EIO, "owner object %s: %s", name, strerror(errno));
        close(fd);
        shm_unlink(name);
        free(inst);
        return rc;
    }
    inst->owner_fd = fd;
    *out = inst;
    return 0;
}

int shm_instance_unlink(shm_instance *inst, char *err, size_t errlen)
{
    struct entry *v;
    int n, removed = 0;
    int rc = list_entries(&v, &n, inst->id, err, errlen);
    if (rc == 0) {
        rc = unlink_instance(v, n, inst->id, &removed, err, errlen);
        free(v);
    }
    return rc; /* owner_fd stays open: destroy closes it */
}

int shm_instance_destroy(shm_instance *inst, char *err, size_t errlen)
{
    if (!inst) return 0;
    int rc = shm_instance_unlink(inst, err, errlen); /* what is still named */
    close(inst->owner_fd); /* drops the lock, after the unlinks */
    free(inst);
    return rc;
}

/* Maps fd (size bytes) into r. */
static int map_region(struct shm_region *r, int fd, size_t bytes, char *err, size_t errlen)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return nb_errf(err, errlen, NB_EIO, "mmap %s (%zu bytes): %s", r->name, bytes, strerror(errno));
    r->base = p;
    r->bytes = bytes;
    r->fd = fd;
    r->opener_pid = (int)getpid();
    return 0;
}

int shm_region_create(shm_instance *inst, const char *what, size_t bytes, struct shm_region *out, char *err,
                      size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->fd = -1;
    if (!what_valid(what) || strcmp(what, OWNER_WHAT) == 0)
        return nb_errf(err, errlen, NB_EINVAL, "bad region name '%s' (want 1-%d of [a-z0-9_.-], not '%s')", what,
                       SHM_WHAT_MAX - 1, OWNER_WHAT);
    if (bytes == 0) return nb_errf(err, errlen, NB_EINVAL, "region %s: size 0", what);
    make_name(out->name, inst->id, what);
    int fd, rc = create_object(out->name, err, errlen, &fd);
    if (rc != 0) return rc;
    /* posix_fallocate reserves tmpfs pages now: ENOSPC here beats SIGBUS at first touch. */
    int e = posix_fallocate(fd, 0, (off_t)bytes);
    if (e != 0) {
        rc = nb_errf(err, errlen, e == ENOSPC ? NB_ENOMEM : NB_EIO, "reserving %zu bytes for %s: %s%s", bytes,
                     out->name, strerror(e), e == ENOSPC ? " (is " SHM_DIR " big enough?)" : "");
    } else {
        rc = map_region(out, fd, bytes, err, errlen);
    }
    if (rc != 0) {
        close(fd);
        shm_unlink(out->name);
        out->fd = -1;
    }
    return rc;
}

/* The region `name` ("/nebula-…") through an fd this process inherited
 * after the name was unlinked (shm_instance_unlink): /proc/self/fd shows it
 * as "/dev/shm/nebula-… (deleted)".  Opened again through /proc, which gives
 * this process an open file description of its own: the rings' role locks
 * are OFD locks, and must not be shared with whoever else holds the
 * inherited one.  Returns the new fd, or -1 when no inherited fd is there. */
static int open_inherited(const char *name)
{
    char want[SHM_NAME_MAX + 32], link[64], target[SHM_NAME_MAX + 32];
    snprintf(want, sizeof want, SHM_DIR "%s (deleted)", name);
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int fd = -1;
    struct dirent *de;
    while (fd < 0 && (de = readdir(d))) {
        if (!isdigit((unsigned char)de->d_name[0]) || atoi(de->d_name) == dirfd(d)) continue;
        snprintf(link, sizeof link, "/proc/self/fd/%.20s", de->d_name);
        ssize_t len = readlink(link, target, sizeof target - 1);
        if (len <= 0) continue;
        target[len] = '\0';
        if (strcmp(target, want) == 0) fd = open(link, O_RDWR | O_CLOEXEC);
    }
    closedir(d);
    return fd;
}

int shm_region_open(const char *instance_id, const char *what, struct shm_region *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->fd = -1;
    if (!id_valid(instance_id)) return nb_errf(err, errlen, NB_EINVAL, "bad instance id '%s'", instance_id);
    if (!what_valid(what)) return nb_errf(err, errlen, NB_EINVAL, "bad region name '%s'", what);
    make_name(out->name, instance_id, what);
    int fd = shm_open(out->name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0 && errno == ENOENT) fd = open_inherited(out->name); /* unlinked: handed down at spawn? */
    if (fd < 0) {
        int e = errno;
        return nb_errf(err, errlen, e == ENOENT ? NB_ENOENT : NB_EIO, "shm_open %s: %s", out->name, strerror(e));
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0)
        rc = nb_errf(err, errlen, NB_EIO, "fstat %s: %s", out->name, strerror(errno));
    else if (st.st_uid != geteuid() || (st.st_mode & 077) != 0)
        rc = nb_errf(err, errlen, NB_EINVAL, "region %s has owner uid %u and mode %04o; want uid %u and 0600",
                     out->name, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777), (unsigned)geteuid());
    else if (st.st_size <= 0)
        rc = nb_errf(err, errlen, NB_EFORMAT, "region %s is empty", out->name);
    else
        rc = map_region(out, fd, (size_t)st.st_size, err, errlen);
    if (rc != 0) {
        close(fd);
        out->fd = -1;
    }
    return rc;
}

void shm_region_close(struct shm_region *r)
{
    if (!r) return;
    if (r->base) munmap(r->base, r->bytes);
    if (r->fd >= 0) close(r->fd);
    r->base = NULL;
    r->bytes = 0;
    r->fd = -1;
}
