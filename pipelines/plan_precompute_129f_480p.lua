-- Plan-only example (docs/PLANNING.md): precompute Wan-VAE latents of 129-frame 480p
-- clips (480x832, the length HunyuanVideo / Open-Sora train on) with the Wan-2.1 VAE
-- encoder on one GPU, 4 decode workers feeding it.
--
--   vflow plan pipelines/plan_precompute_129f_480p.lua --budget cuda=80GiB,cpu=64GiB
--   vflow plan pipelines/plan_precompute_129f_480p.lua --budget cuda=24GiB --set chunk=16
--
-- A 129x480x832 RGB clip is 154 MB of u8; its latents (16, 33, 60, 104) 13 MB of f32.
-- The encoder's memory is set by `chunk` (frames per causal chunk) and micro_batch,
-- never by the clip length. It names cuda:0 and a manifest that need not exist:
-- `vflow plan` works anywhere, `vflow run` needs both.
-- Knobs (vf.args): frames (129), size (832x480, WxH), workers (4), micro_batch (1),
-- chunk (8), capacity (4), device ("cuda:0"), manifest, cache, vae (preset: "wan", or
-- "wan2.2" for the TI2V-5B VAE).
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline "precompute_129f_480p"

local clips = p:stage("decode", {
  manifest = a.manifest or "data/videos.csv",
  frames = a.frames or 129,
  size = { vf.size(a.size or "832x480", "size") },
  workers = a.workers or 4,
})
local vae = p:stage("vae_encode", {
  model = vf.models.vae(a.vae or "wan"),
  micro_batch = a.micro_batch or 1,
  chunk = a.chunk or 8,
  device = a.device or "cuda:0",
})
local cache = p:stage("latent_cache", { path = a.cache or "cache/wan480p_129f.lmdb" })
p:connect(clips, vae, { capacity = a.capacity or 4 })
p:connect(vae, cache, { capacity = 4 })
return p
