/* log.c — timestamped one-line log records on stderr (see log.h). */
#include "core/util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static const char *log_name = "nebula";

void nb_log_set_name(const char *name) { log_name = name; }

void nb_log(const char *fmt, ...)
{
    struct timespec ts;
    struct tm tm;
    char stamp[32];
    char line[1024];
    va_list ap;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* One fprintf per record so concurrent processes don't interleave mid-line. */
    fprintf(stderr, "%s.%03ldZ %s: %s\n", stamp, ts.tv_nsec / 1000000, log_name, line);
}
