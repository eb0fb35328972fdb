/* getopt_long table entries, written once: every program's option table is a
 * list of these, so a table reads as names and codes, not as the four fields
 * of struct option repeated per entry. */
#ifndef NB_UTIL_OPTS_H
#define NB_UTIL_OPTS_H

#include <getopt.h>

#define NB_OPT_ARG(name, code) {name, required_argument, 0, code} /* --name VALUE */
#define NB_OPT_FLAG(name, code) {name, no_argument, 0, code}      /* --name */
#define NB_OPT_END {0, 0, 0, 0}

#endif
