/* decode_guard.h — what the decode stage does when libav itself crashes or hangs.
 *
 * The per-file deadline of decode_av.h is checked at I/O points and between frames; a
 * decoder stuck inside one libav call, or one that crashes, is out of its reach. The
 * guard covers both for the decode worker process (VF_STAGE_OWN_WORKER: it holds only
 * this stage):
 *  - a watchdog thread: when the current file makes no progress for its deadline plus a
 *    grace period, it records the file and ends the process (exit code 3), so the run
 *    fails naming the file instead of hanging;
 *  - handlers for SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT: they record the file and let
 *    the signal take its course.
 * "Record" means a line {"path","source","reason","stage","t"} appended to both
 * <run dir>/quarantine.jsonl (this run's list) and <run dir>/decode_fatal.jsonl, which
 * survives reruns: a later run in the same run dir skips (and quarantines) a file listed
 * there with the same source identity (path + size + mtime) instead of dying on it again.
 *
 * Fault injection for tests: VFLOW_FAULT_DECODE=hang:NAME or crash:NAME makes the guard
 * simulate a hang (sleep) or a crash (SIGSEGV) on files whose base name is NAME.
 *
 * One guard per process (the first decode instance that starts one); functions are
 * no-ops for others. Not for use outside stages/decode*.c.
 */
#ifndef VF_DECODE_GUARD_H
#define VF_DECODE_GUARD_H
#include "runtime/vflow.h"

/* Reads decode_fatal.jsonl of run_dir, installs the handlers, starts the watchdog.
 * grace_s: extra time past a file's deadline before the watchdog acts. */
int vf_decode_guard_start(const char *run_dir, const char *stage, double grace_s, vf_status *st);
void vf_decode_guard_stop(void);

/* True if (path, source) crashed or hung a decoder in an earlier run; why gets that
 * run's reason. */
bool vf_decode_guard_known(const char *path, const char *source, char *why, size_t whyn);

/* Arms the watchdog for a file: budget_s from now (and applies fault injection). */
void vf_decode_guard_enter(const char *path, const char *source, double budget_s);
/* Time spent outside libav (waiting for credit downstream) does not count: moves the
 * watchdog's deadline `seconds` later. */
void vf_decode_guard_extend(double seconds);
void vf_decode_guard_leave(void);
#endif
