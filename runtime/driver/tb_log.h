/* tb_log.h — what the driver logs to TensorBoard: the monitor's picture of a run
 * (metrics.h) turned into scalars in <run dir>/tb/ (formats/tb_events.h), and images.
 *
 * Per optimizer step, from the "train_step" event rows (the same numbers metrics.jsonl
 * holds): train/loss, train/lr, train/grad_norm, perf/step_s, perf/samples_s,
 * perf/tokens_s, and perf/mfu where the row carries one. Per stage, on each new step:
 * mem/<stage>/measured (the peak of the stage's memory account so far, as metrics.jsonl's
 * "peak") and mem/<stage>/plan (the planner's prediction of that account, vf_mplan);
 * per edge edge/<from>-<to>/fill (0..1). Runs that sum "clips" gauges (precompute):
 * data/clips_s and data/quarantined (lines of quarantine.jsonl).
 *
 * Images: an event row with "image" (a PNG file, relative to the run dir) is one image
 * event at the row's "step", tagged by its "tag" or else sample/<file stem>: the sample
 * stage's first frames, sample/<prompt stem>. The file's bytes go in as they are (at
 * most VF_TB_IMAGE_MAX), width and height from its IHDR; a missing, oversized or
 * garbled file is a WARN line and no event. A sample is logged when it is done, after
 * later steps' scalars; a resume's cut still drops exactly the records of its steps
 * (vf_tb_truncate_from).
 *
 * Steps: a training run (a graph with a loop edge) logs everything at the optimizer
 * step; its per-stage and per-edge points start with the first step. Other runs use
 * whole seconds since the run started. A resumed run writes a SessionLog START at its
 * first step and cuts the earlier files of <run dir>/tb/ before that step: TensorBoard
 * (which honours the START) and per-file readers such as tbparse both see the curves
 * continue with one point per step. A fresh run removes earlier files, as it starts
 * metrics.jsonl over.
 */
#ifndef VF_TB_LOG_H
#define VF_TB_LOG_H
#include "runtime/driver/metrics.h"
#include "runtime/json.h"

#define VF_TB_IMAGE_MAX (16 << 20) /* bytes of one image file */

/* Opens the event file in <run_dir>/tb/ and reads the plan of g. *out is owned by the
 * caller (vf_tb_log_close). On failure st names the path. */
int vf_tb_log_open(vf_tb_log **out, const vf_graph *g, const char *run_dir, bool resumed, vf_status *st);
/* Where WARN lines go (a bad image file): warn(arg, message); unset, stderr. */
void vf_tb_log_set_warn(vf_tb_log *t, void (*warn)(void *arg, const char *msg), void *arg);
/* An event row of stage `stage` (parsed). */
void vf_tb_log_event(vf_tb_log *t, const vf_monitor *m, int stage, const vf_json *row);
/* After a sample of the stages marked in touched (NULL: all, at the end of the run):
 * their mem/ and input edge/ points when the step moved since their last ones, the
 * data/ points, and the periodic flush. */
void vf_tb_log_sample(vf_tb_log *t, const vf_monitor *m, const bool *touched);
/* Flushes, closes and frees. NULL is fine. */
void vf_tb_log_close(vf_tb_log *t);

#endif /* VF_TB_LOG_H */
