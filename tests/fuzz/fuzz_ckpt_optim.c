/* fuzz_ckpt_optim.c — libFuzzer target for a checkpoint's optimizer shard reader
 * (formats/ckpt_optim.c, vf_ckpt_read_moments): optimizer-kk-of-SS.safetensors as a
 * resume finds it after damage or a hand edit, read for a slice that may be any range.
 *
 * The first input byte is the slice's start lo (mod 32), the second its length (mod 33);
 * the rest is the one optimizer file of step dir D/step-3. Properties beyond "no crash /
 * no out-of-bounds read" (ASan):
 *   - a refusal has a message naming D/step-3 or the file in it;
 *   - an accepted read covers [lo, hi) with the file's range ("offset", "numel" of its
 *     metadata, read here on their own) and copies exactly the elements of that range
 *     of "exp_avg" and "exp_avg_sq", bit for bit.
 * In the normal build it is linked with replay_main.c and runs over
 * corpus/fuzz_ckpt_optim/.
 */
#include "formats/ckpt.h"
#include "formats/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void fail(const char *what, const char *msg)
{
    fprintf(stderr, "fuzz_ckpt_optim: property violated: %s (%s)\n", what, msg ? msg : "");
    abort();
}

/* The accepted read against the file parsed here, element by element. */
static void check(const char *file, int64_t lo, int64_t hi, const float *m, const float *v)
{
    vf_st_file *f = NULL;
    vf_status st = {0};
    if (vf_st_open(file, &f, &st)) fail("accepted a file safetensors refuses", st.msg);
    const char *so = vf_st_meta_get(f, "offset"), *sn = vf_st_meta_get(f, "numel");
    char *e1 = NULL, *e2 = NULL;
    long long off = so ? strtoll(so, &e1, 10) : -1, n = sn ? strtoll(sn, &e2, 10) : -1;
    if (!so || !sn || *e1 || *e2 || off < 0 || n < 0) fail("accepted a file without offset/numel", file);
    if (hi > lo && (lo < off || hi > off + n)) fail("accepted a range the file does not cover", file);
    const vf_st_tensor *tm = vf_st_find(f, "exp_avg"), *tv = vf_st_find(f, "exp_avg_sq");
    if (hi > lo && (!tm || !tv)) fail("accepted a file without both moments", file);
    for (int64_t i = lo; i < hi; i++)
        if (memcmp(&m[i - lo], (const char *)tm->data + 4 * (i - off), 4) ||
            memcmp(&v[i - lo], (const char *)tv->data + 4 * (i - off), 4))
            fail("copied another element", file);
    vf_st_close(f);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 2) return 0;
    char root[128], step[160], file[224];
    snprintf(root, sizeof root, "/dev/shm/vf_fuzz_ckpt_optim.%d", (int)getpid());
    snprintf(step, sizeof step, "%s/step-3", root);
    snprintf(file, sizeof file, "%s/optimizer-00-of-01.safetensors", step);
    mkdir(root, 0700);
    mkdir(step, 0700);
    FILE *fp = fopen(file, "wb");
    if (!fp) fail("cannot write", file);
    if (size > 2) fwrite(data + 2, 1, size - 2, fp);
    fclose(fp);
    const int64_t lo = data[0] % 32, hi = lo + data[1] % 33;
    float m[33], v[33];
    vf_status st = {0};
    int rc = vf_ckpt_read_moments(step, lo, hi, m, v, &st);
    if (rc && !strstr(st.msg, step)) fail("a refusal that does not name the step dir or its file", st.msg);
    if (!rc) check(file, lo, hi, m, v);
    unlink(file);
    rmdir(step);
    rmdir(root);
    return 0;
}
