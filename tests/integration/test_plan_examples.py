"""The plan-only examples at real sizes (pipelines/plan_*.lua, docs/PLANNING.md) against
numbers computed here by hand, independently of vflow's code:
  - parameter counts of Wan-2.1 1.3B / 14B from the layer shapes of models/dit.h, and the
    ZeRO figures: 2 + 2 bytes/param of weights and gradients, 12 of optimizer state;
  - activations with recompute: Korthikanti's 2·s·b·h per layer (bf16 block inputs) plus
    at most 15% for the embeddings' and head's saved tensors; 1F1B keeps P - p
    micro-batches in flight on partition p;
  - the 14B's partition workspace, buffer by buffer: one block's recompute area and
    the backward's scratch, what the backward can put in the block's dead activations
    put there;
  - the precompute: edges = workers x capacity x (clip bytes + codec overhead), and the
    VAE's device memory independent of the clip length;
  - state per parameter (the partitions' bf16 weights and gradients lent to the shards,
    which hold f32 master weights and moments): at least ZeRO's 16 bytes per parameter on
    every GPU and at most 18, what is in flight between them included;
  - the 14B LoRA on one GPU: the base once in bf16 (2 B/param), no gradients, master or
    moments for it; adapters r·(18·d + 2·ffn) per block counted by hand, 12 B/param of
    optimizer state and 4 of weights + gradients for them alone; it fits where the full
    fine-tune of the same script does not, and is smaller by at least the base's master
    and moments;
  - the 14B on 8x80: checkpointing on the host bounded by chunk x capacity (the snapshot
    streams), and with offload the shards' f32 state and their bounded bf16 chunk buffers
    on the host, within 512 GiB, every GPU with 10 % headroom;
  - Wan 2.2 TI2V-5B (its time embedding per token counted): the full fine-tune fits one 80 GB GPU with the optimizer state on
    the host (12 B/param there) and not without; rank-32 LoRA at 480x832 fits 24 GB with
    the base once in bf16; the Wan 2.2 VAE's device memory does not grow with the clip;
  - the 14B LoRA on one 24 GB GPU: with block swap and the block inputs on the host it
    fits; the host's block inputs, the device ring and the swapped base counted by hand;
    without activation offload it does not, and the planner's fix is offload_activations;
  - Wan 2.1 I2V-14B (the same scripts, --set model=wan-i2v-14b): its parameters counted by
    hand (the T2V 14B's, patch_embedding's 20 conditioning channels, img_emb, each block's
    k_img/v_img/norm_k_img), 12 B/param of optimizer state on 8 x 80 GB where every GPU
    fits, and the LoRA on one 80 GB GPU with k_img/v_img adapters counted;
  - Wan 2.2 A14B, both experts side by side (two trains of the 14B shape): the full
    fine-tune on 4 + 4 x 80 GB with host optimizer state fits, each expert 12 B/param on
    the host and 2 + 2 on its own GPUs, and not without offload; both LoRA experts on one
    GPU hold two FP8 bases (1 B per block-linear weight) and fit 80 GiB at 81 frames only
    with the attention rerun;
  - a full fine-tune with block swap and the optimizer on the host: Wan-1.3B on 12 GiB
    and Wan-14B on one 80 GiB GPU; the swapped blocks' bf16 weights and gradients on the
    host and the rest on the device counted by hand, and one block fewer does not fit;
  - the 14B at 81x720x1280 on 8 x 80 GB: pipeline parallelism alone does not fit, 2
    partitions x sp 4 ranks do, each rank's activations those of its 18,900 tokens and
    the ends' whole sequences counted by hand;
  - every example loads on a machine without GPUs (devices marked not present) and the
    verdicts are what docs/PLANNING.md says: the 14B full fine-tune fits 8 x 80 GiB with
    at least 10 % of each GPU to spare.
vflow-test: labels=integration timeout=120
"""
import json
import os
import subprocess
import sys

VFLOW = os.environ.get("VFLOW_BIN") or os.path.join(os.environ.get("VFLOW_BUILD", "build"), "vflow")
SRC = os.environ.get("VFLOW_SRC") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FAILS = []
GiB = 2.0 ** 30


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print("CHECK FAILED: " + msg, flush=True)
    return cond


def plan(script, *args):
    r = subprocess.run([VFLOW, "plan", os.path.join(SRC, "pipelines", script), "--json"] + list(args),
                       capture_output=True, text=True, timeout=60)
    check(r.returncode in (0, 2), "%s %s: exit %d %s" % (script, args, r.returncode, r.stderr))
    return json.loads(r.stdout), r.returncode


def wan_params(d, f, L, text_dim=4096, freq=256, z=16, patch=4, vocab=0):
    """Wan-2.1 DiT as models/dit.h lays it out, counted by hand."""
    block = (8 * (d * d + d)       # self- and cross-attention q, k, v, o
             + 4 * d               # their q/k RMSNorm gains
             + 2 * d               # norm3: the affine LayerNorm before cross-attention
             + d * f + f + f * d + d  # ffn
             + 6 * d)              # modulation table
    embed = ((z * patch) * d + d                      # patch embedding
             + text_dim * d + d + d * d + d           # text embedding MLP
             + freq * d + d + d * d + d               # time embedding MLP
             + 6 * d * d + 6 * d                      # time projection
             + vocab * text_dim)                      # byte-token table (none: Wan takes text embeddings)
    head = 2 * d + d * z * patch + z * patch
    return L * block + embed + head, block, embed, head


