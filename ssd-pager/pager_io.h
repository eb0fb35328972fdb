/* pager_io.h — batches of positioned reads into caller buffers, with
 * io_uring on files opened O_DIRECT; plain pread when either is refused
 * (a filesystem without O_DIRECT such as tmpfs, a kernel or sandbox without
 * io_uring), with one logged warning each. */
#ifndef NB_PAGER_IO_H
#define NB_PAGER_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <liburing.h>

#define PAGER_IO_DEPTH 64 /* reads in flight per batch */

struct pager_read {
    void *buf;      /* 4 KiB aligned (O_DIRECT) */
    uint64_t bytes; /* multiple of 4 KiB */
    uint64_t offset;
};

struct pager_io {
    struct io_uring ring;
    bool uring;
};

/* Opens path read-only, O_DIRECT if the filesystem allows; *direct says which. */
int pager_io_open(const char *path, bool *direct, int *fd, char *err, size_t errlen);
int pager_io_init(struct pager_io *io);
void pager_io_free(struct pager_io *io);
/* Reads every entry fully (short reads are continued); 0 or NB_EIO. */
int pager_io_read(struct pager_io *io, int fd, const struct pager_read *r, int n, char *err, size_t errlen);

#endif
