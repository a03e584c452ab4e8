-- Plan-only example (docs/PLANNING.md): LoRA fine-tune of Wan-2.1 T2V-14B on ONE 24 GB GPU
-- at Wan's 480p training size, 81 frames 480x832 -> latents (16, 21, 60, 104): 32,760
-- video tokens per sample, 512 caption tokens, batch 1, recompute, rank-32 adapters on
-- every linear of the 40 blocks (as pipelines/plan_wan14b_lora_1x80.lua), planned as
-- frugally as vflow can: block swap (the frozen bf16 base of the last `swap_blocks` blocks
-- in pinned host memory, streamed in ahead of use; README "Block swap"), recompute of
-- everything but block inputs (recompute_attention), those block inputs in pinned host
-- memory too (activation offload; README "Activation offload") and the optimizer on the
-- host.
--
--   vflow plan pipelines/plan_wan14b_lora_24gb.lua --budget cuda=24GiB,cpu=256GiB                 # fits
--   vflow plan pipelines/plan_wan14b_lora_24gb.lua --budget cuda=24GiB,cpu=256GiB \
--        --set offload_activations=false                                                        # exit 2: over
--   vflow plan pipelines/plan_wan14b_lora_24gb.lua --budget cuda=24GiB,cpu=256GiB \
--        --set offload_activations=false --set frames=57                                        # fits
--   vflow plan pipelines/plan_wan14b_lora_24gb.lua --budget cuda=80GiB,cpu=256GiB --set swap_blocks=0 \
--        --set recompute_attention=false --set offload=false --set offload_activations=false    # fits
--   vflow plan pipelines/plan_wan14b_lora_24gb.lua --set model=wan-1.3b --budget cuda=12GiB,cpu=64GiB   # fits
--   vflow plan pipelines/plan_wan14b_lora_24gb.lua --set model=wan-1.3b --budget cuda=8GiB,cpu=64GiB \
--        --set frames=65                                                                        # fits
--
-- At 81 frames the block inputs and the partition's workspace alone are over 24 GiB: this
-- size fits one 24 GB GPU only with the block inputs on the host (docs/PLANNING.md gives
-- the figures). `fp8_base = true` holds the base in FP8 instead (1
-- byte a weight; the swapped blocks then stream their FP8 bytes).
-- It names cuda:0 and a cache that need not exist: `vflow plan` works anywhere, `vflow
-- run` needs the GPU, the cache and the base weights (`weights`).
-- Knobs (vf.args): model (wan-14b), swap_blocks (depth − 1), fp8_base (false), lora_rank
-- (32), lora_alpha (rank), lora_targets (self_attn.*,cross_attn.*,ffn.*), recompute (true),
-- recompute_attention (true), offload_activations (true), offload (true), micro_batches (1), batch (1), frames (81),
-- size (832x480, WxH), device ("cuda:0"), cache, weights.
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline "wan14b_lora_24gb"

local T = 1 + ((a.frames or 81) - 1) // 4
local W, H = vf.size(a.size or "832x480", "size")
local h, w = H // 8, W // 8
local model = vf.models.dit(a.model or "wan-14b")
local dev = a.device or "cuda:0"
local rank = a.lora_rank or 32
local fp8 = a.fp8_base == true

local data = p:stage("latent_reader", {
  path = a.cache or "cache/wan480p.lmdb",
  batch = a.batch or 1,
  text_len = model.text_len,
  latent_shape = { model.z, T, h, w },
})
local dit = p:pipeline_parallel(model, {
  stages = 1,
  micro_batches = a.micro_batches or 1,
  recompute = a.recompute ~= false,
  recompute_attention = a.recompute_attention ~= false,
  devices = dev,
  swap_blocks = a.swap_blocks or model.depth - 1,
  base_dtype = fp8 and "fp8" or nil,
  offload_activations = a.offload_activations ~= false and a.recompute ~= false,
})
-- offload: the adapters' master weights and moments on the host (the step's optimizer
-- work is the adapters' only: small)
local opt = p:stage("adamw", { lr = 1e-4, shards = 1, device = a.offload == false and dev or "cpu" })
local ckpt = p:stage("checkpoint", { dir = "runs/wan14b_lora_24gb/ckpt", every = 250, keep = 2 })
local targets = {}
for t in tostring(a.lora_targets or "self_attn.*,cross_attn.*,ffn.*"):gmatch("[^,]+") do targets[#targets + 1] = t end
p:train { data = data, model = dit, optimizer = opt, checkpoint = ckpt, steps = 10000, weights = a.weights,
          lora = { rank = rank, alpha = a.lora_alpha or rank, targets = targets } }
return p
