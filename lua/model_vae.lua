-- model_vae.lua — VAE presets (vf.models.vae "NAME"): plain tables of the `model` param
-- of vae_encode, checked there against the schema in stages/vae_encode.c. The network is
-- the causal 3D VAE encoder of models/vae.h (Wan-2.1 structure and tensor names).
--
--   dim                  base channel width; level i has dim * dim_mult[i] channels
--   dim_mult             one entry per level; each level but the last ends with a 2x
--                        spatial downsample (4 levels: 8x)
--   num_res_blocks       residual blocks per level
--   temporal_downsample  1/0 per level but the last: 2x causal time downsample there
--                        (two 1s: 4x, clips of 1 + 4k frames)
--   z_dim                latent channels
--   eps                  RMSNorm eps
--   scale, shift         latent affine: latent = (mean - shift) * scale
return {
  -- tests and CPU runs: 8x space, 4x time, 4 latent channels
  tiny = { name = "tiny", dim = 8, dim_mult = { 1, 2, 2, 2 }, num_res_blocks = 1,
           temporal_downsample = { 0, 1, 1 }, z_dim = 4, eps = 1e-12,
           scale = 1.0, shift = 0.0 },
  -- Wan-2.1's VAE encoder widths (53.6M parameters); loads a Wan-2.1 VAE state dict
  -- saved as safetensors. Wan normalises latents per channel (mean/std vectors); this
  -- affine is one scalar pair, so it is left at identity here: set scale/shift to suit.
  wan = { name = "wan", dim = 96, dim_mult = { 1, 2, 4, 4 }, num_res_blocks = 2,
          temporal_downsample = { 0, 1, 1 }, z_dim = 16, eps = 1e-12,
          scale = 1.0, shift = 0.0 },
}
