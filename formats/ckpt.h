/* ckpt.h — the checkpoint, described once: its directory layout, what each file holds,
 * how a commit keeps it whole, and both sides of it. The writer is stage kind
 * `checkpoint` (stages/train/checkpoint_write.c: the model files from the optimizer
 * shards' snapshots, everything else through vf_ckpt_writer below); the readers are a
 * resume (the adamw shards, the first DiT partition), stage `sample` and `vflow sample`.
 *
 * A checkpoint dir D:
 *   D/step-N/            one complete checkpoint: the files below
 *   D/step-N.tmp/        one being written (never read; removed at the next start)
 *   D/latest             "step-N\n" of the newest complete one (for people and scripts;
 *                        resume does not trust it: it scans and verifies; a `latest`
 *                        that points outside D is refused, one that names a step dir
 *                        that is not there is reported and the scan goes on)
 * The files of D/step-N/:
 *   model.safetensors    every model tensor by its name (Wan's original names), F32: the
 *                        master weights; __metadata__ "format" "pt", "step", "preset".
 *                        Above the writer's model_shard_bytes instead Hugging Face's
 *                        sharded form (formats/st_sharded.h): model-0000k-of-0000N
 *                        .safetensors, each at most model_shard_bytes of tensor data
 *                        unless one tensor alone is larger, the tensors in the single
 *                        file's order (by name), each file with the same __metadata__,
 *                        and model.safetensors.index.json. A LoRA run's lora.safetensors
 *                        instead: the adapters alone (the base is not saved again),
 *                        diffusion_model.<name>.lora_A.weight / .lora_B.weight / .alpha,
 *                        F32.
 *   optimizer-kk-of-SS.safetensors
 *                        optimizer shard k of S: "exp_avg", "exp_avg_sq" F32 (numel), the
 *                        Adam moments of the flat range [offset, offset + numel);
 *                        __metadata__ "offset", "numel", "shard", "shards", "step",
 *                        "total" (decimal). A resume with another S takes the overlapping
 *                        pieces of any of them and checks that they cover its slice.
 *   state.json           {"format": "vflow-checkpoint v1", "step", "cursors" (the data
 *                        cursor of each replica, formats/lr_cursor.h), "seed" (the
 *                        config's train.seed), "lr": {"at_step" (the rate of this step),
 *                        and the config's lr, schedule, warmup, decay_steps, min_lr that
 *                        it has}, "adam_step", "loss", "params" (elements of the flat
 *                        vector), "shards", "replicas", "stages", "config_hash",
 *                        "config", "time" (Unix seconds)}
 *   manifest.json        written last: {"format": "vflow-checkpoint-manifest v1", "step",
 *                        "created" (Unix seconds), "files": {name: {"bytes", "crc32c"
 *                        (8 hex digits)}}} listing every other file of the dir
 *
 * A commit (vf_ckpt_writer_*): step-N.tmp/ created → its files written and fsynced, their
 * CRC32C computed on the way out → manifest.json (fsynced) → fsync step-N.tmp → rename
 * to step-N → fsync D → latest (temp file, fsync, rename, fsync D) → only then the
 * complete checkpoints beyond the newest `keep` removed. A step-N dir appears only by
 * that rename, so a crash or a full disk at any point leaves the previous checkpoints
 * intact and either the complete dir or a .tmp. A step-N dir whose files do not match
 * its manifest (damage after the fact, a partial copy) is skipped, loudly, for the
 * previous one.
 *
 * The config check: state.json holds "config", a flat JSON object of every setting that
 * must match for a resume to continue the same run (model dims, optimizer, data order),
 * and "config_hash" (vf_ckpt_config_hash of it). vf_ckpt_config_check refuses a mismatch
 * with VF_EUSAGE (exit code 2) naming each differing key with both values.
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
#define VF_CKPT_LORA "lora.safetensors"   /* a LoRA run's adapters, instead of the model */
/* A two-expert run (Wan 2.2 A14B): one subdir per expert, each laid out as a one-model
 * step dir's model files; state.json records "experts" (["high", "low"] or one of them)
 * and "boundary" (the t fraction after the shift where the experts switch). */
#define VF_CKPT_EXPERT_HIGH "high_noise_model"
#define VF_CKPT_EXPERT_LOW "low_noise_model"
/* ... and a LoRA run's two adapter files (ComfyUI keys, as lora.safetensors), at the top */
#define VF_CKPT_LORA_HIGH "lora_high_noise.safetensors"
#define VF_CKPT_LORA_LOW "lora_low_noise.safetensors"
/* A LoRA two-expert step's state.json is the high expert's (its "lora_base" is the high
 * expert's base); the low expert's record of its base is kept under this key as
 * {"lora_base": {...}}, the object models/dit_base.h reads, so that the step alone tells
 * which base each adapter belongs to. */
#define VF_CKPT_STATE_LOW "low_noise"

