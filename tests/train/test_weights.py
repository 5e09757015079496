"""The one loader of a checkpoint's weights (train/state.restore_weights) and of a run's final weights
(rundir.load_weights, which the e-mail bundle and train.init_from read through): both read tensors written
under the model's former names: the e-mail bag's head and fitted linear model before they left the TRM for
its part (pooled_head.weight, input_linear_* -> parts.0.*), and before that (bag_head, bag_linear_*)."""

import pytest
import torch

from trmkit import names, rundir
from trmkit.email.parts import bag_part, model_of
from trmkit.model.trm import TRM
from trmkit.train.optim import EMA
from trmkit.train.state import load_optimizer_tensors, restore_weights

# a run's tensor names in the two former generations: the e-mail part's weights in the TRM itself
IN_THE_TRM = {"parts.0.pooled_head.weight": "pooled_head.weight",
              **{f"parts.0.linear_{n}": f"input_linear_{n}"
                 for n in ("weight", "bias", "idf", "use_idf", "fold_weight", "fold_bias")}}
GENERATIONS = {"in the TRM": {"pooled_head": "pooled_head", "input_linear": "input_linear"},
               "before the rename": {"pooled_head": "bag_head", "input_linear": "bag_linear"}}


def _classifier(seed: int) -> TRM:
    torch.manual_seed(seed)
    model = model_of(dict(hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, halt_max_steps=1,
                          mixer="attention", puzzle_emb_len=0, vocab_size=40, seq_len=10, num_puzzle_ids=1,
                          num_classes=3, part_positions=4),
                     dict(pooled_head=True, input_linear=True, input_linear_weighting="idf", input_linear_folds=2))
    with torch.no_grad():
        for t in model.state_dict().values():
            if t.is_floating_point():
                t.normal_()
    return model


def _former(name: str, generation: str) -> str:
    name = IN_THE_TRM.get(name, name)
    for new, old in GENERATIONS[generation].items():
        if name.startswith(new):
            return old + name[len(new):]
    return name


def test_every_former_name_of_the_email_parts_weights_maps_to_its_current_one():
    model = _classifier(0)
    own = [k for k in model.state_dict() if k.startswith("parts.")]
    assert sorted(own) == sorted(IN_THE_TRM)  # every weight of the part, each with its former name
    for generation in GENERATIONS:
        for name in model.state_dict():
            assert names.current_name(_former(name, generation)) == name, (generation, name)
    assert names.current_name("input_linear_c") == "input_linear_c"  # a config key is no weight: left as it is


def test_the_parts_weights_are_created_where_the_trm_created_them():
    """Between the class head and the halting head, in parameters and in random draws: the same seed gives
    the same weights as before they moved into the part (the draws of H_init and L_init come after)."""
    params = [name for name, _ in _classifier(0).named_parameters()]
    assert params.index("class_head.bias") < params.index("parts.0.pooled_head.weight") < params.index("q_head.weight")
    base = dict(hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, halt_max_steps=1, mixer="attention",
                puzzle_emb_len=0, vocab_size=40, seq_len=10, num_puzzle_ids=1, num_classes=3, part_positions=4)
    models = {}
    for head in (False, True):
        torch.manual_seed(0)
        models[head] = model_of(base, {"pooled_head": head})
    assert torch.equal(models[False].class_head.weight, models[True].class_head.weight)  # drawn before it
    assert not torch.equal(models[False].H_init, models[True].H_init)  # drawn after it


@pytest.mark.parametrize("generation", list(GENERATIONS))
def test_a_checkpoint_with_the_former_names_restores_weights_and_ema(generation):
    saved = _classifier(0)
    assert any(_former(k, generation) != k for k in saved.state_dict())
    tensors = {f"model.{_former(k, generation)}": v for k, v in saved.state_dict().items()}
    tensors.update({f"ema.{_former(k, generation)}": v + 1 for k, v in saved.state_dict().items()})
    model = _classifier(1)
    ema = EMA(model, 0.99, False)
    restore_weights(model, tensors, ema)
    for k, v in saved.state_dict().items():
        torch.testing.assert_close(model.state_dict()[k], v)
        if k in ema.shadow:
            torch.testing.assert_close(ema.shadow[k], v + 1)
    opt = torch.optim.AdamW(model.parameters())
    names_of = {id(p): name for name, p in saved.named_parameters()}
    state = {f"opt.{_former(names_of[id(p)], generation)}.exp_avg": torch.full_like(p, 2.0)
             for p in saved.parameters()}
    load_optimizer_tensors(model, opt, state)  # a resumed run's Adam moments, under the former names too
    head = bag_part(model).pooled_head.weight
    assert torch.equal(opt.state[head]["exp_avg"], torch.full_like(head, 2.0))
    restore_weights(model, tensors, ema_as_weights=True)  # evaluation: the EMA weights
    torch.testing.assert_close(bag_part(model).linear_weight, bag_part(saved).linear_weight + 1)


@pytest.mark.parametrize("generation", list(GENERATIONS))
def test_a_runs_final_weights_with_the_former_names_load(tmp_path, generation):
    from safetensors.torch import save_file

    saved = _classifier(0)
    save_file({_former(k, generation): v.contiguous() for k, v in saved.state_dict().items()},
              str(tmp_path / "old.safetensors"))
    model = _classifier(1)
    rundir.load_weights(model, tmp_path / "old.safetensors")
    for k, v in saved.state_dict().items():
        torch.testing.assert_close(model.state_dict()[k], v)
