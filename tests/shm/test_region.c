/* test_region.c — instances and regions (shm/region.c): names, mode 0600,
 * collisions, mapping from another process, names unlinked while the
 * regions live on (and opened through an inherited fd), and the cleanup of
 * instances whose process died without cleaning up. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "shm_fixture.h"

Test(region, names_carry_the_instance_id_and_mode_is_0600)
{
    mode_t old_umask = umask(0); /* a permissive umask must not widen the mode */
    shm_instance *inst = fx_instance();
    umask(old_umask);
    const char *id = shm_instance_id(inst);
    char pid_part[16];
    snprintf(pid_part, sizeof pid_part, "%ld-", (long)getpid());
    cr_assert(strncmp(id, pid_part, strlen(pid_part)) == 0, "id %s starts with our pid", id);
    cr_assert_eq(strlen(id), strlen(pid_part) + 8, "id %s: pid, dash, 8 hex digits", id);

    struct shm_region r = fx_region(inst, "ring-moe", 10000);
    char want[SHM_NAME_MAX];
    snprintf(want, sizeof want, "/nebula-%s-ring-moe", id);
    cr_assert_str_eq(r.name, want);
    cr_assert_eq(r.bytes, 10000);
    cr_assert_eq((uintptr_t)r.base % 4096, 0, "page-aligned mapping");
    for (size_t i = 0; i < r.bytes; i++) cr_assert_eq(r.base[i], 0, "fresh region is zero at %zu", i);

    int fd = shm_open(r.name, O_RDONLY, 0);
    cr_assert(fd >= 0, "shm_open %s", r.name);
    struct stat st;
    cr_assert_eq(fstat(fd, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0600, "mode %04o", (unsigned)(st.st_mode & 07777));
    cr_assert_eq(st.st_size, 10000);
    close(fd);

    /* The owner object too. */
    snprintf(want, sizeof want, "/nebula-%s-owner", id);
    fd = shm_open(want, O_RDONLY, 0);
    cr_assert(fd >= 0, "owner object %s", want);
    cr_assert_eq(fstat(fd, &st), 0);
    cr_assert_eq(st.st_mode & 07777, 0600);
    close(fd);

    cr_assert_eq(fx_count_entries(id), 2);
    shm_region_close(&r);
    fx_instance_end(inst);
}

Test(region, a_second_create_of_one_name_is_refused)
{
    shm_instance *a = fx_instance(), *b = fx_instance();
    cr_assert_str_neq(shm_instance_id(a), shm_instance_id(b));
    struct shm_region r1 = fx_region(a, "stats", 4096), r2;
    int rc = shm_region_create(a, "stats", 4096, &r2, fx_err, sizeof fx_err);
    cr_assert_eq(rc, SHM_EEXIST, "rc %d (%s)", rc, fx_err);
    cr_assert(strstr(fx_err, r1.name), "message names the region: %s", fx_err);
    cr_assert_eq(r2.base, NULL);
    /* The same <what> in another instance is another name. */
    struct shm_region r3 = fx_region(b, "stats", 4096);
    shm_region_close(&r1);
    shm_region_close(&r3);
    fx_instance_end(a);
    fx_instance_end(b);
}