/* The checkpoint dir for a stage's `dir` param: the param itself, <run dir>/ckpt when
 * it is empty, or <run dir>/REST for "<run>/REST" (a dir inside the run dir the script
 * cannot name: the experts' dirs of finetune_wan22.lua). */
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
 * every shard file the index's weight_map names (a two-expert step: in high_noise_model/
 * or low_noise_model/, the only subdirs a listed name may have; or a LoRA run's
 * lora_high_noise / lora_low_noise file). VF_ECORRUPT (or VF_ENOTFOUND for a missing
 * manifest) with the file and the mismatch in st. */
int vf_ckpt_verify(const char *path, vf_status *st);

/* Complete step numbers in dir (names "step-N", no suffix), ascending; with `tmp` the
 * "step-N.tmp" ones instead. *steps is malloc'ed (free()), *n may be 0. A missing dir is
 * not an error; one that is not a directory is VF_EBADINPUT. */
int vf_ckpt_list(const char *dir, bool tmp, int64_t **steps, int *n, vf_status *st);

/* The step D/latest names: 0 with *step = N (or -1 when there is no latest);
 * VF_EBADINPUT when it is a symlink that leads outside dir, or holds anything but
 * "step-N" (a name with a '/' included). Whether step-N exists is not checked. */
int vf_ckpt_latest(const char *dir, int64_t *step, vf_status *st);

/* The model file of step dir `path` to open with vf_st_sharded_open: its index when the
 * model is sharded, else model.safetensors, else (a LoRA run's) lora.safetensors. */
void vf_ckpt_model_path(const char *path, char *out, size_t n);

/* Commits dir/step-`step` in the two-expert layout from the one-expert checkpoints of that
 * step, from[0] the high-noise expert's step dir and from[1] the low-noise one's (each
 * complete; borrowed): each one's model files hard-linked (the same file system: no
 * copy) into high_noise_model/ and low_noise_model/, or its lora.safetensors as
 * lora_high_noise / lora_low_noise; state.json the high expert's with "experts":
 * ["high", "low"], "boundary" and (a LoRA run on given weights) the low expert's
 * "lora_base" under VF_CKPT_STATE_LOW; listed with the CRCs of their own manifests, and
 * committed (and the complete steps beyond the newest `keep` removed) as any checkpoint.
 * path (n bytes, may be NULL) gets the step dir. Errors name the file. */
int vf_ckpt_join_experts(const char *dir, int64_t step, const char *const from[2], double boundary, int keep,
                         char *path, size_t n, vf_status *st);

/* Removes the step-N.tmp dirs a killed writer left in dir, calling each(user, path)
 * before each (each may be NULL). */
int vf_ckpt_remove_tmp(const char *dir, void (*each)(void *user, const char *path), void *user, vf_status *st);

/* Moves the complete step-N dirs of dir and its `latest` into a new subdir
 * dir/earlier-<UTC time> (a fresh run's start: an earlier run's checkpoints are kept but no
 * longer found, resumed or pruned as this run's). 0 with *first and *last the steps moved
 * (-1 when there were none: nothing is made) and moved (n bytes, may be NULL) the subdir;
 * VF_EIO naming the path when a move fails. */
int vf_ckpt_set_aside(const char *dir, char *moved, size_t n, int64_t *first, int64_t *last, vf_status *st);

/* ---- state.json */

/* What state.json records (vf_ckpt_state_text makes the file's text of it). */
typedef struct vf_ckpt_state_info {
    int64_t step;
    const char *config;  /* the run's config: a flat JSON object's text (NULL: {}) */
    const char *cursors; /* the replicas' data cursors: a JSON list's text (NULL: []) */
    double lr;           /* the learning rate of this step */
    double loss;
    int64_t params;      /* elements of the flat vector */
    int shards, replicas, stages;
    const char *lora_base; /* a LoRA run's base (path, hash: models/dit_base.h) as a JSON
                            * object's text, recorded as "lora_base"; NULL: none */
    int64_t skipped;       /* steps the optimizer took no update in (an expert routed by the
                            * drawn t that got no sample): "adam_step", Adam's step count
                            * a resume continues, is step − skipped */
} vf_ckpt_state_info;

/* state.json's text (caller frees). NULL with st set when config or cursors are not
 * JSON, or out of memory. */
char *vf_ckpt_state_text(const vf_ckpt_state_info *s, vf_status *st);
/* Of a parsed state.json (vf_ckpt.state): the run's config (borrowed; NULL when it has
 * none), and the data cursor of replica r (borrowed; "" when it has none). */
const vf_json *vf_ckpt_state_config(const vf_json *state);
const char *vf_ckpt_state_cursor(const vf_json *state, int r);

/* ---- the optimizer shards */

/* Host f32 moments of flat elements [lo, hi) into m and v (the caller's, hi - lo floats
 * each) from the optimizer-*.safetensors files of step dir path, whatever the number of
 * shards that wrote them. VF_ECORRUPT naming the file when one is damaged or they do not
 * cover the range. */
int vf_ckpt_read_moments(const char *path, int64_t lo, int64_t hi, float *m, float *v, vf_status *st);

