"""GPU302 is a warning when samples plainly need host work, info when the cost is only likely."""

from __future__ import annotations

from gpulint.testing import lint_text

_LOOP = """
for x, y in loader:
    loss = model(x.cuda(), y.cuda())
    loss.backward()
"""


def _severity(code: str) -> str:
    found = [f for f in lint_text(code + _LOOP, "train.py") if f.code == "GPU302"]
    assert len(found) == 1, found
    return found[0].severity.value


def test_transform_is_a_warning():
    code = (
        "import torch\nimport torchvision.transforms as T\nfrom torch.utils.data import DataLoader\n"
        "from torchvision import datasets\n"
        "loader = DataLoader(datasets.CIFAR10('/d', transform=T.ToTensor()), batch_size=64)\n"
    )
    assert _severity(code) == "warning"


def test_local_dataset_that_decodes_images_is_a_warning():
    code = (
        "import torch\nfrom PIL import Image\nfrom torch.utils.data import DataLoader, Dataset\n"
        "class Images(Dataset):\n    def __getitem__(self, i):\n"
        "        return Image.open(self.paths[i])\n"
        "loader = DataLoader(Images(), batch_size=64)\n"
    )
    assert _severity(code) == "warning"


def test_local_dataset_without_decoding_in_an_image_module_is_info():
    code = (
        "import torch\nfrom PIL import Image\nfrom torch.utils.data import DataLoader, Dataset\n"
        "class Rows(Dataset):\n    def __getitem__(self, i):\n        return self.table.row(i)\n"
        "loader = DataLoader(Rows(), batch_size=64)\n"
    )
    assert _severity(code) == "info"


def test_local_dataset_of_prompts_is_left_alone():
    # `__getitem__` hands back a value it holds: nothing to load, workers buy nothing.
    code = (
        "import torch\nfrom PIL import Image\nfrom torch.utils.data import DataLoader, Dataset\n"
        "class Prompts(Dataset):\n    def __getitem__(self, i):\n        return self.prompt\n"
        "loader = DataLoader(Prompts(), batch_size=64)\n"
    )
    assert not [f for f in lint_text(code + _LOOP, "train.py") if f.code == "GPU302"]


def test_pretokenised_text_is_left_alone():
    # A module with a tokenizer and no image, audio or video code loads token ids: a batch is
    # kilobytes, built in microseconds, so worker processes would buy nothing.
    code = (
        "import torch\nfrom torch.utils.data import DataLoader\n"
        "loader = DataLoader(tokenized['train'], batch_size=8, collate_fn=collator)\n"
    )
    found = [f for f in lint_text(code + _LOOP, "train.py") if f.code == "GPU302"]
    assert found == []
