-- Plan-only example (docs/PLANNING.md): LoRA fine-tune of Wan-2.1 T2V-14B on ONE 80 GB GPU
-- at Wan's 480p training size, 81 frames 480x832 -> latents (16, 21, 60, 104): 32,760
-- video tokens per sample, 512 caption tokens, batch 1, recompute. Rank-32 adapters
-- (alpha 32) on every linear of the 40 blocks: the base's 14.3 B weights are held once in
-- bf16 by the partition, frozen (no gradients, no f32 master, no moments); the optimizer
-- shard holds only the adapters' master weights and moments.
--
--   vflow plan pipelines/plan_wan14b_lora_1x80.lua --budget cuda=80GiB,cpu=256GiB
--   vflow plan pipelines/plan_wan14b_lora_1x80.lua --budget cuda=80GiB,cpu=256GiB --set lora_rank=0   # exit 2: over
--   vflow plan pipelines/plan_wan14b_lora_1x80.lua --budget cuda=80GiB,cpu=256GiB --set fp8_base=true
--
-- lora_rank = 0 plans the full fine-tune of the same model on the same GPU, for comparison.
-- It names cuda:0 and a cache that need not exist: `vflow plan` works anywhere, `vflow
-- run` needs the GPU, the cache and the base weights (`weights`).
-- --set model=wan-i2v-14b plans Wan 2.1 I2V-14B instead (docs/PLANNING.md).
-- Knobs (vf.args): model (wan-14b), lora_rank (32; 0 = full fine-tune), lora_alpha (rank), lora_targets
-- (self_attn.*,cross_attn.*,ffn.*), recompute (true), micro_batches (1), batch (1),
-- frames (81), size (832x480, WxH), device ("cuda:0"), cache, weights, fp8_base (false:
-- true holds the frozen base's block linears in FP8, 1 byte a weight).
local vf = require "vflow"
local a = vf.args
local p = vf.pipeline "wan14b_lora_1x80"

local T = 1 + ((a.frames or 81) - 1) // 4
local W, H = vf.size(a.size or "832x480", "size")
local h, w = H // 8, W // 8
local model = vf.models.dit(a.model or "wan-14b")  -- wan-i2v-14b: Wan 2.1 I2V-14B, the same shapes and the image branch
local dev = a.device or "cuda:0"
local rank = a.lora_rank or 32

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
  devices = dev,
  base_dtype = a.fp8_base == true and "fp8" or nil,
})
local opt = p:stage("adamw", { lr = 1e-4, shards = 1, device = dev })
local ckpt = p:stage("checkpoint", { dir = "runs/wan14b_lora_1x80/ckpt", every = 250, keep = 2 })
local lora
local lora_targets, lora_alpha = a.lora_targets, a.lora_alpha -- read also for rank 0: knobs never read are refused
if rank > 0 then
  local targets = {}
  for t in tostring(lora_targets or "self_attn.*,cross_attn.*,ffn.*"):gmatch("[^,]+") do targets[#targets + 1] = t end
  lora = { rank = rank, alpha = lora_alpha or rank, targets = targets }
end
p:train { data = data, model = dit, optimizer = opt, checkpoint = ckpt, steps = 10000, weights = a.weights,
          lora = lora }
return p