/* ---- writing one checkpoint: vf_ckpt_writer */

typedef struct vf_ckpt_writer vf_ckpt_writer;

/* Starts checkpoint `step` in dir (created when missing): a leftover step-N.tmp is
 * removed and made anew. On success *out (owned: vf_ckpt_writer_commit or
 * vf_ckpt_writer_abort). Errors name the path ("checkpoint: mkdir …"). */
int vf_ckpt_writer_begin(const char *dir, int64_t step, vf_ckpt_writer **out, vf_status *st);
/* The step being written, and its step-N.tmp dir (borrowed from w). */
int64_t vf_ckpt_writer_step(const vf_ckpt_writer *w);
const char *vf_ckpt_writer_dir(const vf_ckpt_writer *w);
/* Where file `name` of the checkpoint is written: step-N.tmp/<name>. */
void vf_ckpt_writer_path(const vf_ckpt_writer *w, const char *name, char *out, size_t n);
/* Lists file `name`, written and fsynced into step-N.tmp by the caller, in the manifest. */
int vf_ckpt_writer_add(vf_ckpt_writer *w, const char *name, int64_t bytes, uint32_t crc, vf_status *st);
/* Writes text as file `name` (fsynced) and lists it. */
int vf_ckpt_writer_text(vf_ckpt_writer *w, const char *name, const char *text, vf_status *st);
/* Writes and lists optimizer shard k of S: the moments m, v of flat [off, off + n) of a
 * vector of `total` elements (borrowed, host f32). */
int vf_ckpt_writer_optimizer(vf_ckpt_writer *w, int k, int S, int64_t off, int64_t n, int64_t total,
                             const float *m, const float *v, vf_status *st);
/* Optimizer shard k of S streamed: the file opened with its header, the moments of flat
 * [off, off + n) put in pieces in any order, and on close checked to be all there,
 * fsynced and listed; the same bytes vf_ckpt_writer_optimizer writes. *out is owned
 * (close or abort; close frees it also on failure). */
typedef struct vf_ckpt_optim vf_ckpt_optim;
int vf_ckpt_optim_open(vf_ckpt_writer *w, int k, int S, int64_t off, int64_t n, int64_t total,
                       vf_ckpt_optim **out, vf_status *st);
/* m, v (borrowed, host f32) of flat elements [a, a + cnt) of the shard's range. */
int vf_ckpt_optim_put(vf_ckpt_optim *o, int64_t a, int64_t cnt, const float *m, const float *v, vf_status *st);
int vf_ckpt_optim_close(vf_ckpt_optim *o, vf_status *st);
void vf_ckpt_optim_abort(vf_ckpt_optim *o); /* NULL is fine; the file stays for the .tmp's removal */
/* Writes and lists state.json of s (borrowed; its step is the writer's). */
int vf_ckpt_writer_state(vf_ckpt_writer *w, const vf_ckpt_state_info *s, vf_status *st);
/* Commits: manifest.json, then the rename to step-N, `latest`, and the removal of the
 * complete checkpoints beyond the newest `keep` (keep >= 1), in the order above. w is
 * freed, also on failure (the .tmp then removed, the previous checkpoints untouched).
 * path (n bytes, may be NULL) gets the step dir, *bytes (may be NULL) the bytes of all
 * its files. */
int vf_ckpt_writer_commit(vf_ckpt_writer *w, int keep, char *path, size_t n, int64_t *bytes, vf_status *st);
/* Gives the checkpoint up: the .tmp removed, w freed. NULL is fine. */
void vf_ckpt_writer_abort(vf_ckpt_writer *w);

/* ---- small durable-write helpers (the writer's, and tests that damage a checkpoint) */

/* Writes text to path (created/truncated), fsyncs it; *crc (may be NULL) = CRC32C of the
 * bytes, *bytes (may be NULL) their count. */
int vf_ckpt_write_text(const char *path, const char *text, uint32_t *crc, int64_t *bytes,
                       vf_status *st);
/* fsync of a directory (after creating, renaming or removing entries in it). */
int vf_ckpt_fsync_dir(const char *dir, vf_status *st);
/* Removes a step dir and the files in it (one level: checkpoints have no subdirs).
 * Missing is fine. */
int vf_ckpt_remove(const char *path, vf_status *st);

/* ---- the config in state.json (ckpt_state.c) */

/* 16 hex digits naming a config: FNV-1a 64 of its canonical JSON. */
void vf_ckpt_config_hash(const vf_json *config, char out[17]);
/* 0 when `saved` (from state.json) and `now` have the same keys with equal values;
 * otherwise VF_EUSAGE, st = "<ckpt>: this run's config differs from the checkpoint's
 * in N key(s): k1 (checkpoint V, now W); k2 (...); use the original settings or start a
 * new run dir". */
int vf_ckpt_config_check(const char *ckpt_path, const vf_json *saved, const vf_json *now,
                         vf_status *st);

#endif /* VF_CKPT_H */