def line_sum(p, stage=None, device=None, what=None, category=None):
    t = 0
    for x in p["lines"]:
        if stage is not None and x.get("stage") != stage:
            continue
        if device is not None and x["device"] != device:
            continue
        if what is not None and not x["what"].startswith(what):
            continue
        if category is not None and x["category"] != category:
            continue
        t += x["bytes"]
    return t


def dev(p, name):
    return next(d for d in p["devices"] if d["device"] == name)


def state_per_param(p, name, params):
    """Each GPU's state line against ZeRO's bytes (2 weights + 2 gradients per parameter of
    its partition, 12 of master and moments per parameter of its shard's slice: 16 per
    parameter, each share over the parameters its holder keeps) and the 18 per parameter
    that allow 2 in flight between partition and shard. params: per GPU, its partition's
    and its shard's parameter counts, by hand."""
    for d, (npart, nslice) in params.items():
        s = dev(p, d).get("state")
        if not check(s is not None, "%s %s: the plan has a state line" % (name, d)):
            continue
        # a shard's slice is cut at norm blocks: within 1 % of an equal share
        n = max(npart, nslice)
        check(abs(s["params"] - n) <= 0.01 * n, "%s %s: state of %d parameters, counted %d" % (name, d, s["params"], n))
        zero = 4 * npart + 12 * nslice
        check(0.99 * zero <= s["bytes"], "%s %s: %d bytes of state, ZeRO's count %d" % (name, d, s["bytes"], zero))
        # the device's figure is its holders' shares summed, each over its own parameters
        shares = sum(w["bytes"] / w["params"] for w in s["where"])
        check(abs(shares - s["bytes_per_param"]) < 1e-6, "%s %s: %.4f B/param, its shares add up to %.4f" %
              (name, d, s["bytes_per_param"], shares))
        bpp = s["bytes_per_param"]
        check(16.0 <= bpp <= 18.0, "%s %s: %.2f bytes of state per parameter (16 to 18)" % (name, d, bpp))
        by = {}
        for w in s["where"]:
            by[w["category"]] = by.get(w["category"], 0) + w["bytes"]
        check(by.get("weights", 0) >= 2 * npart and by.get("gradients", 0) >= 2 * npart and
              abs(by.get("optimizer", 0) - 12 * nslice) <= 0.12 * nslice,
              "%s %s: says where the bytes live: %r" % (name, d, by))
        print("  %s %s: %.2f bytes per parameter" % (name, d, bpp))


