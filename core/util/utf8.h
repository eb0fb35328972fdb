/* utf8.h — the one UTF-8 validity rule of the tree (RFC 3629): the length
 * of the valid character at s, n bytes left, or 0 — a stray continuation
 * byte, a lead byte of a 5- or 6-byte form, an overlong form (C0, C1, E0
 * 80-9F, F0 80-8F), a UTF-16 surrogate (ED A0-BF) or a code point past
 * U+10FFFF (F4 90-, F5-FF), or a character cut by the end.  The API refuses
 * bodies by it and keeps its error texts valid by it; the grammar counts a
 * token's characters by it. */
#ifndef NB_UTF8_H
#define NB_UTF8_H

#include <stddef.h>

static inline size_t nb_utf8_len(const unsigned char *s, size_t n)
{
    if (n == 0) return 0;
    size_t len = s[0] < 0x80 ? 1 : (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || len > n || (len == 2 && s[0] < 0xC2) || (len == 4 && s[0] > 0xF4)) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (len == 3 && ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0))) return 0;
    if (len == 4 && ((s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90))) return 0;
    return len;
}

#endif
