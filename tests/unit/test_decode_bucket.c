/* test_decode_bucket.c — the decode stage's bucket rules (stages/decode/decode_bucket.h):
 * the bucket a display aspect ratio goes to (nearest in log ratio, ties to the larger
 * area, then the first listed), the display aspect ratio of coded size + SAR + rotation,
 * the longest length a video's frames allow, and the check-time errors that name the
 * bucket. No videos needed.
 */
#include "tests/vf_test.h"

#include "stages/decode/decode_bucket.h"

#include <math.h>

static int parse(const char *json, int stride, int patch, vf_buckets *b, vf_status *st)
{
    vf_status js = {0};
    vf_json *j = vf_json_parse(json, &js);
    if (!j) {
        fprintf(stderr, "bad test JSON: %s\n", js.msg);
        exit(1);
    }
    int rc = vf_buckets_parse(j, stride, patch, b, st);
    vf_json_free(j);
    return rc;
}

static const char *THREE =
    "[{\"w\":256,\"h\":144,\"frames\":[17,33,49],\"batch\":[8,4,2]},"
    "{\"w\":144,\"h\":256,\"frames\":[17,33],\"batch\":4},"
    "{\"w\":192,\"h\":192,\"frames\":[33,17],\"batch\":[2,6]}]";

VF_TEST(bucket_parse)
{
    vf_buckets b;
    vf_status st = {0};
    VF_CHECK_EQ_INT(parse(THREE, 8, 2, &b, &st), 0);
    VF_CHECK_EQ_INT(b.n, 3);
    VF_CHECK_EQ_INT(b.b[0].nlens, 3);
    VF_CHECK_EQ_INT(b.b[0].batch[2], 2);
    VF_CHECK_EQ_INT(b.b[1].batch[0], 4); /* one integer for every length */
    VF_CHECK_EQ_INT(b.b[1].batch[1], 4);
    VF_CHECK_EQ_INT(b.b[2].frames[0], 33);
    VF_CHECK_EQ_INT(b.b[2].batch[1], 6);
    char name[48];
    vf_bucket_name(&b.b[0], 33, name, sizeof name);
    VF_CHECK_STR(name, "256x144x33");
}

