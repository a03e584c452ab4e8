-- Plan-only example (docs/PLANNING.md): fine-tune of Wan 2.2 TI2V-5B on ONE GPU at its own
-- size, 121 frames 704x1280 (24 fps, 5 s) through the Wan 2.2 VAE (stride 4x16x16) ->
-- latents (48, 31, 44, 80): 31·22·40 = 27,280 video tokens per sample, 512 caption
-- tokens, batch 1, recompute.
--
--   vflow plan pipelines/plan_ti2v5b.lua --budget cuda=80GiB,cpu=256GiB --set offload=true
--   vflow plan pipelines/plan_ti2v5b.lua --budget cuda=80GiB,cpu=256GiB   # exit 2: cuda:0 over
--   vflow plan pipelines/plan_ti2v5b.lua --budget cuda=24GiB,cpu=64GiB --set lora_rank=32 --set size=832x480
--
-- On 80 GB the full fine-tune fits with the optimizer shard (f32 master weights and
-- moments, 12 bytes per parameter) on the host; on the GPU alone (offload=false) it does
-- not. On 24 GB rank-32 adapters on every linear of the 30 blocks train over the base
-- held once in bf16, frozen, at 480x832 (121 frames: latents (48, 31, 30, 52)); at
-- 704x1280 they do not fit 24 GB. The time embedding per token (TI2V's first frame at
-- t = 0) is counted: e and e0 of every token, 7 x 27,280 x 3072 values per sample at 704p. It names cuda:0 and a cache that need not exist:
-- `vflow plan` works anywhere, `vflow run` needs the GPU, the cache and the base weights.
-- Knobs (vf.args): lora_rank (0 = full fine-tune), lora_alpha (rank), offload (false),
-- recompute (true), micro_batches (1), batch (1), frames (121), size (1280x704, WxH),
-- device ("cuda:0"), cache, weights, time ("token"; "sample": the time embedding per sample, to
-- compare).
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline "ti2v5b"

local T = 1 + ((a.frames or 121) - 1) // 4          -- the VAE's 4x causal time compression
local W, H = vf.size(a.size or "1280x704", "size")
local h, w = H // 16, W // 16                        -- the Wan 2.2 VAE's 16x space compression
-- the preset's time embedding is per token (e (B, L, dim) and e0 (6, B, L, dim) held as
-- activations); time = "sample" plans the per-sample one for comparison
local model = vf.models.dit("wan2.2-ti2v-5b", { time = a.time or "token" })
local dev = a.device or "cuda:0"
local rank = a.lora_rank or 0

local data = p:stage("latent_reader", {
  path = a.cache or "cache/ti2v_704p.lmdb",
  batch = a.batch or 1,
  text_len = model.text_len,
  latent_shape = { model.z, T, h, w },
})
local dit = p:pipeline_parallel(model, {
  stages = 1,
  micro_batches = a.micro_batches or 1,
  recompute = a.recompute ~= false,
  devices = dev,
})
local opt = p:stage("adamw", {
  lr = rank > 0 and 1e-4 or 1e-5,
  shards = 1,
  device = a.offload == true and "cpu" or dev,
})
local ckpt = p:stage("checkpoint", { dir = "runs/ti2v5b/ckpt", every = 500, keep = 2 })
local lora
local lora_alpha = a.lora_alpha -- read also for rank 0: knobs never read are refused
if rank > 0 then
  lora = { rank = rank, alpha = lora_alpha or rank, targets = { "self_attn.*", "cross_attn.*", "ffn.*" } }
end
p:train { data = data, model = dit, optimizer = opt, checkpoint = ckpt, steps = 10000, weights = a.weights,
          lora = lora }
return p
