/* decode.c — the `decode` stage: videos in (manifest or glob), clips out.
 *
 * A source stage: reads this instance's share of the files (shard/nshards; the Lua side
 * expands `workers = N` into N instances, lua/decode.lua), cuts each file into clips
 * (decode_clip.h) and decodes them with the core of decode_av.h into u8 (T, H, W, 3) RGB
 * items (docs/ITEMS.md, port "out"). Each instance runs in a worker process of its own
 * (VF_STAGE_OWN_WORKER), so libav's failures stay there: decode_guard.h records a file
 * that crashes the decoder or hangs it past its deadline (the worker ends and the run
 * fails naming the file) and later runs in the same run dir skip it.
 *
 * A file that cannot give its clips (corrupt, truncated, empty, not a video, audio only,
 * too short, over max_pixels, past its deadline) goes to <run dir>/quarantine.jsonl with
 * the reason and the run goes on. If a file fails after some of its clips were sent,
 * those clips stand (their frames were decoded correctly) and the reason says so. The
 * bad files are counted over the whole run: every instance of the group adds to one
 * tally (run_tally.h). Once the run has tried bad_min_files files, more than
 * max_bad_fraction of those tried being bad stops it, naming the fraction, the knob and
 * the last reasons; a run of fewer files is never stopped by the fraction (one bad clip
 * of five is 0.2), only when none of its files is good (unless max_bad_fraction is 1). The closing summary names the
 * quarantined files.
 *
 * Buckets: with `buckets` (decode_bucket.h) each file goes to the bucket nearest its
 * display aspect ratio and gets the longest of that bucket's lengths its frames allow;
 * its clips are (F, H, W, 3) of that bucket (cover-resize, centre crop), carry metadata
 * "bucket" = "<W>x<H>x<F>" and "bucket_batch", and `frames` and `size` are not used. A
 * file too short for the bucket's shortest length is dropped: the reason goes to
 * quarantine.jsonl, metric dropped_short counts it, and it does not count against
 * max_bad_fraction (a mixed dataset's short videos are expected to fall out); a file
 * that gives no clip for another reason is a bad file as without buckets. The clips
 * of each bucket length are counted (metric row "buckets" and the closing log line).
 *
 * bucket_config (Open-Sora's table, decode_bucket.h) expands into buckets per resolution;
 * a file goes to the largest resolution it reaches (80 % of its pixels), else it is
 * dropped like a short file (metric dropped_small). Each clip, planned at the longest
 * length its file allows, is kept there with that length's keep probability (a seeded
 * hash, so a rerun keeps the same clips), else takes its first frames at the next
 * shorter length whose decision keeps it; a clip no length keeps is dropped (metric
 * dropped_keep).
 *
 * Text embeddings: with text_dim > 0 every manifest row names a safetensors file in
 * column `text_emb` (decode_text.h); it is loaded before the video is opened and every
 * clip of the row carries it as "text_emb" bf16 (L, D). A missing, unreadable or
 * misshapen file (another width, more than text_len rows, NaN) quarantines the row like
 * a bad video. A manifest with the column and text_dim = 0, or text_dim > 0 and a row
 * without the column, is refused at init (exit 2): a cache must not mix the two. The
 * same holds for image_dim and column `clip_emb` (image-to-video: the CLIP features of
 * the row's first frame, exactly image_len rows), carried as "clip_emb" bf16 (L, D).
 */
#include "stages/decode/decode_av.h"
#include "stages/decode/decode_bucket.h"
#include "stages/decode/decode_clip.h"
#include "stages/decode/decode_guard.h"
#include "formats/video_manifest.h"
#include "stages/decode/decode_replan.h"
#include "formats/run_tally.h"
#include "stages/decode/decode_text.h"

#include <errno.h>
#include <libavutil/log.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define META_BYTES (64 * 1024) /* bound on an item's id + metadata (port spec) */
#define LAST_REASONS 3

