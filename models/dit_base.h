/* dit_base.h — the frozen base a LoRA run's adapters belong to, kept reachable.
 *
 * A LoRA checkpoint holds the adapters only. Its state.json records the base as
 *   "lora_base": {"path": ABSOLUTE PATH, "sha256": HEX, "bytes": N}
 * the path as given to `weights` made absolute, and the SHA-256 of the bytes of the files
 * the weights are read from (the file, or an index's shards in order; N their sum), so
 * that a base that moved, vanished or changed is told apart from the one trained on.
 * Checkpoints written before the record have only the config's "lora.base" (the path as
 * given, no hash). Sampling and --resume check the base they are about to use against
 * the record and refuse a missing or different one, naming the recorded path and hash and
 * how to give the base.
 */
#ifndef VF_DIT_BASE_H
#define VF_DIT_BASE_H
#include "runtime/json.h"
#include "runtime/vflow.h"
#include <limits.h>

#define VF_DIT_BASE_CHUNK (1 << 20) /* bytes hashing reads at a time: the one buffer it holds */

typedef struct vf_dit_base {
    char path[PATH_MAX];     /* absolute; "" = none (the seeded init) */
    char sha256[65];         /* lowercase hex; "" = not recorded (an older checkpoint) */
    int64_t bytes;
} vf_dit_base;

/* The identity of the weights at `weights` (any source vf_dit_wsrc_open reads): its
 * absolute path and the hash of its files' bytes (read once, start to end). */
int vf_dit_base_id(const char *weights, vf_dit_base *out, vf_status *st);

/* The base recorded in a checkpoint's state.json: 1 found (out filled; sha256 "" for an
 * older checkpoint), 0 none (a LoRA on the seeded init, or not a LoRA checkpoint). */
int vf_dit_base_recorded(const vf_json *state, vf_dit_base *out);

/* {"path","sha256","bytes"} of b: a new JSON object, NULL when out of memory. */
vf_json *vf_dit_base_json(const vf_dit_base *b);

/* Checks the base about to be used against the one recorded in checkpoint `ckpt`
 * (state.json `state`): `use` is the weights given ("" or NULL = none); with none,
 * `use_record` lets the recorded path stand in (sampling), else none is the seeded init
 * (a run's `weights`). `how` is the option that gives them ("--weights", "--set weights=").
 * 0 when they agree or nothing was recorded; VF_EBADINPUT with one line when the base is
 * missing or its content differs, naming the recorded path and hash, what was found, and
 * `how` to give the right one. *now: the path to load ("" = the seeded init) and, when it
 * was hashed, its identity. */
int vf_dit_base_verify(const char *ckpt, const vf_json *state, const char *use, bool use_record, const char *how,
                       vf_dit_base *now, vf_status *st);
#endif
