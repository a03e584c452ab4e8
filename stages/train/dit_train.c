/* dit_train.c — the arithmetic the training stages share (dit_train.h): ownership of the
 * flat parameter vector, the 1F1B order, the learning-rate schedule, micro-batch cuts
 * and the backend buffer pool behind hot items.
 *
 * Everything here is a pure function of its arguments (except the pool), so a partition,
 * a shard and a test computing the same range or the same schedule always agree.
 */
#include "stages/train/dit_train.h"
#include "models/dit_lora.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ ownership */

int64_t vf_train_norm_block(int64_t total)
{
    int64_t want = (total + 4095) / 4096, b = 1;
    while (b < want) b <<= 1;
    return b < 4096 ? 4096 : b;
}

int64_t vf_train_ckpt_chunk_elems(int64_t bytes)
{
    return bytes >= 24 ? bytes / 12 : 1;
}

void vf_train_shard_range(int64_t total, int64_t block, int S, int k, int64_t *lo, int64_t *hi,
                          int64_t *b0, int64_t *b1)
{
    int64_t nb = (total + block - 1) / block;
    *b0 = nb * k / S;
    *b1 = nb * (k + 1) / S;
    *lo = *b0 * block;
    *hi = *b1 * block < total ? *b1 * block : total;
    if (*lo > total) *lo = total;
}

int vf_train_model(const vf_params *p, vf_dit_config *cfg, vf_dit_layout **l, vf_dit_lora **lora, vf_status *st)
{
    int rc = 0;
    vf_dit_lora_cfg lc;
    *l = NULL, *lora = NULL;
    VF_TRY(vf_dit_config_from_params(vf_param_table(p, "model"), cfg, st));
    VF_TRY(vf_dit_layout_new(cfg, l, st));
    VF_TRY(vf_dit_lora_cfg_parse(vf_param_str(p, "lora"), &lc, st));
    if (lc.rank > 0) VF_TRY(vf_dit_lora_new(*l, &lc, lora, st));
fail:
    return rc;
}

int vf_train_splits(const vf_params *p, int depth, int *splits, int *P, const char *who,
                    vf_status *st)
{
    int n = vf_param_len(p, "splits");
    if (n < 2 || n > VF_TRAIN_MAX_PARTS + 1)
        return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                             "%s: splits needs 2..%d block boundaries {0, ..., depth}, got %d", who,
                             VF_TRAIN_MAX_PARTS + 1, n);
    for (int i = 0; i < n; i++) {
        splits[i] = (int)vf_param_int_at(p, "splits", i);
        bool bad = (i == 0 && splits[i] != 0) || (i > 0 && splits[i] <= splits[i - 1]) ||
                   (i == n - 1 && splits[i] != depth);
        if (bad)
            return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                                 "%s: splits must rise strictly from 0 to the model depth %d "
                                 "(entry %d is %d)", who, depth, i, splits[i]);
    }
    *P = n - 1;
    return 0;
}

void vf_train_overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1, int64_t *off, int64_t *n)
{
    int64_t lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    *off = lo;
    *n = hi > lo ? hi - lo : 0;
}

int64_t vf_train_most_overlap(int64_t a0, int64_t a1, const int64_t *lo, const int64_t *hi, int k)
{
    int64_t most = 1;
    for (int i = 0; i < k; i++) {
        int64_t off, n;
        vf_train_overlap(a0, a1, lo[i], hi[i], &off, &n);
        if (n > most) most = n;
    }
    return most;
}

/* ------------------------------------------------------------------ schedules */

int vf_train_1f1b(int P, int p, int M, vf_1f1b_op *ops)
{
    int warm = P - p - 1 < M ? P - p - 1 : M, k = 0, f = 0, b = 0;
    for (; f < warm; f++) ops[k++] = (vf_1f1b_op){true, f};
    while (f < M) {
        ops[k++] = (vf_1f1b_op){true, f++};
        ops[k++] = (vf_1f1b_op){false, b++};
    }
    while (b < M) ops[k++] = (vf_1f1b_op){false, b++};
    /* in flight peaks after the warmup plus the first steady forward */
    return warm + 1 < M ? warm + 1 : M;
}

