/* clock.h — the monotonic clock, read one way everywhere: seconds as a
 * double (timings, deadlines) or nanoseconds as an integer (counters that
 * are summed, ring waits).  CLOCK_MONOTONIC never steps back when the wall
 * clock is set, which is what a duration needs. */
#ifndef NB_UTIL_CLOCK_H
#define NB_UTIL_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline double nb_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline uint64_t nb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
