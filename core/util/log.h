/* log.h — one line per event: "2026-11-30T04:08:50.123Z name: message".
 * Processes set their name once; libraries never log on their own. */
#ifndef NB_LOG_H
#define NB_LOG_H

void nb_log_set_name(const char *name);
void nb_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
