"""The policy's model and tokenizer: from a local Hugging Face folder, or random weights of a named shape.

Nothing is downloaded: a folder is read with `local_files_only=True`, and a shape is built from `shapes.SHAPES`.
A random shape is built under the target dtype (`torch.set_default_dtype` for the build), so a bfloat16 1.5B model
never exists in float32 first: each parameter is allocated in bfloat16 and initialised there.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

import torch

from trmkit.config import ConfigError
from trmkit.rl.lm.shapes import shape_config
from trmkit.rl.lm.tokenizer import ByteTokenizer, HFTokenizer, LMTokenizer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")  # any one (vocab.json wants merges.txt)


def resolve_dtype(dtype: str | torch.dtype, key: str = "rl.dtype") -> torch.dtype:
    """'bfloat16' -> torch.bfloat16; a torch.dtype passes through."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ConfigError(f"{key}: unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    return DTYPES[dtype]


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Floating tensors created inside are `dtype` (parameters included); the previous default is restored."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def dtype_kwargs(dtype: torch.dtype) -> dict[str, torch.dtype]:
    """The dtype keyword of this transformers version: `dtype` from 4.56, `torch_dtype` before."""
    import transformers

    major, minor = (int(p) for p in transformers.__version__.split(".")[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def shape_to_config(name: str) -> tuple[Any, ByteTokenizer]:
    """The transformers config of a named shape, its special ids those of its byte tokenizer."""
    from transformers import AutoConfig

    shape = shape_config(name)
    tokenizer = ByteTokenizer(vocab_size=shape["vocab_size"])
    config = AutoConfig.for_model(
        shape.pop("model_type"), **shape, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    return config, tokenizer


def build_random(name: str, dtype: str | torch.dtype = "float32", seed: int = 0) -> tuple[Any, ByteTokenizer]:
    """Random weights of a named shape and its byte tokenizer: `build_random("tiny")` -> (Qwen2ForCausalLM, ...)."""
    from transformers import AutoModelForCausalLM

    config, tokenizer = shape_to_config(name)
    target = resolve_dtype(dtype)
    with torch.random.fork_rng(devices=[]), default_dtype(target):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, **dtype_kwargs(target))
    return model.eval(), tokenizer


def check_model_folder(path: Path, key: str = "rl.model_path") -> None:
    """A ConfigError naming the folder, the missing file and the fix, unless the folder holds a loadable model."""
    if not path.is_dir():
        raise ConfigError(f"{key}: {path} is not a folder; give a local Hugging Face model folder "
                          "(config.json, *.safetensors, tokenizer files)")
    if not (path / "config.json").is_file():
        raise ConfigError(f"{key}: {path} has no config.json; copy the model's config.json into it "
                          "(a folder written by save_pretrained has one)")
    if not any(path.glob("*.safetensors")):
        found = sorted(p.name for p in path.glob("*.bin"))
        extra = f" (found {', '.join(found)}: save them as safetensors with save_pretrained)" if found else ""
        raise ConfigError(f"{key}: {path} has no weights: no *.safetensors file{extra}; "
                          "copy the model's model.safetensors (or its shards and index) into it")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise ConfigError(f"{key}: {path} has no tokenizer files (none of {', '.join(TOKENIZER_FILES)}); "
                          "copy the model's tokenizer.json and tokenizer_config.json into it")
    if (path / "vocab.json").is_file() and not (path / "tokenizer.json").is_file() \
            and not (path / "merges.txt").is_file():
        raise ConfigError(f"{key}: {path} has vocab.json but no merges.txt; copy the model's merges.txt "
                          "(or its tokenizer.json) into it")


def load_folder(path: str | Path, dtype: str | torch.dtype = "float32") -> tuple[Any, HFTokenizer]:
    """A local Hugging Face folder's model (in `dtype`) and tokenizer; nothing is downloaded."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = Path(path)
    check_model_folder(folder)
    target = resolve_dtype(dtype)
    model = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True, **dtype_kwargs(target))
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    return model.eval(), HFTokenizer(tokenizer)


def load_policy(model_path: str | Path | None = None, model_shape: str | None = None,
                dtype: str | torch.dtype = "float32", seed: int = 0) -> tuple[Any, LMTokenizer]:
    """(model, tokenizer) from exactly one of `model_path` (a local folder) or `model_shape` (random weights).

    `load_policy(model_shape="tiny")` -> (a 279,616-parameter Qwen2ForCausalLM, ByteTokenizer(vocab_size=512))."""
    if (model_path is None) == (model_shape is None):
        raise ConfigError("rl.model_path / rl.model_shape: give exactly one (a local model folder, or a shape "
                          "name such as qwen2.5-0.5b for random weights)")
    if model_path is not None:
        return load_folder(model_path, dtype)
    return build_random(model_shape, dtype, seed)