Test(region, bad_names_and_sizes_are_refused)
{
    shm_instance *inst = fx_instance();
    struct shm_region r;
    const char *bad[] = {"", "a/b", "owner", "UPPER", "white space", "0123456789012345678901234567890123"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_assert_eq(shm_region_create(inst, bad[i], 4096, &r, fx_err, sizeof fx_err), NB_EINVAL, "'%s'", bad[i]);
    cr_assert_eq(shm_region_create(inst, "empty", 0, &r, fx_err, sizeof fx_err), NB_EINVAL);
    cr_assert_eq(shm_region_open("not-an-id", "x", &r, fx_err, sizeof fx_err), NB_EINVAL);
    cr_assert_eq(shm_region_open(shm_instance_id(inst), "missing", &r, fx_err, sizeof fx_err), NB_ENOENT);
    cr_assert_eq(fx_count_entries(shm_instance_id(inst)), 1, "only the owner object");
    fx_instance_end(inst);
}

static const char *child_id;

/* Child: maps the region by name, checks the parent's bytes, writes its own. */
static int child_maps_and_writes(void *arg)
{
    struct shm_region r;
    if (shm_region_open(child_id, "arena", &r, fx_err, sizeof fx_err) != 0) return 10;
    if (r.bytes != 1 << 20) return 11;
    for (size_t i = 0; i < r.bytes; i += 4096)
        if (r.base[i] != (uint8_t)(i / 4096)) return 12;
    for (size_t i = 1; i < r.bytes; i += 4096) r.base[i] = 0xa5;
    shm_region_close(&r);
    return 0;
}

Test(region, another_process_maps_by_instance_id_and_what)
{
    shm_instance *inst = fx_instance();
    struct shm_region r = fx_region(inst, "arena", 1 << 20);
    for (size_t i = 0; i < r.bytes; i += 4096) r.base[i] = (uint8_t)(i / 4096);
    child_id = shm_instance_id(inst);
    cr_assert_eq(fx_reap(fx_spawn(child_maps_and_writes, NULL)), 0);
    for (size_t i = 1; i < r.bytes; i += 4096) cr_assert_eq(r.base[i], 0xa5, "child's write at %zu", i);
    shm_region_close(&r);
    fx_instance_end(inst);
}

Test(region, open_refuses_a_region_others_could_open)
{
    shm_instance *inst = fx_instance();
    char name[SHM_NAME_MAX];
    snprintf(name, sizeof name, "/nebula-%s-planted", shm_instance_id(inst));
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0644);
    cr_assert(fd >= 0);
    cr_assert_eq(fchmod(fd, 0644), 0);
    cr_assert_eq(ftruncate(fd, 4096), 0);
    close(fd);
    struct shm_region r;
    cr_assert_eq(shm_region_open(shm_instance_id(inst), "planted", &r, fx_err, sizeof fx_err), NB_EINVAL);
    cr_assert(strstr(fx_err, "0644"), "message gives the mode: %s", fx_err);
    fx_instance_end(inst); /* removes "planted" too: it carries the instance's name */
}

Test(region, a_mapping_outlives_destroy)
{
    shm_instance *inst = fx_instance();
    struct shm_region r = fx_region(inst, "ring", 8192);
    r.base[100] = 42;
    fx_instance_end(inst); /* unlinked: nothing in /dev/shm */
    r.base[200] = 43;      /* still mapped: no fault */
    cr_assert_eq(r.base[100] + r.base[200], 85);
    shm_region_close(&r);
}

/* Child (forked: it holds the parent's fds, as a spawned worker holds the
 * ones the coordinator hands down): opens the unlinked region by id, writes
 * to it, and checks its handle is a description of its own: an OFD lock on
 * it must conflict with one on the inherited fd (inherited_fd). */
static int inherited_fd;

static int child_opens_unlinked(void *arg)
{
    (void)arg;
    struct shm_region r;
    if (shm_region_open(child_id, "arena", &r, fx_err, sizeof fx_err) != 0) return 10;
    if (r.fd == inherited_fd) return 11;
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1};
    if (fcntl(r.fd, F_OFD_SETLK, &fl) != 0) return 12;
    struct flock other = fl;
    if (fcntl(inherited_fd, F_OFD_SETLK, &other) == 0) return 13; /* same description: the locks would not conflict */
    for (size_t i = 1; i < r.bytes; i += 4096) r.base[i] = 0x5a;
    struct shm_region none;
    if (shm_region_open(child_id, "never-made", &none, fx_err, sizeof fx_err) != NB_ENOENT) return 14;
    shm_region_close(&r);
    return 0;
}

Test(region, unlinked_names_nothing_in_dev_shm_an_inherited_fd_still_opens_it)
{
    shm_instance *inst = fx_instance();
    struct shm_region r = fx_region(inst, "arena", 1 << 20);
    r.base[0] = 7;
    const char *id = shm_instance_id(inst);
    cr_assert_eq(fx_count_entries(id), 2);
    cr_assert_eq(shm_instance_unlink(inst, fx_err, sizeof fx_err), 0, "%s", fx_err);
    cr_assert_eq(fx_count_entries(id), 0, "names left in %s after shm_instance_unlink", SHM_DIR);
    cr_assert_eq(r.base[0], 7, "the mapping stays");
    child_id = id;
    inherited_fd = r.fd;
    cr_assert_eq(fx_reap(fx_spawn(child_opens_unlinked, NULL)), 0, "the child's checks (exit code names the one that failed)");
    for (size_t i = 1; i < r.bytes; i += 4096) cr_assert_eq(r.base[i], 0x5a, "child's write at %zu", i);
    shm_region_close(&r);
    fx_instance_end(inst); /* nothing to unlink any more: still 0 */
}

