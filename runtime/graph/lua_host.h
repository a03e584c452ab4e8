/* lua_host.h — runs a pipeline script in a sandboxed Lua 5.4 and turns the pipeline it
 * returns into a plain vf_graph (README.md, "The Lua DSL").
 *
 * The sandbox: base (without dofile/loadfile; `load` of text chunks only), string
 * (without string.dump), table, math, utf8; no io, os, package, debug, coroutine;
 * `collectgarbage` limited to "count"/"collect"/"step"; `print` writes to stderr. An
 * instruction cap and a memory cap stop runaway scripts with a file:line message.
 * `require` serves only the modules embedded from lua/NAME.lua at build time.
 *
 * The script's `--set k=v` pairs arrive as `vf.args` (numbers converted, "true"/"false"
 * as booleans). Every stage and edge records the "file:line" of the user's Lua call that
 * created it (through extension sugar too: the first frame in a user chunk counts).
 */
#ifndef VF_LUA_HOST_H
#define VF_LUA_HOST_H

#include "runtime/graph/graph.h"

#define VF_LUA_MAX_INSTRUCTIONS 100000000LL /* ~0.5 s of Lua: a script describes, not computes */
#define VF_LUA_MAX_BYTES (256u << 20)       /* Lua heap of the script */

/* Runs the script at path with the --set pairs set_kv[0..nset) ("key=value"), and
 * converts the returned pipeline. On success *out is a new graph the caller owns
 * (vf_graph_free); it is not validated yet. On failure returns VF_EUSAGE (bad script:
 * syntax, runtime error, sandbox violation, caps, not a pipeline) or VF_ENOMEM, with
 * st->msg = "FILE:LINE: message" (a runtime error adds the script's own traceback
 * frames on following lines), and *out = NULL. */
int vf_lua_load(const char *path, const char *const *set_kv, int nset, vf_graph **out, vf_status *st);

/* As vf_lua_load; also sets used[i] (nset entries, may be NULL) when the script read
 * vf.args[key of set_kv[i]], so the CLI can tell a script knob from a stage override, and
 * near[i] (nset entries, may be NULL) for a key it did not read: the key it read that is
 * the likely typo's intent (a did-you-mean; a new string the caller frees), else NULL. */
int vf_lua_load_ex(const char *path, const char *const *set_kv, int nset, vf_graph **out, bool *used, char **near,
                   vf_status *st);

#endif /* VF_LUA_HOST_H */
