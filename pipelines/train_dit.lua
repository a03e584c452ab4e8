-- Train a video DiT on a latent cache (pipelines/precompute_latents.lua writes one):
-- pipeline-parallel partitions in 1F1B, sharded AdamW, asynchronous atomic checkpoints.
--
--   vflow run pipelines/train_dit.lua --set cache=cache/latents.lmdb --set steps=300
--   vflow run pipelines/train_dit.lua --set cache=cache/latents.lmdb --set steps=400 --resume
--                    (steps is the run's total: the resume trains steps 301-400)
--
-- Knobs (vf.args):
--   run            pipeline name = run dir runs/<run>                      (train)
--   cache          LMDB latent cache                                       (cache/latents.lmdb)
--   model          DiT preset                                              (tiny)
--   dim depth heads head_dim ffn text_len in_dim img_dim img_len time   overrides of the preset's fields
--                  (time = "token": a time embedding per token, Wan 2.2 TI2V)
--   cond           the cache's conditioning kind the reader takes: text, concat, concat+clip,
--                  first_frame (TI2V, a model with time = "token")     (from the model)
--   text_dim       condition on the cache's text embeddings of this width (text = embeddings;
--                  the Wan presets always do)                             (caption bytes)
--   steps          optimizer steps                                         (200)
--   batch          global batch per replica (samples per step)             (4)
--   stages         pipeline partitions P                                   (2)
--   micro_batches  micro-batches M per step                                (2)
--   recompute      keep only block inputs (true/false)                     (false)
--   recompute_attention  with recompute: rerun the self-attention in backward too,
--                  keeping only block inputs (true/false)                  (false)
--   replicas       data-parallel replicas D                                (1)
--   sp             sequence parallelism: each partition as this many rank processes,
--                  each holding 1/sp of every sample's tokens; divides heads (1)
--   shards         optimizer shards S                                      (1)
--   lr warmup schedule min_lr weight_decay clip   AdamW                    (1e-3, 0, constant, 0, 0.01, 1.0)
--   every keep     checkpoint interval (steps; 0 = last only) and count    (50, 2)
--   ckpt           checkpoint dir                                          (<run dir>/ckpt)
--   model_shard_bytes  above this many bytes the checkpoint's model is written as
--                  Hugging Face shards + model.safetensors.index.json; 0 = one file (1e10)
--   sync           synchronous checkpoints (benchmark baseline)            (false)
--   ckpt_chunk     bytes of each snapshot chunk a shard streams to the writer (64 MiB)
--   seed           data order, init, noise and timesteps                   (0)
--   t_sampling     timestep distribution: logit_normal or uniform          (logit_normal)
--   t_mean t_std   the logit-normal's mean and std                         (0, 1)
--   t_shift        flow-matching shift of each timestep, t <- s*t/(1+(s-1)*t) (1: none)
--   t_min t_max    timesteps mapped linearly into this range, after the shift (0, 1)
--   weights        start from these DiT weights: a .safetensors file, a sharded
--                  *.safetensors.index.json or a diffusers directory       (seeded init)
--   lora_rank      train LoRA adapters of this rank on the frozen model (`weights` or
--                  the seeded init) instead of every weight                (off)
--   lora_alpha lora_targets   their alpha (rank) and target patterns, comma-separated
--                  (self_attn.*,cross_attn.*,ffn.*)
--   lora_init      start the adapters from this LoRA file                  (A random, B zero)
--   fp8_base       with lora_rank: hold the frozen base's block linears in FP8
--                  (README "FP8 base") (true/false)                        (false)
--   swap_blocks    the last K blocks of each partition keep their weights (LoRA: the
--                  frozen base; else weights and gradients) in host memory, streamed in
--                  ahead of use; "auto": the smallest K with which each partition fits
--                  its budget                                              (0)
--   swap_budget    with swap_blocks=auto: the device memory a partition may hold
--                  ("12GiB"); the CPU backend needs it            (its device's budget)
--   offload_activations  with recompute: the block inputs kept for backward wait in
--                  pinned host memory (README "Activation offload") (true/false) (false)
--   device         "cpu" or "cuda:N" for every partition and shard         (cpu)
--   offload        the shards' master weights and moments in host memory (true/false): the
--                  partitions keep bf16 weights and gradients on their GPU (false)
--   isolate        one process per partition / shard / writer (true/false) (true)
--   nodes          spread the partitions (and replicas) over this many nodes of a
--                  multi-node run, in order; docs/MULTINODE.md                  (1)
--   tensorboard    write TensorBoard event files in <run dir>/tb/ (true/false) (true)
--   sample_prompts text-embedding files, comma-separated: a video of each per checkpoint
--                  in <run dir>/samples/step-N/ (a model with text_dim)     (none)
--   sample_captions captions as text, separated by '|', for a model trained on caption
--                  bytes (no text_dim): a video of each per checkpoint       (none)
--   sample_negative sample_frames sample_size (WxH or one number) sample_steps sample_shift sample_guidance
--   sample_seed sample_fps sample_every sample_device sample_cache   the sample stage's params
--   sample_image sample_image_embeds   an image-to-video model's first frame (an image file
--                  of the sample size) and, for Wan 2.1 I2V, its CLIP features