static const vf_param_spec decode_params[] = {
    {"manifest", VF_P_STR, "null", VF_ANY,
     "CSV (path,text[,start,end,fps], extra columns pass through) or JSONL list of videos"},
    {"source", VF_P_STR, "null", VF_ANY, "glob of videos instead of a manifest (\"dir/*.mp4\"; a dir = all files)"},
    {"frames", VF_P_INT, "17", VF_RANGE(1, 4096), "frames per clip (T)"},
    {"stride", VF_P_INT, "1", VF_RANGE(1, 1000), "take every stride-th source frame"},
    {"fps", VF_P_NUM, "0", VF_RANGE(0, 1000),
     "target frame rate: sample by timestamp instead of stride (0 = use stride)"},
    {"clips_per_video", VF_P_INT, "0", VF_RANGE(0, 1000000),
     "clips per file, spread evenly over its non-overlapping clips; 0 = all of them"},
    {"size", VF_P_LIST_INT, "[256,256]", VF_RANGE(1, 16384),
     "output {W, H} (or {S} for S x S): resize keeping aspect to cover, then centre crop"},
    {"filter", VF_P_STR, "\"bicubic\"", VF_ANY, "resize filter", "fast_bilinear|bilinear|bicubic|area|lanczos|neighbor"},
    {"deadline_s", VF_P_NUM, "300", VF_RANGE(0.01, 604800), "time budget per file (open + all its clips)"},
    {"stall_s", VF_P_NUM, "10", VF_RANGE(0, 604800),
     "quarantine a file when the decoder delivers no frame for this long (0 = only deadline_s)"},
    {"max_bad_fraction", VF_P_NUM, "0.1", VF_RANGE(0, 1),
     "stop the run when more than this fraction of the files it tried (all decode instances) are quarantined"},
    {"bad_min_files", VF_P_INT, "20", VF_RANGE(1, 1000000000),
     "files the run tries before max_bad_fraction is judged; a run of fewer files fails only when every one is bad "
     "(and max_bad_fraction < 1)"},
    {"threads", VF_P_INT, "2", VF_RANGE(0, 256), "libavcodec/libswscale threads per instance (0 = per core)"},
    {"shard", VF_P_INT, "0", VF_RANGE(0, 65535), "this instance's share: files i with i % nshards == shard"},
    {"nshards", VF_P_INT, "1", VF_RANGE(1, 65536), "number of decode instances sharing the list"},
    {"max_pixels", VF_P_INT, "9437184", VF_RANGE(1, 1 << 30),
     "largest decoded frame (w*h) accepted; also bounds the decoder's frame pool"},
    {"err_detect", VF_P_STR, "\"conceal\"", VF_ANY,
     "damaged frames: conceal keeps those the decoder conceals (as ffmpeg does; the file is "
     "reported damaged), careful drops frames libav flags, explode also any frame with an error",
     "conceal|careful|explode"},
    {"text_dim", VF_P_INT, "0", VF_RANGE(0, 1 << 20),
     "width of the text embeddings named by the manifest column text_emb (umT5-xxl: 4096); 0 = none"},
    {"text_len", VF_P_INT, "512", VF_RANGE(1, 65536), "most rows a text embedding may have"},
    {"image_dim", VF_P_INT, "0", VF_RANGE(0, 1 << 20),
     "image-to-video: width of the CLIP image features named by the manifest column clip_emb (ViT-H/14: 1280); "
     "0 = none"},
    {"image_len", VF_P_INT, "257", VF_RANGE(1, 65536), "rows of the CLIP image features (ViT-H/14: 257)"},
    {"buckets", VF_P_LIST_TABLE, "null", VF_ANY,
     "{ {w = W, h = H, frames = {17, 33}, batch = {4, 2} (or one integer)}, ... }: each file goes to the "
     "bucket nearest its aspect ratio, each clip to the longest length its frames allow; replaces size and frames"},
    {"bucket_config", VF_P_TABLE, "null", VF_ANY,
     "Open-Sora's table { [\"480p\"] = { [49] = {keep, batch}, ... }, ... }: each resolution expands into "
     "buckets of aspect 9:16, 3:4, 1:1, 4:3, 16:9; a clip is kept at a length with probability keep, else "
     "falls to the next shorter one; instead of buckets"},
    {"seed", VF_P_INT, "0", VF_RANGE(0, 2147483647), "seed of bucket_config's keep decisions"},
    {"vae_stride", VF_P_INT, "8", VF_RANGE(1, 64), "spatial stride of the VAE: bucket sizes are multiples of vae_stride * patch"},
    {"patch", VF_P_INT, "2", VF_RANGE(1, 64), "spatial patch of the DiT: bucket sizes are multiples of vae_stride * patch"},
    {0},
};

typedef struct dec_state {
    vf_decode_opts av;
    vf_clip_opts clip;
    vf_manifest man;
    double max_bad;
    int64_t bad_min;              /* files tried before max_bad is judged */
    vf_decode_tally tally;        /* files tried and bad, over the group's instances */
    int64_t nbad;                 /* this instance's quarantined files */
    char bad_names[512];          /* the first ones, for the summary */
    int T, W, H;
    vf_buckets bk;                /* bk.n == 0: one fixed size and length */
    int64_t bclips[VF_BUCKET_MAX][VF_BUCKET_MAX_LENS]; /* clips made per bucket length */
    int64_t dropped_short;        /* files too short for their bucket's shortest length */
    int64_t dropped_small;        /* files below 80 % of bucket_config's smallest resolution */
    int64_t dropped_keep;         /* clips no length of their bucket kept (keep < 1) */
    int64_t fell;                 /* clips kept at a length shorter than their planned one */
    uint64_t seed;
    vf_decode_emb_dims emb;       /* the embedding columns read (text_emb, clip_emb) */
    char transform[256];          /* of the fixed geometry (no buckets) */
    char filter[32];
    char last[LAST_REASONS][512]; /* ring of the last quarantine reasons */
    int nlast;
    int64_t damaged;              /* files that gave clips despite damage or unreadable frames */
} dec_state;

/* ------------------------------------------------------------ params */

