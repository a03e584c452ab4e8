-- Plan-only example (docs/PLANNING.md): LoRA fine-tune of Wan-2.1 T2V-1.3B on ONE 12 GB
-- GPU at Wan's 480p training size, 81 frames 480x832 -> latents (16, 21, 60, 104): 32,760
-- video tokens per sample, 512 caption tokens, batch 1, recompute with the self-attention
-- recomputed too. Rank-32 adapters (alpha 32) on every linear of the 30 blocks, the frozen
-- base held in FP8 (fp8_base, README "FP8 base": its block linears at 1 byte a weight).
--
--   vflow plan pipelines/plan_wan13b_lora_12gb.lua --budget cuda=12GiB,cpu=64GiB
--   vflow plan pipelines/plan_wan13b_lora_12gb.lua --budget cuda=12GiB,cpu=64GiB --set fp8_base=false   # exit 2: over
--   vflow plan pipelines/plan_wan13b_lora_12gb.lua --budget cuda=12GiB,cpu=64GiB --set recompute_attention=false   # exit 2: over
--
-- fp8_base = false plans the same with the base in bf16, recompute_attention = false with
-- each self-attention's output kept: neither fits 12 GB. It names cuda:0 and a cache
-- that need not exist: `vflow plan` works anywhere, `vflow run` needs the GPU, the cache
-- and the base weights (`weights`).
-- Knobs (vf.args): fp8_base (true), lora_rank (32), recompute (true), recompute_attention
-- (true), frames (81), size (832x480, WxH), device ("cuda:0"), cache, weights.
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline "wan13b_lora_12gb"

local T = 1 + ((a.frames or 81) - 1) // 4
local W, H = vf.size(a.size or "832x480", "size")
local h, w = H // 8, W // 8
local model = vf.models.dit "wan-1.3b"
local dev = a.device or "cuda:0"
local rank = a.lora_rank or 32

local data = p:stage("latent_reader", {
  path = a.cache or "cache/wan480p.lmdb",
  batch = 1,
  text_len = model.text_len,
  latent_shape = { model.z, T, h, w },
})
local dit = p:pipeline_parallel(model, {
  stages = 1,
  recompute = a.recompute ~= false,
  recompute_attention = a.recompute_attention ~= false,
  devices = dev,
  base_dtype = a.fp8_base ~= false and "fp8" or nil,
})
local opt = p:stage("adamw", { lr = 1e-4, shards = 1, device = dev })
local ckpt = p:stage("checkpoint", { dir = "runs/wan13b_lora_12gb/ckpt", every = 250, keep = 2 })
p:train { data = data, model = dit, optimizer = opt, checkpoint = ckpt, steps = 10000, weights = a.weights,
          lora = { rank = rank, alpha = rank, targets = { "self_attn.*", "cross_attn.*", "ffn.*" } } }
return p
