/* st_sharded.h — a model's safetensors read as one whether it is a single file or Hugging
 * Face's sharded form, and the names and index of that form for writers.
 *
 * The sharded form is what transformers' and diffusers' save_pretrained(max_shard_size=…)
 * write and what vflow's checkpoints write above `model_shard_bytes`:
 *   <stem>-00001-of-0000N.safetensors … <stem>-0000N-of-0000N.safetensors
 *   <stem>.safetensors.index.json   {"metadata": {"total_size": BYTES, …},
 *                                     "weight_map": {tensor name: file name beside it}}
 * total_size is the sum of the tensors' data bytes (headers not counted).
 *
 * Errors name the index, the tensor and the file: VF_EBADINPUT for an index that is not
 * JSON or has no weight_map, a file name with a '/', a shard that is missing, or a tensor
 * that is not in the file the map names; a shard's own damage is vf_st_open's error.
 */
#ifndef VF_ST_SHARDED_H
#define VF_ST_SHARDED_H

#include "formats/safetensors.h"

#define VF_ST_INDEX_SUFFIX ".safetensors.index.json"

typedef struct vf_st_sharded vf_st_sharded;

/* Opens path: a *.json index (every file its weight_map names is opened, headers only:
 * the data are mapped, not read) or one .safetensors file. Caller owns *out
 * (vf_st_sharded_close). */
int vf_st_sharded_open(const char *path, vf_st_sharded **out, vf_status *st);
void vf_st_sharded_close(vf_st_sharded *s); /* NULL is fine */

/* Tensor `name` and the file that holds it (*file, *path may be NULL): for an index,
 * where its weight_map puts it (a tensor the map does not name is absent); for one file,
 * that file. NULL when absent. Pointers live until vf_st_sharded_close. */
const vf_st_tensor *vf_st_sharded_find(const vf_st_sharded *s, const char *name, const vf_st_file **file,
                                       const char **path);

/* Every file of the set, in the order the weight map first names them (one for a single
 * file): returns their count; (*files)[i] and (*paths)[i] (either may be NULL) are
 * borrowed until vf_st_sharded_close. */
int vf_st_sharded_files(const vf_st_sharded *s, const vf_st_file *const **files, const char *const **paths);

/* The file name of shard k (0-based) of n: "<stem>-%05d-of-%05d.safetensors" with k + 1,
 * as save_pretrained numbers them. */
void vf_st_shard_name(const char *stem, int k, int n, char *out, size_t len);

/* The index's text: {"metadata": {"total_size": total_size, then the nmeta pairs
 * meta[2i]: meta[2i + 1] (strings)}, "weight_map": {names[j]: the file name of shard
 * shard_of[j] of nshards of stem}} with the tensors in the order given. Caller frees;
 * NULL when out of memory. */
char *vf_st_index_text(const char *stem, const char *const *names, const int *shard_of, int n, int nshards,
                       int64_t total_size, const char *const *meta, int nmeta);

#endif /* VF_ST_SHARDED_H */