static int read_opts(const vf_params *p, vf_decode_opts *av, vf_clip_opts *clip, int *W, int *H,
                     vf_status *st)
{
    int rc = 0;
    int nsz = vf_param_len(p, "size");
    if (nsz != 1 && nsz != 2)
        VF_FAIL(st, VF_EUSAGE, "decode: size must be {W, H} or {S}, got %d numbers", nsz);
    *W = (int)vf_param_int_at(p, "size", 0);
    *H = (int)vf_param_int_at(p, "size", nsz == 2 ? 1 : 0);
    vf_decode_opts_default(av);
    av->out_w = *W;
    av->out_h = *H;
    av->threads = (int)vf_param_int(p, "threads");
    av->deadline_s = vf_param_num(p, "deadline_s");
    av->stall_s = vf_param_num(p, "stall_s");
    av->max_pixels = vf_param_int(p, "max_pixels");
    const char *ed = vf_param_str(p, "err_detect");
    av->err_detect = !strcmp(ed, "conceal") ? VF_DECODE_ERR_CONCEAL
                   : !strcmp(ed, "explode") ? VF_DECODE_ERR_EXPLODE : VF_DECODE_ERR_CAREFUL;
    if (vf_decode_filter_parse(vf_param_str(p, "filter"), &av->sws_flags) < 0)
        VF_FAIL(st, VF_EUSAGE, "decode: unknown filter '%s'", vf_param_str(p, "filter"));
    memset(clip, 0, sizeof *clip);
    clip->frames = (int)vf_param_int(p, "frames");
    clip->stride = (int)vf_param_int(p, "stride");
    clip->fps = vf_param_num(p, "fps");
    clip->clips_per_video = (int)vf_param_int(p, "clips_per_video");
    if (clip->fps > 0 && clip->stride != 1)
        VF_FAIL(st, VF_EUSAGE, "decode: give either stride (%d) or fps (%g), not both",
                clip->stride, clip->fps);
    if ((int64_t)*W * *H > vf_param_int(p, "max_pixels"))
        VF_FAIL(st, VF_EUSAGE, "decode: size %dx%d is larger than max_pixels=%lld", *W, *H,
                (long long)vf_param_int(p, "max_pixels"));
    bool has_m = vf_param_has(p, "manifest"), has_s = vf_param_has(p, "source");
    if (has_m == has_s)
        VF_FAIL(st, VF_EUSAGE, "decode: give exactly one of manifest (a CSV/JSONL file) or "
                               "source (a glob), got %s", has_m ? "both" : "neither");
    vf_buckets bk;
    VF_TRY(vf_decode_read_buckets(p, &bk, st));
    if (bk.n) { /* the decoder's budget covers the largest bucket */
        int mT;
        int64_t mc;
        vf_decode_bucket_bounds(&bk, W, H, &mT, &mc);
        av->out_w = *W;
        av->out_h = *H;
        clip->frames = mT;
    }
    if (vf_param_int(p, "shard") >= vf_param_int(p, "nshards"))
        VF_FAIL(st, VF_EUSAGE, "decode: shard %lld outside [0, nshards=%lld)",
                (long long)vf_param_int(p, "shard"), (long long)vf_param_int(p, "nshards"));
    return 0;
fail:
    return rc;
}

static int decode_ports(const vf_params *p, const vf_port_specs *upstream, vf_port_specs *out,
                        vf_status *st)
{
    int rc = 0, W, H;
    vf_decode_opts av;
    vf_clip_opts clip;
    VF_TRY(read_opts(p, &av, &clip, &W, &H, st));
    vf_port_spec *o = vf_port_add(out, "out", VF_PORT_OUT, true);
    const int64_t dims[4] = {clip.frames, H, W, 3};
    static const char *const bsym[4] = {"T", "H", "W", ""};
    /* (T, H, W, 3) RGB; with buckets each dim varies up to the largest bucket's */
    bool bucketed = vf_param_has(p, "buckets") || vf_param_has(p, "bucket_config");
    vf_port_tensor(o, "frames", VF_DTYPE_U8, 4, dims, bucketed ? bsym : NULL);
    if (vf_param_int(p, "text_dim") > 0) {
        static const char *const tsym[2] = {"L", ""};
        const int64_t td[2] = {vf_param_int(p, "text_len"), vf_param_int(p, "text_dim")};
        vf_port_tensor(o, "text_emb", VF_DTYPE_BF16, 2, td, tsym); /* (L <= text_len, D) */
    }
    if (vf_param_int(p, "image_dim") > 0)
        vf_port_tensor(o, "clip_emb", VF_DTYPE_BF16, 2, (int64_t[2]){vf_param_int(p, "image_len"), vf_param_int(p, "image_dim")}, NULL);
    o->meta_bytes = META_BYTES;
    return 0;
fail:
    return rc;
}

static int decode_memory(const vf_params *p, const vf_port_specs *ports, vf_mem_plan *out,
                         vf_status *st)
{
    int rc = 0, W, H;
    vf_decode_opts av;
    vf_clip_opts clip;
    VF_TRY(read_opts(p, &av, &clip, &W, &H, st));
    vf_device cpu = {VF_DEV_CPU, 0};
    /* what a frame of max_pixels needs, whatever the files hold: a bound, named as one */
    vf_mem_plan_add(out, cpu, VF_MEM_DECODE, "decoder, index, scaler (max_pixels bound)",
                    vf_decode_budget_bytes(&av));
    /* the clip being filled before vf_send hands it to the edge */
    int64_t clip_bytes = (int64_t)clip.frames * H * W * 3;
    vf_buckets bk;
    VF_TRY(vf_decode_read_buckets(p, &bk, st));
    if (bk.n) {
        int mW, mH, mT;
        vf_decode_bucket_bounds(&bk, &mW, &mH, &mT, &clip_bytes);
    }
    vf_mem_plan_add(out, cpu, VF_MEM_DECODE, "clip being decoded", clip_bytes + META_BYTES);
    if (vf_param_int(p, "text_dim") > 0) /* the row's bf16 embedding and its f32 staging */
        vf_mem_plan_add(out, cpu, VF_MEM_DECODE, "text embedding", vf_param_int(p, "text_len") * vf_param_int(p, "text_dim") * 6);
    vf_mem_plan_add(out, cpu, VF_MEM_DECODE, "clip image features", vf_param_int(p, "image_len") * vf_param_int(p, "image_dim") * 6);
    /* clip plan of one file: frame indices of every clip (bounded by the frame index) */
    vf_mem_plan_add(out, cpu, VF_MEM_DECODE, "clip plan", (int64_t)(1 << 21) * 8 * 2);
    const char *m = vf_param_has(p, "manifest") ? vf_param_str(p, "manifest") : NULL;
    const char *s = vf_param_has(p, "source") ? vf_param_str(p, "source") : NULL;
    vf_mem_plan_add(out, cpu, VF_MEM_DECODE, "manifest", vf_manifest_bytes(m, s, (int)vf_param_int(p, "nshards")));
    return 0;
fail:
    return rc;
}

/* `vflow run`: the manifest or source is there before any worker starts (a missing one
 * would leave an empty cache behind). */
