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
#include "stages/decode/decode_clip.h"

#define VF_BUCKET_MAX 64        /* buckets per run */
#define VF_BUCKET_MAX_LENS 16   /* lengths per bucket */

typedef struct vf_bucket {
    int w, h;
    int nlens;
    int frames[VF_BUCKET_MAX_LENS];  /* as listed */
    int batch[VF_BUCKET_MAX_LENS];   /* batch of frames[i] */
} vf_bucket;

typedef struct vf_buckets {
    int n;
    vf_bucket b[VF_BUCKET_MAX];
} vf_buckets;

/* Reads the decode param `buckets` (a JSON array of {w, h, frames, batch}; batch a list
 * as long as frames or one integer for all) and checks it: w and h multiples of
 * vae_stride * patch, every length 1 + 4k, batch >= 1, frames non-empty and batch of
 * the same count, no bucket listed twice. VF_EUSAGE naming the bucket otherwise. */
int vf_buckets_parse(const vf_json *arr, int vae_stride, int patch, vf_buckets *out, vf_status *st);

/* "<W>x<H>x<F>" of bucket b at length f (the item metadata "bucket"). */
void vf_bucket_name(const vf_bucket *b, int f, char *buf, size_t n);

/* Display aspect ratio (width / height as shown) of a coded_w x coded_h picture with
 * sample aspect ratio sar, transposed when the display matrix rotates by 90 degrees. */
double vf_bucket_dar(int coded_w, int coded_h, double sar, bool transpose);

/* Index of the bucket nearest to display aspect ratio dar (see the file comment). */
int vf_bucket_pick(const vf_buckets *bs, double dar);

/* Plans the clips of one video (times, n, duration_s as vf_clip_plan_make takes them)
 * in bucket b: tries b's lengths from the longest down and keeps the first plan with a
 * clip. *len gets the chosen index into b->frames, *co (the caller's options, whose
 * frames field is overwritten) the options of the chosen plan, for planning again
 * later. VF_EBADINPUT when even the shortest length gives no clip (st: the reason at
 * that length), VF_ENOMEM. The caller calls vf_clip_plan_fini on *plan. */
int vf_bucket_plan(const double *times, int64_t n, double duration_s, const vf_bucket *b,
                   vf_clip_opts *co, vf_clip_plan *plan, int *len, vf_status *st);

#endif
