/* vflow.h — the public C API a stage author needs.
 *
 * A stage sees only this header (plus models/ and kernels/ops.h): tensors, items,
 * typed params, port specs, the stage vtable, and the per-stage context through which
 * it receives and sends items (vf_recv / vf_send), logs, reports metrics and allocates
 * accounted memory. Everything else (graph, transports, workers, supervision) lives
 * behind it in runtime/ and may change without touching a stage.
 *
 * Conventions: functions return int (0 ok, negative VF_E* on error) and fill
 * a vf_status with a message naming file/stage/key; ownership of every pointer argument
 * or result is stated in the comment above the declaration.
 */
#ifndef VFLOW_H
#define VFLOW_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VF_API_VERSION 1
#define VF_VERSION_STRING "0.1.0"

/* ------------------------------------------------------------------ errors */

enum {
    VF_OK = 0,
    VF_EOS = 1,          /* not an error: end of stream on vf_recv */
    VF_EINVAL = -1,      /* bad argument, bad param, bad input data */
    VF_ENOMEM = -2,      /* allocation failed or account over its limit */
    VF_EIO = -3,         /* file / socket I/O */
    VF_ECORRUPT = -4,    /* checksum, truncated or malformed record */
    VF_EVERSION = -5,    /* unknown codec / file version */
    VF_ESTOPPED = -6,    /* the run is stopping (SIGINT, peer failure); unwind quietly */
    VF_ETIMEOUT = -7,    /* deadline passed */
    VF_EEXTERNAL = -8,   /* a library call failed (libav, ZeroMQ, LMDB, Lua) */
    VF_ECUDA = -9,       /* CUDA / cuBLAS / NCCL */
    VF_ENOTFOUND = -10,  /* missing file, key, stage, port */
    VF_EUSAGE = -11,     /* bad command line or bad topology: exit code 2 */
    VF_EBUDGET = -12,    /* plan exceeds a device budget: exit code 2 */
    VF_EBADINPUT = -13,  /* bad user data (video, manifest, cache): exit code 2 */
};

/* A status carries the first error's code, a human message (which names the
 * file / stage / key involved) and the C source location that raised it. */
typedef struct vf_status {
    int code;
    int line;          /* C source line that raised it */
    const char *file;  /* C source file (static string) */
    char msg[2048];
} vf_status;