static int decode_preflight(const vf_params *p, vf_status *st)
{
    int rc = 0;
    vf_manifest m;
    int nshards = (int)vf_param_int(p, "nshards");
    if (vf_param_has(p, "manifest")) {
        rc = vf_manifest_check(vf_param_str(p, "manifest"), st);
        if (rc < 0) vf_status_prefix(st, "decode");
    } else if (vf_param_has(p, "source")) { /* the listing an instance makes, for its share */
        rc = vf_manifest_glob(vf_param_str(p, "source"), 0, nshards, &m, st);
        vf_manifest_fini(&m);
        if (rc < 0) vf_status_prefix(st, "decode");
    }
    return rc;
}

/* ------------------------------------------------------------ lifecycle */

/* The transform metadata of clips of T frames of W x H (part of the cache key). */
static void make_transform(const dec_state *d, int T, int W, int H, char *buf, size_t n)
{
    snprintf(buf, n, "frames=%d;stride=%d;fps=%g;size=%dx%d;crop=center;filter=%s", T,
             d->clip.fps > 0 ? 1 : d->clip.stride, d->clip.fps, W, H, d->filter);
}

static int decode_init(vf_stage *s, const vf_params *p, vf_status *st)
{
    int rc = 0;
    dec_state *d = calloc(1, sizeof *d);
    if (!d) return vf_status_set(st, VF_ENOMEM, __FILE__, __LINE__, "decode: out of memory");
    vf_stage_set_state(s, d);
    VF_TRY(read_opts(p, &d->av, &d->clip, &d->W, &d->H, st));
    VF_TRY(vf_decode_read_buckets(p, &d->bk, st));
    d->T = d->clip.frames;
    d->max_bad = vf_param_num(p, "max_bad_fraction");
    d->bad_min = vf_param_int(p, "bad_min_files");
    d->seed = (uint64_t)vf_param_int(p, "seed");
    int shard = (int)vf_param_int(p, "shard"), nshards = (int)vf_param_int(p, "nshards");
    if (vf_param_has(p, "manifest")) rc = vf_manifest_load(vf_param_str(p, "manifest"), shard, nshards, &d->man, st);
    else rc = vf_manifest_glob(vf_param_str(p, "source"), shard, nshards, &d->man, st);
    if (rc < 0) {
        vf_status_prefix(st, "stage '%s'", vf_stage_name(s));
        goto fail;
    }
    d->emb = (vf_decode_emb_dims){vf_param_int(p, "text_dim"), vf_param_int(p, "text_len"),
                                  vf_param_int(p, "image_dim"), vf_param_int(p, "image_len")};
    VF_TRY(vf_decode_embs_check(&d->man, vf_stage_name(s), &d->emb, st));
    snprintf(d->filter, sizeof d->filter, "%s", vf_param_str(p, "filter"));
    make_transform(d, d->T, d->W, d->H, d->transform, sizeof d->transform);
    /* libav's own error lines go to the log; warnings about damaged files would drown
     * it, and every rejection carries its reason into quarantine.jsonl anyway. */
    if (av_log_get_level() > AV_LOG_ERROR) av_log_set_level(AV_LOG_ERROR);
    return 0;
fail:
    return rc;
}

static void decode_fini(vf_stage *s)
{
    dec_state *d = vf_stage_state(s);
    if (!d) return;
    vf_manifest_fini(&d->man);
    vf_decode_tally_close(&d->tally);
    free(d);
    vf_stage_set_state(s, NULL);
}

/* ------------------------------------------------------------ per file */

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* 128-bit identity of (path, size, mtime) as 32 hex chars: two FNV-1a 64 lanes. */
static void source_id(const char *path, int64_t size, int64_t mtime_ns, char out[33])
{
    uint64_t h[2] = {0xcbf29ce484222325ULL, 0x84222325cbf29ce4ULL};
    char tail[64];
    int tn = snprintf(tail, sizeof tail, "\n%lld\n%lld", (long long)size, (long long)mtime_ns);
    for (int l = 0; l < 2; l++) {
        for (const char *c = path; *c; c++) { h[l] ^= (unsigned char)*c; h[l] *= 0x100000001b3ULL + l * 2; }
        for (int i = 0; i < tn; i++) { h[l] ^= (unsigned char)tail[i]; h[l] *= 0x100000001b3ULL + l * 2; }
    }
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)h[0], (unsigned long long)h[1]);
}

/* The geometry of one file's clips: the fixed one, or its bucket's. */
typedef struct file_geom {
    int T, W, H;
    int bucket, len;              /* bucket index and index of its length; -1: no buckets */
    char transform[256];
} file_geom;

