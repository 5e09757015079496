"""The LM policy's loading: named shapes, random weights built in their dtype, the byte tokenizer, local folders."""

import pytest
import torch
from torch.overrides import TorchFunctionMode

from trmkit.config import ConfigError
from trmkit.rl.lm.load import build_random, check_model_folder, load_policy, shape_to_config
from trmkit.rl.lm.memory import param_count
from trmkit.rl.lm.shapes import SHAPES, shape_config
from trmkit.rl.lm.tokenizer import ByteTokenizer, HFTokenizer, batch_encode, decode_responses

# The public parameter counts of the real models (their model cards and a count of their safetensors).
PUBLIC_COUNTS = {"qwen2.5-0.5b": 494_032_768, "qwen2.5-1.5b": 1_543_714_304, "llama-3.2-1b": 1_235_814_400}
OUR_COUNTS = {"tiny": 279_616, "small": 3_281_152}  # the test and demo shapes, as shapes.py documents them


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.mark.parametrize("name", list(SHAPES))
def test_each_shape_builds_with_the_parameters_it_is_known_to_have(name):
    from transformers import AutoModelForCausalLM

    config, _ = shape_to_config(name)
    with torch.device("meta"):  # shapes only: no memory, no init
        model = AutoModelForCausalLM.from_config(config)
    built = sum(p.numel() for p in model.parameters())
    assert built == param_count(SHAPES[name])
    assert built == {**PUBLIC_COUNTS, **OUR_COUNTS}[name]


def test_an_unknown_shape_names_the_closest():
    with pytest.raises(ConfigError, match=r"rl.model_shape: unknown model shape 'qwen2.5-0.6b'.*'qwen2.5-0.5b'"):
        shape_config("qwen2.5-0.6b")
    with pytest.raises(ConfigError, match="exactly one"):
        load_policy()
    with pytest.raises(ConfigError, match="rl.dtype: unknown dtype 'bf16'; use one of float32, bfloat16"):
        load_policy(model_shape="tiny", dtype="bf16")


def test_a_random_shape_is_built_in_its_dtype_without_a_float32_copy_first():
    made = []

    class Factories(TorchFunctionMode):  # every tensor a factory function makes while the model is built
        def __torch_function__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if getattr(func, "__name__", "") in ("empty", "zeros", "ones", "randn", "full") \
                    and isinstance(out, torch.Tensor):
                made.append((out.dtype, out.numel()))
            return out

    with Factories():
        model, _ = build_random("tiny", dtype="bfloat16")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    big_float32 = [n for dtype, n in made if dtype == torch.float32 and n >= 64 * 64]
    assert sum(n for d, n in made if d == torch.bfloat16) >= 279_616 and not big_float32
    assert torch.get_default_dtype() == torch.float32  # restored after the build


def test_the_byte_tokenizer_round_trips_utf8_inside_the_vocabulary():
    tok = ByteTokenizer(vocab_size=512)
    ids = tok.encode("def f(x): return 'é'")
    assert ids[0] == tok.bos_token_id and max(ids) < 259 and min(ids[1:]) >= 3
    assert tok.decode(ids + [tok.eos_token_id, tok.pad_token_id]) == "def f(x): return 'é'"
    assert tok.decode([0xC3 + 3]) == "\ufffd"  # a broken UTF-8 sequence decodes, replaced
    with pytest.raises(ValueError):
        ByteTokenizer(vocab_size=100)


def test_batch_encode_pads_on_the_left_and_responses_stop_at_eos():
    tok = ByteTokenizer(vocab_size=512)
    ids, mask = batch_encode(tok, ["ab", "abcd"])
    assert ids.shape == (2, 5) and ids[0].tolist() == [0, 0, 1, 100, 101] and mask[0].tolist() == [0, 0, 1, 1, 1]
    responses = torch.tensor([[107, 108, 2, 50], [107, 2, 2, 0]])
    assert decode_responses(tok, responses) == ["hi", "h"]


def write_folder(path, tiny):
    """A Hugging Face folder as save_pretrained writes one: the tiny model and a byte-level BPE tokenizer trained
    here on a few lines (Qwen's kind of tokenizer; nothing downloaded)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    inner = Tokenizer(models.BPE())
    inner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    inner.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>"]
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    inner.train_from_iterator(["def f(x):\n    return x[::-1]", "assert f([1, 2]) == [2, 1]"] * 4, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=inner, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tiny.save_pretrained(path)
    tok.save_pretrained(path)


def test_a_local_folder_loads_the_same_model_and_its_tokenizer(tmp_path):
    tiny, _ = build_random("tiny")
    write_folder(tmp_path, tiny)
    model, tok = load_policy(model_path=tmp_path)
    text = "def f(x):\n    return x[::-1]"
    ids = tok.encode(text)
    assert isinstance(tok, HFTokenizer) and tok.decode(ids) == text and max(ids) < 300 and len(ids) < len(text)
    assert tok.pad_token_id == tok.eos_token_id == 0
    batch = torch.tensor([ids])
    with torch.no_grad():
        assert torch.equal(model(batch).logits, tiny(batch).logits)


@pytest.mark.parametrize("remove, message", [
    ("config.json", "has no config.json; copy the model's config.json"),
    ("model.safetensors", "has no weights: no \\*.safetensors file"),
    ("tokenizer.json", "has no tokenizer files"),
])
def test_a_folder_missing_a_file_is_named_with_the_fix(tmp_path, remove, message):
    tiny, _ = build_random("tiny")
    write_folder(tmp_path, tiny)
    (tmp_path / remove).unlink()
    with pytest.raises(ConfigError, match=f"rl.model_path: {tmp_path}.* {message}"):
        check_model_folder(tmp_path)
    with pytest.raises(ConfigError, match="is not a folder"):
        load_policy(model_path=tmp_path / "nowhere")