/* Sets st (if not NULL and not already holding an error) and returns code. */
int vf_status_set(vf_status *st, int code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Prefixes the message already in st with "prefix: " (adds context on the way up). */
void vf_status_prefix(vf_status *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void vf_status_clear(vf_status *st);
const char *vf_strerror(int code);
/* Exit code of the CLI for a status code: 0, 1 (run failed) or 2 (usage/topology/input). */
int vf_exit_code(int code);

/* Raise an error: sets st and jumps to `fail`; expects `int rc` in scope. */
#define VF_FAIL(st, code, ...)                                                  \
    do {                                                                        \
        rc = vf_status_set((st), (code), __FILE__, __LINE__, __VA_ARGS__);      \
        goto fail;                                                              \
    } while (0)
/* Call something that returns int status; on negative jump to `fail`. */
#define VF_TRY(expr)                                                            \
    do {                                                                        \
        rc = (expr);                                                            \
        if (rc < 0) goto fail;                                                  \
    } while (0)
/* Broken invariant (a bug, not bad input): print and abort. */
#define VF_ASSERT(cond)                                                         \
    do {                                                                        \
        if (!(cond)) vf_assert_fail(#cond, __FILE__, __LINE__);                 \
    } while (0)
void vf_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));

/* ------------------------------------------------------------------ memory */

/* Accounted host allocation: 64-byte aligned, charged to the calling thread's
 * account (the stage running on it; "runtime" otherwise). Returns NULL and sets st on
 * failure. The caller owns the block; release it with vf_free (which credits the same
 * account, whichever thread frees it). */
void *vf_alloc(size_t bytes, vf_status *st);
void *vf_calloc(size_t bytes, vf_status *st);
void vf_free(void *p);

/* ------------------------------------------------------------------ tensors */

typedef enum vf_dtype {
    VF_DTYPE_U8 = 0,
    VF_DTYPE_I32 = 1,
    VF_DTYPE_F32 = 2,
    VF_DTYPE_BF16 = 3,
    VF_DTYPE_F16 = 4,
    VF_DTYPE_COUNT
} vf_dtype;

size_t vf_dtype_size(vf_dtype dt);
const char *vf_dtype_name(vf_dtype dt);          /* "u8", "f32", … */
int vf_dtype_parse(const char *name, vf_dtype *out); /* 0 or VF_EINVAL */

typedef enum vf_device_kind { VF_DEV_CPU = 0, VF_DEV_CUDA = 1 } vf_device_kind;
typedef struct vf_device {
    vf_device_kind kind;
    int index;
} vf_device;
/* "cpu", "cuda", "cuda:N" → device; VF_EINVAL with a message otherwise. */
int vf_device_parse(const char *s, vf_device *out, vf_status *st);
void vf_device_str(vf_device d, char *buf, size_t n);

#define VF_MAX_DIMS 6

/* Releases external storage (zmq message, pool buffer, mmap) when the last tensor
 * referencing it goes away. */
typedef void (*vf_release_fn)(void *data, void *hint);

/* A tensor: dtype, shape, device and a reference-counted storage. Tensors are
 * contiguous, row-major. Share with vf_tensor_ref; every reference is dropped with
 * vf_tensor_unref. */
typedef struct vf_tensor {
    vf_dtype dtype;
    int ndim;
    int64_t shape[VF_MAX_DIMS];
    vf_device device;
    void *data;
    struct vf_storage *storage; /* internal: refcount, release callback, account */
} vf_tensor;

/* New contiguous tensor, uninitialised host memory from vf_alloc (device tensors are
 * created by the CUDA backend). Caller owns the returned reference. */
vf_tensor *vf_tensor_new(vf_dtype dt, int ndim, const int64_t *shape, vf_status *st);
vf_tensor *vf_tensor_zeros(vf_dtype dt, int ndim, const int64_t *shape, vf_status *st);
/* Wraps memory the tensor does not own; release(data, hint) runs when the last
 * reference drops (release may be NULL for memory that outlives the tensor). */
vf_tensor *vf_tensor_wrap(vf_dtype dt, int ndim, const int64_t *shape, vf_device dev,
                          void *data, vf_release_fn release, void *hint, vf_status *st);
vf_tensor *vf_tensor_ref(vf_tensor *t);  /* returns t with one more reference */
void vf_tensor_unref(vf_tensor *t);      /* NULL is fine */
int64_t vf_tensor_numel(const vf_tensor *t);
size_t vf_tensor_nbytes(const vf_tensor *t);
/* Shapes as "(2,16,5,32,32)" for messages. */
void vf_shape_str(int ndim, const int64_t *shape, char *buf, size_t n);

/* ---- lending memory: views instead of copies
 *
 * A stage may lend memory to the stages it sends to instead of copying it into an item:
 * it puts a view of the memory (vf_tensor_view) in the item, and the consumer's tensor
 * aliases the same bytes wherever the two ends can share memory — one process (the
 * tensor itself); two processes of one node, through a shared-memory segment (host memory
 * from vf_alloc_shared, mapped once by each consumer process) or CUDA IPC (the CUDA
 * backend's memory, exported once and mapped once by each consumer process). The consumer
 * reads and writes the lender's bytes in place, and vf_tensor_is_view says it does. Where
 * the ends cannot share memory (across nodes, or host memory that is not from
 * vf_alloc_shared on an edge between processes) the edge carries the bytes and the
 * consumer gets a copy of its own: vf_tensor_is_view is false there, and its writes stay
 * with it.
 * The runtime moves views; who touches the bytes when is the stages' protocol: a lender
 * leaves lent bytes alone until the consumer says it is done (an item back), and a
 * consumer says so only after it dropped its views and its device work on them ended
 * (vf_backend.sync). A port declares a view tensor with vf_tensor_spec.view, and the plan
 * counts its bytes only on the edges that carry them (across nodes). */

/* Host memory another process of this node can map: a shared-memory segment of its own
 * (memfd, so the size of /dev/shm does not limit it), fully reserved up front (a full
 * machine is an error here, never a fault later), charged to the calling thread's account
 * like vf_alloc. Caller owns it: vf_free_shared, from any thread. NULL and st set on
 * failure. */
void *vf_alloc_shared(size_t bytes, vf_status *st);
void vf_free_shared(void *p); /* NULL is fine */
/* A view of memory the caller lends (see above): host memory (vf_alloc_shared for other
 * processes to map it) or device memory of a backend (dev). The tensor does not own the
 * bytes: the caller keeps them alive while any view of them is out. Caller owns the
 * tensor reference. */
vf_tensor *vf_tensor_view(vf_dtype dt, int ndim, const int64_t *shape, vf_device dev, void *data,
                          vf_status *st);
/* True when t is a view: made by vf_tensor_view in this process, or received on an edge
 * that shares memory (it aliases the lender's bytes). False for a copy. */
bool vf_tensor_is_view(const vf_tensor *t);

/* ---- all-to-all among ranks
 *
 * The N processes of one node that share a job (the ranks of a sequence-parallel
 * partition) exchange equal chunks: rank i's chunk j goes to rank j, which finds it as
 * its chunk i — the tokens <-> heads exchange around self-attention. Over shared memory
 * (runtime/edge/a2a_shm.c): every rank opens the group with the same key (unique to the
 * run and the group: a run dir and a partition name), the same nranks and chunk_max, and
 * then calls vf_a2a_run the same number of times with the same chunk size; a call returns
 * once every rank has entered it. The result is the bytes sent, whatever the timing.
 * A rank that closes, dies, is cancelled or misses the deadline makes the others' calls
 * fail (VF_ESTOPPED, VF_ETIMEOUT) instead of hang; ranks that disagree on a size fail
 * with VF_EINVAL naming both. */
#define VF_A2A_MAX_RANKS 64
typedef struct vf_a2a vf_a2a;
typedef struct vf_a2a_opts {
    int timeout_ms;              /* longest wait for the other ranks, per call; 0 = 10 minutes */
    bool (*cancel)(void *user);  /* polled while waiting (e.g. vf_aborting): true gives up */
    void *user;
} vf_a2a_opts;
/* Joins the group `key` as rank `rank` of nranks, for chunks up to chunk_max bytes;
 * rank 0 makes the shared memory (2·nranks² chunks), the others wait for it. o may be
 * NULL. Caller owns *out: vf_a2a_close. */
int vf_a2a_open(const char *key, int nranks, int rank, size_t chunk_max, const vf_a2a_opts *o, vf_a2a **out,
                vf_status *st);
/* send: nranks chunks of `chunk` bytes, the j-th for rank j; recv: nranks chunks, the
 * i-th from rank i. send and recv are the same buffer or do not overlap; neither is
 * kept after the call. */
int vf_a2a_run(vf_a2a *a, const void *send, void *recv, size_t chunk, vf_status *st);
void vf_a2a_close(vf_a2a *a); /* NULL is fine */

/* bf16 / f16 conversion (round to nearest even). */
uint16_t vf_f32_to_bf16(float f);
float vf_bf16_to_f32(uint16_t h);
uint16_t vf_f32_to_f16(float f);
float vf_f16_to_f32(uint16_t h);

/* FP8 E4M3 (torch's float8_e4m3fn: bias 7, no infinities, 0x7f/0xff NaN, largest 448).
 * vf_f32_to_e4m3 rounds to nearest even and saturates finite values past ±448 to ±448
 * (NaN stays NaN). */
uint8_t vf_f32_to_e4m3(float f);
float vf_e4m3_to_f32(uint8_t x);
/* The per-tensor FP8 rule a frozen base is quantised by at load (what musubi-tuner's
 * fp8_scaled and ComfyUI's scaled FP8 files hold): scale = absmax / 448 in f32 (1 for an
 * all-zero tensor), byte i = vf_f32_to_e4m3(src[i] / scale), the division in f32; the
 * value a byte stands for is vf_e4m3_to_f32(byte) · scale, one f32 rounding.
 * vf_fp8_scale reads src (n floats); vf_fp8_quantise writes dst (n bytes; dst may be
 * src's own memory, byte i being written after float i is read); vf_fp8_dequantise writes
 * dst (n floats). All borrowed. */
float vf_fp8_scale(const float *src, int64_t n);
void vf_fp8_quantise(const float *src, int64_t n, float scale, uint8_t *dst);
void vf_fp8_dequantise(const uint8_t *src, int64_t n, float scale, float *dst);

/* ------------------------------------------------------------------ items */

/* What flows on an edge: an id, named tensors, and a small string/number metadata
 * map. Items are single-owner: vf_send takes ownership; the receiver frees. */
typedef struct vf_item vf_item;

/* New empty item; id is copied (NULL = ""). Caller owns it. */
vf_item *vf_item_new(const char *id, vf_status *st);
void vf_item_free(vf_item *it); /* drops its tensor references; NULL is fine */
const char *vf_item_id(const vf_item *it); /* borrowed, valid while it lives */
int vf_item_set_id(vf_item *it, const char *id, vf_status *st);
/* Adds or replaces tensor `name`; the item takes over the caller's reference to t. */
int vf_item_put(vf_item *it, const char *name, vf_tensor *t, vf_status *st);
/* Borrowed pointer to tensor `name`, NULL if absent. */
vf_tensor *vf_item_get(const vf_item *it, const char *name);
/* Removes tensor `name` and hands its reference to the caller (NULL if absent). */
vf_tensor *vf_item_take(vf_item *it, const char *name);
int vf_item_ntensors(const vf_item *it);
/* i-th tensor and its name (borrowed). */
vf_tensor *vf_item_tensor_at(const vf_item *it, int i, const char **name);
/* Metadata: values are copied. Setting an existing key replaces it. */
int vf_item_set_str(vf_item *it, const char *key, const char *val, vf_status *st);
int vf_item_set_num(vf_item *it, const char *key, double val, vf_status *st);
const char *vf_item_str(const vf_item *it, const char *key);  /* borrowed or NULL */
/* 0 and *out set, or VF_ENOTFOUND. */
int vf_item_num(const vf_item *it, const char *key, double *out);
int vf_item_nmeta(const vf_item *it);
/* i-th metadata entry; exactly one of *str / is_num is meaningful. */
void vf_item_meta_at(const vf_item *it, int i, const char **key, const char **str,
                     double *num, bool *is_num);

/* The codec (wire and LMDB records): magic, version, id, metadata, tensors, CRC32C.
 * Host tensors only are inlined; device tensors are sent by their transports. */
size_t vf_item_encoded_size(const vf_item *it);
/* Encodes into buf (cap bytes); *len = bytes written. VF_EINVAL if cap too small. */
int vf_item_encode(const vf_item *it, void *buf, size_t cap, size_t *len, vf_status *st);
/* Strict decode: never reads outside [buf, buf+len), checks version and CRC.
 * Copies payloads; caller owns *out. */
int vf_item_decode(const void *buf, size_t len, vf_item **out, vf_status *st);
/* The id and metadata of a record only (no tensors; header checks, no CRC, which spans
 * the payloads): a cheap look at many records. Caller owns *out. */
int vf_item_decode_meta(const void *buf, size_t len, vf_item **out, vf_status *st);
/* As vf_item_decode but tensors alias buf (no copy); `release(buf_owner_hint)` is
 * called once when the last such tensor is dropped. On error release is not called. */
int vf_item_decode_view(const void *buf, size_t len, vf_release_fn release, void *hint,
                        vf_item **out, vf_status *st);
uint32_t vf_crc32c(uint32_t crc, const void *data, size_t n);
/* The CRC32C of A followed by B from crc(A), crc(B) and B's length in bytes. */
uint32_t vf_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2);

