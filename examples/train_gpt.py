"""A small GPT-style training script with the mistakes gpulint exists to catch.

Run `gpulint check examples/` to see them; `gpulint check --diff examples/` shows the autofixes.
"""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, Dataset


class TokenDataset(Dataset):
    def __init__(self, tokens, block_size):
        self.tokens, self.block_size = tokens, block_size

    def __len__(self):
        return len(self.tokens) - self.block_size - 1

    def __getitem__(self, i):
        chunk = self.tokens[i : i + self.block_size + 1]
        return chunk[:-1], chunk[1:]


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = torch.nn.LayerNorm(d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x):
        return x + self.mlp(self.ln(x))


class GPT(torch.nn.Module):
    def __init__(self, vocab=50304, d=768, layers=12):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.blocks = torch.nn.ModuleList(Block(d) for _ in range(layers))
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.emb(idx)
        for block in self.blocks:
            x = checkpoint(block, x)
        return self.head(x)


def main():
    dist.init_process_group(backend="gloo")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)

    tokens = torch.randint(0, 50304, (1_000_000,))
    loader = DataLoader(TokenDataset(tokens, 1024), batch_size=8, shuffle=True, num_workers=4)
    model = DDP(GPT().to(device), device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    scaler = torch.cuda.amp.GradScaler()

    for epoch in range(10):
        for step, (x, y) in enumerate(loader):
            x, y = x.to(device), y.to(device)
            with torch.cuda.amp.autocast(dtype=torch.bfloat16):
                logits = model(x)
                loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            print(f"epoch {epoch} step {step} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
