"""The model composes an application's pieces through model/parts.py, never by its names (docs/architecture.md)."""

import ast
import re
from pathlib import Path

import torch

from trmkit.config import ModelConfig
from trmkit.model.parts import Part
from trmkit.model.trm import TRM

MODEL = Path(__file__).resolve().parents[2] / "trmkit" / "model"
APPLICATIONS = ("trmkit.tasks", "trmkit.email", "trmkit.rl", "trmkit.predict", "trmkit.bench", "trmkit.learn",
                "trmkit.report", "trmkit.registry", "trmkit.api", "trmkit.cli")
APP_FIELD = re.compile(r"^(trace_|pooled_|input_linear)")
# The e-mail bag's fields the model still reads by name (model/trm.py, model/input_linear.py): they are to move
# to the e-mail package as a part; the set may only shrink.
EMAIL_FIELDS_LEFT = {"pooled_positions", "pooled_head", "input_linear", "input_linear_weighting",
                     "input_linear_folds", "input_linear_weight", "input_linear_bias", "input_linear_idf",
                     "input_linear_use_idf", "input_linear_fold_weight", "input_linear_fold_bias",
                     "input_linear_logits"}


def trees() -> dict[str, ast.AST]:
    return {path.name: ast.parse(path.read_text()) for path in sorted(MODEL.glob("*.py"))}


def test_the_model_imports_no_task_or_application():
    found = []
    for name, tree in trees().items():
        for node in ast.walk(tree):
            modules = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                       else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            found += [f"model/{name} imports {m}" for m in modules if m.startswith(APPLICATIONS)]
    assert not found, "\n".join(found)


def test_the_model_reads_no_applications_field_by_name():
    read = {(name, node.attr) for name, tree in trees().items() for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and APP_FIELD.match(node.attr)}
    assert not {(name, attr) for name, attr in read if attr.startswith("trace_")}, "a maze trace is a part"
    assert {attr for _, attr in read} <= EMAIL_FIELDS_LEFT, f"new application fields read by name: {sorted(read)}"


class Doubler(Part):
    """A toy part: two more outputs, folded by dropping them and doubling the rest."""

    def __init__(self):
        super().__init__(extra_outputs=2)

    def answer(self, logits):
        return 2 * logits[..., :-2]


def test_parts_widen_the_head_and_every_answer_goes_through_them_in_turn():
    cfg = ModelConfig(hidden_size=16, num_heads=2, L_layers=1, H_cycles=1, L_cycles=1, halt_max_steps=2,
                      puzzle_emb_len=2, vocab_size=5, seq_len=4, num_puzzle_ids=1)
    torch.manual_seed(0)
    plain = TRM(cfg)
    torch.manual_seed(0)
    model = TRM(cfg, [Doubler(), Doubler()])
    assert plain.extra_outputs == 0 and model.extra_outputs == 4 and model.lm_head.out_features == 5 + 4
    assert list(plain.state_dict()) == list(model.state_dict())  # parts without weights add no names
    assert torch.equal(plain.embed_tokens.weight, model.embed_tokens.weight)  # nor random draws before the head
    logits = torch.arange(9.0).expand(1, 4, 9)
    assert torch.equal(model.answer_logits(logits), 4 * torch.arange(5.0).expand(1, 4, 5))
    assert plain.answer_logits(logits) is logits
