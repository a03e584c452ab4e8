/* text_emb.h — a caption's text embedding file: a safetensors file of one float tensor
 * (L, D), the rows of an encoder's last hidden state for the caption's real tokens (what
 * tools/encode_captions.py writes and a manifest's text_emb column names). */
#ifndef VF_FORMATS_TEXT_EMB_H
#define VF_FORMATS_TEXT_EMB_H

#include "runtime/vflow.h"

#include <stdint.h>

/* Reads the file at path into *out (caller frees; rows·text_dim f32, row-major) and its
 * row count L into *rows. The file must hold exactly one F32/BF16/F16/F64 tensor of shape
 * (L, text_dim), 1 <= L <= text_len, every value finite. Otherwise VF_EBADINPUT with st's
 * message "PATH: what is wrong" (naming the tensor, its dtype and shape, or the row and
 * column of a non-finite value); VF_ENOMEM when out of memory. */
int vf_text_emb_read(const char *path, int64_t text_dim, int64_t text_len, float **out, int64_t *rows,
                     vf_status *st);

#endif
