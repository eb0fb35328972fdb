/* err.h — errors as values, shared by every room.
 *
 * Library functions return 0 on success or a negative NB_E* code, and write a
 * one-line human message into a caller-provided buffer.  Only main() decides
 * whether to exit.  The message names the field, tensor or offset at fault so
 * that a user with a corrupt file knows what is wrong without a debugger. */
#ifndef NB_ERR_H
#define NB_ERR_H

#include <stdarg.h>
#include <stddef.h>

enum {
    NB_OK = 0,
    NB_EIO = -1,      /* open/read/write/mmap failed */
    NB_EFORMAT = -2,  /* file or buffer is malformed, truncated, corrupt */
    NB_ENOMEM = -3,   /* allocation failed */
    NB_EINVAL = -4,   /* bad argument from the caller */
    NB_ENOTSUP = -5,  /* well-formed but not supported (type, version) */
    NB_ENOENT = -6,   /* key, tensor or file not found */
};

/* Formats a message into err (if err and errlen are non-zero) and returns code. */
int nb_errf(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* nb_errf's message with "WHERE: " before it (the file, tensor or item at
 * fault), from a caller's own va_list: what a parser's fail(ctx, code, fmt, ...)
 * calls.  The message part is cut at 383 bytes. */
int nb_verrf_at(char *err, size_t errlen, int code, const char *where, const char *fmt, va_list ap)
    __attribute__((format(printf, 5, 0)));

/* Short name of an error code ("format error", ...). */
const char *nb_strerror(int code);

#endif
