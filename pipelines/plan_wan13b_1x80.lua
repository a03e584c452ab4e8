-- Plan-only example (docs/PLANNING.md): full fine-tune of Wan-2.1 T2V-1.3B on ONE 80 GB
-- GPU at Wan's 480p training size, 81 frames 480x832 -> latents (16, 21, 60, 104):
-- 21·30·52 = 32,760 video tokens per sample, 512 caption tokens, batch 1.
--
--   vflow plan pipelines/plan_wan13b_1x80.lua --budget cuda=80GiB,cpu=256GiB
--   vflow plan pipelines/plan_wan13b_1x80.lua --budget cuda=80GiB,cpu=256GiB --set recompute=false   # exit 2: cuda:0 over
--
-- The host needs 64.2 GiB (the asynchronous checkpoint's copies of the optimizer state),
-- so a 24 GiB host budget is refused: give the host the run's machine has.
-- It names cuda:0 and a cache that need not exist (latent_shape plans without it):
-- `vflow plan` works anywhere, `vflow run` needs the GPU and the cache.
--   # on one 12 GB GPU: the optimizer on the host, 24 of the 30 blocks' weights and
--   # gradients in pinned host memory (swap "auto": 11.91 GiB of cuda:0)
--   vflow plan pipelines/plan_wan13b_1x80.lua --set offload=true --set swap_blocks=auto --budget cuda=12GiB,cpu=256GiB
--
-- Knobs (vf.args): recompute (true), micro_batches (1), batch (1), frames (81), size
-- (832x480, WxH), offload (false: the optimizer shard on the GPU), shards (1),
-- swap_blocks (0; a number or "auto": block swap, README "Block swap"), swap_budget,
-- device ("cuda:0"), cache, weights (Wan's checkpoint to start from: the plan checks it
-- against the model and counts its largest tensor); model (preset, "wan-1.3b") and dim
-- depth heads head_dim ffn text_len to plan another DiT shape on one GPU
-- (docs/PLANNING.md: a CogVideoX-5B shape).
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline "wan13b_1x80"

local T = 1 + ((a.frames or 81) - 1) // 4          -- the VAE's 4x causal time compression
local W, H = vf.size(a.size or "832x480", "size")
local h, w = H // 8, W // 8
local overrides = {}
for _, k in ipairs { "dim", "depth", "heads", "head_dim", "ffn", "text_len" } do
  if a[k] ~= nil then overrides[k] = a[k] end
end
local model = vf.models.dit(a.model or "wan-1.3b", overrides)
local dev = a.device or "cuda:0"

local data = p:stage("latent_reader", {
  path = a.cache or "cache/wan480p.lmdb",
  batch = a.batch or 1,
  text_len = model.text_len,
  latent_shape = { model.z, T, h, w },
})
local dit = p:pipeline_parallel(model, {
  stages = a.stages or 1,
  micro_batches = a.micro_batches or 1,
  recompute = a.recompute ~= false,
  swap_blocks = a.swap_blocks or 0,
  swap_budget = a.swap_budget,
  devices = dev,
})
local opt = p:stage("adamw", {
  lr = 1e-5,
  shards = a.shards or 1,
  device = a.offload == true and "cpu" or dev,
})
local ckpt = p:stage("checkpoint", { dir = "runs/wan13b_1x80/ckpt", every = 500, keep = 2 })
p:train { data = data, model = dit, optimizer = opt, checkpoint = ckpt, steps = 10000, weights = a.weights }
return p