static int build_item(dec_state *d, const vf_manifest_row *r, const vf_decode_info *info,
                      const double *times, int64_t grid, const int64_t *idx, vf_tensor *frames,
                      const char *src, int64_t size, int64_t mtime_ns, const vf_decode_embs *embs,
                      const file_geom *g, vf_item **out, vf_status *st)
{
    int rc = 0;
    char id[4200], tf[400];
    snprintf(id, sizeof id, "%s#%lld", r->path, (long long)grid);
    vf_item *it = vf_item_new(id, st);
    if (!it) { vf_tensor_unref(frames); return st ? st->code : VF_ENOMEM; }
    VF_TRY(vf_item_put(it, "frames", frames, st));
    VF_TRY(vf_decode_embs_put(it, embs, st));
    if (r->start_s > 0 || r->end_s > 0)
        snprintf(tf, sizeof tf, "%s;start=%g;end=%g", g->transform, r->start_s, r->end_s);
    else
        snprintf(tf, sizeof tf, "%s", g->transform);
    VF_TRY(vf_item_set_str(it, "path", r->path, st));
    VF_TRY(vf_item_set_str(it, "caption", r->caption, st));
    VF_TRY(vf_item_set_str(it, "transform", tf, st));
    VF_TRY(vf_item_set_str(it, "source", src, st));
    VF_TRY(vf_item_set_num(it, "clip", (double)grid, st));
    VF_TRY(vf_item_set_num(it, "pts_start", times[idx[0]], st));
    VF_TRY(vf_item_set_num(it, "pts_end", times[idx[g->T - 1]], st));
    VF_TRY(vf_item_set_num(it, "fps", r->fps > 0 && !info->has_pts ? r->fps : info->fps, st));
    VF_TRY(vf_item_set_num(it, "frame0", (double)idx[0], st));
    VF_TRY(vf_item_set_num(it, "size_bytes", (double)size, st));
    VF_TRY(vf_item_set_num(it, "mtime_ns", (double)mtime_ns, st));
    VF_TRY(vf_item_set_num(it, "src_w", info->width, st));
    VF_TRY(vf_item_set_num(it, "src_h", info->height, st));
    VF_TRY(vf_item_set_num(it, "rotation", info->rotation, st));
    if (g->bucket >= 0) {
        const vf_bucket *b = &d->bk.b[g->bucket];
        char name[48];
        vf_bucket_name(b, b->frames[g->len], name, sizeof name);
        VF_TRY(vf_item_set_str(it, "bucket", name, st));
        VF_TRY(vf_item_set_num(it, "bucket_batch", b->batch[g->len], st));
    }
    for (int i = 0; i < r->nextra; i++) {
        const vf_manifest_extra *x = &r->extra[i];
        if (x->is_num) VF_TRY(vf_item_set_num(it, x->key, strtod(x->val, NULL), st));
        else VF_TRY(vf_item_set_str(it, x->key, x->val, st));
    }
    *out = it;
    return 0;
fail:
    vf_item_free(it);
    return rc;
}

/* The length a clip planned at bucket length index `planned` is kept at: that one if
 * its keep decision says so, else the next shorter length of the bucket whose decision
 * does (the clip's first frames: every shorter length fits in it); -1 when none does. */
static int keep_len(const dec_state *d, const vf_bucket *b, const char *path, int64_t clip, int planned)
{
    int cur = planned;
    while (cur >= 0) {
        if (vf_bucket_keep(d->seed, path, clip, b->frames[cur], b->keep[cur])) return cur;
        int next = -1; /* the longest length shorter than the current one */
        for (int i = 0; i < b->nlens; i++)
            if (b->frames[i] < b->frames[cur] && (next < 0 || b->frames[i] > b->frames[next])) next = i;
        cur = next;
    }
    return -1;
}

/* Decodes one file. 0: done (clips sent); 1: bad file, reason in why; 2: the run is
 * draining, stop producing; 3: too short for its bucket (dropped, reason in why); 4:
 * smaller than every resolution of bucket_config (dropped, reason in why); <0: run
 * failure. */
