/* ckpt.h — the on-disk checkpoint layout, shared by the stage that writes checkpoints
 * (stages/train/checkpoint.c) and the stages that resume from them (adamw shards, the first
 * DiT partition).
 *
 * Layout (docs/TRAINING.md, "Checkpoints") of a checkpoint dir D:
 *   D/step-N/            one complete checkpoint: model.safetensors (or, above the
 *                        writer's model_shard_bytes, model-0000k-of-0000N.safetensors and
 *                        model.safetensors.index.json: Hugging Face's sharded form; a
 *                        LoRA run's: lora.safetensors, the adapters alone),
 *                        optimizer-kk-of-SS.safetensors, state.json, and manifest.json,
 *                        written last, which lists every other file with its byte size
 *                        and CRC32C
 *   D/step-N.tmp/        one being written (never read; removed at the next start)
 *   D/latest             "step-N\n" of the newest complete one (for people and scripts;
 *                        resume does not trust it: it scans and verifies; a `latest`
 *                        that points outside D is refused, one that names a step dir
 *                        that is not there is reported and the scan goes on)
 * A step-N dir appears only by rename after its files and manifest were fsynced, so a
 * crash leaves either the complete dir or a .tmp. A step-N dir whose files do not match
 * its manifest (damage after the fact, a partial copy) is skipped, loudly, for the
 * previous one.
 *
 * The config check: state.json holds "config", a flat JSON object of every setting that
 * must match for a resume to continue the same run (model dims, optimizer, data order).
 * vf_ckpt_config_check refuses a mismatch with VF_EUSAGE (exit code 2) naming each
 * differing key with both values.
 */
#ifndef VF_CKPT_H
#define VF_CKPT_H

#include "runtime/json.h"
#include "runtime/vflow.h"

#include <limits.h>

#define VF_CKPT_MANIFEST "manifest.json"
#define VF_CKPT_STATE "state.json"
#define VF_CKPT_MODEL "model.safetensors"
#define VF_CKPT_MODEL_STEM "model" /* of the shards: model-00001-of-0000N.safetensors */
#define VF_CKPT_MODEL_INDEX "model.safetensors.index.json"
/* A LoRA run's checkpoints hold the adapters instead of the model (the base is not saved
 * again): diffusion_model.<name>.lora_A.weight / .lora_B.weight / .alpha, F32 */
#define VF_CKPT_LORA "lora.safetensors"

/* The checkpoint dir for a stage's `dir` param: the param itself, or <run dir>/ckpt when
 * it is empty. */
void vf_ckpt_dir(const char *param, const char *run_dir, char *out, size_t n);

/* A verified checkpoint. */
typedef struct vf_ckpt {
    int64_t step;
    char path[PATH_MAX];   /* D/step-N */
    vf_json *state;        /* parsed state.json (owned) */
    int skipped;           /* newer step dirs skipped as damaged */
    int64_t latest;        /* the step D/latest names, -1 when there is no latest */
    bool latest_missing;   /* ... and that step dir is not there */
} vf_ckpt;

/* Called once per damaged checkpoint skipped, with a message naming it and why. */
typedef void (*vf_ckpt_warn_fn)(void *user, const char *msg);

/* Finds the newest complete checkpoint in dir whose files match its manifest and whose
 * state.json parses. 0 with *out filled (vf_ckpt_fini), VF_ENOTFOUND when there is none
 * (no dir, no step dirs, or every one damaged: st says which; out->skipped and
 * out->latest say what was there), VF_EBADINPUT when dir is not a directory or its
 * `latest` points outside it, VF_EIO on a directory error. warn may be NULL; it also
 * hears of a `latest` that names a missing step dir. */
int vf_ckpt_find(const char *dir, vf_ckpt_warn_fn warn, void *user, vf_ckpt *out, vf_status *st);
void vf_ckpt_fini(vf_ckpt *c);
/* One step dir as vf_ckpt_find checks each: its manifest verified, its state.json parsed
 * (owned by the caller) with "step" equal to `step` (or any, for step < 0). VF_ECORRUPT /
 * VF_ENOTFOUND naming the file otherwise. */
int vf_ckpt_open(const char *path, int64_t step, vf_json **state, vf_status *st);

/* Checks one step dir against its manifest: every listed file present with its size and
 * CRC32C, state.json listed and the model listed: model.safetensors, or its index and
 * every shard file the index's weight_map names. VF_ECORRUPT (or VF_ENOTFOUND for a
 * missing manifest) with the file and the mismatch in st. */
int vf_ckpt_verify(const char *path, vf_status *st);

/* Complete step numbers in dir (names "step-N", no suffix), ascending; with `tmp` the
 * "step-N.tmp" ones instead. *steps is malloc'ed (free()), *n may be 0. A missing dir is
 * not an error; one that is not a directory is VF_EBADINPUT. */
int vf_ckpt_list(const char *dir, bool tmp, int64_t **steps, int *n, vf_status *st);

/* The step D/latest names: 0 with *step = N (or -1 when there is no latest);
 * VF_EBADINPUT when it is a symlink that leads outside dir, or holds anything but
 * "step-N" (a name with a '/' included). Whether step-N exists is not checked. */
int vf_ckpt_latest(const char *dir, int64_t *step, vf_status *st);

/* ---- writing helpers (stages/train/checkpoint.c) */

/* Writes text to path (created/truncated), fsyncs it; *crc (may be NULL) = CRC32C of the
 * bytes, *bytes their count. */
int vf_ckpt_write_text(const char *path, const char *text, uint32_t *crc, int64_t *bytes,
                       vf_status *st);
/* fsync of a directory (after creating, renaming or removing entries in it). */
int vf_ckpt_fsync_dir(const char *dir, vf_status *st);
/* Removes a step dir and the files in it (one level: checkpoints have no subdirs).
 * Missing is fine. */
int vf_ckpt_remove(const char *path, vf_status *st);

/* ---- config */

/* 16 hex digits naming a config: FNV-1a 64 of its canonical JSON. */
void vf_ckpt_config_hash(const vf_json *config, char out[17]);
/* 0 when `saved` (from state.json) and `now` have the same keys with equal values;
 * otherwise VF_EUSAGE, st = "<ckpt>: this run's config differs from the checkpoint's
 * in N key(s): k1 (checkpoint V, now W); k2 (...); use the original settings or start a
 * new run dir". */
int vf_ckpt_config_check(const char *ckpt_path, const vf_json *saved, const vf_json *now,
                         vf_status *st);

#endif /* VF_CKPT_H */