/* Child: creates an instance with two regions, reports its id, dies without
 * cleaning up (as a crash would). */
static struct fx_pipe child_pipe;

static int child_creates_and_dies(void *arg)
{
    shm_instance *inst;
    struct shm_region a, b;
    if (shm_instance_create(&inst, NULL, fx_err, sizeof fx_err) != 0) return 10;
    if (shm_region_create(inst, "ring-moe", 65536, &a, fx_err, sizeof fx_err) != 0) return 11;
    if (shm_region_create(inst, "stats", 4096, &b, fx_err, sizeof fx_err) != 0) return 12;
    char id[SHM_ID_MAX] = {0};
    snprintf(id, sizeof id, "%s", shm_instance_id(inst));
    if (fx_send(&child_pipe, id, sizeof id) != 0) return 13;
    bool wait_for_kill = *(bool *)arg;
    if (wait_for_kill) pause();
    _exit(0); /* no destroy, no unmap */
}

/* Forks child_creates_and_dies (alive until killed, or gone at once) and
 * waits for the id of the instance it leaves. */
static pid_t spawn_orphan_instance(bool wait_for_kill, char id[SHM_ID_MAX])
{
    fx_pipe_open(&child_pipe);
    pid_t pid = fx_spawn(child_creates_and_dies, &wait_for_kill);
    cr_assert_eq(fx_recv(&child_pipe, id, SHM_ID_MAX), 0);
    return pid;
}

Test(region, next_start_removes_regions_of_a_dead_instance)
{
    char id[SHM_ID_MAX];
    pid_t pid = spawn_orphan_instance(false, id);
    cr_assert_eq(fx_reap(pid), 0);
    cr_assert_eq(fx_count_entries(id), 3, "ring-moe, stats and owner are left behind");

    int removed = -1;
    shm_instance *inst;
    cr_assert_eq(shm_instance_create(&inst, &removed, fx_err, sizeof fx_err), 0, "%s", fx_err);
    cr_assert_eq(fx_count_entries(id), 0, "the next start removed the dead instance's objects");
    cr_assert_geq(removed, 3); /* others' dead leftovers may go too */
    fx_instance_end(inst);
}

Test(region, cleanup_leaves_a_live_instance_alone_until_it_is_killed)
{
    char id[SHM_ID_MAX];
    pid_t pid = spawn_orphan_instance(true, id);

    cr_assert_eq(shm_cleanup_stale(NULL, fx_err, sizeof fx_err), 0, "%s", fx_err);
    cr_assert_eq(fx_count_entries(id), 3, "a live instance keeps its regions");

    kill(pid, SIGKILL);
    cr_assert_eq(fx_reap(pid), -SIGKILL);
    cr_assert_eq(shm_cleanup_stale(NULL, fx_err, sizeof fx_err), 0, "%s", fx_err);
    cr_assert_eq(fx_count_entries(id), 0, "killed: removed");
}

/* An owner object with no record yet (its creator is between shm_open and
 * flock) is judged by the pid in its name. */
Test(region, an_owner_without_record_is_judged_by_its_pid)
{
    char name[SHM_NAME_MAX];
    snprintf(name, sizeof name, "/nebula-%ld-0badc0de-owner", (long)getpid());
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    cr_assert(fd >= 0);
    close(fd);
    cr_assert_eq(shm_cleanup_stale(NULL, fx_err, sizeof fx_err), 0);
    char id[SHM_ID_MAX];
    snprintf(id, sizeof id, "%ld-0badc0de", (long)getpid());
    cr_assert_eq(fx_count_entries(id), 1, "our pid lives: kept");
    shm_unlink(name);

    /* Same with the pid of a child that is gone: removed. */
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    fx_reap(dead);
    snprintf(id, sizeof id, "%ld-0badc0de", (long)dead);
    snprintf(name, sizeof name, "/nebula-%s-owner", id);
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    cr_assert(fd >= 0);
    close(fd);
    cr_assert_eq(shm_cleanup_stale(NULL, fx_err, sizeof fx_err), 0);
    cr_assert_eq(fx_count_entries(id), 0, "dead pid: removed");
}

Test(region, strerror_names_the_shm_codes)
{
    cr_assert_str_eq(shm_strerror(SHM_ETIMEDOUT), "timed out");
    cr_assert_str_eq(shm_strerror(SHM_EPEER), "peer gone");
    cr_assert_str_eq(shm_strerror(NB_ENOENT), "not found");
}
