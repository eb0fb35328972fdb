/* err.c — formatting of error messages (see err.h). */
#include "core/util/err.h"

#include <stdarg.h>
#include <stdio.h>

int nb_errf(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

int nb_verrf_at(char *err, size_t errlen, int code, const char *where, const char *fmt, va_list ap)
{
    char msg[384];
    vsnprintf(msg, sizeof msg, fmt, ap);
    return nb_errf(err, errlen, code, "%s: %s", where, msg);
}

const char *nb_strerror(int code)
{
    switch (code) {
    case NB_OK: return "ok";
    case NB_EIO: return "I/O error";
    case NB_EFORMAT: return "format error";
    case NB_ENOMEM: return "out of memory";
    case NB_EINVAL: return "invalid argument";
    case NB_ENOTSUP: return "not supported";
    case NB_ENOENT: return "not found";
    default: return "unknown error";
    }
}
