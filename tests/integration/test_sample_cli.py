#!/usr/bin/env python3
# test_sample_cli.py — `vflow sample` from a trained checkpoint, checked link by link
# against the tools the reference tests hold to diffusers:
#  - a tiny DiT with text embeddings (text_dim 16) trained 4 steps over P = 2 partitions
#    from a cache with embeddings (cache_tool write --text 16, pipelines/train_dit.lua);
#  - vflow sample CKPT (the checkpoint dir: its newest step) with positive and negative
#    embedding files (safetensors, one (L, 16) tensor each, written here by hand);
#  - its latent equals, bit for bit, `dit_tool sample` on the same model file, seed and
#    embeddings (dit_tool's sampler is held to diffusers' WanPipeline by
#    tests/reference/test_dit_sample_diffusers.py);
#  - its frames equal `vae_tool decode` of that latent with the same seeded tiny VAE
#    (held to AutoencoderKLWan.decode by tests/reference/test_vae_dec_diffusers.py),
#    rounded to 8 bits (at most 1 level apart where f32 and f64 round a .5 differently);
#  - the mp4: ffprobe reads h264 (or mpeg4), 9 frames, 64x48, 12 fps; decoded by ffmpeg,
#    every frame within 1 dB PSNR of the ffmpeg CLI encoding the same frames at the same
#    settings (this model's frames are noise-like: 4:2:0 chroma bounds any encoder near
#    25 dB; smooth content reaches 40 dB, tests/integration/test_video_write.py);
#  - the PNG strip is frames 0, 2/3·… evenly up to the last, side by side, exactly;
#  - the same command twice writes the same latent (seeded);
#  - a byte-caption model (the tiny preset without text_dim) sampled with --prompt TEXT:
#    its latent equals dit_tool sample fed the caption's bytes, cut at text_len and
#    padded, as tokens; another caption gives another latent;
#  - two experts (--low F --boundary B --guidance-2 G): the latent equals dit_tool sample
#    low=… boundary=… guidance2=… bit for bit, and differs from the one-model latent;
#  - bad input, each exit 2 with one line naming it and no output file: a size the VAE
#    stride x patch does not divide, a frame count the VAE cannot make, embeddings of
#    another width, embeddings for a byte-caption checkpoint and a caption for an
#    embeddings one, an output directory that does not exist,
#    a missing checkpoint, --vae-preset wan for a 4-channel model, --guidance-2 with one
#    model, --low without a boundary, a --low file that is not there.
import os
import random
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from media_lib import st_write, st_read, psnr  # noqa: E402

BUILD = os.environ.get("VFLOW_BUILD", "build")
SRC = os.environ.get("VFLOW_SRC", os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
VFLOW = os.environ.get("VFLOW_BIN", os.path.join(BUILD, "vflow"))
TOOLS = os.path.join(BUILD, "tools")
ENV = dict(os.environ, OMP_NUM_THREADS="1")
fails = []


def check(cond, msg):
    if not cond:
        fails.append(msg)
        print("FAIL: " + msg, file=sys.stderr)
    return cond


def run(args, **kw):
    return subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=300, **kw)








