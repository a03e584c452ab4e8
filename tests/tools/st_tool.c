/* st_tool.c — drives runtime/safetensors.{h,c} from scripts (the cross-check against
 * the Python safetensors package in tests/reference/test_safetensors_py.py).
 *
 *   st_tool check FILE        exit 0 if FILE is valid, 1 (message on stderr) if refused
 *   st_tool checks FILE…      one line per file: "ok" or "refused: <message>"
 *   st_tool dump FILE         JSON: {"header_len","meta":{..},"tensors":[{name,dtype,shape,hex}]}
 *                             tensors in file (offset) order, data as lowercase hex
 *   st_tool copy IN OUT       rewrites IN with vf_st_writer (all tensors and metadata)
 *   st_tool f32 FILE NAME     the tensor through vf_st_read_f32, one %.9g value per line
 */
#include "runtime/core/obuf.h"
#include "formats/safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(vf_status *st)
{
    fprintf(stderr, "st_tool: %s\n", st->msg);
    return 1;
}

static int dump(vf_st_file *f)
{
    vf_obuf b;
    vf_obuf_init(&b);
    vf_obuf_printf(&b, "{\"header_len\":%llu,\"meta\":{", (unsigned long long)vf_st_header_len(f));
    for (int i = 0; i < vf_st_meta_count(f); i++) {
        const char *k, *v;
        vf_st_meta_at(f, i, &k, &v);
        if (i) vf_obuf_puts(&b, ",");
        vf_obuf_json_str(&b, k);
        vf_obuf_puts(&b, ":");
        vf_obuf_json_str(&b, v);
    }
    vf_obuf_puts(&b, "},\"tensors\":[");
    for (int i = 0; i < vf_st_count(f); i++) {
        const vf_st_tensor *t = vf_st_at(f, i);
        if (i) vf_obuf_puts(&b, ",");
        vf_obuf_puts(&b, "{\"name\":");
        vf_obuf_json_str(&b, t->name);
        vf_obuf_printf(&b, ",\"dtype\":\"%s\",\"shape\":[", vf_st_dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) vf_obuf_printf(&b, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        vf_obuf_puts(&b, "],\"hex\":\"");
        const unsigned char *p = t->data;
        for (uint64_t k = 0; k < t->nbytes; k++) vf_obuf_printf(&b, "%02x", p[k]);
        vf_obuf_puts(&b, "\"}");
    }
    vf_obuf_puts(&b, "]}\n");
    int ok = vf_obuf_ok(&b);
    if (ok) fputs(vf_obuf_str(&b), stdout);
    vf_obuf_fini(&b);
    return ok ? 0 : 1;
}

static int copy(vf_st_file *f, const char *out, vf_status *st)
{
    int rc = 0;
    vf_st_writer *w = vf_st_writer_new(st);
    if (!w) return st->code;
    for (int i = 0; i < vf_st_count(f); i++) {
        const vf_st_tensor *t = vf_st_at(f, i);
        VF_TRY(vf_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, st));
    }
    for (int i = 0; i < vf_st_meta_count(f); i++) {
        const char *k, *v;
        vf_st_meta_at(f, i, &k, &v);
        VF_TRY(vf_st_writer_meta(w, k, v, st));
    }
    VF_TRY(vf_st_writer_save(w, out, VF_ST_ATOMIC, NULL, st));
fail:
    vf_st_writer_free(w);
    return rc;
}

int main(int argc, char **argv)
{
    vf_status st;
    vf_status_clear(&st);
    if (argc < 3) {
        fprintf(stderr, "usage: st_tool check|dump|copy|f32 FILE [OUT|NAME]\n");
        return 2;
    }
    vf_st_file *f = NULL;
    if (!strcmp(argv[1], "checks")) {
        for (int i = 2; i < argc; i++) {
            vf_status_clear(&st);
            if (vf_st_open(argv[i], &f, &st) == 0) {
                printf("ok\n");
            } else { /* one line each: names in messages may hold newlines */
                for (char *c = st.msg; *c; c++)
                    if ((unsigned char)*c < 0x20) *c = ' ';
                printf("refused: %s\n", st.msg);
            }
            vf_st_close(f);
            f = NULL;
        }
        return 0;
    }
    if (vf_st_open(argv[2], &f, &st) != 0) return fail(&st);
    int rc = 0;
    if (!strcmp(argv[1], "check")) {
        rc = 0;
    } else if (!strcmp(argv[1], "dump")) {
        rc = dump(f);
    } else if (!strcmp(argv[1], "copy") && argc == 4) {
        rc = copy(f, argv[3], &st) ? fail(&st) : 0;
    } else if (!strcmp(argv[1], "f32") && argc == 4) {
        const vf_st_tensor *t = vf_st_find(f, argv[3]);
        float *v = t ? malloc(sizeof(float) * (size_t)(t->numel ? t->numel : 1)) : NULL;
        if (!t) {
            fprintf(stderr, "st_tool: no tensor %s\n", argv[3]);
            rc = 1;
        } else if (vf_st_read_f32(f, argv[3], v, t->numel, &st) != 0) {
            rc = fail(&st);
        } else {
            for (int64_t i = 0; i < t->numel; i++) printf("%.9g\n", v[i]);
        }
        free(v);
    } else {
        fprintf(stderr, "st_tool: unknown command %s\n", argv[1]);
        rc = 2;
    }
    vf_st_close(f);
    return rc;
}
