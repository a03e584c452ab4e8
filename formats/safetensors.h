/* safetensors.h — reading and writing the safetensors format (huggingface/safetensors).
 *
 * Layout: u64 little-endian N, N bytes of UTF-8 JSON header (padded with spaces), then
 * the data buffer. Header entries: {"name": {"dtype","shape","data_offsets":[b,e]}},
 * plus an optional "__metadata__" map of strings to strings.
 *
 * The reader maps the file read-only and validates it the way the reference reader
 * (safetensors 0.8, tensor.rs) does: header size <= 100 MB and inside the file, valid
 * UTF-8 JSON, every tensor with a known dtype, an unsigned shape and two offsets,
 * offsets tiling the buffer exactly (sorted by offset: no gap, no overlap),
 * e - b == numel * dtype size (checked for overflow), file length == 8 + N + buffer,
 * "__metadata__" values strings only. It is stricter in one place: a tensor name that
 * appears twice is refused (the reference keeps the last one). Errors name the file and
 * the tensor.
 *
 * The writer orders tensors like the reference writer (descending dtype order of the
 * reference's Dtype enum, i.e. by alignment, then by name), pads the header to a
 * multiple of 8 with spaces so every tensor is aligned, and streams tensor by tensor
 * from the caller's memory (or a fill callback) to the fd: saving a model never needs
 * a second full copy. For the same tensors and at most one metadata key its output is
 * byte-identical to safetensors.numpy.save.
 *
 * Used by models/ (VAE and DiT weights), the checkpoint stage (model and optimizer
 * files) and tests/tools/st_tool.c.
 */
#ifndef VF_SAFETENSORS_H
#define VF_SAFETENSORS_H
#include "runtime/vflow.h"
#include <stdio.h>

/* In the order of the reference's Dtype enum (the writer sorts by it). */
typedef enum vf_st_dtype {
    VF_ST_BOOL = 0,
    VF_ST_F4,
    VF_ST_F6_E2M3,
    VF_ST_F6_E3M2,
    VF_ST_U8,
    VF_ST_I8,
    VF_ST_F8_E5M2,
    VF_ST_F8_E4M3,
    VF_ST_F8_E8M0,
    VF_ST_F8_E4M3FNUZ,
    VF_ST_F8_E5M2FNUZ,
    VF_ST_I16,
    VF_ST_U16,
    VF_ST_F16,
    VF_ST_BF16,
    VF_ST_I32,
    VF_ST_U32,
    VF_ST_F32,
    VF_ST_C64,
    VF_ST_F64,
    VF_ST_I64,
    VF_ST_U64,
    VF_ST_DTYPE_COUNT
} vf_st_dtype;

const char *vf_st_dtype_name(vf_st_dtype dt);          /* "F32"; static string */
int vf_st_dtype_bits(vf_st_dtype dt);                  /* bits per element (4, 6, 8 … 64) */
/* Exact (case-sensitive) name -> dtype: 0, or VF_EINVAL. */
int vf_st_dtype_parse(const char *name, vf_st_dtype *out);
/* Counterparts of the runtime's dtypes (U8 I32 F32 BF16 F16). vf_st_dtype_to_vf
 * returns VF_EINVAL for a dtype the runtime has no tensor type for. */
vf_st_dtype vf_st_dtype_from_vf(vf_dtype dt);
int vf_st_dtype_to_vf(vf_st_dtype dt, vf_dtype *out);

/* ------------------------------------------------------------------ reader */

/* One tensor of an open file. All pointers are borrowed from the vf_st_file and live
 * until vf_st_close. */
typedef struct vf_st_tensor {
    const char *name;
    vf_st_dtype dtype;
    int ndim;
    const int64_t *shape;  /* ndim entries (NULL when ndim == 0: a scalar) */
    int64_t numel;
    uint64_t nbytes;
    uint64_t offset;       /* from the start of the data buffer */
    const void *data;      /* into the mapping; not necessarily aligned for foreign files */
} vf_st_tensor;