static int do_file(dec_state *d, vf_ctx *ctx, vf_port *out, const vf_manifest_row *r,
                   int64_t *nclips, char *why, size_t whyn, vf_status *st)
{
    int rc = 0;
    vf_status fst = {0};
    vf_decode_file *f = NULL;
    vf_clip_plan plan = {0};
    vf_decode_embs embs = {0};
    int64_t sent = 0, lost_n = 0;
    char lost_why[320] = "";
    struct stat sb;
    why[0] = 0;
    size_t meta = strlen(r->path) * 2 + strlen(r->caption) + strlen(d->transform) + 512;
    for (int i = 0; i < r->nextra; i++) meta += strlen(r->extra[i].key) + strlen(r->extra[i].val) + 16;
    if (meta > META_BYTES) {
        snprintf(why, whyn, "metadata of %zu bytes (path, caption, extra columns) exceed the %d-byte bound",
                 meta, META_BYTES);
        return 1;
    }
    if (stat(r->path, &sb) != 0) memset(&sb, 0, sizeof sb);
    int64_t mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000LL + sb.st_mtim.tv_nsec;
    char src[33];
    source_id(r->path, (int64_t)sb.st_size, mtime_ns, src);
    char prior[600];
    if (vf_decode_guard_known(r->path, src, prior, sizeof prior)) {
        snprintf(why, whyn, "skipped: an earlier run in this run dir recorded: %s", prior);
        return 1;
    }
    rc = vf_decode_embs_load(r, &d->emb, &embs, why, whyn, st);
    if (rc) return rc; /* 1: the row is bad (why says so); < 0: out of memory */
    vf_decode_opts o = d->av;
    o.fps_hint = r->fps;
    vf_decode_guard_enter(r->path, src, o.deadline_s);
    rc = vf_decode_open(r->path, &o, &f, &fst);
    if (rc < 0) goto bad;
    const vf_decode_info *info = vf_decode_get_info(f);
    const double *times = vf_decode_frame_times(f);
    vf_clip_opts co = d->clip;
    co.start_s = r->start_s;
    co.end_s = r->end_s;
    file_geom g = {.T = d->T, .W = d->W, .H = d->H, .bucket = -1, .len = -1};
    if (d->bk.n) {
        double dar = vf_bucket_dar(info->coded_w, info->coded_h, info->sar, vf_decode_transposed(f));
        double area = (double)info->coded_w * info->coded_h * (info->sar > 0 ? info->sar : 1);
        g.bucket = vf_bucket_pick_area(&d->bk, dar, area);
        if (g.bucket < 0) {
            snprintf(why, whyn, "dropped: %dx%d (%.0f display pixels) is below 80%% of the smallest resolution "
                     "of bucket_config, \"%s\" (%lld pixels)", info->coded_w, info->coded_h, area,
                     d->bk.res_name[d->bk.nres - 1], (long long)d->bk.res_area[d->bk.nres - 1]);
            rc = 4;
            goto done;
        }
        const vf_bucket *b = &d->bk.b[g.bucket];
        g.W = b->w, g.H = b->h;
        rc = vf_bucket_plan(times, info->nframes, info->duration_s, b, &co, &plan, &g.len, &fst);
        if (rc == VF_EBADINPUT && !strncmp(fst.msg, "too short", 9)) { /* other reasons: a bad file */
            int shortest = b->frames[0];
            for (int i = 1; i < b->nlens; i++) if (b->frames[i] < shortest) shortest = b->frames[i];
            snprintf(why, whyn, "dropped: bucket %dx%d (aspect %.4g for the file's %.4g): %.1200s (shortest length %d)",
                     b->w, b->h, (double)b->w / b->h, dar, fst.msg, shortest);
            rc = 3;
            goto done;
        }
        if (rc < 0) goto bad;
        g.T = b->frames[g.len];
        rc = vf_decode_set_size(f, g.W, g.H, &fst);
        if (rc < 0) goto bad;
    } else {
        rc = vf_clip_plan_make(times, info->nframes, info->duration_s, &co, &plan, &fst);
        if (rc < 0) goto bad;
    }
    const int planT = g.T, plan_len = g.len; /* the plan's clips are planT frames apart in plan.idx */
    make_transform(d, g.T, g.W, g.H, g.transform, sizeof g.transform);
    const int64_t indexed = info->nframes;
    for (int64_t k = 0; k < plan.nclips; k++) {
        if (vf_stopping(ctx)) { rc = 2; goto done; } /* drain: end the stream here */
        const int64_t *idx = plan.idx + k * planT;
        if (g.bucket >= 0) { /* bucket_config's keep decision: this length, a shorter one, or none */
            const vf_bucket *b = &d->bk.b[g.bucket];
            int kl = keep_len(d, b, r->path, plan.grid[k], plan_len);
            if (kl < 0) {
                d->dropped_keep++;
                continue;
            }
            if (kl != g.len) {
                g.len = kl;
                g.T = b->frames[kl];
                make_transform(d, g.T, g.W, g.H, g.transform, sizeof g.transform);
            }
        }
        const int64_t shape[4] = {g.T, g.H, g.W, 3};
        vf_tensor *t = vf_tensor_new(VF_DTYPE_U8, 4, shape, st); /* (T, H, W, 3) */
        if (!t) { rc = st->code ? st->code : VF_ENOMEM; goto done; }
        rc = vf_decode_read(f, idx, g.T, t->data, &fst);
        if (rc == VF_EBADINPUT) {
            /* Frames the decoder cannot deliver are not the file's: drop them and plan
             * the clips again over the frames that can be read (as ffmpeg counts them).
             * Clips already sent lie before them and stay as they are. */
            char lw[sizeof lost_why];
            snprintf(lw, sizeof lw, "%.300s", fst.msg);
            int pr = vf_decode_replan(f, &co, &plan, &k, &lost_n, &fst);
            if (pr == 0) {
                vf_tensor_unref(t);
                memcpy(lost_why, lw, sizeof lw);
                times = vf_decode_frame_times(f);
                continue;
            }
            if (pr < 0) {
                vf_tensor_unref(t);
                memcpy(lost_why, lw, sizeof lw);
                rc = pr;
                if (sent) { rc = 0; break; } /* the readable frames make no more clips */
                goto bad;
            }
        }
        if (rc < 0) {
            vf_tensor_unref(t);
            vf_status_prefix(&fst, "clip %lld (frames %lld..%lld)", (long long)plan.grid[k],
                             (long long)idx[0], (long long)idx[g.T - 1]);
            goto bad;
        }
        vf_item *it = NULL;
        rc = build_item(d, r, info, times, plan.grid[k], idx, t, src, (int64_t)sb.st_size, mtime_ns, &embs, &g, &it, st);
        if (rc < 0) goto done;
        double t0 = mono_s();
        rc = vf_send(out, it, st);
        double waited = mono_s() - t0; /* waiting for credit is not decoding */
        vf_decode_deadline_extend(f, waited);
        vf_decode_guard_extend(waited);
        if (rc < 0) goto done;
        sent++;
        (*nclips)++;
        if (g.bucket >= 0) d->bclips[g.bucket][g.len]++;
        if (g.bucket >= 0 && g.len != plan_len) d->fell++;
    }
    rc = 0;
    if (info->damaged || lost_n) {
        /* the clips the readable frames make were sent; say what was lost, never silently */
        d->damaged++;
        vf_log(ctx, VF_LOG_WARN, "damaged: %s: %s%s%lld of %lld indexed frames unreadable%s%s%s; %lld clip%s made",
               r->path, info->damaged ? info->damage : "", info->damaged ? "; " : "", (long long)lost_n,
               (long long)indexed, lost_n ? " (" : "", lost_n ? lost_why : "", lost_n ? ")" : "",
               (long long)sent, sent == 1 ? "" : "s");
    }
    goto done;
bad:
    if (rc == VF_EBADINPUT || rc == VF_ETIMEOUT) {
        if (lost_n && !sent)
            snprintf(why, whyn, "%.700s (%lld indexed frames unreadable: %.500s)", fst.msg, (long long)lost_n, lost_why);
        else if (sent)
            snprintf(why, whyn, "%.1200s (%lld earlier clip%s of this file were sent)", fst.msg,
                     (long long)sent, sent > 1 ? "s" : "");
        else
            snprintf(why, whyn, "%.1400s", fst.msg);
        rc = 1;
    } else { /* out of memory or a bug: not the file's fault */
        vf_status_set(st, rc, fst.file ? fst.file : __FILE__, fst.line, "%s: %s", r->path, fst.msg);
    }
done:
    vf_decode_embs_free(&embs);
    vf_clip_plan_fini(&plan);
    vf_decode_close(f);
    vf_decode_guard_leave();
    return rc;
}