def wan13b():
    p, rc = plan("plan_wan13b_1x80.lua", "--budget", "cuda=80GiB,cpu=256GiB")
    N, _, _, _ = wan_params(1536, 8960, 30)
    check(rc == 0 and p["fits"], "Wan-1.3B fits one 80 GiB GPU with recompute: %s" % p["verdict"])
    check(not dev(p, "cuda:0")["present"], "cuda:0 is marked absent on this machine")
    opt = line_sum(p, stage="adamw_0", what="master weights + moments")
    wg = line_sum(p, stage="dit_0", what="weights (lent") + line_sum(p, stage="dit_0", what="gradients (lent")
    check(opt == 12 * N, "optimizer state 12 B/param: %d vs %d" % (opt, 12 * N))
    check(wg == 4 * N, "bf16 weights + gradients 4 B/param: %d vs %d" % (wg, 4 * N))
    check(opt + wg == 16 * N, "ZeRO's 16 bytes/param")
    state_per_param(p, "wan-1.3b", {"cuda:0": (N, N)})
    s, h, L = 21 * 30 * 52, 1536, 30
    acts = line_sum(p, stage="dit_0", category="activations")
    kort = 2 * s * h * L  # bf16 block inputs, Korthikanti's full recompute
    # and what the recompute does not redo: the self-attention's bf16 output and its f32
    # log-sum-exp per head (12 heads)
    kept = kort + (2 * s * h + 4 * 12 * s) * L
    check(kept <= acts <= 1.15 * kept, "recompute activations %.2f GiB vs (2sbh + 2sbh + 4·heads·s)·L %.2f GiB"
          % (acts / GiB, kept / GiB))
    # cuDNN's deterministic attention backward (kernels/ops.h): for the self-attention at
    # 32 760 tokens the bf16 score gradient of every (query, key) pair would be 24 GiB, over
    # the 4 GiB default cap, so an f32 dQ accumulator (32 768 rows in 128-row tiles, 12
    # heads of 128); for the cross-attention the score gradient against 512 caption tokens
    # (0.4 GB), the larger of the two; each with two f32 per query row and 16 MiB
    ws = line_sum(p, stage="dit_0", what="cuDNN attention workspace")
    t = -(-s // 128) * 128
    self_ws, cross_ws = 12 * t * 128 * 4, 12 * t * 512 * 2
    check(ws == max(self_ws, cross_ws) + 12 * t * 8 + (16 << 20), "cuDNN attention workspace %d bytes" % ws)
    st = next(x for x in p["stages"] if x["name"] == "dit_0")
    off = st["activations"]["recompute_off"]
    per_layer = off / (s * h * L)
    check(34 <= per_layer <= 80, "no recompute: %.1f·s·h per layer (Korthikanti's GPT block: 34)" % per_layer)
    print("wan-1.3b: N=%d, cuda:0 %.2f GiB, acts %.2f GiB (2sbhL %.2f), no recompute %.1f sbh/layer, cpu %.2f GiB"
          % (N, dev(p, "cuda:0")["total"] / GiB, acts / GiB, kort / GiB, per_layer, dev(p, "cpu")["total"] / GiB))
    # without recompute it does not fit, and recompute is the fix found
    p2, rc2 = plan("plan_wan13b_1x80.lua", "--budget", "cuda=80GiB,cpu=256GiB", "--set", "recompute=false")
    fixes = {f["knob"]: f for f in p2["fixes"]}
    check(rc2 == 2 and "recompute" in fixes and fixes["recompute"]["fits"] and
          fixes["recompute"]["totals"]["cuda:0"] == dev(p, "cuda:0")["total"],
          "recompute=false: refused, and the recompute fix re-plans to the default's total: %r" % p2["fixes"])


def wan14b():
    p, rc = plan("plan_wan14b_8x80.lua", "--budget", "cuda=80GiB,cpu=2TiB")
    N, block, embed, head = wan_params(5120, 13824, 40)
    opt = sum(line_sum(p, stage="adamw_%d" % k, what="master weights + moments") for k in range(8))
    check(opt == 12 * N, "14B optimizer state over 8 shards = 12 B/param: %d vs %d" % (opt, 12 * N))
    n0 = 5 * block + embed
    check(line_sum(p, stage="dit_0", what="weights (lent") == 2 * n0, "partition 0: embeddings + 5 blocks")
    check(line_sum(p, stage="dit_0", what="gradients (lent") == 2 * n0, "partition 0: their gradients")
    # the most parameters a GPU holds state of: partition q's range or shard q's slice
    sizes = [5 * block + (embed if q == 0 else 0) + (head if q == 7 else 0) for q in range(8)]
    state_per_param(p, "wan-14b", {"cuda:%d" % q: (sizes[q], N // 8) for q in range(8)})
    s, h = 21 * 30 * 52, 5120
    for q in range(8):
        acts = line_sum(p, stage="dit_%d" % q, category="activations")
        # 1F1B: P - p micro-batches in flight, each block keeping its input and its
        # self-attention's output (bf16) and log-sum-exp (f32, 40 heads)
        want = (8 - q) * 5 * (2 * s * h + 2 * s * h + 4 * 40 * s)
        # the last partition also keeps what its head and loss need: the last block's
        # output and the head's modulated input (2·s·h in bf16; 3·s·h leaves room)
        extra = 3 * 2 * s * h * (8 - q) if q == 7 else 0
        check(want <= acts <= 1.15 * want + extra, "partition %d: %.2f GiB activations vs %.2f GiB" %
              (q, acts / GiB, want / GiB))
    # a middle partition's workspace, by hand (bf16, s tokens of width h, ffn f): the one
    # block recompute area (15 (s, h) activations and the two (s, f) of the MLP), the
    # backward's two early (s, h) gradient scratch buffers, the dx ping-pong partner
    # and one (s, f) gradient of the MLP (its GELU backward runs in place); the forward
    # scratch shares the first gradient buffer, and the four late (s, h) scratch buffers
    # live in the block's own dead MLP activations (2 (s, f) >= 4 (s, h))
    f = 13824
    hand = 2 * (s * h * (15 + 2 + 1) + s * f * (2 + 1))
    for q in range(1, 7):
        ws = line_sum(p, stage="dit_%d" % q, what="partition workspace")
        check(hand <= ws <= 1.01 * hand, "partition %d: workspace %.2f GiB vs %.2f GiB by hand" %
              (q, ws / GiB, hand / GiB))
    cpu = dev(p, "cpu")["total"]
    # checkpoints stream: each shard's snapshot crosses in chunks of 64 MiB (the default
    # ckpt_chunk), so the host holds per shard its staging chunk, the chunk held while
    # sent and the edge's capacity of 2, and the writer the chunk it writes: bounded by
    # chunk x capacity, far below one 12 B/param copy of the state being saved
    chunk, S = 64 << 20, 8
    ck = sum(x["bytes"] for x in p["lines"] if x["device"] == "cpu" and
             (x["category"] == "checkpoint" or ".snap" in x["what"]))
    want = (4 * S + 1) * chunk
    check(want <= ck <= want * 1.01 + (4 << 20), "checkpointing on the host %.3f GiB vs (4S+1) chunks %.3f GiB" %
          (ck / GiB, want / GiB))
    check(cpu <= 12 * N, "host %.2f GiB: at most one copy of the optimizer state %.2f GiB" % (cpu / GiB, 12 * N / GiB))
    # each byte of state once: the full fine-tune fits 8 x 80 GiB with 10 % to spare per GPU
    check(rc == 0 and p["fits"], "8x80 fits: %s" % p["verdict"])
    for q in range(8):
        t = dev(p, "cuda:%d" % q)["total"]
        check(t <= 0.9 * 80 * GiB, "cuda:%d: %.2f GiB, over 90 %% of 80 GiB" % (q, t / GiB))
    print("wan-14b: N=%d, cuda:0 %.2f GiB .. cuda:7 %.2f GiB, cpu %.2f GiB (checkpointing %.2f GiB)" %
          (N, dev(p, "cuda:0")["total"] / GiB, dev(p, "cuda:7")["total"] / GiB, cpu / GiB, ck / GiB))
    # on smaller GPUs offloading the shards is tried, and with the block inputs on the host
    # too (activation offload) it fits
    p40, rc40 = plan("plan_wan14b_8x80.lua", "--budget", "cuda=40GiB,cpu=2TiB")
    check(rc40 == 2 and any(f["knob"] == "offload" for f in p40["fixes"])
          and any(f["fits"] and "adamw_0.device" in f["change"] and "offload_activations=true" in f["change"]
                  for f in p40["fixes"]),
          "8x40: offload with offload_activations is a fix that fits: %r" % p40["fixes"])
    # rerunning the self-attention in the backward is a fix that frees on partition 0 the
    # 8 micro-batches x 5 blocks of kept self-attention output and lse, less the area the
    # recompute then writes them to
    fx = {f["knob"]: f for f in p40["fixes"]}
    ra = fx.get("recompute_attention")
    kept = 8 * 5 * (2 * s * h + 4 * 40 * s)
    check(ra is not None and ra["change"] == "--set recompute_attention=true"
          and 0.95 * kept <= dev(p40, "cuda:0")["total"] - ra["totals"]["cuda:0"] <= kept,
          "the recompute_attention fix: %r" % ra)
    # offload: the shards in host memory read the partitions' bf16 gradients and write
    # bf16 weights through chunk buffers of `chunk` elements (one copy each way), their
    # f32 master and moments (12 B/param) on the host; no optimizer state, gradient slice
    # or weight copy on the GPUs, which keep at least 10 % headroom; the host within 512 GiB
    po, rco = plan("plan_wan14b_8x80.lua", "--budget", "cuda=80GiB,cpu=512GiB", "--set", "offload=true")
    check(rco == 0 and po["fits"], "offload: fits in 8x80 GiB and 512 GiB of host: %s" % po.get("verdict"))
    check(line_sum(po, device="cpu", what="master weights + moments") == 12 * N, "offload: master + moments on the host")
    cap = 16777216  # the default chunk: elements, a whole number of norm blocks here
    # page-locked, so each chunk's copy to and from the GPU is one DMA
    check(line_sum(po, device="cpu", what="gradient chunk (pinned, GPU partitions)") == S * 2 * cap,
          "offload: one pinned bf16 gradient chunk per shard on the host")
    check(line_sum(po, device="cpu", what="weight chunk (pinned, GPU partitions)") == S * 2 * cap,
          "offload: one pinned bf16 weight chunk per shard on the host")
    for d in po["devices"]:
        if d["device"].startswith("cuda"):
            check(d["total"] <= 0.9 * 80 * GiB, "offload: %s %.2f GiB, 10 %% headroom" % (d["device"], d["total"] / GiB))
            check(line_sum(po, device=d["device"], category="optimizer") == 0, "offload: no optimizer state on " + d["device"])
    ocpu = dev(po, "cpu")["total"]
    check(ocpu <= 512 * GiB, "offload: host %.2f GiB <= 512 GiB" % (ocpu / GiB))
    print("wan-14b offload: cuda:0 %.2f GiB, cpu %.2f GiB" % (dev(po, "cuda:0")["total"] / GiB, ocpu / GiB))


def wan14b_lora():
    budget = ("--budget", "cuda=80GiB,cpu=256GiB")
    p, rc = plan("plan_wan14b_lora_1x80.lua", *budget)
    full, rc_full = plan("plan_wan14b_lora_1x80.lua", *budget, "--set", "lora_rank=0")
    N, _, _, _ = wan_params(5120, 13824, 40)
    r, d, f = 32, 5120, 13824
    NL = 40 * r * (18 * d + 2 * f)  # A (r, in) and B (out, r) on q k v o, cross q k v o, ffn.0, ffn.2
    check(rc == 0 and p["fits"], "14B LoRA fits one 80 GiB GPU: %s" % p["verdict"])
    check(rc_full == 2 and not full["fits"], "the full fine-tune of 14B does not: %s" % full["verdict"])
    opt = line_sum(p, stage="adamw_0", what="master weights + moments")
    check(opt == 12 * NL, "LoRA optimizer state 12 B per adapter parameter: %d vs %d" % (opt, 12 * NL))
    check(line_sum(full, stage="adamw_0", what="master weights + moments") == 12 * N, "full: 12 B/param")
    base = line_sum(p, stage="dit_0", what="frozen base weights")
    check(base == 2 * N, "the base once in bf16: %d vs %d" % (base, 2 * N))
    ad = line_sum(p, stage="dit_0", what="LoRA adapters (lent") + line_sum(p, stage="dit_0", what="LoRA gradients (lent")
    check(ad == 4 * NL, "adapters + their gradients 4 B/param: %d vs %d" % (ad, 4 * NL))
    check(line_sum(p, stage="dit_0", what="gradients (lent") == 0, "no gradients for the base")
    saved = dev(full, "cuda:0")["total"] - dev(p, "cuda:0")["total"]
    check(saved >= 12 * (N - NL), "LoRA saves at least the base's master + moments on cuda:0: %.2f GiB vs %.2f GiB" %
          (saved / GiB, 12 * (N - NL) / GiB))
    print("wan-14b LoRA r=32: %d adapter params, cuda:0 %.2f GiB (full fine-tune %.2f GiB), cpu %.2f GiB" %
          (NL, dev(p, "cuda:0")["total"] / GiB, dev(full, "cuda:0")["total"] / GiB, dev(p, "cpu")["total"] / GiB))


def wan14b_lora_24gb():
    """Wan-14B LoRA r=32 at 81x480x832 on one 24 GiB GPU: with block swap (K = 39) and the
    block inputs in pinned host memory it fits; the host holds the inputs of blocks 1..39
    (bf16, s x h each; block 0's input stays on the device) and the device a ring of 3; the
    swapped blocks' base is 39 blocks' parameters in bf16. Without activation offload it
    does not fit, and the planner names offload_activations as the fix that fits."""
    budget = ("--budget", "cuda=24GiB,cpu=256GiB")
    p, rc = plan("plan_wan14b_lora_24gb.lua", *budget)
    s, h, d, f = 21 * 30 * 52, 5120, 5120, 13824
    check(rc == 0 and p["fits"], "14B LoRA on 24 GiB with swap and activation offload fits: %s" % p["verdict"])
    host = line_sum(p, stage="dit_0", what="activation offload: saved block inputs")
    check(host == 39 * 2 * s * h, "host block inputs 39 x 2·s·h: %d vs %d" % (host, 39 * 2 * s * h))
    ring = line_sum(p, stage="dit_0", what="activation offload ring")
    check(ring == 3 * 2 * s * h, "offload ring 3 x 2·s·h: %d vs %d" % (ring, 3 * 2 * s * h))
    per_block = 4 * d * d + 4 * d + 2 * d + 2 * d + 4 * d * d + 4 * d + 2 * d + 2 * d * f + f + d + 6 * d
    swapped = line_sum(p, stage="dit_0", what="block swap: swapped blocks")
    check(swapped == 39 * 2 * per_block, "swapped base 39 blocks in bf16: %d vs %d" % (swapped, 39 * 2 * per_block))
    acts = line_sum(p, device="cuda:0", category="activations")
    check(acts <= 4 * 2 * s * h, "activations on the device at most 4 x 2·s·h: %.2f GiB" % (acts / GiB))
    q, rcq = plan("plan_wan14b_lora_24gb.lua", *budget, "--set", "offload_activations=false")
    fx = [x for x in q.get("fixes", []) if x["knob"] == "offload_activations"]
    check(rcq == 2 and not q["fits"], "without activation offload it does not fit: %s" % q["verdict"])
    check(len(fx) == 1 and fx[0]["fits"], "offload_activations is the fix that fits: %r" % q.get("fixes"))
    print("wan-14b LoRA 24 GB: cuda:0 %.2f GiB with activation offload (host inputs %.2f GiB), %.2f GiB without" %
          (dev(p, "cuda:0")["total"] / GiB, host / GiB, dev(q, "cuda:0")["total"] / GiB))


def i2v_extra(d=5120, L=40, clip=1280, cond=20, patch=4):
    """What Wan 2.1 I2V-14B adds to the T2V 14B, counted by hand: patch_embedding's 20
    conditioning channels, img_emb (LayerNorm, Linear, GELU, Linear, LayerNorm, all affine)
    and each block's k_img, v_img (with biases) and norm_k_img."""
    img_emb = 2 * clip + clip * clip + clip + clip * d + d + 2 * d
    return cond * patch * d + img_emb + L * (2 * (d * d + d) + d)


def wan_i2v():
    """I2V-14B at 81x480x832: the full fine-tune on 8 x 80 GB, LoRA on one 80 GB GPU."""
    N = wan_params(5120, 13824, 40)[0] + i2v_extra()
    p, rc = plan("plan_wan14b_8x80.lua", "--budget", "cuda=80GiB,cpu=2TiB", "--set", "model=wan-i2v-14b")
    check(rc == 0 and p["fits"], "I2V-14B full fits 8 x 80 GiB: %s" % p["verdict"])
    opt = sum(line_sum(p, stage="adamw_%d" % k, what="master weights + moments") for k in range(8))
    check(opt == 12 * N, "I2V-14B optimizer state over 8 shards = 12 B/param: %d vs %d" % (opt, 12 * N))
    gpus = [dev(p, "cuda:%d" % q)["total"] for q in range(8)]
    check(max(gpus) <= 0.95 * 80 * GiB, "every GPU within 95 %% of 80 GiB: %.2f GiB" % (max(gpus) / GiB))
    r, d, f = 32, 5120, 13824
    NL = 40 * r * (22 * d + 2 * f)  # the T2V targets and cross_attn.k_img, v_img
    pl, rcl = plan("plan_wan14b_lora_1x80.lua", "--budget", "cuda=80GiB,cpu=256GiB", "--set", "model=wan-i2v-14b")
    check(rcl == 0 and pl["fits"], "I2V-14B LoRA fits one 80 GiB GPU: %s" % pl["verdict"])
    check(line_sum(pl, stage="dit_0", what="frozen base weights") == 2 * N, "the I2V base once in bf16")
    check(line_sum(pl, stage="adamw_0", what="master weights + moments") == 12 * NL,
          "I2V LoRA optimizer state 12 B per adapter parameter (image branch included)")
    print("wan-i2v-14b: %d params; 8x80 full %.2f-%.2f GiB per GPU, cpu %.2f GiB; LoRA r=32 (%d adapter params) "
          "cuda:0 %.2f GiB, cpu %.2f GiB" % (N, min(gpus) / GiB, max(gpus) / GiB, dev(p, "cpu")["total"] / GiB, NL,
                                             dev(pl, "cuda:0")["total"] / GiB, dev(pl, "cpu")["total"] / GiB))


def precompute():
    p, rc = plan("plan_precompute_129f_480p.lua", "--budget", "cuda=80GiB,cpu=64GiB")
    check(rc == 0 and p["fits"], "precompute fits: %s" % p["verdict"])
    clip = 129 * 480 * 832 * 3
    edges = [e for e in p["edges"] if e["dst"] == "vae_encode.in"]
    check(len(edges) == 4 and all(e["capacity"] == 4 for e in edges), "4 decode workers, capacity 4")
    for e in edges:
        # + the codec header and the bound the port allows for the id and metadata
        check(clip <= e["item_bytes"] <= clip + 140 * 1024, "item = one clip + codec overhead: %d vs %d" %
              (e["item_bytes"], clip))
    p2, _ = plan("plan_precompute_129f_480p.lua", "--budget", "cuda=80GiB,cpu=64GiB", "--set", "frames=257")
    vae1 = line_sum(p, stage="vae_encode", device="cuda:0")
    vae2 = line_sum(p2, stage="vae_encode", device="cuda:0")
    check(vae1 == vae2 > 0, "VAE device memory independent of the clip length: %d vs %d" % (vae1, vae2))
    check(dev(p2, "cpu")["total"] > dev(p, "cpu")["total"], "host memory grows with the clips")
    print("precompute 129f: cpu %.2f GiB, cuda:0 %.2f GiB (VAE %.2f GiB at 129 and 257 frames)" %
          (dev(p, "cpu")["total"] / GiB, dev(p, "cuda:0")["total"] / GiB, vae1 / GiB))


def ti2v5b():
    """Wan 2.2 TI2V-5B (dim 3072, ffn 14336, 30 blocks, 48 latent channels): the full
    fine-tune on one 80 GiB GPU with the optimizer state on the host, LoRA on one 24 GiB
    GPU at 480x832; the Wan 2.2 VAE's precompute memory independent of the clip length."""
    N, _, _, _ = wan_params(3072, 14336, 30, z=48)
    b80 = ("--budget", "cuda=80GiB,cpu=256GiB")
    off, rc_off = plan("plan_ti2v5b.lua", *b80, "--set", "offload=true")
    gpu, rc_gpu = plan("plan_ti2v5b.lua", *b80)
    check(rc_off == 0 and off["fits"], "TI2V-5B full fine-tune, optimizer on the host, fits 80 GiB: %s" % off["verdict"])
    check(rc_gpu == 2 and not gpu["fits"], "with the optimizer on the GPU it does not: %s" % gpu["verdict"])
    check(line_sum(off, stage="adamw_0", what="master weights + moments") == 12 * N,
          "host optimizer state 12 B/param of %d" % N)
    check(line_sum(off, stage="dit_0", what="weights") >= 2 * N, "bf16 weights on cuda:0")
    # the time embedding per token is counted: e and e0 of each of the 31·22·40 tokens, 7 x dim
    # bf16 values, in the saved activations, over the same plan with a time per sample
    ps, _ = plan("plan_ti2v5b.lua", *b80, "--set", "offload=true", "--set", "time=sample")
    tok = 31 * 22 * 40
    grow = line_sum(off, stage="dit_0", what="saved activations") - line_sum(ps, stage="dit_0", what="saved activations")
    check(grow >= 7 * tok * 3072 * 2, "per-token e, e0 in the saved activations: %d bytes more, want >= %d" % (
        grow, 7 * tok * 3072 * 2))
    b24 = ("--budget", "cuda=24GiB,cpu=64GiB")
    lo, rc_lo = plan("plan_ti2v5b.lua", *b24, "--set", "lora_rank=32", "--set", "size=832x480")
    r, d, f = 32, 3072, 14336
    NL = 30 * r * (18 * d + 2 * f)
    check(rc_lo == 0 and lo["fits"], "TI2V-5B LoRA r=32 at 480x832 fits 24 GiB: %s" % lo["verdict"])
    check(line_sum(lo, stage="dit_0", what="frozen base weights") == 2 * N, "the base once in bf16")
    check(line_sum(lo, stage="adamw_0", what="master weights + moments") == 12 * NL, "12 B per adapter parameter")
    pre = []
    for frames in (121, 241):
        pp, rc = plan("plan_precompute_129f_480p.lua", "--budget", "cuda=80GiB,cpu=64GiB", "--set", "vae=wan2.2",
                      "--set", "frames=%d" % frames, "--set", "size=1280x704")
        check(rc == 0 and pp["fits"], "Wan 2.2 VAE precompute of %d frames 704p fits: %s" % (frames, pp["verdict"]))
        pre.append(line_sum(pp, stage="vae_encode", device="cuda:0"))
    check(pre[0] == pre[1] > 0, "Wan 2.2 VAE device memory independent of the clip length: %d vs %d" % tuple(pre))
    print("ti2v-5b: %d params; full fine-tune + host optimizer cuda:0 %.2f GiB (time per sample %.2f GiB), cpu "
          "%.2f GiB; LoRA r=32 480p cuda:0 %.2f GiB; Wan 2.2 VAE precompute 704p cuda:0 %.2f GiB" %
          (N, dev(off, "cuda:0")["total"] / GiB, dev(ps, "cuda:0")["total"] / GiB, dev(off, "cpu")["total"] / GiB,
           dev(lo, "cuda:0")["total"] / GiB, pre[0] / GiB))


def wan22_a14b():
    """Both Wan 2.2 A14B experts side by side, each a train of its own (two Wan 2.1 14B
    shapes): the full fine-tune on 4 + 4 GPUs with host optimizer state fits 80 GiB each,
    the low expert's GPUs hold what the high expert's hold, each expert's partitions 2 + 2
    B/param and its shards 12 B/param on the host; without offload it does not fit. Both
    LoRA experts on one GPU hold two FP8 bases (1 B per block-linear parameter each) and
    fit 80 GiB at 81x480x832 only with the attention rerun; at 61 frames with room."""
    N, block, embed, head = wan_params(5120, 13824, 40)
    budget = ("--budget", "cuda=80GiB,cpu=1TiB")
    p, rc = plan("plan_wan22_a14b.lua", *budget)
    check(rc == 0 and p["fits"], "A14B both experts, full fine-tune on 4 + 4 x 80 GiB fits: %s" % p["verdict"])
    gpus = [dev(p, "cuda:%d" % g)["total"] for g in range(8)]
    check(gpus[:4] == gpus[4:], "the low expert's GPUs hold what the high expert's hold: %r" % gpus)
    check(max(gpus) <= 80 * GiB, "every GPU within 80 GiB: %.2f GiB" % (max(gpus) / GiB))
    for e in ("high", "low"):
        opt = sum(line_sum(p, stage="adamw_%s_%d" % (e, k), device="cpu", what="master weights + moments")
                  for k in range(4))
        check(opt == 12 * N, "%s: optimizer state on the host = 12 B/param: %d vs %d" % (e, opt, 12 * N))
        w = sum(line_sum(p, stage="dit_%s_%d" % (e, q), what="weights (lent") for q in range(4))
        g = sum(line_sum(p, stage="dit_%s_%d" % (e, q), what="gradients (lent") for q in range(4))
        check(w == g == 2 * N, "%s: partitions' bf16 weights and gradients 2 + 2 B/param" % e)
    full, rcf = plan("plan_wan22_a14b.lua", *budget, "--set", "offload=false")
    check(rcf == 2 and not full["fits"], "without offload it does not fit: %s" % full["verdict"])
    lora = ("--set", "lora_rank=32", "--set", "gpus=1", "--set", "recompute_attention=true")
    l81, rc81 = plan("plan_wan22_a14b.lua", *budget, *lora)
    l61, rc61 = plan("plan_wan22_a14b.lua", *budget, *lora, "--set", "frames=61")
    lk, rck = plan("plan_wan22_a14b.lua", *budget, *lora[:4])
    check(rc81 == 0 and l81["fits"], "both LoRA experts on one GPU at 81 frames fit: %s" % l81["verdict"])
    check(rck == 2 and not lk["fits"], "without the attention rerun they do not: %s" % lk["verdict"])
    check(rc61 == 0 and l61["fits"], "both LoRA experts on one GPU at 61 frames fit: %s" % l61["verdict"])
    linears = 40 * (8 * 5120 * 5120 + 2 * 5120 * 13824)  # q k v o, cross q k v o, ffn.0, ffn.2 weights
    fp8 = line_sum(l61, device="cuda:0", what="frozen base: block linears in FP8")
    check(fp8 == 2 * linears, "two FP8 bases on cuda:0, 1 B per block-linear weight: %d vs %d" % (fp8, 2 * linears))
    print("wan2.2-a14b both experts: full 4 + 4 x 80 with host optimizer %.2f-%.2f GiB per GPU, cpu %.2f GiB "
          "(%.2f GiB without offload); LoRA r=32 both on cuda:0 %.2f GiB at 81 frames, %.2f GiB at 61" %
          (min(gpus) / GiB, max(gpus) / GiB, dev(p, "cpu")["total"] / GiB, dev(full, "cuda:0")["total"] / GiB,
           dev(l81, "cuda:0")["total"] / GiB, dev(l61, "cuda:0")["total"] / GiB))


def wan14b_720p_sp():
    """Wan-14B at 81x720x1280 (75,600 tokens) on 8 x 80 GB: pipeline parallelism alone does
    not fit, 2 partitions x sp 4 ranks do. A rank's activations are those of its 18,900
    tokens (1F1B: P - p micro-batches in flight, each block its input, self-attention
    output and lse), the whole sequences at the ends counted by hand."""
    budget = ("--budget", "cuda=80GiB,cpu=2TiB")
    pp, rcp = plan("plan_wan14b_8x80.lua", *budget, "--set", "size=1280x720")
    check(rcp == 2 and not pp["fits"], "14B at 720p, pipeline parallelism alone: does not fit 8 x 80")
    p, rc = plan("plan_wan14b_720p_sp.lua", *budget)
    check(rc == 0 and p["fits"], "14B at 720p, 2 partitions x sp 4: fits: %s" % p["verdict"])
    for d in p["devices"]:
        if d["device"].startswith("cuda"):
            check(d["total"] <= 0.9 * 80 * GiB, "720p sp: %s %.2f GiB, over 90 %% of 80 GiB" %
                  (d["device"], d["total"] / GiB))
    L, s, h, zP = 21 * 45 * 80, 21 * 45 * 80 // 4, 5120, 16 * 4
    al = lambda b: (b + 63) // 64 * 64
    for q in (0, 1):
        for k in range(4):
            st = "dit_%d_s%d" % (q, k)
            acts = line_sum(p, stage=st, what="saved activations")
            want = (2 - q) * 20 * (2 * s * h + 2 * s * h + 4 * 40 * s)
            extra = 3 * 2 * s * h if q == 1 else 0
            check(want <= acts <= 1.15 * want + extra, "%s: %.2f GiB activations vs %.2f GiB for its %d tokens" %
                  (st, acts / GiB, want / GiB, s))
            # the ends: the first partition's patchify of the whole clips and its staging (a
            # rank embeds its tokens' patches, which its saved stores hold); the last stages
            # its rank's targets only, among its tokens' lines
            ends = line_sum(p, stage=st, what="sequence parallel: whole clips' patchify (first partition)")
            check(ends == (2 * al(2 * L * zP) if q == 0 else 0), "%s: whole sequences %d" % (st, ends))
            check(not [x for x in p["lines"] if x.get("stage") == st and "patches" in x["what"]],
                  "%s: a line of whole clips' patches" % st)
    q4, rc4 = plan("plan_wan14b_720p_sp.lua", *budget, "--set", "stages=4", "--set", "sp=2")
    check(rc4 == 2, "4 partitions x sp 2 do not fit 8 x 80 GB without recompute_attention")
    print("wan-14b 720p: PP alone cuda:0 %.2f GiB; 2 x sp 4 %.2f-%.2f GiB per GPU; 4 x sp 2 cuda:0 %.2f GiB" %
          (dev(pp, "cuda:0")["total"] / GiB, min(d["total"] for d in p["devices"] if d["device"] != "cpu") / GiB,
           max(d["total"] for d in p["devices"] if d["device"] != "cpu") / GiB, dev(q4, "cuda:0")["total"] / GiB))


def full_ft_swap():
    """A full fine-tune with block swap at 81x480x832, the optimizer on the host: Wan-1.3B on
    one 12 GiB GPU, Wan-14B on one 80 GiB GPU. The K that "auto" takes is read off the host
    lines (each swapped block's bf16 weights and bf16 gradients, counted by hand) and is
    the smallest that fits: K - 1 given explicitly is refused. On the device the resident
    weights and gradients are those of the other blocks, embeddings and head, and the ring
    two blocks of each."""
    cases = [("wan-1.3b 12 GiB", "plan_wan13b_1x80.lua", (1536, 8960, 30), "cuda=12GiB,cpu=256GiB", []),
             ("wan-14b 80 GiB", "plan_wan14b_8x80.lua", (5120, 13824, 40), "cuda=80GiB,cpu=2TiB",
              ["--set", "gpus=1", "--set", "stages=1", "--set", "shards=1", "--set", "micro_batches=1"])]
    for name, script, (d, f, L), budget, extra in cases:
        args = ["--budget", budget, "--set", "offload=true"] + extra
        p, rc = plan(script, *args, "--set", "swap_blocks=auto")
        N, block, _, _ = wan_params(d, f, L)
        check(rc == 0 and p["fits"], "%s: the full fine-tune with swap \"auto\" fits: %s" % (name, p["verdict"]))
        hw = line_sum(p, stage="dit_0", device="cpu", what="block swap: swapped", category="weights")
        hg = line_sum(p, stage="dit_0", device="cpu", what="block swap: swapped", category="gradients")
        K = hw // (2 * block)
        check(0 < K < L and hw == 2 * block * K and hg == hw, "%s: host holds K = %d blocks' bf16 weights and "
              "gradients: %d, %d bytes (block %d params)" % (name, K, hw, hg, block))
        res = line_sum(p, stage="dit_0", what="weights (lent") + line_sum(p, stage="dit_0", what="gradients (lent")
        check(res == 4 * (N - K * block), "%s: resident weights + gradients 4 B/param of the %d unswapped "
              "parameters: %d" % (name, N - K * block, res))
        ring = line_sum(p, stage="dit_0", device="cuda:0", what="block swap ring")
        check(ring == 2 * 2 * 2 * block, "%s: the ring two blocks of weights and gradients: %d" % (name, ring))
        q, rcq = plan(script, *args, "--set", "swap_blocks=%d" % (K - 1))
        check(rcq == 2 and not q["fits"], "%s: K - 1 = %d does not fit: %s" % (name, K - 1, q["verdict"]))
        print("%s full fine-tune: auto K = %d, cuda:0 %.2f GiB, host %.2f GiB" %
              (name, K, dev(p, "cuda:0")["total"] / GiB, dev(p, "cpu")["total"] / GiB))


wan13b()
wan14b()
wan14b_720p_sp()
wan14b_lora()
wan14b_lora_24gb()
wan_i2v()
precompute()
ti2v5b()
wan22_a14b()
full_ft_swap()
if FAILS:
    print("%d check(s) failed" % len(FAILS))
    sys.exit(1)
print("ok")