double vf_train_lr(const vf_lr_sched *s, int64_t step)
{
    if (s->warmup > 0 && step <= s->warmup) return s->lr * (double)step / (double)s->warmup;
    if (!s->cosine) return s->lr;
    int64_t span = s->decay_steps - s->warmup;
    double prog = span > 0 ? (double)(step - s->warmup) / (double)span : 1.0;
    if (prog > 1.0) prog = 1.0;
    if (prog < 0.0) prog = 0.0;
    return s->min_lr + (s->lr - s->min_lr) * 0.5 * (1.0 + cos(M_PI * prog));
}

void vf_train_mb_range(int B, int M, int m, int *first, int *n)
{
    int a = (int)((int64_t)B * m / M), b = (int)((int64_t)B * (m + 1) / M);
    *first = a;
    *n = b - a;
}

int64_t vf_train_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ------------------------------------------------------------------ buffer pool */

#define POOL_MAX_KEEP 64

struct vf_bufpool {
    pthread_mutex_t mu;
    vf_backend *be;
    size_t bytes;
    int refs, nfree, keep;
    void *free[POOL_MAX_KEEP];
};

vf_bufpool *vf_bufpool_new(vf_backend *be, size_t bytes, int keep, vf_status *st)
{
    vf_bufpool *p = calloc(1, sizeof *p);
    if (!p) {
        vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "buffer pool: out of memory");
        return NULL;
    }
    pthread_mutex_init(&p->mu, NULL);
    p->be = be;
    p->bytes = bytes ? bytes : 1;
    p->keep = keep < 1 ? 1 : keep > POOL_MAX_KEEP ? POOL_MAX_KEEP : keep;
    p->refs = 1;
    return p;
}

size_t vf_bufpool_bytes(const vf_bufpool *p) { return p->bytes; }

/* Drops one reference with the lock held; frees everything with the last one. */
static void pool_unref_locked(vf_bufpool *p)
{
    if (--p->refs > 0) {
        pthread_mutex_unlock(&p->mu);
        return;
    }
    for (int i = 0; i < p->nfree; i++) p->be->free(p->be, p->free[i]);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

void vf_bufpool_unref(vf_bufpool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    pool_unref_locked(p);
}

static void pool_release(void *data, void *hint)
{
    vf_bufpool *p = hint;
    pthread_mutex_lock(&p->mu);
    /* keep the buffer for reuse only while the stage still holds the pool */
    if (p->nfree < p->keep && p->refs > 1)
        p->free[p->nfree++] = data;
    else
        p->be->free(p->be, data);
    pool_unref_locked(p);
}

vf_tensor *vf_bufpool_tensor(vf_bufpool *p, vf_dtype dt, int ndim, const int64_t *shape,
                             vf_status *st)
{
    size_t need = vf_dtype_size(dt);
    for (int i = 0; i < ndim; i++) need *= (size_t)shape[i];
    if (need > p->bytes) {
        char s[96];
        vf_shape_str(ndim, shape, s, sizeof s);
        vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                      "buffer pool: tensor %s %s needs %zu bytes, buffers hold %zu", vf_dtype_name(dt),
                      s, need, p->bytes);
        return NULL;
    }
    pthread_mutex_lock(&p->mu);
    void *b = p->nfree ? p->free[--p->nfree] : NULL;
    p->refs++;
    pthread_mutex_unlock(&p->mu);
    if (!b) b = p->be->alloc(p->be, p->bytes, st);
    if (!b) {
        pthread_mutex_lock(&p->mu);
        pool_unref_locked(p);
        return NULL;
    }
    vf_tensor *t = vf_tensor_wrap(dt, ndim, shape, p->be->device, b, pool_release, p, st);
    if (!t) pool_release(b, p);
    return t;
}

/* ------------------------------------------------------------------ transfers */

static bool same_device(vf_device a, vf_device b)
{
    return a.kind == b.kind && (a.kind == VF_DEV_CPU || a.index == b.index);
}