/* Clips per bucket length: one log line and one metrics row
 * {"event":"buckets","clips":{"<W>x<H>x<F>":N,...},"dropped_short":K}. */
static int report_buckets(dec_state *d, vf_ctx *ctx, vf_status *st)
{
    int rc = 0;
    size_t cap = 256 + (size_t)d->bk.n * VF_BUCKET_MAX_LENS * 48;
    char *line = malloc(cap), *row = malloc(cap);
    if (!line || !row) VF_FAIL(st, VF_ENOMEM, "decode: out of memory");
    size_t ln = 0, rn = 0;
    ln += (size_t)snprintf(line + ln, cap - ln, "buckets:");
    rn += (size_t)snprintf(row + rn, cap - rn, "{\"event\":\"buckets\",\"clips\":{");
    int first = 1;
    for (int i = 0; i < d->bk.n; i++) {
        const vf_bucket *b = &d->bk.b[i];
        for (int k = 0; k < b->nlens; k++) {
            char name[48];
            vf_bucket_name(b, b->frames[k], name, sizeof name);
            ln += (size_t)snprintf(line + ln, cap - ln, " %s=%lld", name, (long long)d->bclips[i][k]);
            rn += (size_t)snprintf(row + rn, cap - rn, "%s\"%s\":%lld", first ? "" : ",", name,
                                   (long long)d->bclips[i][k]);
            first = 0;
        }
    }
    ln += (size_t)snprintf(line + ln, cap - ln, "; %lld file%s dropped as too short", (long long)d->dropped_short,
                           d->dropped_short == 1 ? "" : "s");
    rn += (size_t)snprintf(row + rn, cap - rn, "},\"dropped_short\":%lld", (long long)d->dropped_short);
    if (d->bk.nres) { /* bucket_config: files too small, clips no keep decision kept, clips kept shorter */
        snprintf(line + ln, cap - ln, ", %lld as too small; %lld clip%s dropped by keep, %lld kept at a shorter length",
                 (long long)d->dropped_small, (long long)d->dropped_keep, d->dropped_keep == 1 ? "" : "s",
                 (long long)d->fell);
        snprintf(row + rn, cap - rn, ",\"dropped_small\":%lld,\"dropped_keep\":%lld,\"fell_shorter\":%lld}",
                 (long long)d->dropped_small, (long long)d->dropped_keep, (long long)d->fell);
    } else {
        snprintf(row + rn, cap - rn, "}");
    }
    vf_log(ctx, VF_LOG_INFO, "%s", line);
    vf_metric_row(ctx, row);
fail:
    free(line);
    free(row);
    return rc;
}

/* The name `--set NAME.PARAM=` reaches every instance by: the group's ("decode" of
 * decode_0 … decode_{N-1}, lua/decode.lua), or the stage's own when it is alone. */
static void group_name(const char *stage, int nshards, char *out, size_t n)
{
    snprintf(out, n, "%s", stage);
    char *u = strrchr(out, '_');
    if (nshards > 1 && u && u[1] && strspn(u + 1, "0123456789") == strlen(u + 1)) *u = 0;
}

/* Whether the run's bad files stop it now (the rule in the header): 0 or VF_EINVAL. */
static int judge_bad(dec_state *d, vf_stage *s, int64_t done, vf_status *st)
{
    int rc = 0;
    int64_t tried, bad;
    vf_decode_tally_sum(&d->tally, &tried, &bad);
    const int64_t total = d->tally.shared ? d->man.total : d->man.n;
    bool over = tried >= d->bad_min && (double)bad > d->max_bad * (double)tried;
    bool none = d->max_bad < 1 && tried == total && bad == total; /* 1: any share of bad files is fine */
    if (!over && !none) return 0;
    char tail[3 * 520] = "", group[VF_NAME_MAX + 8];
    for (int k = 0; k < LAST_REASONS && k < d->nlast; k++) {
        size_t l = strlen(tail);
        snprintf(tail + l, sizeof tail - l, "%s%s", k ? "; " : "", d->last[(d->nlast - 1 - k) % LAST_REASONS]);
    }
    group_name(vf_stage_name(s), d->tally.nshards, group, sizeof group);
    /* the run failed on its data, not on its command line: exit 1 */
    if (none)
        VF_FAIL(st, VF_EINVAL, "decode '%s': none of the run's %lld files gives a clip; last reasons: %s",
                vf_stage_name(s), (long long)total, tail);
    VF_FAIL(st, VF_EINVAL,
            "decode '%s': %lld of the %lld files the run tried are bad (%.3g > max_bad_fraction %.3g, judged once "
            "%lld files are tried), stopping after this instance's %lld files; to accept more bad files: --set "
            "max_bad_fraction=F (the precompute scripts' knob) or --set %s.max_bad_fraction=F; last reasons: %s",
            vf_stage_name(s), (long long)bad, (long long)tried, (double)bad / (double)tried, d->max_bad,
            (long long)d->bad_min, (long long)done, group, tail);
fail:
    return rc;
}

/* A quarantined file: recorded, its reason kept for the failure message, its name for
 * the summary. */
static void note_bad(dec_state *d, vf_ctx *ctx, const char *path, const char *why)
{
    vf_quarantine(ctx, path, why); /* also logs it */
    snprintf(d->last[d->nlast % LAST_REASONS], sizeof d->last[0], "%s: %s", path, why);
    d->nlast++;
    d->nbad++;
    size_t l = strlen(d->bad_names);
    if (d->nbad <= 3) snprintf(d->bad_names + l, sizeof d->bad_names - l, "%s%s", d->nbad > 1 ? ", " : "", path);
    else if (d->nbad == 4) snprintf(d->bad_names + l, sizeof d->bad_names - l, ", …");
    vf_summary(ctx, "quarantined", "%s: %lld of %lld file%s quarantined (%s/quarantine.jsonl): %s",
               vf_stage_name(vf_ctx_stage(ctx)), (long long)d->nbad, (long long)d->man.n, d->man.n == 1 ? "" : "s",
               vf_run_dir(ctx), d->bad_names);
}

