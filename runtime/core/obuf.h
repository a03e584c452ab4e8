/* obuf.h — small text output helpers of the driver and workers: a growable string
 * buffer with printf and JSON-string appends (metrics rows, control messages, the
 * quarantine list), and the atomic append of one line to a file.
 *
 * Allocation failure of a buffer is sticky (`oom` set, further appends ignored), so
 * builders need no error path per append; the final user checks vf_obuf_ok.
 */
#ifndef VF_OBUF_H
#define VF_OBUF_H
#include <stdbool.h>
#include <stddef.h>

typedef struct vf_obuf {
    char *s;        /* NUL-terminated, owned; NULL until the first append */
    size_t len, cap;
    bool oom;
} vf_obuf;

void vf_obuf_init(vf_obuf *b);
void vf_obuf_fini(vf_obuf *b);
void vf_obuf_reset(vf_obuf *b); /* keeps the memory */
bool vf_obuf_ok(const vf_obuf *b);
void vf_obuf_add(vf_obuf *b, const char *s, size_t n);
void vf_obuf_puts(vf_obuf *b, const char *s);
void vf_obuf_printf(vf_obuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a JSON string literal with quotes (control chars escaped; bytes of
 * invalid UTF-8 pass through unchanged). */
void vf_obuf_json_str(vf_obuf *b, const char *s);
/* Appends a finite double as JSON (NaN/inf become null). */
void vf_obuf_json_num(vf_obuf *b, double v);
/* Returns the text (never NULL; "" when empty or after OOM). Borrowed. */
const char *vf_obuf_str(const vf_obuf *b);

/* Appends `line` plus '\n' to fd with one write(2); files opened with O_APPEND get the
 * whole line in one piece even with several writers. 0 or -errno. */
int vf_write_line(int fd, const char *line, size_t n);
/* Opens path with O_APPEND|O_CREAT, writes one line, closes. 0 or -errno. */
int vf_append_line(const char *path, const char *line);

#endif /* VF_OBUF_H */