def main():
    tmp = tempfile.mkdtemp(prefix="sample_")
    j = lambda *p: os.path.join(tmp, *p)  # noqa: E731
    r = run([os.path.join(TOOLS, "cache_tool"), "write", j("c.lmdb"), "0", "8", "--shape", "4,2,8,8", "--text", "16"])
    if not check(r.returncode == 0, "cache_tool: " + r.stderr):
        return 1
    r = run([VFLOW, "run", os.path.join(SRC, "pipelines", "train_dit.lua"), "--run-dir", j("rd"), "--set",
             "cache=" + j("c.lmdb"), "--set", "text_dim=16", "--set", "steps=4", "--set", "every=4",
             "--set", "tensorboard=false", "--set", "seed=2"])
    if not check(r.returncode == 0, "training: " + r.stderr[-500:]):
        return 1
    ckpt = j("rd", "ckpt")
    step = os.path.join(ckpt, "step-4")

    rnd = random.Random(5)
    TL, D = 32, 16  # the tiny preset's text_len, the cache's width
    pos = [rnd.gauss(0, 1) for _ in range(7 * D)]
    neg = [rnd.gauss(0, 1) for _ in range(3 * D)]
    st_write(j("pos.safetensors"), {"emb": ((7, D), pos)})
    st_write(j("neg.safetensors"), {"emb": ((3, D), neg)})
    W, H, F = 64, 48, 9
    base = [VFLOW, "sample", ckpt, "--prompt-embeds", j("pos.safetensors"), "--negative-embeds",
            j("neg.safetensors"), "--frames", str(F), "--size", "%dx%d" % (W, H), "--steps", "5", "--shift", "3",
            "--guidance", "4.5", "--seed", "11", "--fps", "12"]
    r = run(base + ["--out", j("s.mp4"), "--png", j("s.png"), "--latent-out", j("s.lat"), "--frames-out", j("s.rgb")])
    if not check(r.returncode == 0, "vflow sample: exit %d: %s" % (r.returncode, r.stderr[-500:])):
        return 1
    print(r.stdout.strip())
    check("step-4" in r.stdout, "the newest step is not the one sampled: " + r.stdout)

    # the latent against dit_tool sample (same file, seed, embeddings, schedule)
    Tl, h, w = 1 + (F - 1) // 4, H // 8, W // 8
    with open(j("pos.f32"), "wb") as f:
        f.write(struct.pack("<%df" % (TL * D), *(pos + [0.0] * (TL * D - len(pos)))))
    with open(j("neg.f32"), "wb") as f:
        f.write(struct.pack("<%df" % (TL * D), *(neg + [0.0] * (TL * D - len(neg)))))
    for name, n in (("pos_len", 7), ("neg_len", 3)):
        with open(j(name), "wb") as f:
            f.write(struct.pack("<i", n))
    r = run([os.path.join(TOOLS, "dit_tool"), "sample", "text_emb=1", "text_dim=16", "dims=1,%d,%d,%d" % (Tl, h, w),
             "weights=" + os.path.join(step, "model.safetensors"), "pos=" + j("pos.f32"), "pos_len=" + j("pos_len"),
             "neg=" + j("neg.f32"), "neg_len=" + j("neg_len"), "steps=5", "shift=3", "guidance=4.5", "seed=11",
             "out=" + j("ref.lat")])
    check(r.returncode == 0, "dit_tool sample: " + r.stderr[-300:])
    lat, ref = open(j("s.lat"), "rb").read(), open(j("ref.lat"), "rb").read()
    check(len(lat) == 4 * 4 * Tl * h * w and lat == ref, "latent differs from dit_tool sample's (%d vs %d bytes)" %
          (len(lat), len(ref)))

    # two experts: --low FILE switching at --boundary with --guidance-2, against dit_tool sample
    # low= (held to WanPipeline with transformer_2 by test_wan_experts_sample_diffusers.py)
    cfg = ["text_emb=1", "text_dim=16"]
    run([os.path.join(TOOLS, "dit_tool"), "init"] + cfg + ["seed=3", "out=" + j("low.bin")])
    run([os.path.join(TOOLS, "dit_tool"), "save"] + cfg + ["params=" + j("low.bin"), "out=" + j("low.safetensors")])
    r = run(base + ["--low", j("low.safetensors"), "--boundary", "0.875", "--guidance-2", "2", "--out", j("e.mp4"),
                    "--latent-out", j("e.lat")])
    check(r.returncode == 0, "vflow sample --low: exit %d: %s" % (r.returncode, r.stderr[-500:]))
    r = run([os.path.join(TOOLS, "dit_tool"), "sample"] + cfg + [
        "dims=1,%d,%d,%d" % (Tl, h, w), "weights=" + os.path.join(step, "model.safetensors"), "pos=" + j("pos.f32"),
        "pos_len=" + j("pos_len"), "neg=" + j("neg.f32"), "neg_len=" + j("neg_len"), "steps=5", "shift=3",
        "guidance=4.5", "seed=11", "low=" + j("low.safetensors"), "boundary=0.875", "guidance2=2",
        "out=" + j("eref.lat")])
    check(r.returncode == 0 and "low" in r.stdout and "high" in r.stdout, "dit_tool sample low=: " + r.stderr[-300:])
    elat = open(j("e.lat"), "rb").read() if os.path.exists(j("e.lat")) else b""
    check(elat == open(j("eref.lat"), "rb").read() and elat != lat,
          "two experts: the latent differs from dit_tool sample low='s, or equals the one-model latent")

    # the frames against vae_tool decode of that latent (tiny VAE, seed 0, scale 1 shift 0)
    zs = struct.unpack("<%df" % (len(lat) // 4), lat)
    st_write(j("z.safetensors"), {"z": ((1, 4, Tl, h, w), list(zs))})
    r = run([os.path.join(TOOLS, "vae_tool"), "decode", "--preset", "tiny", "--seed", "0", "--input",
             j("z.safetensors"), "--out", j("x.safetensors")])
    check(r.returncode == 0, "vae_tool decode: " + r.stderr[-300:])
    shape, x = st_read(j("x.safetensors"), "x")
    check(shape == [1, 3, F, H, W], "vae_tool decode shape %s" % shape)
    rgb = open(j("s.rgb"), "rb").read()
    plane = H * W
    worst = 0
    for t in range(F):
        for i in range(plane):
            for c in range(3):
                v = min(255.0, max(0.0, (x[(c * F + t) * plane + i] + 1.0) * 127.5))
                worst = max(worst, abs(rgb[(t * plane + i) * 3 + c] - round(v)))
    check(len(rgb) == F * plane * 3 and worst <= 1, "frames differ from vae_tool decode by %d levels" % worst)

    # the mp4, read by ffprobe and ffmpeg, against the ffmpeg CLI's own encode of the frames
    p = run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
             "stream=codec_name,width,height,r_frame_rate,nb_read_frames", "-of", "default=noprint_wrappers=1",
             j("s.mp4")])
    info = dict(l.split("=", 1) for l in p.stdout.split())
    check(info.get("codec_name") in ("h264", "mpeg4") and info.get("width") == str(W) and info.get("height") == str(H)
          and info.get("nb_read_frames") == str(F) and info.get("r_frame_rate") == "12/1", "ffprobe: %r" % info)

    def dec(path):
        out = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                             capture_output=True).stdout
        return [out[i * plane * 3:(i + 1) * plane * 3] for i in range(F)]

    enc = ["-c:v", "libx264", "-crf", "18", "-g", "12"] if info.get("codec_name") == "h264" else \
        ["-c:v", "mpeg4", "-q:v", "3", "-g", "12"]
    subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", "%dx%d" % (W, H),
                    "-r", "12", "-i", j("s.rgb")] + enc + ["-pix_fmt", "yuv420p", j("peer.mp4")], check=True)
    ours = min(psnr(a, rgb[i * plane * 3:(i + 1) * plane * 3]) for i, a in enumerate(dec(j("s.mp4"))))
    peer = min(psnr(a, rgb[i * plane * 3:(i + 1) * plane * 3]) for i, a in enumerate(dec(j("peer.mp4"))))
    print("worst frame PSNR %.1f dB, the ffmpeg CLI's %.1f dB" % (ours, peer))
    check(ours >= peer - 1.0 and ours > 20.0, "worst frame PSNR %.1f dB, the ffmpeg CLI's %.1f dB" % (ours, peer))

    # the PNG strip: 4 frames evenly from the first to the last
    strip = subprocess.run(["ffmpeg", "-v", "error", "-i", j("s.png"), "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                           capture_output=True).stdout
    picks = [k * (F - 1) // 3 for k in range(4)]
    exp = b"".join(rgb[(t * plane + y * W) * 3:(t * plane + (y + 1) * W) * 3] for y in range(H) for t in picks)
    check(strip == exp, "PNG strip is not frames %s side by side" % picks)

    # seeded: the same command again gives the same latent
    r = run(base + ["--out", j("s2.mp4"), "--latent-out", j("s2.lat")])
    check(r.returncode == 0 and open(j("s2.lat"), "rb").read() == lat, "a second run gives another latent")

    # bad input
    st_write(j("wide.safetensors"), {"emb": ((4, 32), [0.5] * 128)})
    r = run([os.path.join(TOOLS, "cache_tool"), "write", j("b.lmdb"), "0", "8", "--shape", "4,2,8,8"])
    r = run([VFLOW, "run", os.path.join(SRC, "pipelines", "train_dit.lua"), "--run-dir", j("rb"), "--set",
             "cache=" + j("b.lmdb"), "--set", "steps=2", "--set", "every=2", "--set", "tensorboard=false"])
    check(r.returncode == 0, "byte-caption training: " + r.stderr[-300:])
    # a byte-caption model takes the caption as text: its latent against dit_tool sample fed
    # the caption's bytes as tokens (written here: the first text_len bytes, then pads)
    caption = "a red ball rolls over the green grass, slowly"  # longer than text_len: cut
    bargs = [VFLOW, "sample", j("rb", "ckpt"), "--prompt", caption, "--frames", str(F), "--size", "%dx%d" % (W, H),
             "--steps", "4", "--guidance", "3", "--seed", "5", "--fps", "12", "--out", j("b.mp4"),
             "--latent-out", j("b.lat")]
    r = run(bargs)
    check(r.returncode == 0, "vflow sample --prompt: exit %d: %s" % (r.returncode, r.stderr[-400:]))
    raw = caption.encode()[:TL]
    with open(j("btok.i32"), "wb") as f:
        f.write(struct.pack("<%di" % TL, *(list(raw) + [256] * (TL - len(raw)))))
    with open(j("bneg.i32"), "wb") as f:
        f.write(struct.pack("<%di" % TL, *([256] * TL)))
    for name, n in (("bpos_len", len(raw)), ("bneg_len", 0)):
        with open(j(name), "wb") as f:
            f.write(struct.pack("<i", n))
    r = run([os.path.join(TOOLS, "dit_tool"), "sample", "text_emb=0", "dims=1,%d,%d,%d" % (Tl, h, w),
             "weights=" + os.path.join(j("rb", "ckpt"), "step-2", "model.safetensors"), "pos=" + j("btok.i32"),
             "pos_len=" + j("bpos_len"), "neg=" + j("bneg.i32"), "neg_len=" + j("bneg_len"), "steps=4", "shift=3",
             "guidance=3", "seed=5", "out=" + j("bref.lat")])
    check(r.returncode == 0, "dit_tool sample (bytes): " + r.stderr[-300:])
    blat = open(j("b.lat"), "rb").read() if os.path.exists(j("b.lat")) else b""
    check(len(blat) == 4 * 4 * Tl * h * w and blat == open(j("bref.lat"), "rb").read(),
          "byte-caption latent differs from dit_tool sample's")
    other = list(bargs)
    other[other.index(caption)] = "a blue cube"
    other[other.index(j("b.lat"))] = j("b2.lat")
    r = run(other)
    check(r.returncode == 0 and open(j("b2.lat"), "rb").read() != blat, "another caption gives the same latent")

    cases = [
        ("size", ["--size", "60x48"], "--size 60x48"),
        ("caption for an embeddings model", ["--prompt", "a cat"], "text embeddings"),
        ("frames", ["--frames", "10"], "--frames 10"),
        ("width", ["--prompt-embeds", j("wide.safetensors")], "wide.safetensors"),
        ("bytes model", ["CKPT=" + j("rb", "ckpt")], "caption bytes"),
        ("out dir", ["--out", j("nodir", "x.mp4")], "x.mp4"),
        ("missing ckpt", ["CKPT=" + j("nothere")], "nothere"),
        ("vae preset", ["--vae-preset", "wan"], "--vae-preset wan"),
        ("second guidance, one model", ["--guidance-2", "2"], "--guidance-2"),
        ("two experts, no boundary", ["--low", j("low.safetensors")], "--boundary"),
        ("low expert missing", ["--low", j("nolow.safetensors"), "--boundary", "0.9"], "nolow.safetensors"),
    ]
    for name, extra, words in cases:
        args = list(base) + ["--out", j("bad.mp4")]
        for e in extra:
            if e.startswith("CKPT="):
                args[2] = e[5:]
        rest = [e for e in extra if not e.startswith("CKPT=")]
        if "--prompt" in rest:  # instead of the embeddings
            k = args.index("--prompt-embeds")
            del args[k:k + 2]
            k = args.index("--negative-embeds")
            del args[k:k + 2]
        args += rest
        r = run(args)
        lines = r.stderr.strip().splitlines()
        check(r.returncode == 2 and len(lines) == 1 and words in lines[0],
              "%s: exit %d, stderr %r (expected exit 2, one line with %r)" % (name, r.returncode, r.stderr, words))
        check(not os.path.exists(j("bad.mp4")) and not os.path.exists(j("bad.mp4.part")), "%s: output left" % name)

    subprocess.run(["rm", "-rf", tmp])
    if fails:
        print("%d failures" % len(fails))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
