/* mapfile.h — a whole regular file mapped read-only: the one way model files
 * (GGUF, safetensors) are opened, so every format reports open/size/mmap
 * failures the same way. */
#ifndef NB_MAPFILE_H
#define NB_MAPFILE_H

#include <stddef.h>

/* Maps path; a file shorter than min_bytes (or empty) fails with short_code
 * and `why_short` ("empty file", "too short for a header") in the message.
 * Unmap with munmap. */
int nb_map_file(const char *path, size_t min_bytes, int short_code, const char *why_short, void **map, size_t *size,
                char *err, size_t errlen);

#endif