/* ------------------------------------------------------------------ params */

/* Params of a stage, already validated against its schema with defaults filled in, so
 * the getters need no error path: a key in the schema is always present. Strings and
 * sub-tables are borrowed and live as long as the params. */
typedef struct vf_params vf_params;

typedef enum vf_param_type {
    VF_P_INT = 1,    /* integer (Lua integer or integral float) */
    VF_P_NUM,        /* number */
    VF_P_BOOL,
    VF_P_STR,
    VF_P_DEVICE,     /* "cpu" | "cuda:N" */
    VF_P_LIST_INT,   /* {256, 256} */
    VF_P_LIST_NUM,
    VF_P_LIST_STR,
    VF_P_TABLE,      /* nested table checked against `fields` (e.g. a model preset) */
    VF_P_LIST_TABLE, /* {{...}, {...}}: a list of tables, each checked against `fields`
                        when given; read through vf_params_ctree */
} vf_param_type;

typedef struct vf_param_spec {
    const char *name;
    vf_param_type type;
    const char *def;       /* default as JSON text ("4", "\"cpu\"", "[256,256]"); NULL = required */
    double min, max;       /* range of numbers / list elements; ignored when min > max */
    const char *doc;       /* one line, goes into README's generated table */
    const char *choices;   /* for strings: "a|b|c", or NULL for any; for an int: words it
                              takes besides integers ("auto"), read with vf_param_str */
    const struct vf_param_spec *fields; /* VF_P_TABLE, VF_P_LIST_TABLE: schema of its keys,
                                           {0}-terminated */
} vf_param_spec;
/* Range helper for specs: VF_RANGE(1, 64); VF_ANY = no range. */
#define VF_RANGE(a, b) (a), (b)
#define VF_ANY 1, 0

