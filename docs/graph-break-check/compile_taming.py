"""Compile four modules of CompVis/taming-transformers (VQGAN) and run them once, so that
`TORCH_LOGS=graph_breaks` can be set beside gpulint's GPU510 findings on the same code.

Run from a taming-transformers checkout (this file copied to its root): the modules are
imported from it, never from gpulint. CPU is enough: graph breaks are Dynamo's, the
`eager` backend keeps the run short.
"""

import torch

from taming.modules.diffusionmodules.model import Encoder
from taming.modules.discriminator.model import NLayerDiscriminator
from taming.modules.util import ActNorm
from taming.modules.vqvae.quantize import VectorQuantizer

torch.manual_seed(0)

# The discriminator of VQGAN training, with ActNorm layers (use_actnorm=True).
disc = NLayerDiscriminator(input_nc=3, ndf=16, n_layers=2, use_actnorm=True).train()
disc = torch.compile(disc, backend="eager")

# ActNorm on its own: a data-dependent initialisation on the first training call.
actnorm = ActNorm(32).train()
actnorm = torch.compile(actnorm, backend="eager")

# The encoder and the quantizer of the VQ model: no break expected.
encoder = Encoder(ch=32, out_ch=3, ch_mult=(1, 2), num_res_blocks=1, attn_resolutions=(16,),
                  in_channels=3, resolution=32, z_channels=8, double_z=False)
encoder = torch.compile(encoder, backend="eager")
quantizer = VectorQuantizer(n_e=64, e_dim=8, beta=0.25)
quantizer = torch.compile(quantizer, backend="eager")

x = torch.randn(2, 3, 32, 32)
disc(x)
actnorm(torch.randn(2, 32, 8, 8))
z = encoder(x)
quantizer(z)
print("ran: discriminator, actnorm, encoder, quantizer")