local vf = require "vflow"
local a = vf.args
local p = vf.pipeline(a.run or "train", { tensorboard = a.tensorboard })

local overrides = {}
for _, k in ipairs { "dim", "depth", "heads", "head_dim", "ffn", "text_len", "in_dim", "img_dim", "img_len", "time" } do
  if a[k] ~= nil then overrides[k] = a[k] end
end
if a.text_dim ~= nil then overrides.text_dim, overrides.text = a.text_dim, "embeddings" end
local model = vf.models.dit(a.model or "tiny", overrides)
local seed = a.seed or 0
local isolate = a.isolate ~= false

local data = p:stage("latent_reader", {
  path = a.cache or "cache/latents.lmdb",
  batch = a.batch or 4,
  seed = seed,
  text_len = model.text_len,
  text_dim = model.text == "embeddings" and model.text_dim or nil,
  cond = a.cond,
})
local dit = p:pipeline_parallel(model, {
  stages = a.stages or 2,
  micro_batches = a.micro_batches or 2,
  recompute = a.recompute == true,
  recompute_attention = a.recompute_attention == true,
  devices = a.device or "cpu",
  replicas = a.replicas or 1,
  sp = a.sp or 1,
  isolate = isolate,
  nodes = a.nodes,
  base_dtype = a.fp8_base == true and "fp8" or nil,
  swap_blocks = a.swap_blocks,
  swap_budget = a.swap_budget,
  offload_activations = a.offload_activations == true,
})
local opt = p:stage("adamw", {
  lr = a.lr or 1e-3,
  warmup = a.warmup or 0,
  schedule = a.schedule or "constant",
  min_lr = a.min_lr or 0,
  weight_decay = a.weight_decay or 0.01,
  clip_grad = a.clip or 1.0,
  shards = a.shards or 1,
  device = a.offload == true and "cpu" or a.device or "cpu",
  isolate = isolate,
})
local ckpt = p:stage("checkpoint", {
  dir = a.ckpt or "",
  every = a.every or 50,
  keep = a.keep or 2,
  sync = a.sync == true,
  chunk = a.ckpt_chunk,
  model_shard_bytes = a.model_shard_bytes,
})
-- every knob is read whether it applies or not: a knob the script never reads is refused
local sk = {}
for _, k in ipairs { "prompts", "captions", "negative", "frames", "size", "steps", "shift", "guidance", "seed",
                     "fps", "every", "device", "cache", "image", "image_embeds" } do sk[k] = a["sample_" .. k] end
local lora_alpha, lora_targets = a.lora_alpha, a.lora_targets
local sample
local function nonempty(v) return v ~= nil and v ~= "" end
if nonempty(sk.prompts) or nonempty(sk.captions) then
  local prompts, captions = {}, {}
  for f in tostring(sk.prompts or ""):gmatch("[^,]+") do prompts[#prompts + 1] = f end
  for c in tostring(sk.captions or ""):gmatch("[^|]+") do captions[#captions + 1] = c end
  local size
  if sk.size ~= nil then size = { vf.size(sk.size, "sample_size") } end
  sample = {
    prompts = #prompts > 0 and prompts or nil, captions = #captions > 0 and captions or nil, negative = sk.negative,
    frames = sk.frames, size = size, steps = sk.steps, shift = sk.shift, guidance = sk.guidance, seed = sk.seed,
    fps = sk.fps, every = sk.every, device = sk.device, cache = sk.cache, image = sk.image,
    image_embeds = sk.image_embeds,
  }
end
local lora = (a.lora_rank or 0) ~= 0 and { rank = a.lora_rank, alpha = lora_alpha,
                                           targets = lora_targets or "self_attn.*,cross_attn.*,ffn.*" } or nil
p:train { data = data, model = dit, optimizer = opt, checkpoint = ckpt, steps = a.steps or 200, seed = seed,
          lora = lora, lora_init = a.lora_init, weights = a.weights, sample = sample,
          t_sampling = a.t_sampling, t_mean = a.t_mean, t_std = a.t_std, t_shift = a.t_shift,
          t_min = a.t_min, t_max = a.t_max }
return p
