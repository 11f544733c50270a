"""A client that negotiates UTF-8 positions gets byte columns, not UTF-16 units."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytest.importorskip("pygls.lsp.server")
pytest_lsp = pytest.importorskip("pytest_lsp")

from lsprotocol import types as lsp  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient  # noqa: E402

TRAIN = 'import torch\nnote = "héllo 😀"; scaler = torch.cuda.amp.GradScaler()\n'


@pytest_lsp.fixture(
    config=ClientServerConfig(server_command=[sys.executable, "-m", "gpulint", "server"])
)
async def client(lsp_client: LanguageClient, tmp_path: Path):
    capabilities = lsp.ClientCapabilities(
        general=lsp.GeneralClientCapabilities(position_encodings=[lsp.PositionEncodingKind.Utf8])
    )
    result = await lsp_client.initialize_session(
        lsp.InitializeParams(capabilities=capabilities, root_uri=tmp_path.as_uri())
    )
    assert result.capabilities.position_encoding == lsp.PositionEncodingKind.Utf8
    yield
    await lsp_client.shutdown_session()


@pytest.mark.asyncio
async def test_utf8_columns_when_negotiated(client: LanguageClient, tmp_path):
    path = tmp_path / "train.py"
    waiter = asyncio.ensure_future(
        client.wait_for_notification(lsp.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    )
    await asyncio.sleep(0)
    client.text_document_did_open(
        lsp.DidOpenTextDocumentParams(
            text_document=lsp.TextDocumentItem(
                uri=path.as_uri(), language_id="python", version=1, text=TRAIN
            )
        )
    )
    params = await asyncio.wait_for(waiter, 20)
    (d,) = [x for x in params.diagnostics if x.code == "GPU201"]
    line = TRAIN.splitlines()[1]
    assert d.range.start.character == len(line[: line.index("torch")].encode("utf-8"))