bool vf_param_has(const vf_params *p, const char *key);
int64_t vf_param_int(const vf_params *p, const char *key);
double vf_param_num(const vf_params *p, const char *key);
bool vf_param_bool(const vf_params *p, const char *key);
const char *vf_param_str(const vf_params *p, const char *key);
vf_device vf_param_device(const vf_params *p, const char *key);
int vf_param_len(const vf_params *p, const char *key); /* list length, 0 if absent */
int64_t vf_param_int_at(const vf_params *p, const char *key, int i);
double vf_param_num_at(const vf_params *p, const char *key, int i);
const char *vf_param_str_at(const vf_params *p, const char *key, int i);
const vf_params *vf_param_table(const vf_params *p, const char *key);
/* Element i of a list of tables (NULL when it is none). */
const vf_params *vf_param_table_at(const vf_params *p, const char *key, int i);
/* Params of stage kind `kind` from a JSON object text, checked against that kind's
 * schema with defaults filled (for a stage that carries another stage's params, e.g.
 * the optimizer vouching for the data reader's settings in its checkpoints). `what`
 * names the source in messages. Caller owns the result (vf_params_free); NULL with st
 * set when json is not an object, the kind is unknown or a param is wrong. */
vf_params *vf_params_parse_for(const char *kind, const char *json, const char *what, vf_status *st);
void vf_params_free(vf_params *p);
/* The params as a JSON object tree (runtime/json.h), borrowed from p. */
const struct vf_json *vf_params_ctree(const vf_params *p);
/* Canonical JSON of the params (sorted keys), e.g. for config hashes and cache keys.
 * Caller frees with free(). */
