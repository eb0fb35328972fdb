/* progress.c — what nebula-prepare tells the user while it works.
 *
 * On a terminal a long step draws one bar line, redrawn in place at most
 * ten times a second: "experts.bin: writing [#####.....] 48% 12.1/25.0 GiB
 * 1.4 GiB/s ETA 9s".  Redirected to a file or pipe, the same step prints a
 * plain line at every 10% (logs stay short and greppable).  Either way a
 * step ends with one summary line. */
#include "tools/nebula-prepare/prepare.h"
#include "core/util/clock.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static bool quiet_mode, on_tty;

void progress_setup(bool quiet)
{
    quiet_mode = quiet;
    on_tty = !quiet && isatty(STDERR_FILENO);
}

bool progress_quiet(void) { return quiet_mode; }

void fmt_bytes(uint64_t bytes, char *buf, size_t len)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double b = (double)bytes;
    int i = 0;
    while (b >= 1024 && i < 4) b /= 1024, i++;
    if (i == 0) snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    else snprintf(buf, len, "%.1f %s", b, unit[i]);
}

void say(const char *fmt, ...)
{
    if (quiet_mode) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("nebula-prepare: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void progress_begin(struct progress *p, const char *what, uint64_t total)
{
    p->what = what;
    p->total = total;
    p->done = 0;
    p->t0 = nb_now_s();
    p->last_draw = 0;
    p->last_pct = 0;
}

static void draw(struct progress *p, double t)
{
    double frac = p->total ? (double)p->done / (double)p->total : 1;
    if (frac > 1) frac = 1;
    double rate = t > p->t0 ? (double)p->done / (t - p->t0) : 0;
    char done[32], total[32], speed[32];
    fmt_bytes(p->done, done, sizeof done);
    fmt_bytes(p->total, total, sizeof total);
    fmt_bytes((uint64_t)rate, speed, sizeof speed);
    if (!on_tty) {
        fprintf(stderr, "nebula-prepare: %s %3d%% (%s of %s, %s/s)\n", p->what, (int)(frac * 100), done, total, speed);
        return;
    }
    enum { WIDTH = 30 };
    char bar[WIDTH + 1];
    int fill = (int)(frac * WIDTH);
    for (int i = 0; i < WIDTH; i++) bar[i] = i < fill ? '#' : '.';
    bar[WIDTH] = 0;
    double eta = rate > 0 ? (double)(p->total - p->done) / rate : 0;
    fprintf(stderr, "\r\033[K%s [%s] %3d%% %s/%s %s/s ETA %.0fs", p->what, bar, (int)(frac * 100), done, total, speed,
            eta);
    fflush(stderr);
}

void progress_add(struct progress *p, uint64_t n)
{
    p->done += n;
    if (quiet_mode || !p->total) return;
    double t = nb_now_s();
    if (on_tty) {
        if (t - p->last_draw >= 0.1) {
            p->last_draw = t;
            draw(p, t);
        }
        return;
    }
    int pct = (int)(100.0 * (double)p->done / (double)p->total);
    if (pct / 10 > p->last_pct / 10 && pct < 100 && t - p->t0 >= 2.0) { /* quick steps get their summary only */
        p->last_pct = pct;
        draw(p, t);
    }
}

void progress_end(struct progress *p, const char *message)
{
    if (quiet_mode) return;
    double dt = nb_now_s() - p->t0;
    if (on_tty && p->last_draw > 0) fputs("\r\033[K", stderr);
    if (p->done > 0 && dt > 0.05) {
        char done[32], speed[32];
        fmt_bytes(p->done, done, sizeof done);
        fmt_bytes((uint64_t)((double)p->done / dt), speed, sizeof speed);
        fprintf(stderr, "nebula-prepare: %s: %s (%s in %.1f s, %s/s)\n", p->what, message, done, dt, speed);
    } else {
        fprintf(stderr, "nebula-prepare: %s: %s\n", p->what, message);
    }
}
