/* pager_io.c — io_uring (or pread) batches of whole-blob / whole-page reads
 * (pager_io.h).  One submission per batch of up to PAGER_IO_DEPTH reads, then
 * every completion is reaped before returning: a request's bytes are all in
 * staging when its response is published. */
#include "ssd-pager/pager_io.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "core/util/err.h"
#include "core/util/log.h"

int pager_io_open(const char *path, bool *direct, int *fd, char *err, size_t errlen)
{
    *direct = true;
    *fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (*fd < 0 && errno == EINVAL) {
        nb_log("warning: %s: O_DIRECT refused by the filesystem; reading through the page cache", path);
        *direct = false;
        *fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (*fd < 0) return nb_errf(err, errlen, NB_EIO, "%s: %s", path, strerror(errno));
    return 0;
}

int pager_io_init(struct pager_io *io)
{
    int rc = io_uring_queue_init(PAGER_IO_DEPTH, &io->ring, 0);
    io->uring = rc == 0;
    if (!io->uring) nb_log("warning: io_uring unavailable (%s); using pread", strerror(-rc));
    return 0;
}

void pager_io_free(struct pager_io *io)
{
    if (io->uring) io_uring_queue_exit(&io->ring);
    io->uring = false;
}

/* Finishes one read with pread from `done` bytes on (the fallback path, and
 * the rare short completion). */
static int finish_pread(int fd, const struct pager_read *r, uint64_t done, char *err, size_t errlen)
{
    while (done < r->bytes) {
        ssize_t got = pread(fd, (uint8_t *)r->buf + done, r->bytes - done, (off_t)(r->offset + done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
            return nb_errf(err, errlen, NB_EIO, "read of %lu bytes at %lu: %s", (unsigned long)r->bytes,
                           (unsigned long)r->offset, got < 0 ? strerror(errno) : "end of file");
        done += (uint64_t)got;
    }
    return 0;
}

static int uring_batch(struct pager_io *io, int fd, const struct pager_read *r, int n, char *err, size_t errlen)
{
    for (int i = 0; i < n; i++) {
        struct io_uring_sqe *sqe = io_uring_get_sqe(&io->ring);
        io_uring_prep_read(sqe, fd, r[i].buf, (unsigned)r[i].bytes, r[i].offset);
        io_uring_sqe_set_data64(sqe, (uint64_t)i);
    }
    int rc = io_uring_submit(&io->ring), first = 0;
    if (rc != n) return nb_errf(err, errlen, NB_EIO, "io_uring_submit: %s", strerror(rc < 0 ? -rc : EIO));
    for (int k = 0; k < n; k++) {
        struct io_uring_cqe *cqe;
        rc = io_uring_wait_cqe(&io->ring, &cqe);
        if (rc < 0) return nb_errf(err, errlen, NB_EIO, "io_uring_wait_cqe: %s", strerror(-rc));
        int i = (int)io_uring_cqe_get_data64(cqe), res = cqe->res;
        io_uring_cqe_seen(&io->ring, cqe);
        if (res < 0 && !first) first = nb_errf(err, errlen, NB_EIO, "read at %lu: %s", (unsigned long)r[i].offset,
                                               strerror(-res));
        else if (res >= 0 && (uint64_t)res < r[i].bytes && !first)
            first = finish_pread(fd, &r[i], (uint64_t)res, err, errlen);
    }
    return first;
}

int pager_io_read(struct pager_io *io, int fd, const struct pager_read *r, int n, char *err, size_t errlen)
{
    for (int at = 0; at < n; at += PAGER_IO_DEPTH) {
        int m = n - at < PAGER_IO_DEPTH ? n - at : PAGER_IO_DEPTH, rc = 0;
        if (io->uring) rc = uring_batch(io, fd, r + at, m, err, errlen);
        else
            for (int i = 0; i < m && !rc; i++) rc = finish_pread(fd, &r[at + i], 0, err, errlen);
        if (rc) return rc;
    }
    return 0;
}