char *vf_params_json(const vf_params *p);

/* ------------------------------------------------------------------ ports */

#define VF_MAX_PORTS 32
#define VF_MAX_PORT_TENSORS 8
#define VF_NAME_MAX 48
#define VF_PORT_GEO_MAX 1024

typedef enum vf_port_dir { VF_PORT_IN = 0, VF_PORT_OUT = 1 } vf_port_dir;

/* One tensor an item on this port carries. dims[i] is the exact size, or for a
 * variable dim (sym[i] non-empty, e.g. "T") its upper bound: so the largest item a
 * port allows — and the memory of an edge — is known before launch. */
typedef struct vf_tensor_spec {
    char name[VF_NAME_MAX];
    vf_dtype dtype;
    int ndim;
    int64_t dims[VF_MAX_DIMS];
    char sym[VF_MAX_DIMS][8];
    bool optional;           /* may be missing from an item */
    bool view;               /* a view of the producer's memory (vf_tensor_view): its bytes
                                cross only edges that cannot share memory, and only there
                                does the plan count them */
} vf_tensor_spec;

typedef struct vf_port_spec {
    char name[VF_NAME_MAX];
    vf_port_dir dir;
    bool required;           /* an input that must be connected / output that must be */
    bool multi;              /* input accepting several edges (merged) */
    vf_device device;        /* where its tensors live */
    int ntensors;
    vf_tensor_spec t[VF_MAX_PORT_TENSORS];
    int64_t meta_bytes;      /* bound on id + metadata bytes of one item */
    /* items in several geometries (a bucketed reader): "name:B,d1,…;…", the first
     * tensor's dims per geometry, as the items' "geometries" metadata; "" = one */
    char geometries[VF_PORT_GEO_MAX];
} vf_port_spec;

typedef struct vf_port_specs {
    int n;
    vf_port_spec p[VF_MAX_PORTS];
} vf_port_specs;

/* Builder helpers for `ports` hooks. Return the new entry (never NULL: VF_ASSERTs
 * capacity, a static property of the stage). */
vf_port_spec *vf_port_add(vf_port_specs *ps, const char *name, vf_port_dir dir, bool required);
/* Adds a tensor; dims given as ndim values; sym NULL or an array of ndim strings
 * ("" for fixed dims). */
vf_tensor_spec *vf_port_tensor(vf_port_spec *p, const char *name, vf_dtype dt, int ndim,
                               const int64_t *dims, const char *const *sym);
const vf_port_spec *vf_port_find(const vf_port_specs *ps, const char *name);
/* Largest encoded item this port allows (tensors at their bounds + meta + header). */
int64_t vf_port_max_item_bytes(const vf_port_spec *p);

/* ------------------------------------------------------------------ memory plan */

/* What a memory entry is, for the planner's tables and its fixes (docs/PLANNING.md). */
typedef enum vf_mem_cat {
    VF_MEM_WEIGHTS = 0,
    VF_MEM_GRADS,
    VF_MEM_OPTIM,       /* optimizer state (master weights, moments) */
    VF_MEM_ACTS,        /* saved activations of micro-batches in flight */
    VF_MEM_WORKSPACE,   /* compute workspace (partition, attention, backend) */
    VF_MEM_VAE,         /* VAE weights, causal caches, chunk workspace */
    VF_MEM_DECODE,      /* decoder frames, index, scaler, manifest */
    VF_MEM_ITEMS,       /* items a stage holds or builds, item pools */
    VF_MEM_EDGES,       /* edge buffers (items in flight) and send copies (the planner's) */
    VF_MEM_CKPT,        /* checkpoint snapshots and staging */
    VF_MEM_RUNTIME,     /* processes, allocator cache, CUDA contexts (the planner's) */
    VF_MEM_OTHER,
    VF_MEM_CAT_COUNT
} vf_mem_cat;

