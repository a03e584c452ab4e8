/* decode_bucket.h — buckets of the decode stage: which (W, H, F) geometry each video and
 * each of its clips gets when a run mixes aspect ratios and lengths.
 *
 * A bucket is a frame size W x H and a list of clip lengths, each with its batch size
 * (the batch travels with the clips as metadata for the reader). A video goes to the
 * bucket whose aspect ratio W/H is nearest its display aspect ratio (after the sample
 * aspect ratio and rotation), measured as |log(W/H) - log(dar)| so portrait and
 * landscape are symmetric; ties go to the larger area, then to the bucket listed first.
 * The video then gets the longest length of that bucket at which the clip grid
 * (decode_clip.h, with the run's stride or fps) offers at least one clip, and makes
 * every clip that grid offers at that length. Pure arithmetic over the video's facts,
 * so it is tested without any video.
 */
#ifndef VF_DECODE_BUCKET_H
#define VF_DECODE_BUCKET_H
#include "runtime/json.h"
#include "runtime/vflow.h"
#include "stages/decode/decode_clip.h"

#define VF_BUCKET_MAX 64        /* buckets per run */
#define VF_BUCKET_MAX_LENS 16   /* lengths per bucket */

#define VF_BUCKET_MAX_RES 16    /* resolutions of a bucket_config */

typedef struct vf_bucket {
    int w, h;
    int nlens;
    int frames[VF_BUCKET_MAX_LENS];  /* as listed */
    int batch[VF_BUCKET_MAX_LENS];   /* batch of frames[i] */
    double keep[VF_BUCKET_MAX_LENS]; /* probability a clip is kept at frames[i]; 1 in the list form */
    int res;                         /* index into vf_buckets.res_name; -1 in the list form */
} vf_bucket;

typedef struct vf_buckets {
    int n;
    vf_bucket b[VF_BUCKET_MAX];
    int nres;                         /* 0: the list form (`buckets`) */
    char res_name[VF_BUCKET_MAX_RES][16];   /* bucket_config's resolutions, largest area first */
    int64_t res_area[VF_BUCKET_MAX_RES];    /* their nominal pixel areas */
} vf_buckets;

/* Reads the decode param `buckets` (a JSON array of {w, h, frames, batch}; batch a list
 * as long as frames or one integer for all) and checks it: w and h multiples of
 * vae_stride * patch, every length 1 + 4k, batch >= 1, frames non-empty and batch of
 * the same count, no bucket listed twice. VF_EUSAGE naming the bucket otherwise. */
int vf_buckets_parse(const vf_json *arr, int vae_stride, int patch, vf_buckets *out, vf_status *st);

/* Reads the decode param `bucket_config`, Open-Sora's table resolution -> length ->
 * {keep, batch} (a JSON object {"480p": {"49": [0.5, 8], ...}, ...}; the Lua sugar
 * turns integer length keys into strings), and expands it into buckets: every
 * resolution (vf_bucket_res_area) gives one bucket per aspect ratio of
 * VF_BUCKET_RATIOS, W x H the multiples of vae_stride * patch nearest to
 * sqrt(area * r) x sqrt(area / r); two ratios that round to the same size at a small
 * resolution give one bucket. VF_EUSAGE naming the entry otherwise (an unknown
 * resolution, a length not 1 + 4k, keep outside [0, 1], a batch < 1). */
int vf_bucket_config_parse(const vf_json *obj, int vae_stride, int patch, vf_buckets *out, vf_status *st);

/* Aspect ratios (W / H) a resolution expands into: 9:16, 3:4, 1:1, 4:3, 16:9. */
#define VF_BUCKET_NRATIOS 5
extern const int vf_bucket_ratios[VF_BUCKET_NRATIOS][2];

/* Nominal pixel area of an Open-Sora resolution name ("144p", "256", "240p", "360p",
 * "512", "480p", "720p", "1024", "1080p", "2k", "2048"), or 0 for an unknown name. */
int64_t vf_bucket_res_area(const char *name);

/* "<W>x<H>x<F>" of bucket b at length f (the item metadata "bucket"). */
void vf_bucket_name(const vf_bucket *b, int f, char *buf, size_t n);

/* Display aspect ratio (width / height as shown) of a coded_w x coded_h picture with
 * sample aspect ratio sar, transposed when the display matrix rotates by 90 degrees. */
double vf_bucket_dar(int coded_w, int coded_h, double sar, bool transpose);

/* Index of the bucket nearest to display aspect ratio dar (see the file comment). */
int vf_bucket_pick(const vf_buckets *bs, double dar);

/* With a bucket_config (bs->nres > 0): the resolution is the largest whose area the
 * video's display area (area, in source pixels) reaches to 80 % (Open-Sora's rule), the
 * bucket the one of that resolution nearest to dar; -1 when the video is smaller than
 * 80 % of every resolution. In the list form: vf_bucket_pick. */
int vf_bucket_pick_area(const vf_buckets *bs, double dar, double area);

/* Whether the clip `clip` of the file `path` is kept at length `frames` with
 * probability p: a hash of (seed, path, clip, frames) as a uniform number in [0, 1)
 * (vf_bucket_keep_u) below p. A rerun decides the same; p >= 1 always keeps. */
double vf_bucket_keep_u(uint64_t seed, const char *path, int64_t clip, int frames);
bool vf_bucket_keep(uint64_t seed, const char *path, int64_t clip, int frames, double p);

/* Plans the clips of one video (times, n, duration_s as vf_clip_plan_make takes them)
 * in bucket b: tries b's lengths from the longest down and keeps the first plan with a
 * clip. *len gets the chosen index into b->frames, *co (the caller's options, whose
 * frames field is overwritten) the options of the chosen plan, for planning again
 * later. VF_EBADINPUT when even the shortest length gives no clip (st: the reason at
 * that length), VF_ENOMEM. The caller calls vf_clip_plan_fini on *plan. */
int vf_bucket_plan(const double *times, int64_t n, double duration_s, const vf_bucket *b,
                   vf_clip_opts *co, vf_clip_plan *plan, int *len, vf_status *st);

/* decode_bucket_params.c. The buckets of the stage's params into *bk (zeroed; none
 * when neither `buckets` nor `bucket_config` is given): both, or a bucket above
 * max_pixels, is VF_EUSAGE naming the param. */
int vf_decode_read_buckets(const vf_params *p, vf_buckets *bk, vf_status *st);
/* The largest frame size, clip length and clip bytes (W·H·T·3) of the buckets. */
void vf_decode_bucket_bounds(const vf_buckets *bk, int *maxW, int *maxH, int *maxT, int64_t *max_clip);

#endif
