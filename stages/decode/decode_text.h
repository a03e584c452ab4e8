/* decode_text.h — the text embedding of a manifest row (column `text_emb`), loaded by
 * the decode stage and attached to every clip of the row as tensor "text_emb".
 *
 * The file is a safetensors file holding one tensor (L, D) of any float dtype (F32, F64,
 * BF16, F16): the text encoder's output for the real tokens of the caption
 * (tools/encode_captions.py writes such files). It becomes a host bf16 (L, D) tensor,
 * rounded to nearest even: the latent cache stores embeddings as bf16, and rounding here
 * makes the key hash, the stored record and what latent_reader emits one value.
 */
#ifndef VF_DECODE_TEXT_H
#define VF_DECODE_TEXT_H
#include "runtime/vflow.h"

/* Loads `path`. 0: *out (caller owns) is bf16 (L, D) with 1 <= L <= text_len and
 * D == text_dim; 1: the file is bad, `why` says which file and tensor and what is wrong
 * (missing, unreadable, not one tensor, not 2-D, another width, too long, not a float
 * dtype, NaN or infinity); < 0: out of memory (st set). */
int vf_decode_text_load(const char *path, int64_t text_dim, int64_t text_len, vf_tensor **out,
                        char *why, size_t whyn, vf_status *st);
#endif