/* Who allocates an entry's bytes, which decides the account the planner predicts it in. */
typedef enum vf_mem_holder {
    VF_MEM_OWN = 0,     /* the stage itself (vf_alloc from its thread) */
    VF_MEM_INPUT,       /* received items the stage holds: on an in-process edge the
                           producer allocated them, so they are in the producer's account */
    VF_MEM_LIBRARY,     /* a library's own allocations (libav, a writer's buffer): in the
                           totals and the worker's RSS, in no account */
    VF_MEM_PINNED,      /* host memory the stage pins for its device's copy queue (block
                           swap's host copy): its own account, as VF_MEM_OWN; outside the
                           device memory a partition on the CPU backend stands for */
} vf_mem_holder;

/* What a stage declares it will hold, per device, before anything runs. A longer `what`
 * is cut to VF_MEM_WHAT_MAX - 1 bytes. */
#define VF_MEM_WHAT_MAX 96
typedef struct vf_mem_entry {
    char what[VF_MEM_WHAT_MAX]; /* "weights", "saved activations", "chunk workspace", … */
    vf_device device;
    vf_mem_cat cat;
    vf_mem_holder holder;
    int64_t bytes;
} vf_mem_entry;

#define VF_MAX_MEM_ENTRIES 32
#define VF_MAX_MEM_PARAMS 4
typedef struct vf_mem_plan {
    int n;
    vf_mem_entry e[VF_MAX_MEM_ENTRIES];
    int np;                   /* vf_mem_plan_params entries */
    struct {
        vf_device device;
        int64_t n;
    } params[VF_MAX_MEM_PARAMS];
} vf_mem_plan;

/* Declares bytes on dev (the same device, category and `what` twice add up: a hook may
 * declare in pieces). _input and _lib name another holder (vf_mem_holder). An entry that
 * is the bound a param sets rather than what the data will need ends its `what` with
 * "(<param> bound)": plan-vs-measured says so beside the stage's ratio. */
void vf_mem_plan_add(vf_mem_plan *m, vf_device dev, vf_mem_cat cat, const char *what, int64_t bytes);
void vf_mem_plan_add_input(vf_mem_plan *m, vf_device dev, vf_mem_cat cat, const char *what, int64_t bytes);
void vf_mem_plan_add_lib(vf_mem_plan *m, vf_device dev, vf_mem_cat cat, const char *what, int64_t bytes);
/* Pinned host memory (VF_MEM_PINNED), always on the host. */
void vf_mem_plan_add_pinned(vf_mem_plan *m, vf_mem_cat cat, const char *what, int64_t bytes);
int64_t vf_mem_plan_total(const vf_mem_plan *m, vf_device dev);
/* Declares that the stage holds training state (weights, gradients or optimizer state:
 * the entries of those categories) of n parameters on dev. `vflow plan` divides the
 * stage's state bytes there by n and adds the stages of a device up (docs/PLANNING.md
 * "state per parameter"). Twice for one device: the larger count stays. */
void vf_mem_plan_params(vf_mem_plan *m, vf_device dev, int64_t n);

/* ------------------------------------------------------------------ stages */

typedef struct vf_stage vf_stage; /* one stage instance (runtime-owned) */
typedef struct vf_ctx vf_ctx;     /* its running context */
typedef struct vf_port vf_port;   /* a connected port at run time */

enum {
    VF_STAGE_OWN_WORKER = 1 << 0, /* place in a worker process of its own (decode, LMDB writer) */
    VF_STAGE_SOURCE = 1 << 1,     /* has no inputs by design */
};

/* A knob the planner may turn to make an over-budget run fit (`vflow plan`, the fixes
 * of docs/PLANNING.md). The planner runs the script again with the knob changed and
 * plans that; a stage only says which of its params may move, which way and how far. */
typedef enum vf_knob_move {
    VF_KNOB_SET = 0,  /* set the param to `value` where it is not that already */
    VF_KNOB_HALVE,    /* halve it, down to `min` */
    VF_KNOB_DOUBLE,   /* double it, up to `max` and to `max_factor` × its value (0: no factor limit) */
    VF_KNOB_STEP,     /* add one, up to `max` and `max_factor` × its value */
} vf_knob_move;