typedef struct vf_st_file vf_st_file;

/* Maps and validates `path`. Caller owns *out (vf_st_close). VF_ENOTFOUND for a
 * missing file, VF_EIO for read errors, VF_ECORRUPT for a malformed file. */
int vf_st_open(const char *path, vf_st_file **out, vf_status *st);
/* Validates an in-memory file image. buf is borrowed and must outlive *out; `label`
 * names it in messages (copied). */
int vf_st_open_mem(const void *buf, size_t len, const char *label, vf_st_file **out,
                   vf_status *st);
void vf_st_close(vf_st_file *f); /* NULL is fine */

/* Tensors in data-offset order. */
int vf_st_count(const vf_st_file *f);
const vf_st_tensor *vf_st_at(const vf_st_file *f, int i);
const vf_st_tensor *vf_st_find(const vf_st_file *f, const char *name); /* NULL if absent */
/* Metadata ("__metadata__"); strings borrowed from f. */
int vf_st_meta_count(const vf_st_file *f);
void vf_st_meta_at(const vf_st_file *f, int i, const char **key, const char **val);
const char *vf_st_meta_get(const vf_st_file *f, const char *key); /* NULL if absent */
uint64_t vf_st_header_len(const vf_st_file *f); /* N */

/* Looks up `name` and checks its shape equals (ndim, shape): VF_ENOTFOUND /
 * VF_EINVAL with a message naming file, tensor, expected and found shapes. *out is
 * borrowed from f. */
int vf_st_expect(const vf_st_file *f, const char *name, int ndim, const int64_t *shape,
                 const vf_st_tensor **out, vf_status *st);
/* Copies tensor `name` into dst (numel floats), converting from F32, F64, BF16 or F16;
 * other dtypes and a numel mismatch are VF_EINVAL naming the file and tensor. */
int vf_st_read_f32(const vf_st_file *f, const char *name, float *dst, int64_t numel,
                   vf_status *st);
/* Gives back the pages of a mapped file that lie wholly inside tensor t's data (madvise
 * MADV_DONTNEED; the mapping stays valid and rereads them on access), so reading a large
 * file tensor by tensor keeps about one tensor resident instead of the whole file. A
 * no-op for in-memory images. */
void vf_st_drop(const vf_st_file *f, const vf_st_tensor *t);
/* New host tensor holding a copy of tensor `name` (dtype must have a runtime
 * counterpart; at most VF_MAX_DIMS dims). Caller owns *out. */
int vf_st_read_tensor(const vf_st_file *f, const char *name, vf_tensor **out,
                      vf_status *st);

/* ------------------------------------------------------------------ writer */

/* Produces bytes [offset, offset + n) of one tensor's little-endian data into buf, for
 * data that is not in memory as it will be written (converted on the fly, on a device).
 * Called in increasing offset order with n <= 1 MiB. Return 0 or a negative code with
 * st set. */
typedef int (*vf_st_fill_fn)(void *user, uint64_t offset, void *buf, size_t n,
                             vf_status *st);

typedef struct vf_st_writer vf_st_writer;

vf_st_writer *vf_st_writer_new(vf_status *st); /* caller owns; vf_st_writer_free */
void vf_st_writer_free(vf_st_writer *w);       /* NULL is fine */
/* Adds a tensor; name and shape are copied, data (numel * size bytes, little-endian)
 * is borrowed until the write call returns. Duplicate names, invalid UTF-8 names,
 * the name "__metadata__" and negative dims are VF_EINVAL. */
int vf_st_writer_add(vf_st_writer *w, const char *name, vf_st_dtype dt, int ndim,
                     const int64_t *shape, const void *data, vf_status *st);
/* As vf_st_writer_add, the bytes coming from fill(user, …) at write time. */
int vf_st_writer_add_fill(vf_st_writer *w, const char *name, vf_st_dtype dt, int ndim,
                          const int64_t *shape, vf_st_fill_fn fill, void *user,
                          vf_status *st);
