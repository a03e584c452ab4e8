/* fuzz_ckpt.c — libFuzzer target for the checkpoint readers (formats/ckpt.c): a step
 * dir's manifest.json and state.json, as resume finds them after a crash, a full disk or
 * a hand edit.
 *
 * A checkpoint dir D/step-7/ is made with a small model.safetensors; the first input
 * byte picks what the rest of the input becomes: manifest.json itself (listing whatever
 * it lists), state.json with a manifest that matches it (sizes and CRCs computed here,
 * so the state parser is reached), (first byte 3 mod 4) a sharded model's
 * model.safetensors.index.json, listed in a matching manifest beside model.safetensors
 * and state.json, or (first byte 5 mod 8) D/latest beside a complete step-7. Properties
 * beyond "no crash / no out-of-bounds read" (ASan):
 *   - vf_ckpt_find either fails with a message, or returns step 7 with a parsed state
 *     whose "step" is 7 and a verified dir; the state's cursor of replica 0 is its
 *     "cursors"[0] when that is a string, else "";
 *   - a found checkpoint with an index has a weight map whose every file is listed;
 *   - a `latest` that is read names step 7, or a step that is reported missing;
 *   - nothing outside D is read as part of the checkpoint (names with '/' are refused).
 * In the normal build it is linked with replay_main.c and runs over corpus/fuzz_ckpt/.
 */
#include "formats/ckpt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void fail(const char *what, const char *msg)
{
    fprintf(stderr, "fuzz_ckpt: property violated: %s (%s)\n", what, msg ? msg : "");
    abort();
}

static void put(const char *dir, const char *name, const void *b, size_t n)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) fail("cannot write", p);
    if (n) fwrite(b, 1, n, f);
    fclose(f);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    if (size < 1) return 0;
    char root[128], step[160];
    snprintf(root, sizeof root, "/dev/shm/vf_fuzz_ckpt.%d", (int)getpid());
    snprintf(step, sizeof step, "%s/step-7", root);
    mkdir(root, 0700);
    mkdir(step, 0700);
    static const char model[] = "\x10\0\0\0\0\0\0\0{\"__metadata__\":{}}";
    put(step, VF_CKPT_MODEL, model, sizeof model - 1);
    const char *body = (const char *)data + 1;
    const size_t blen = size - 1;
    const bool index = data[0] % 4 == 3, latest = data[0] % 8 == 5;
    char lp[192];
    snprintf(lp, sizeof lp, "%s/latest", root);
    if (latest) {
        put(step, VF_CKPT_STATE, "{\"step\":7}", 10);
        char man[512];
        snprintf(man, sizeof man,
                 "{\"files\":{\"" VF_CKPT_MODEL "\":{\"bytes\":%zu,\"crc32c\":\"%08x\"},"
                 "\"" VF_CKPT_STATE "\":{\"bytes\":10,\"crc32c\":\"%08x\"}}}",
                 sizeof model - 1, vf_crc32c(0, model, sizeof model - 1), vf_crc32c(0, "{\"step\":7}", 10));
        put(step, VF_CKPT_MANIFEST, man, strlen(man));
        put(root, "latest", body, blen);
    } else if (index) {
        put(step, VF_CKPT_STATE, "{\"step\":7}", 10);
        put(step, VF_CKPT_MODEL_INDEX, body, blen);
        char man[768];
        snprintf(man, sizeof man,
                 "{\"files\":{\"" VF_CKPT_MODEL "\":{\"bytes\":%zu,\"crc32c\":\"%08x\"},"
                 "\"" VF_CKPT_MODEL_INDEX "\":{\"bytes\":%zu,\"crc32c\":\"%08x\"},"
                 "\"" VF_CKPT_STATE "\":{\"bytes\":10,\"crc32c\":\"%08x\"}}}",
                 sizeof model - 1, vf_crc32c(0, model, sizeof model - 1), blen, vf_crc32c(0, body, blen),
                 vf_crc32c(0, "{\"step\":7}", 10));
        put(step, VF_CKPT_MANIFEST, man, strlen(man));
    } else if (data[0] % 2 == 0) {
        put(step, VF_CKPT_STATE, "{\"step\":7}", 10);
        put(step, VF_CKPT_MANIFEST, body, blen);
    } else {
        put(step, VF_CKPT_STATE, body, blen);
        char man[512];
        snprintf(man, sizeof man,
                 "{\"files\":{\"" VF_CKPT_MODEL "\":{\"bytes\":%zu,\"crc32c\":\"%08x\"},"
                 "\"" VF_CKPT_STATE "\":{\"bytes\":%zu,\"crc32c\":\"%08x\"}}}",
                 sizeof model - 1, vf_crc32c(0, model, sizeof model - 1), blen, vf_crc32c(0, body, blen));
        put(step, VF_CKPT_MANIFEST, man, strlen(man));
    }
    vf_status st = {0};
    vf_ckpt c;
    int rc = vf_ckpt_find(root, NULL, NULL, &c, &st);
    if (rc) {
        if (!st.msg[0]) fail("a refusal without a message", NULL);
    } else {
        if (c.step != 7 || !c.state) fail("found a checkpoint that is not step 7 with a state", st.msg);
        if (vf_json_get_int(c.state, "step", -1) != 7) fail("state.json's step is not 7", NULL);
        const vf_json *c0 = vf_json_at(vf_json_get(c.state, "cursors"), 0);
        if (strcmp(vf_ckpt_state_cursor(c.state, 0), c0 && c0->type == VF_JSON_STR ? c0->s : ""))
            fail("the cursor of replica 0 is not state.json's", NULL);
        if (c.latest >= 0 && c.latest != 7 && !c.latest_missing) fail("latest names a step that is not there", NULL);
        if (index) {
            vf_json *j = vf_json_parse_n(body, blen, &st);
            const vf_json *map = j ? vf_json_get(j, "weight_map") : NULL;
            if (!map || vf_json_len(map) == 0) fail("accepted an index without a weight map", NULL);
            for (int i = 0; i < vf_json_len(map); i++) {
                const vf_json *v = vf_json_at(map, i);
                if (!v || v->type != VF_JSON_STR || (strcmp(v->s, VF_CKPT_MODEL) && strcmp(v->s, VF_CKPT_STATE) &&
                                                     strcmp(v->s, VF_CKPT_MODEL_INDEX)))
                    fail("accepted an index naming a file the manifest does not list", v && v->s ? v->s : "");
            }
            vf_json_free(j);
        }
        vf_ckpt_fini(&c);
    }
    char p[256];
    const char *names[] = {VF_CKPT_MODEL, VF_CKPT_STATE, VF_CKPT_MANIFEST, VF_CKPT_MODEL_INDEX};
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", step, names[i]);
        unlink(p);
    }
    unlink(lp);
    rmdir(step);
    rmdir(root);
    return 0;
}
