-- model_vae.lua — VAE presets (vf.models.vae "NAME"): plain tables for the `model`
-- param of vae_encode (fields: see `vflow help vae_encode`). Owned by the VAE code
-- (models/vae.c, stages/vae_encode.c); this table holds the tiny test preset until the
-- full list lands.
return {
  tiny = { name = "tiny", dim = 8, dim_mult = { 1, 2, 2, 2 }, num_res_blocks = 1,
           temporal_downsample = { 0, 1, 1 }, z_dim = 4, eps = 1e-12, scale = 1.0, shift = 0.0 },
}