/* As vf_st_writer_add, the bytes coming later in pieces through a vf_st_stream (below);
 * write_fd / write_file / save refuse a writer that has one. */
int vf_st_writer_add_streamed(vf_st_writer *w, const char *name, vf_st_dtype dt, int ndim,
                              const int64_t *shape, vf_status *st);
/* Adds a host tensor (borrowed: it must stay alive and unchanged until written). */
int vf_st_writer_add_tensor(vf_st_writer *w, const char *name, const vf_tensor *t,
                            vf_status *st);
/* Sets metadata key -> value (both copied; a key set twice keeps the last value). */
int vf_st_writer_meta(vf_st_writer *w, const char *key, const char *value, vf_status *st);
/* Size of the file the writer will produce (fixed once tensors and metadata are in). */
uint64_t vf_st_writer_size(vf_st_writer *w);

enum {
    VF_ST_FSYNC = 1 << 0,  /* fsync the file before returning */
    VF_ST_ATOMIC = 1 << 1, /* save: write "<path>.tmp", fsync, rename, fsync the dir */
};
/* Streams the file to fd (from its current position). `label` names it in messages.
 * With VF_ST_FSYNC the fd is fsynced. On return *crc (if not NULL) holds the CRC32C
 * (vf_crc32c) of every byte written: checkpoint manifests need it without rereading. */
int vf_st_writer_write_fd(vf_st_writer *w, int fd, const char *label, unsigned flags,
                          uint32_t *crc, vf_status *st);
/* Same through a FILE* (flushed; with VF_ST_FSYNC also fsynced). */
int vf_st_writer_write_file(vf_st_writer *w, FILE *fp, const char *label, unsigned flags,
                            uint32_t *crc, vf_status *st);
/* Creates/truncates path (mode 0644) and writes it; VF_ST_ATOMIC as above. On failure
 * no partial file is left at path when VF_ST_ATOMIC is given. */
int vf_st_writer_save(vf_st_writer *w, const char *path, unsigned flags, uint32_t *crc,
                      vf_status *st);

/* ---- a file written in pieces, in any order: the same bytes as vf_st_writer_save of
 * the same tensors and metadata, for data that arrives piece by piece (the checkpoint
 * writer's files, from the optimizer shards' snapshot chunks). */
typedef struct vf_st_stream vf_st_stream;
/* Creates/truncates path (0644) and writes w's header and its in-memory tensors (fill
 * callbacks are refused); the streamed tensors' bytes follow by vf_st_stream_put. w is
 * borrowed and must stay unchanged until finish/abort. On success *out (owned). */
int vf_st_stream_open(vf_st_writer *w, const char *path, vf_st_stream **out, vf_status *st);
/* File offset of tensor `name`'s first byte; -1 when the file has no such tensor. */
int64_t vf_st_stream_offset(const vf_st_stream *s, const char *name);
/* Size of the whole file. */
uint64_t vf_st_stream_size(const vf_st_stream *s);
/* Writes n bytes of buf at file offset `at` (inside the file) and keeps their CRC32C. */
int vf_st_stream_put(vf_st_stream *s, uint64_t at, const void *buf, size_t n, vf_status *st);
/* Checks that the pieces tile the file exactly (a byte never written or written twice is
 * VF_EINVAL naming the range), fsyncs with VF_ST_FSYNC and closes: *bytes (may be NULL)
 * the file's size, *crc (may be NULL) its CRC32C, combined from the pieces' without
 * reading the file back. s is freed, also on failure. */
int vf_st_stream_finish(vf_st_stream *s, unsigned flags, int64_t *bytes, uint32_t *crc, vf_status *st);
/* Closes and frees s; the file stays as it is (the caller removes it). NULL is fine. */
void vf_st_stream_abort(vf_st_stream *s);

#endif /* VF_SAFETENSORS_H */
