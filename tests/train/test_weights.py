"""The one loader of a checkpoint's weights (train/state.restore_weights) and of a run's final weights
(rundir.load_weights): both read tensors written under the model's former names."""

import torch

from trmkit import rundir
from trmkit.config import ModelConfig
from trmkit.model.trm import TRM
from trmkit.train.optim import EMA
from trmkit.train.state import restore_weights

FORMER = {"input_linear": "bag_linear", "pooled_head": "bag_head"}


def _classifier(seed: int) -> TRM:
    torch.manual_seed(seed)
    cfg = ModelConfig(hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, halt_max_steps=1,
                      mixer="attention", puzzle_emb_len=0, vocab_size=40, seq_len=10, num_puzzle_ids=1,
                      num_classes=3, pooled_positions=4, pooled_head=True, input_linear=True,
                      input_linear_weighting="idf", input_linear_folds=2)
    model = TRM(cfg)
    with torch.no_grad():
        for t in model.state_dict().values():
            if t.is_floating_point():
                t.normal_()
    return model


def _former(name: str) -> str:
    for new, old in FORMER.items():
        if name.startswith(new):
            return old + name[len(new):]
    return name


def test_a_checkpoint_with_the_former_names_restores_weights_and_ema():
    saved = _classifier(0)
    assert any(_former(k) != k for k in saved.state_dict())
    tensors = {f"model.{_former(k)}": v for k, v in saved.state_dict().items()}
    tensors.update({f"ema.{_former(k)}": v + 1 for k, v in saved.state_dict().items()})
    model = _classifier(1)
    ema = EMA(model, 0.99, False)
    restore_weights(model, tensors, ema)
    for k, v in saved.state_dict().items():
        torch.testing.assert_close(model.state_dict()[k], v)
        if k in ema.shadow:
            torch.testing.assert_close(ema.shadow[k], v + 1)
    restore_weights(model, tensors, ema_as_weights=True)  # evaluation: the EMA weights
    torch.testing.assert_close(model.input_linear_weight, saved.input_linear_weight + 1)


def test_a_runs_final_weights_with_the_former_names_load(tmp_path):
    from safetensors.torch import save_file

    saved = _classifier(0)
    save_file({_former(k): v.contiguous() for k, v in saved.state_dict().items()}, str(tmp_path / "old.safetensors"))
    model = _classifier(1)
    rundir.load_weights(model, tmp_path / "old.safetensors")
    for k, v in saved.state_dict().items():
        torch.testing.assert_close(model.state_dict()[k], v)