int vf_train_tensor_in(vf_backend *be, void *dst, vf_dtype dst_dt, const vf_tensor *src,
                       int64_t off, int64_t n, const char *what, vf_status *st)
{
    if (off < 0 || n < 0 || off + n > vf_tensor_numel(src))
        return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                             "%s: elements [%lld, %lld) outside a tensor of %lld", what,
                             (long long)off, (long long)(off + n), (long long)vf_tensor_numel(src));
    if (n == 0) return 0;
    size_t es = vf_dtype_size(src->dtype);
    const char *p = (const char *)src->data + (size_t)off * es;
    if (same_device(src->device, be->device) && src->dtype == dst_dt) {
        be->copy(be, dst, p, (size_t)n * es);
        return 0;
    }
    if (src->device.kind == VF_DEV_CPU && src->dtype == VF_DTYPE_F32) {
        be->upload(be, dst, (const float *)p, n, dst_dt);
        return 0;
    }
    if (src->device.kind == VF_DEV_CPU && src->dtype == dst_dt) {
        /* host bytes of the backend's own dtype (a host optimizer shard's bf16 weights
         * for a GPU partition): one copy onto the device */
        be->copy(be, dst, p, (size_t)n * es);
        return 0;
    }
    char dev[32];
    vf_device_str(src->device, dev, sizeof dev);
    return vf_status_set(st, VF_EINVAL, __FILE__, __LINE__,
                         "%s: cannot move a %s tensor on %s into %s memory of the %s backend", what,
                         vf_dtype_name(src->dtype), dev, vf_dtype_name(dst_dt), be->name);
}

/* ------------------------------------------------------------------ the end */

int vf_train_finish(vf_ctx *ctx, const char *const *outs, int nout, const char *const *stop_ins,
                    int nstop, const char *const *drain_ins, int ndrain, vf_status *st)
{
    int rc = 0;
    for (int i = 0; i < nout && rc >= 0; i++) {
        vf_port *p = vf_out(ctx, outs[i]);
        if (p) rc = vf_close(p, st);
    }
    for (int i = 0; i < nstop && rc >= 0; i++) {
        vf_port *p = vf_in(ctx, stop_ins[i]);
        if (p) rc = vf_close(p, st);
    }
    for (int i = 0; i < ndrain && rc >= 0; i++) {
        vf_port *p = vf_in(ctx, drain_ins[i]);
        while (p && rc >= 0) {
            vf_item *it = NULL;
            rc = vf_recv(p, &it, st);
            vf_item_free(it);
            if (rc == VF_EOS) {
                rc = 0;
                break;
            }
        }
    }
    return rc < 0 ? rc : 0;
}

/* ------------------------------------------------------------------ resume */

int vf_train_no_ckpt(vf_ctx *ctx, const vf_ckpt *seen, const vf_status *why, bool loud, vf_status *st)
{
    bool empty = seen->skipped == 0 && !seen->latest_missing;
    if (vf_resume_auto(ctx) && empty) {
        if (loud) vf_log(ctx, VF_LOG_WARN, "--resume=auto: %s: the run starts from step 0", why->msg);
        return 0;
    }
    if (vf_resume_auto(ctx))
        return vf_status_set(st, VF_EBADINPUT, __FILE__, __LINE__,
                             "--resume=auto: %s: checkpoints were written there but none is complete now, so "
                             "the run does not start over them from step 0; move the directory away to start "
                             "afresh",
                             why->msg);
    return vf_status_set(st, VF_EUSAGE, __FILE__, __LINE__,
                         "--resume: no complete checkpoint to continue from: %s; run without --resume to start "
                         "from step 0, or with --resume=auto to do so when there is none",
                         why->msg);
}

int vf_train_ckpt_aside(vf_ctx *ctx, const char *who, const char *dir, vf_status *st)
{
    char to[PATH_MAX];
    int64_t first, last;
    int rc = vf_ckpt_set_aside(dir, to, sizeof to, &first, &last, st);
    if (rc) {
        vf_status_prefix(st, "%s: setting an earlier run's checkpoints aside", who);
        return rc;
    }
    if (first >= 0)
        vf_log(ctx, VF_LOG_WARN, "%s: %s held an earlier run's checkpoints (steps %lld to %lld): moved to %s; this "
               "run starts from step 0 (--resume continues a run)", who, dir, (long long)first, (long long)last, to);
    return 0;
}