static int decode_run(vf_stage *s, vf_ctx *ctx, vf_status *st)
{
    int rc = 0;
    dec_state *d = vf_stage_state(s);
    vf_port *out = vf_out(ctx, "out");
    int64_t nclips = 0, done = 0;
    char why[1536];
    const int64_t nfiles = d->man.n;
    const vf_params *p = vf_stage_params(s);
    if (!out) VF_FAIL(st, VF_EUSAGE, "decode: output port 'out' is not connected");
    /* libav stuck inside one call for the deadline plus this grace = a hung decoder */
    double grace = d->av.deadline_s * 0.25 > 5 ? d->av.deadline_s * 0.25 : 5;
    VF_TRY(vf_decode_guard_start(vf_run_dir(ctx), vf_stage_name(s), grace, st));
    vf_decode_tally_open(&d->tally, vf_run_dir(ctx), d->man.origin, (int)vf_param_int(p, "shard"),
                         (int)vf_param_int(p, "nshards"), why, sizeof why);
    if (why[0]) vf_log(ctx, VF_LOG_WARN, "%s", why);
    if (d->bk.n)
        vf_log(ctx, VF_LOG_INFO, "%lld of %lld files from %s (%d buckets)", (long long)nfiles,
               (long long)d->man.total, d->man.origin, d->bk.n);
    else
        vf_log(ctx, VF_LOG_INFO, "%lld of %lld files from %s (%dx%d, %d frames)", (long long)nfiles,
               (long long)d->man.total, d->man.origin, d->W, d->H, d->T);
    if (vf_param_has(p, "source") && vf_param_int(p, "shard") == 0) { /* one line for the group */
        vf_log(ctx, VF_LOG_INFO, "source %s: %lld videos, %lld with a .txt caption; %lld other files skipped",
               d->man.origin, (long long)d->man.total, (long long)d->man.captioned, (long long)d->man.skipped);
        char skipped[96] = "";
        if (d->man.skipped)
            snprintf(skipped, sizeof skipped, "; %lld other file%s skipped (not %s by extension)",
                     (long long)d->man.skipped, d->man.skipped == 1 ? "" : "s", d->man.skipped == 1 ? "a video" : "videos");
        vf_summary(ctx, "source", "source %s: %lld video%s, %lld with a .txt caption%s", d->man.origin,
                   (long long)d->man.total, d->man.total == 1 ? "" : "s", (long long)d->man.captioned, skipped);
    }
    for (int64_t i = 0; i < nfiles; i++) {
        /* drain (first SIGINT): stop producing; returning 0 ends the stream cleanly */
        if (vf_stopping(ctx)) break;
        const vf_manifest_row *r = &d->man.rows[i];
        rc = do_file(d, ctx, out, r, &nclips, why, sizeof why, st);
        if (rc < 0) goto fail;
        if (rc == 2) break;
        done++;
        if (rc == 3) { /* too short for its bucket: recorded and counted, not a bad file */
            d->dropped_short++;
            vf_quarantine(ctx, r->path, why);
            vf_metric(ctx, "dropped_short", (double)d->dropped_short);
        }
        if (rc == 4) { /* below bucket_config's smallest resolution: as too short */
            d->dropped_small++;
            vf_quarantine(ctx, r->path, why);
            vf_metric(ctx, "dropped_small", (double)d->dropped_small);
        }
        if (d->bk.nres) vf_metric(ctx, "dropped_keep", (double)d->dropped_keep);
        vf_decode_tally_add(&d->tally, rc == 1);
        if (rc == 1) note_bad(d, ctx, r->path, why);
        vf_metric(ctx, "files", (double)done);
        vf_metric(ctx, "clips", (double)nclips);
        vf_metric(ctx, "bad", (double)d->nbad);
        vf_metric(ctx, "damaged", (double)d->damaged);
        VF_TRY(judge_bad(d, s, done, st));
    }
    vf_log(ctx, VF_LOG_INFO, "done: %lld files, %lld clips, %lld quarantined, %lld damaged (clips kept)",
           (long long)done, (long long)nclips, (long long)d->nbad, (long long)d->damaged);
    if (d->bk.n) VF_TRY(report_buckets(d, ctx, st));
    vf_decode_guard_stop();
    return 0;
fail:
    vf_decode_guard_stop();
    return rc;
}

/* What lua/decode.lua takes and turns into instances (shard, nshards of each). */
static const vf_param_spec decode_expander_params[] = {
    {"workers", VF_P_INT, "1", VF_RANGE(1, 1024),
     "decode processes: workers = N makes decode_0 .. decode_{N-1} (group decode), instance i reading files i, "
     "i+N, …; 1 = one stage named decode (lua/decode.lua)"},
    {0},
};

static const vf_stage_ops decode_ops = {
    .api_version = VF_API_VERSION,
    .kind = "decode",
    .doc = "videos (manifest or glob) -> u8 (T,H,W,3) RGB clips; bad files to quarantine.jsonl",
    .params = decode_params,
    .flags = VF_STAGE_OWN_WORKER | VF_STAGE_SOURCE,
    .ports = decode_ports,
    .memory = decode_memory,
    .init = decode_init,
    .run = decode_run,
    .fini = decode_fini,
    .preflight = decode_preflight,
    .expander_params = decode_expander_params,
};
VF_REGISTER_STAGE(decode_ops)