/* Each bad bucket is refused naming it (and what is wrong with it). */
VF_TEST(bucket_parse_errors)
{
    static const struct { const char *json; int stride, patch; const char *want[2]; } cases[] = {
        {"[{\"w\":250,\"h\":144,\"frames\":[17],\"batch\":1}]", 8, 2, {"bucket 250x144", "not a multiple of 16"}},
        {"[{\"w\":256,\"h\":136,\"frames\":[17],\"batch\":1}]", 8, 2, {"bucket 256x136", "height 136"}},
        {"[{\"w\":256,\"h\":144,\"frames\":[17],\"batch\":1},{\"w\":144,\"h\":256,\"frames\":[18],\"batch\":1}]", 8, 2,
         {"bucket 144x256 (buckets[2])", "length 18 is not 1 + 4k"}},
        {"[{\"w\":256,\"h\":144,\"frames\":[17,33],\"batch\":[4,0]}]", 8, 2, {"bucket 256x144", "batch 0"}},
        {"[{\"w\":256,\"h\":144,\"frames\":[17],\"batch\":-2}]", 8, 2, {"bucket 256x144", "batch -2"}},
        {"[{\"w\":256,\"h\":144,\"frames\":[17,33],\"batch\":[4]}]", 8, 2, {"bucket 256x144", "2 lengths (frames) but 1 batch"}},
        {"[{\"w\":256,\"h\":144,\"frames\":[],\"batch\":1}]", 8, 2, {"bucket 256x144", "non-empty list"}},
        {"[{\"w\":256,\"h\":144,\"batch\":1}]", 8, 2, {"bucket 256x144", "frames must be"}},
        {"[{\"w\":256,\"h\":144,\"frames\":[17]}]", 8, 2, {"bucket 256x144", "batch missing"}},
        {"[{\"w\":256,\"h\":144,\"frames\":[17],\"batch\":1,\"fps\":8}]", 8, 2, {"buckets[1]", "unknown key 'fps'"}},
        {"[{\"w\":256,\"h\":144,\"frames\":[17],\"batch\":1},{\"w\":256,\"h\":144,\"frames\":[33],\"batch\":1}]", 8, 2,
         {"bucket 256x144 listed twice", "buckets[2]"}},
        {"[]", 8, 2, {"non-empty list", "buckets"}},
        /* a stride x patch of 8: 136 is fine, 132 is not */
        {"[{\"w\":136,\"h\":132,\"frames\":[17],\"batch\":1}]", 8, 1, {"bucket 136x132", "multiple of 8"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vf_buckets b;
        vf_status st = {0};
        int rc = parse(cases[i].json, cases[i].stride, cases[i].patch, &b, &st);
        VF_CHECK_MSG(rc == VF_EUSAGE, "case %zu: rc %d (%s)", i, rc, st.msg);
        for (int k = 0; k < 2; k++)
            VF_CHECK_MSG(strstr(st.msg, cases[i].want[k]) != NULL, "case %zu: '%s' lacks '%s'", i, st.msg,
                         cases[i].want[k]);
    }
    vf_buckets b;
    vf_status st = {0};
    VF_CHECK_EQ_INT(parse("[{\"w\":136,\"h\":128,\"frames\":[1,5],\"batch\":1}]", 8, 1, &b, &st), 0);
}

VF_TEST(bucket_pick)
{
    vf_buckets b;
    vf_status st = {0};
    VF_CHECK_EQ_INT(parse(THREE, 8, 2, &b, &st), 0);
    VF_CHECK_EQ_INT(vf_bucket_pick(&b, 16.0 / 9), 0);
    VF_CHECK_EQ_INT(vf_bucket_pick(&b, 9.0 / 16), 1);
    VF_CHECK_EQ_INT(vf_bucket_pick(&b, 1.0), 2);
    VF_CHECK_EQ_INT(vf_bucket_pick(&b, 2.35), 0);
    VF_CHECK_EQ_INT(vf_bucket_pick(&b, 0.3), 1);
    VF_CHECK_EQ_INT(vf_bucket_pick(&b, 1.2), 2);   /* log 1.2 = .18 < log(1.78/1.2) = .39 */
    VF_CHECK_EQ_INT(vf_bucket_pick(&b, 0.8), 2);
    /* 4:3 lies exactly between 16:9 and 1:1 in log ratio; equal areas: the first listed */
    VF_CHECK_EQ_INT(vf_bucket_pick(&b, 4.0 / 3), 0);
    VF_CHECK_EQ_INT(vf_bucket_pick(&b, 3.0 / 4), 1);
    /* the same ratio twice: the larger area wins whatever the order */
    VF_CHECK_EQ_INT(parse("[{\"w\":128,\"h\":128,\"frames\":[17],\"batch\":1},"
                          "{\"w\":320,\"h\":320,\"frames\":[17],\"batch\":1}]", 8, 2, &b, &st), 0);
    VF_CHECK_EQ_INT(vf_bucket_pick(&b, 1.0), 1);
    VF_CHECK_EQ_INT(vf_bucket_pick(&b, 3.0), 1);
    /* a tie in distance and in area: the first listed */
    VF_CHECK_EQ_INT(parse("[{\"w\":256,\"h\":128,\"frames\":[17],\"batch\":1},"
                          "{\"w\":128,\"h\":256,\"frames\":[17],\"batch\":1}]", 8, 2, &b, &st), 0);
    VF_CHECK_EQ_INT(vf_bucket_pick(&b, 1.0), 0);
}

VF_TEST(bucket_dar)
{
    VF_CHECK_NEAR(vf_bucket_dar(320, 180, 1, false), 16.0 / 9, 1e-12);
    VF_CHECK_NEAR(vf_bucket_dar(320, 180, 1, true), 9.0 / 16, 1e-12);   /* rotated 90 degrees */
    VF_CHECK_NEAR(vf_bucket_dar(720, 480, 32.0 / 27, false), 16.0 / 9, 1e-12); /* anamorphic NTSC */
    VF_CHECK_NEAR(vf_bucket_dar(720, 480, 32.0 / 27, true), 9.0 / 16, 1e-12);
    VF_CHECK_NEAR(vf_bucket_dar(480, 480, 0, false), 1.0, 1e-12);       /* unknown SAR: square pixels */
}

VF_TEST(bucket_length)
{
    vf_buckets b;
    vf_status st = {0};
    VF_CHECK_EQ_INT(parse(THREE, 8, 2, &b, &st), 0);
    double t[200];
    for (int i = 0; i < 200; i++) t[i] = i / 25.0;
    vf_clip_plan p = {0};
    vf_clip_opts o = {.stride = 1};
    int len = -1;
    /* 40 frames: 49 does not fit, 33 does (one clip) */
    VF_CHECK_EQ_INT(vf_bucket_plan(t, 40, 1.6, &b.b[0], &o, &p, &len, &st), 0);
    VF_CHECK_EQ_INT(b.b[0].frames[len], 33);
    VF_CHECK_EQ_INT(o.frames, 33);
    VF_CHECK_EQ_INT(p.nclips, 1);
    vf_clip_plan_fini(&p);
    /* 120 frames: 49 twice (the grid's rule: (120 - 49) / 49 + 1) */
    VF_CHECK_EQ_INT(vf_bucket_plan(t, 120, 4.8, &b.b[0], &o, &p, &len, &st), 0);
    VF_CHECK_EQ_INT(b.b[0].frames[len], 49);
    VF_CHECK_EQ_INT(p.nclips, 2);
    VF_CHECK_EQ_INT(p.idx[49 + 48], 97);
    vf_clip_plan_fini(&p);
    /* lengths listed shortest last or first: the longest that fits wins either way */
    VF_CHECK_EQ_INT(vf_bucket_plan(t, 33, 1.32, &b.b[2], &o, &p, &len, &st), 0);
    VF_CHECK_EQ_INT(len, 0);
    vf_clip_plan_fini(&p);
    VF_CHECK_EQ_INT(vf_bucket_plan(t, 32, 1.28, &b.b[2], &o, &p, &len, &st), 0);
    VF_CHECK_EQ_INT(len, 1);
    VF_CHECK_EQ_INT(p.nclips, 1);
    vf_clip_plan_fini(&p);
    /* stride 2: 40 frames hold 17 samples (span 33) but not 33 (span 65) */
    o = (vf_clip_opts){.stride = 2};
    VF_CHECK_EQ_INT(vf_bucket_plan(t, 40, 1.6, &b.b[0], &o, &p, &len, &st), 0);
    VF_CHECK_EQ_INT(b.b[0].frames[len], 17);
    VF_CHECK_EQ_INT(p.idx[16], 32);
    vf_clip_plan_fini(&p);
    /* fps 5 over 25 fps frames: 120 frames = 4.8 s hold 24 samples: 17, not 33 */
    o = (vf_clip_opts){.stride = 1, .fps = 5};
    VF_CHECK_EQ_INT(vf_bucket_plan(t, 120, 4.8, &b.b[0], &o, &p, &len, &st), 0);
    VF_CHECK_EQ_INT(b.b[0].frames[len], 17);
    VF_CHECK_EQ_INT(p.idx[1], 5);
    vf_clip_plan_fini(&p);
    /* clips_per_video still picks among the chosen length's grid */
    o = (vf_clip_opts){.stride = 1, .clips_per_video = 1};
    VF_CHECK_EQ_INT(vf_bucket_plan(t, 200, 8.0, &b.b[0], &o, &p, &len, &st), 0);
    VF_CHECK_EQ_INT(b.b[0].frames[len], 49);
    VF_CHECK_EQ_INT(p.nclips, 1);
    vf_clip_plan_fini(&p);
    /* too short for the shortest length: the reason at that length */
    o = (vf_clip_opts){.stride = 1};
    VF_CHECK_EQ_INT(vf_bucket_plan(t, 16, 0.64, &b.b[0], &o, &p, &len, &st), VF_EBADINPUT);
    VF_CHECK_MSG(strstr(st.msg, "too short: 16 frames readable, 17 needed") != NULL, "%s", st.msg);
    vf_clip_plan_fini(&p);
}

int main(void) { return vf_test_main(); }
