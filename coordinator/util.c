/* util.c — the coordinator's leaves: the clock and a path join, used by
 * every other piece (so they sit below all of them in the file graph). */
#include "coordinator/coord.h"

#include "core/event/event.h"
#include "core/util/err.h"

#include <string.h>

double coord_now(void) { return event_now(); }

int coord_path(char *dst, size_t len, const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    if (a + 1 + b + 1 > len) return NB_EINVAL;
    memmove(dst, dir, a); /* dir may be dst's own prefix */
    dst[a] = '/';
    memcpy(dst + a + 1, name, b + 1);
    return 0;
}