typedef struct vf_knob_spec {
    const char *name;        /* the knob as the fixes show it: "recompute", "offload" */
    const char *param;       /* the stage param it moves (NULL: only the script's `arg`) */
    const char *arg;         /* the vf.args key a script may read for it (the planner checks
                                that the script does); NULL: overrides of `param` only */
    bool arg_only;           /* only through the script (sugar derives other params from it) */
    vf_knob_move move;
    const char *value;       /* VF_KNOB_SET: the JSON value ("true", "\"cpu\"") */
    int64_t min, max;        /* limits of the numeric moves */
    int64_t max_factor;
    /* The knob's value now, when it is not simply the int param `param` (NULL). */
    int64_t (*current)(const vf_params *p);
    int rank;                /* the planner tries knobs by rank (lower first), and a knob of
                                the same name on several kinds moves all of them together */
    const char *note;        /* what it trades, shown with the fix ("optimizer shards on the
                                host"); NULL: nothing to add */
    /* The param may be "auto" (a VF_KNOB_STEP knob whose param spec lists "auto" among its
     * choices): `vflow plan` and `vflow run` resolve it before anything starts to the
     * smallest value from `min` up with which the stage fits (runtime/plan/plan_auto.c):
     * its device's plan total within that device's budget or, when the stage's param
     * `auto_budget` names a size, the stage's own device memory (its entries on its
     * device but the pinned ones) within that size. The stage treats an unresolved
     * "auto" as `min` when planned and refuses it when it starts. */
    bool auto_value;
    const char *auto_budget;
} vf_knob_spec;

typedef struct vf_stage_ops {
    int api_version;               /* VF_API_VERSION */
    const char *kind;              /* "vae_encode" */
    const char *doc;               /* one line for README / help */
    const vf_param_spec *params;   /* schema, {0}-terminated */
    unsigned flags;
    /* Static port specs from params and the specs arriving at the connected inputs
     * (`upstream`: entries named like this stage's input ports; absent = not known
     * yet, e.g. on a training loop edge). Fill `out` with every port. */
    int (*ports)(const vf_params *p, const vf_port_specs *upstream, vf_port_specs *out,
                 vf_status *st);
    /* Bytes the stage will hold per device (beyond its edges' buffers). */
    int (*memory)(const vf_params *p, const vf_port_specs *ports, vf_mem_plan *out,
                  vf_status *st);
    /* Allocate state (vf_stage_set_state). Runs on the stage's thread. */
    int (*init)(vf_stage *s, const vf_params *p, vf_status *st);
    /* Owns its loop: vf_recv / vf_send until end of stream or stop. Returning 0 closes
     * its outputs (end of stream); a negative code fails the run with st's message. */
    int (*run)(vf_stage *s, vf_ctx *ctx, vf_status *st);
    void (*fini)(vf_stage *s);     /* free state; runs even after a failed init/run */
    /* Knobs the planner may turn, {0}-terminated; NULL: none. */
    const vf_knob_spec *knobs;
    /* A directory the stage writes for the run's life that may lie outside the run dir
     * (the checkpoint dir), from its params and the run dir (absolute); "" = none. The
     * driver locks it as it locks the run dir, so that two runs never write it at once.
     * NULL: none. */
    void (*lock_dir)(const vf_params *p, const char *run_dir, char *out, size_t n);
    /* What the stage reads when it starts is there (a manifest, a cache): checked by
     * `vflow run` before it creates the run dir or starts a worker, on the node that runs
     * the stage; never by `check` or `plan`, which work where the data are not. A
     * failure (VF_EBADINPUT, st naming the file and what to do) exits 2 with nothing
     * started. NULL: nothing to check. */
    int (*preflight)(const vf_params *p, vf_status *st);
    /* Keys p:stage(kind, {...}) takes for this kind that its Lua expander (vf.expand,
     * lua/<file>.lua) consumes before any stage exists — decode's `workers`, adamw's
     * `isolate` — {0}-terminated, for `vflow help KIND` and the README table only: the
     * stage never receives them. NULL: none. */
    const vf_param_spec *expander_params;
} vf_stage_ops;

/* Registers a stage kind (called from a constructor, see VF_REGISTER_STAGE). */
void vf_stage_register(const vf_stage_ops *ops);
const vf_stage_ops *vf_stage_lookup(const char *kind);
/* All registered kinds, sorted by name; returns count. Pointers are static. */
int vf_stage_kinds(const vf_stage_ops **out, int max);

#define VF_REGISTER_STAGE(ops_var)                                              \
    __attribute__((constructor)) static void vf_register_##ops_var(void)        \
    {                                                                           \
        vf_stage_register(&(ops_var));                                          \
    }

