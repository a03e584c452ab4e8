/* item.h — runtime-internal helpers around items and the codec (not for stages).
 *
 * The record format (version 1, little-endian; tensors payloads in host order, and the
 * runtime only builds on little-endian hosts):
 *
 *   0   magic "VFIT"        4 bytes
 *   4   version             u16 (VF_CODEC_VERSION)
 *   6   flags               u16, 0 (VF_CODEC_FLAG_SPLIT on the wire only, below)
 *   8   total length        u64, whole record including the CRC
 *   16  id                  u32 length + bytes (no NUL inside)
 *       metadata            u32 count, then per entry: u32 key length (1..255) + key,
 *                           u8 kind (0 string: u32 length + bytes, 1 number: f64)
 *       tensors             u32 count, then per tensor: u32 name length (1..255) + name,
 *                           u8 dtype, u8 ndim (0..6), u8 location, u8 0,
 *                           i64 dims[ndim], u32 location-data length + bytes
 *                           (0 for inline; a CUDA IPC handle / NCCL peer for the others)
 *       zero padding to a multiple of 64
 *   payloads                every inline tensor in order, each at a 64-byte aligned
 *                           offset (so a view over the record is aligned), zero padded
 *   CRC32C                  u32 over every byte before it
 *
 * Decoding checks magic, version, the total length against the buffer and the CRC, and
 * then still checks every length and count against the bytes left (a record with a
 * valid CRC may be crafted), refusing duplicate names, bad dtypes, ndim > 6, negative or
 * overflowing dims, and naming the offset of whatever is wrong.
 *
 * Split records (the ZeroMQ transport's wire form; never stored, and refused by
 * vf_item_decode / vf_item_decode_view): flags VF_CODEC_FLAG_SPLIT, and every tensor of
 * at least `min_frame` bytes has location VF_LOC_FRAME, no location data and no payload
 * in the record: its payload travels as a frame of its own after the record, in tensor
 * order, so that a sender hands the tensor's memory to the socket instead of copying it
 * into the record. Everything else is as above, the record's CRC included; a frame is
 * checked for its length (dtype x shape), not summed: a CRC pass over every payload on
 * both sides cut a 64 MiB ipc edge's throughput by about 40% (bench_edges), and what
 * carries a frame is trusted with its bytes already (a kernel copy on ipc; TCP's
 * checksum, and CURVE's MAC on a secured hub). An item with no tensor that large
 * encodes to an ordinary record (flags 0), byte for byte.
 */
#ifndef VF_ITEM_H
#define VF_ITEM_H

#include "runtime/vflow.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VF_CODEC_MAGIC "VFIT"
#define VF_CODEC_VERSION 1
#define VF_CODEC_ALIGN 64
#define VF_CODEC_MAX_NAME 255        /* tensor names and metadata keys */
#define VF_CODEC_MAX_COUNT 4096      /* tensors or metadata entries per item */
#define VF_CODEC_MAX_LOC 4096        /* location data of a non-inline tensor */
#define VF_CODEC_FLAG_SPLIT 0x0001   /* a split record (wire only) */

typedef enum vf_tensor_loc {
    VF_LOC_INLINE = 0,   /* payload in the record */
    VF_LOC_CUDA_IPC = 1, /* device tensor: CUDA IPC handle + event (CUDA transport) */
    VF_LOC_NCCL = 2,     /* device tensor sent by NCCL alongside the record */
    VF_LOC_FRAME = 3,    /* split record: the payload is a frame of its own */
    VF_LOC_COUNT
} vf_tensor_loc;

/* Shallow copy for fan-out: id and metadata copied, tensors shared by reference.
 * Caller owns the result; NULL with st set on failure. */
vf_item *vf_item_share(const vf_item *it, vf_status *st);
/* Sum of the tensors' byte sizes, views left out: they move no bytes (vflow.h "lending
 * memory"). */
size_t vf_item_tensor_bytes(const vf_item *it);
/* Encodes into a new vf_alloc'd buffer (charged to the calling thread's account);
 * caller frees *buf with vf_free. */
int vf_item_encode_alloc(const vf_item *it, void **buf, size_t *len, vf_status *st);

/* ---- split records (see above) */

/* Bytes of the record of `it` split at min_frame (0: not split, vf_item_encoded_size). */
size_t vf_item_split_size(const vf_item *it, size_t min_frame);
/* Encodes the record of `it` split at min_frame into a new vf_alloc'd buffer (charged to
 * the calling thread's account; caller frees *buf with vf_free). *nframes: how many
 * tensors were left out as frames; they are the tensors of at least min_frame bytes, in
 * the order of vf_item_tensor_at. */
int vf_item_encode_split(const vf_item *it, size_t min_frame, void **buf, size_t *len, int *nframes,
                         vf_status *st);

/* One frame that came with a split record: its bytes and how to release them. */
typedef struct vf_frame {
    const void *data;
    size_t len;
    vf_release_fn release; /* release(data, hint) once no tensor aliases it; may be NULL */
    void *hint;
} vf_frame;

/* Decodes a split record (or an ordinary one, nframes 0) as vf_item_decode_view does —
 * tensors alias buf, release(buf, hint) once the last of them goes — with the payload of
 * its k-th frame tensor in frames[k]. Checks the record as vf_item_decode does, and that
 * there are exactly nframes frame tensors, each frame as long as its tensor. A frame's
 * tensor aliases it (copies it when it is not aligned for the dtype).
 * On success every buffer is released once nothing aliases it (at once when nothing
 * does); on error none is: the caller still owns them all. Caller owns *out. */
int vf_item_decode_split(const void *buf, size_t len, vf_release_fn release, void *hint, const vf_frame *frames,
                         int nframes, vf_item **out, vf_status *st);

/* Upper bound of the encoded size of an item with this id+metadata budget
 * (id_meta_bytes: raw bytes of the id, keys and values; the codec adds its own small
 * per-entry headers, covered by assuming at most one entry per 16 bytes) and these
 * tensors. -1 if it overflows. */
int64_t vf_codec_size_bound(int64_t id_meta_bytes, int ntensors, const size_t *name_lens,
                            const int *ndims, const int64_t *payload_bytes);

/* CRC32C, table and SSE4.2 paths (vf_crc32c picks one); for tests and benchmarks. */
uint32_t vf_crc32c_sw(uint32_t crc, const void *data, size_t n);
uint32_t vf_crc32c_hw(uint32_t crc, const void *data, size_t n); /* = sw without SSE4.2 */
bool vf_crc32c_hw_available(void);

#ifdef __cplusplus
}
#endif
#endif /* VF_ITEM_H */
