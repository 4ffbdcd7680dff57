"""Tiny Shakespeare: its characters as uint8 token ids, split as nanoGPT splits it, a sample a
window of a language model's context (`text_windows`); found and verified by its SHA-256."""
import hashlib
import os
from pathlib import Path

import numpy as np

from xbench.common.errors import UserError
from xbench.common.workload.models import VOCAB
from xbench.common.workload.samples import Images

# Tiny Shakespeare (karpathy/char-rnn's input.txt): its SHA-256, its length, and nanoGPT's split
# (the first 90% of the characters trains, the last 10% validates).
SHAKESPEARE_FILE = "input.txt"
SHAKESPEARE_FOLDER = "tinyshakespeare"
SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
SHAKESPEARE_CHARACTERS = 1115394
TRAIN_SHARE = 0.9
SHAKESPEARE_HOW_TO_GET = (f"put Tiny Shakespeare's {SHAKESPEARE_FILE} (karpathy/char-rnn, "
                          f"data/tinyshakespeare; SHA-256 {SHAKESPEARE_SHA256[:12]}...) in a "
                          f"folder and pass --data-dir FOLDER (or set XBENCH_DATA_DIR); or run "
                          f"with --data synthetic to time on random tokens")


def window_count(characters: int, context: int) -> int:
    """Windows of context + 1 characters a text of `characters` holds, one every `context`
    characters (each window's last character is the next one's first input)."""
    return (characters - 1) // context


def split_windows(windows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Windows of context + 1 tokens as (inputs, next tokens), each (n, context)."""
    return np.ascontiguousarray(windows[:, :-1]), np.ascontiguousarray(windows[:, 1:])


def text_windows(tokens: np.ndarray, context: int) -> tuple[np.ndarray, np.ndarray]:
    """The text's windows of context + 1 tokens, one every `context` tokens from its start,
    as (inputs, next tokens)."""
    count = window_count(len(tokens), context)
    starts = np.arange(count)[:, None] * context + np.arange(context + 1)
    return split_windows(tokens[starts])


def shakespeare_dirs(data_dir=None) -> list[Path]:
    """Where Tiny Shakespeare is looked for, in order: the folder given, its tinyshakespeare
    folder, and a tinyshakespeare folder beside it (so a --data-dir that holds MNIST in a
    shared data folder finds the text beside it); then $XBENCH_DATA_DIR the same way, then
    ./data."""
    roots = [Path(data_dir)] if data_dir else []
    if os.environ.get("XBENCH_DATA_DIR"):
        roots.append(Path(os.environ["XBENCH_DATA_DIR"]))
    if not data_dir:
        roots.append(Path("data"))
    return [folder for root in roots
            for folder in (root, root / SHAKESPEARE_FOLDER, root.parent / SHAKESPEARE_FOLDER)]


def load_shakespeare(data_dir=None, context: int = 64) -> Images:
    """Tiny Shakespeare's characters as token ids (its 65 characters in sorted order), split as
    nanoGPT splits it, cut into windows of `context` + 1; its SHA-256 verified."""
    for folder in shakespeare_dirs(data_dir):
        path = folder / SHAKESPEARE_FILE
        if path.is_file():
            raw = path.read_bytes()
            if hashlib.sha256(raw).hexdigest() != SHAKESPEARE_SHA256:
                raise UserError(f"{path} is not Tiny Shakespeare's {SHAKESPEARE_FILE}: its SHA-256 "
                                f"does not match ({len(raw):,} bytes, expected "
                                f"{SHAKESPEARE_CHARACTERS:,}). {SHAKESPEARE_HOW_TO_GET}")
            alphabet = np.unique(np.frombuffer(raw, np.uint8))
            assert len(alphabet) == VOCAB, len(alphabet)
            tokens = np.searchsorted(alphabet, np.frombuffer(raw, np.uint8)).astype(np.uint8)
            split = int(len(tokens) * TRAIN_SHARE)
            return Images(*text_windows(tokens[:split], context),
                          *text_windows(tokens[split:], context), dataset="shakespeare",
                          source=str(path.resolve()), layout="shakespeare",
                          files=(str(path.resolve()),))
    looked = "\n  ".join(str(d) for d in shakespeare_dirs(data_dir))
    raise UserError(f"Tiny Shakespeare not found. Looked for {SHAKESPEARE_FILE} in:\n  {looked}\n"
                    f"{SHAKESPEARE_HOW_TO_GET}")