void *vf_stage_state(const vf_stage *s);
void vf_stage_set_state(vf_stage *s, void *state);
const char *vf_stage_name(const vf_stage *s);      /* unique name in the graph */
const vf_params *vf_stage_params(const vf_stage *s);

/* ------------------------------------------------------------------ run context */

/* Connected port by name; NULL if the port is optional and not connected.
 * Borrowed, valid during run. */
vf_port *vf_in(vf_ctx *ctx, const char *name);
vf_port *vf_out(vf_ctx *ctx, const char *name);
int vf_port_edges(const vf_port *p); /* number of edges on it */

/* Blocks for the next item. 0: *out set (caller owns it); VF_EOS: all edges ended;
 * VF_ESTOPPED: the run is stopping; other negative: transport error. */
int vf_recv(vf_port *in, vf_item **out, vf_status *st);
/* As vf_recv but gives up after timeout_ms: VF_ETIMEOUT, *out untouched. */
int vf_recv_timeout(vf_port *in, int timeout_ms, vf_item **out, vf_status *st);
/* Sends an item to every edge of the port (fan-out shares tensors by reference).
 * Always takes ownership of it, also on failure. Blocks while an edge has no credit.
 * VF_ESTOPPED when the run is stopping. The item's tensors are read after vf_send
 * returns (an in-process consumer holds them; a ZeroMQ edge sends large ones from their
 * own memory once the socket gets to them): keep no reference you write through later. */
int vf_send(vf_port *out, vf_item *it, vf_status *st);
/* Ends the stream on an output early (also done for all outputs when run returns). */
int vf_close(vf_port *out, vf_status *st);

/* A drain was requested (first SIGINT, the driver's drain): finish the work in hand,
 * send it, and end the stream. */
bool vf_stopping(const vf_ctx *ctx);
/* The run is being aborted (second SIGINT, a failed peer): nothing downstream will take
 * more items, so a long computation in hand may be dropped (return VF_ESTOPPED). Every
 * vf_send / vf_recv already returns VF_ESTOPPED then; this is for loops between them. */
bool vf_aborting(const vf_ctx *ctx);
const char *vf_run_dir(const vf_ctx *ctx); /* the run dir (absolute) */
/* True when the run was started with `vflow run … --resume`: stages that keep training
 * state (optimizer shards, the first DiT partition, the checkpoint writer) then continue
 * from the newest complete checkpoint. */
bool vf_resuming(const vf_ctx *ctx);
/* True when it was `--resume=auto`: where no checkpoint was ever written the run starts
 * from step 0 (a WARN); with plain `--resume` no complete checkpoint is bad input
 * (VF_EUSAGE naming the directory). */
bool vf_resume_auto(const vf_ctx *ctx);
vf_stage *vf_ctx_stage(vf_ctx *ctx);

/* Logging into the run log, prefixed with the stage name. level: 0 error 1 warn 2 info 3 debug */
enum { VF_LOG_ERROR = 0, VF_LOG_WARN = 1, VF_LOG_INFO = 2, VF_LOG_DEBUG = 3 };
void vf_log(vf_ctx *ctx, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* A named gauge of this stage (e.g. "loss"): shown by the progress display and
 * written with the stage's periodic metrics row. */
void vf_metric(vf_ctx *ctx, const char *key, double value);
/* An event row (a JSON object text, e.g. a training step) appended to metrics.jsonl
 * with "stage" and "t" added. */
void vf_metric_row(vf_ctx *ctx, const char *json_object);
/* A line of the run's closing summary on the console, under the table of stages (what a
 * short run has no progress line to show: the last loss, the checkpoint written, the files
 * quarantined). key names the line within the stage: a later line of the same key
 * replaces it, so a stage may keep one up to date as it goes. Also an event row
 * {"event":"summary","key","line"} of metrics.jsonl. */
#define VF_SUMMARY_LINE 512 /* longest summary line kept (bytes, with the NUL) */
void vf_summary(vf_ctx *ctx, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Appends {"path","reason","stage","t"} to <run dir>/quarantine.jsonl. */
void vf_quarantine(vf_ctx *ctx, const char *path, const char *reason);

/* Helper for map stages: calls fn for each item of input port `in` until end of
 * stream; fn owns the item it is given and sends what it produces. */
typedef int (*vf_map_fn)(vf_stage *s, vf_ctx *ctx, vf_item *it, vf_status *st);
int vf_run_map(vf_stage *s, vf_ctx *ctx, const char *in, vf_map_fn fn, vf_status *st);

#ifdef __cplusplus
}
#endif
#endif /* VFLOW_H */
